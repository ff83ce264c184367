"""The sweeper: what becomes of a host that stopped beating, and of its tasks.

Every engine runs it (:func:`serve`: a coroutine on its task worker's loop, every
:func:`sweep_every` seconds, on a connection borrowed from the engine's shared pool: issue
25, no connection of its own); one sweep runs at a time fleet-wide: the sweep's
transaction takes ``pg_try_advisory_xact_lock(`` :data:`SWEEP_LOCK` ``)`` and does nothing
when another holds it. A transaction-level lock ends with its transaction or its session,
so a host SIGKILLed during a sweep never blocks the next one (a procrastinate ``lock`` would
stay held by its ``doing`` job, and the only thing that retries a stalled job is the sweep
itself). Every UPDATE is guarded by the generation it read, so even two sweeps at once never
bump a task twice. Until issue 25 the sweep was a procrastinate periodic task on a worker of
its own (its pool and its LISTEN: two steady connections per engine).

One transaction per sweep (:func:`sweep_once`), decided in Python from rows
(:func:`dead_hosts`, :func:`fate_of`: no I/O), applied in SQL:

a. an ``alive`` host whose heartbeat is older than ITS OWN ``host_timeout`` becomes
   ``dead`` (``lost_at``): each host declares its timeout in its heartbeat row
   (:mod:`supervisor.cluster.writer`); a ``stopped`` host (clean stop) is never declared
   dead: its tasks keep running in tmux and its next start adopts them (for
   ``stopped_host_grace``: rule (e)); silence counts only while the sweeper itself has
   been reaching a database that has been up (after an outage longer than
   ``host_timeout`` every heartbeat looks stale for a moment);
b. a dead host's tasks claimed but never launched (``claimed``, or the manifest's
   ``queued`` the writer reports before the launch) go back to the queue: ``queued``,
   owner NULL, generation + 1, with a new job at :data:`REQUEUE_PRIORITY`, so another host
   claims them within seconds, ahead of every new submission (issue 25);
c. its launched, unfinished tasks (:data:`supervisor.taskdir.states.LIVE`) become
   :data:`~supervisor.taskdir.states.HOST_LOST` with generation + 1 (a lost host coming back finds a
   newer generation: its writes match no row) and a ``host_lost`` event; when the DEAD
   host's ``on_host_lost`` is ``restart`` and the task is not pinned (``host`` NULL), the
   lost run is appended to ``restarted_from`` and the task is queued again as in (b): a new
   run elsewhere, with a new session id (every launch makes one);
d. procrastinate jobs left ``doing`` by workers whose heartbeat is older than the fleet's
   largest ``host_timeout`` are retried (procrastinate's ``select_stalled_jobs_by_heartbeat``
   and ``procrastinate_retry_job_v2``, as its docs' howto/production/retry_stalled_jobs
   does), or failed when a waiting job holds their ``queueing_lock`` already; a job retried
   for a task that is not ``queued`` finds it taken and does nothing (the claim). A job
   another transaction holds right now is left to the next sweep (``SKIP LOCKED``). A dead
   host's worker may turn stale a sweep before the host does (both stop beating at once):
   its task's job is then retried and does nothing, and (b)/(c) defer a new one (or raise
   the retried one to :data:`REQUEUE_PRIORITY` while it still waits).
e. (issue 25) a ``stopped`` host's unfinished tasks stay its own for ``stopped_host_grace``
   seconds after its stop (each host declares its own in its heartbeat, ``[cluster]
   stopped_host_grace``); past that, (b) and (c) apply to them as for a dead host
   (:func:`gone`), and the host stays ``stopped``. Its agents were stopped by then: the
   released lease carries the deadline (:mod:`supervisor.cluster.lease`). A host that
   starts again within the grace adopts them as before.

Requeued work keeps its place (issue 25): procrastinate fetches ``ORDER BY priority DESC,
id ASC`` (``procrastinate_fetch_job_v2`` in its ``sql/schema.sql``), and a submission's job
has priority 0, so the jobs of (b) and (c), at :data:`REQUEUE_PRIORITY`, run before the whole
backlog as soon as a slot frees anywhere. Within one sweep they are deferred in submission
order (``submitted_at``, then id); a later sweep's come after an earlier one's. A dead
host's job still ``doing`` for such a task is failed, not retried, when the new job waits
(rule (d) runs after the new jobs are deferred), so the task's one waiting job is the one at
the requeue priority.

Workers heartbeat every ``[cluster] heartbeat`` seconds (:func:`worker_options`), so a live
worker's heartbeat is younger than that and (d) never touches its jobs as long as
``heartbeat`` < ``host_timeout``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

import psycopg

from supervisor.cluster import retention
from supervisor.cluster.connections import Outage
from supervisor.cluster.db import ClusterError, Source, borrow, one_line
from supervisor.cluster.sqlfiles import query
from supervisor.cluster.submit import TASK_NAME
from supervisor.taskdir.states import HOST_LOST, LIVE, UNCLAIMED, FleetState

log = logging.getLogger("supervise.cluster")
#: Seconds between two sweeps of one engine in a fleet of up to :data:`FLEET_SWEEPS` hosts.
SWEEP_EVERY = 1.0
#: Sweeps a second the whole fleet tries (one gets the lock, the others skip): each engine
#: sweeps every ``hosts / FLEET_SWEEPS`` seconds at least (:func:`sweep_every`), so a
#: fleet's idle transactions for sweeping stay at about this many whatever its size.
FLEET_SWEEPS = 4.0
#: ``pg_try_advisory_xact_lock`` key of a sweep ("swep" in ASCII).
SWEEP_LOCK = 0x73776570
#: procrastinate priority of a job for a task put back to ``queued`` (rules (b), (c) and a
#: claim that declines a task claimed before: :func:`~supervisor.cluster.ownership.defer_again`):
#: above a submission's 0, below the hold jobs' (``intake.HOLD_PRIORITY``, 1000), which a
#: restarted worker must fetch before anything else.
REQUEUE_PRIORITY = 500

Fate = Literal["requeue", "host_lost", "restart"]


@dataclass(frozen=True)
class HostRow:
    """A ``supervise_hosts`` row: ``age`` is seconds since its heartbeat (the database's
    clock), ``host_timeout`` seconds, ``on_host_lost`` ``report`` | ``restart``;
    ``stopped_s`` seconds since its last clean stop (None: never stopped) and
    ``stopped_host_grace`` the seconds it declared a stop may keep its tasks (None: a host
    of an earlier version, for ever)."""

    host_id: str
    state: str
    age: float
    host_timeout: float
    on_host_lost: str
    stopped_s: float | None = None
    stopped_host_grace: float | None = None


@dataclass(frozen=True)
class TaskRow:
    """A ``supervise_tasks`` row owned by a dead host (``host``: pinned to it, or None)."""

    id: str
    state: str
    owner_host: str
    generation: int
    host: str | None
    session_id: str | None


@dataclass(frozen=True)
class SweepResult:
    """What one sweep did: ``swept`` False when another sweep held the lock; hosts declared
    ``dead``; task ids ``requeued`` (b), ``lost`` and ``restarted`` (c); procrastinate job
    ids ``retried`` and ``failed`` (d)."""

    swept: bool
    dead: tuple[str, ...] = ()
    requeued: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()
    retried: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()


# ------------------------------------------------------------------ the pure rules


def dead_hosts(hosts: Iterable[HostRow], watched: float = math.inf) -> list[str]:
    """Rule (a): the ``alive`` hosts silent for longer than their own ``host_timeout``.
    ``stopped`` and already ``dead`` hosts are not (re)declared.

    ``watched``: seconds for which this sweeper has seen the database answer without a break
    (and the database has been up). Silence counts only from then: after an outage of the
    database (or of this sweeper's link to it) longer than ``host_timeout``, every host's
    heartbeat looks stale until its writer gets through again (about a second: its
    ``RETRY_EVERY``); without this rule, one sweep would declare the whole fleet dead and
    restart tasks that never stopped running."""
    return sorted(
        h.host_id for h in hosts if h.state == "alive" and min(h.age, watched) > h.host_timeout
    )


def gone(host: HostRow) -> bool:
    """Whether ``host``'s tasks are given up: it is ``dead``, or (rule (e)) ``stopped`` for
    longer than its own ``stopped_host_grace``."""
    if host.state == "dead":
        return True
    return (
        host.state == "stopped"
        and host.stopped_s is not None
        and host.stopped_host_grace is not None
        and host.stopped_s > host.stopped_host_grace
    )


def fate_of(task: TaskRow, owner: HostRow) -> Fate | None:
    """Rules (b) and (c) for one task of the :func:`gone` host ``owner``: ``requeue``
    (never launched), ``restart`` (launched, ``on_host_lost = "restart"``, not pinned),
    ``host_lost`` (launched otherwise), None (ended, or not the owner's any more)."""
    if not gone(owner) or task.owner_host != owner.host_id:
        return None
    if task.state in UNCLAIMED:
        return "requeue"
    if task.state in LIVE:
        return "restart" if owner.on_host_lost == "restart" and task.host is None else "host_lost"
    return None


def stale_after(hosts: Iterable[HostRow]) -> float:
    """Rule (d)'s threshold: seconds after which a procrastinate worker's heartbeat is
    stale: the fleet's largest ``host_timeout`` (30 s, the default, with no host)."""
    return max((h.host_timeout for h in hosts), default=30.0)


# ------------------------------------------------------------------ applied in SQL


def sweep_once(
    source: Source, watched: float = math.inf, prune: retention.Schedule | None = None
) -> SweepResult:
    """One sweep, one transaction (see the module docstring for the rules); ``watched``:
    seconds this sweeper has had the database without a break (:func:`dead_hosts`; the
    server's own uptime bounds it too). ``prune``: after the sweep's commit, one batch of
    the periodic prune when one is due (``[cluster] prune_after``, in a transaction of its
    own: :class:`supervisor.cluster.retention.Schedule`).

    Raises:
        ClusterError: the database cannot be reached or refused (nothing is applied).
    """
    with borrow(source) as conn:
        try:
            with conn.transaction():
                got = conn.execute(query("sweep_lock"), (SWEEP_LOCK,)).fetchone()
                if not (got and got[0]):
                    return SweepResult(swept=False)
                result = _sweep(conn, watched)
            if prune is not None:
                prune.run(conn)
            return result
        except psycopg.Error as exc:
            raise ClusterError(f"sweep failed: {one_line(exc)}") from exc


def _sweep(conn: psycopg.Connection, watched: float) -> SweepResult:
    """Rules (a)–(d) inside the caller's transaction."""
    hosts = {r[0]: HostRow(*r) for r in conn.execute(query("sweep_hosts")).fetchall()}
    uptime = conn.execute(query("server_uptime")).fetchone()
    watched = min(watched, float(uptime[0])) if uptime else watched
    dead: tuple[str, ...] = ()
    if candidates := dead_hosts(hosts.values(), watched):
        dead = tuple(
            sorted(r[0] for r in conn.execute(query("mark_dead"), (candidates,)).fetchall())
        )
    for host_id in dead:
        hosts[host_id] = replace(hosts[host_id], state="dead")
    given_up = [h.host_id for h in hosts.values() if gone(h)]
    done: dict[Fate, list[str]] = {"requeue": [], "host_lost": [], "restart": []}
    queued: list[str] = []  # in submission order (the query's)
    if given_up:
        states = sorted(str(s) for s in UNCLAIMED | LIVE)
        for row in conn.execute(query("dead_hosts_tasks"), (given_up, states)).fetchall():
            task = TaskRow(*row)
            fate = fate_of(task, hosts[task.owner_host])
            if fate is not None and _apply(conn, task, fate):
                done[fate].append(task.id)
                if fate != "host_lost":
                    queued.append(task.id)
    for task_id in queued:
        _ensure_job(conn, task_id)
    retried, failed = _stalled(conn, stale_after(hosts.values()))
    result = SweepResult(
        True,
        dead,
        tuple(done["requeue"]),
        tuple(done["host_lost"]),
        tuple(done["restart"]),
        tuple(retried),
        tuple(failed),
    )
    if dead or any(done.values()) or retried or failed:
        log.info("sweep: %s", result)
    return result


def _apply(conn: psycopg.Connection, task: TaskRow, fate: Fate) -> bool:
    """One task's fate, guarded by the generation and state read; False: it changed
    meanwhile (nothing done)."""
    guard = (task.id, task.owner_host, task.generation, task.state)
    if fate == "requeue":
        changed = conn.execute(query("requeue_task"), guard).rowcount
        event, state = "requeued", FleetState.QUEUED
    elif fate == "host_lost":
        changed = conn.execute(query("lose_task"), (HOST_LOST, *guard)).rowcount
        event, state = HOST_LOST, HOST_LOST
    else:
        run = {
            "host_id": task.owner_host,
            "generation": task.generation,
            "session_id": task.session_id,
        }
        changed = conn.execute(query("restart_task"), (json.dumps(run), *guard)).rowcount
        event, state = HOST_LOST, FleetState.QUEUED
    if changed != 1:
        return False
    # Deterministic id: the event of one task's lost run is written once, whoever sweeps.
    transition = f"sweep:{task.id}:{task.generation}:{event}"
    conn.execute(
        query("insert_event"), (transition, task.id, task.owner_host, task.generation, event, state)
    )
    return True


def _stalled(conn: psycopg.Connection, stale: float) -> tuple[list[int], list[int]]:
    """Rule (d): ids of the jobs ``doing`` on stale workers that were retried, and of
    those failed because a waiting job holds their ``queueing_lock`` already."""
    retried: list[int] = []
    failed: list[int] = []
    for job_id, lock in conn.execute(query("stalled_jobs"), (stale,)).fetchall():
        if lock is not None and conn.execute(query("waiting_job"), (lock,)).fetchone():
            conn.execute(query("fail_job"), (job_id,))
            failed.append(job_id)
        else:
            conn.execute(query("retry_job"), (job_id,))
            conn.execute(query("notify_retried_job"), (job_id,))  # delivered at the commit
            retried.append(job_id)
    return retried, failed


def _ensure_job(conn: psycopg.Connection, task_id: str) -> None:
    """A task queued again gets a waiting job at :data:`REQUEUE_PRIORITY` (its old one is
    ``doing`` on the dead host's worker, failed by rule (d) once stale). A job that waits
    already (``queueing_lock`` = the task id: rule (d) retried it a sweep before the host
    turned dead) is raised to that priority instead of deferring a second one."""
    if not conn.execute(query("raise_waiting_job"), (REQUEUE_PRIORITY, task_id)).rowcount:
        args = json.dumps({"task_id": task_id})
        conn.execute(query("defer_requeued"), (TASK_NAME, REQUEUE_PRIORITY, args, task_id))


# ------------------------------------------------------------------ the engine's sweeps


def worker_options(heartbeat: float, host_timeout: float) -> dict[str, Any]:
    """procrastinate worker options for the task worker: heartbeat every ``heartbeat``
    seconds (its default 10 s would look stale to rule (d)), and prune workers silent for
    ``host_timeout`` (its ``stalled_worker_timeout``)."""
    return {"update_heartbeat_interval": heartbeat, "stalled_worker_timeout": host_timeout}


def sweep_every(alive_hosts: int, draw: float = 0.5) -> float:
    """Seconds until this engine's next sweep: :data:`SWEEP_EVERY`, or ``alive_hosts /``
    :data:`FLEET_SWEEPS` in a larger fleet, times ``0.5 + draw`` (``draw`` uniform in
    [0, 1): engines that started together do not sweep together). A lost host is found by
    whichever engine sweeps first after its ``host_timeout``: about ``1 / FLEET_SWEEPS``
    seconds later on average, whatever the fleet's size."""
    return max(SWEEP_EVERY, alive_hosts / FLEET_SWEEPS) * (0.5 + draw)


async def serve(
    source: Source,
    outage: Outage | None = None,
    prune_after: float | None = None,
    hosts: Callable[[], int] = lambda: 1,
) -> None:
    """Sweep until cancelled, every :func:`sweep_every` seconds for the ``hosts()`` alive
    (each sweep in a thread, on a connection from ``source``). ``watched``
    (:func:`dead_hosts`) counts from the first good sweep and starts again after a failed
    one. A failure goes to ``outage``
    (one line per outage), or is logged when there is none. ``prune_after`` (seconds;
    ``[cluster] prune_after``): each sweep also runs the periodic prune
    (:class:`supervisor.cluster.retention.Schedule`)."""
    since: float | None = None  # monotonic time of the first good sweep in a row
    pruning = retention.Schedule(prune_after)
    while True:
        began = time.monotonic()
        watched = 0.0 if since is None else began - since
        try:
            await asyncio.to_thread(sweep_once, source, watched, pruning)
        except ClusterError as exc:
            since = None
            if outage is not None:
                outage.failed(exc, "the sweeper", began)
            else:
                log.error("cluster: %s", exc)
        except Exception:  # a bug in one sweep must not end this host's sweeps for good
            since = None
            log.exception("cluster: a sweep failed; sweeping again soon")
        else:
            since = time.monotonic() if since is None else since
        await asyncio.sleep(sweep_every(hosts(), random.random()))
