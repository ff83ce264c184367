"""The sweeper: what becomes of a host that stopped beating, and of its tasks.

Every engine runs it; one sweep runs at a time fleet-wide. A procrastinate periodic task
(:data:`SWEEP_TASK`, every second: procrastinate's cron takes a 6th field for seconds,
``blueprints.periodic``) is deferred by every host's deferrer, and the database keeps one
job per second (``procrastinate_periodic_defers`` is unique on the task, ``periodic_id``
and timestamp: ``periodic.PeriodicDeferrer.defer_jobs``); its ``queueing_lock`` keeps at
most one waiting. It has no procrastinate ``lock``: a host killed during a sweep would
leave that job ``doing`` and its lock held, and the only thing that retries a stalled job
is the sweep itself, so no sweep would ever run again (seen on this machine: a SIGKILLed
engine's host never declared dead); the advisory lock below does that job instead.
The job runs on a worker of its own (:func:`serve`, queue :data:`SWEEP_QUEUE`,
concurrency 1), because the task worker's slots are each held by a running task for as
long as it runs (:mod:`supervisor.cluster.intake`): a full fleet would never run a sweep
there. The sweep's transaction also takes
``pg_try_advisory_xact_lock(`` :data:`SWEEP_LOCK` ``)`` and does nothing when another holds
it; every UPDATE is guarded by the generation it read, so even two sweeps at once never
bump a task twice.

One transaction per sweep (:func:`sweep_once`), decided in Python from rows
(:func:`dead_hosts`, :func:`fate_of`: no I/O), applied in SQL:

a. an ``alive`` host whose heartbeat is older than ITS OWN ``host_timeout`` becomes
   ``dead`` (``lost_at``): each host declares its timeout in its heartbeat row
   (:mod:`supervisor.cluster.writer`); a ``stopped`` host (clean stop) is never declared
   dead: its tasks keep running in tmux and its next start adopts them; silence counts
   only while the sweeper itself has been reaching a database that has been up (after an
   outage longer than ``host_timeout`` every heartbeat looks stale for a moment);
b. a dead host's tasks claimed but never launched (``claimed``, or the manifest's
   ``queued`` the writer reports before the launch) go back to the queue: ``queued``,
   owner NULL, generation + 1, their job retried (or a new one deferred), so another host
   claims them within seconds;
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
   its task's job is then retried and does nothing, and (b)/(c) defer a new one.

Workers heartbeat every ``[cluster] heartbeat`` seconds (:func:`worker_options`), so a live
worker's heartbeat is younger than that and (d) never touches its jobs as long as
``heartbeat`` < ``host_timeout``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from procrastinate import App, PsycopgConnector

from supervisor.cluster import retention
from supervisor.cluster.db import (
    CONNECT_TIMEOUT,
    STATEMENT_TIMEOUT,
    ClusterError,
    connect,
    one_line,
)
from supervisor.cluster.sqlfiles import query
from supervisor.cluster.submit import TASK_NAME
from supervisor.taskdir.states import HOST_LOST, LIVE, UNCLAIMED, FleetState

log = logging.getLogger("supervise.cluster")
#: The periodic task's name.
SWEEP_TASK = "supervise.sweep"
#: Its queue: ':' is outside the names a profile may give a queue or a host (``NAME_RE``),
#: so no host's task worker takes from it.
SWEEP_QUEUE = "supervise:sweep"
#: procrastinate cron with a 6th field for seconds: every second.
SWEEP_CRON = "* * * * * *"
#: ``pg_try_advisory_xact_lock`` key of a sweep ("swep" in ASCII).
SWEEP_LOCK = 0x73776570
#: Seconds before the sweeper's worker is started again after it died.
BACKOFF = 2.0

Fate = Literal["requeue", "host_lost", "restart"]


@dataclass(frozen=True)
class HostRow:
    """A ``supervise_hosts`` row: ``age`` is seconds since its heartbeat (the database's
    clock), ``host_timeout`` seconds, ``on_host_lost`` ``report`` | ``restart``."""

    host_id: str
    state: str
    age: float
    host_timeout: float
    on_host_lost: str


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


def fate_of(task: TaskRow, owner: HostRow) -> Fate | None:
    """Rules (b) and (c) for one task of the dead host ``owner``: ``requeue`` (never
    launched), ``restart`` (launched, ``on_host_lost = "restart"``, not pinned),
    ``host_lost`` (launched otherwise), None (ended, or not the owner's any more)."""
    if owner.state != "dead" or task.owner_host != owner.host_id:
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
    dsn: str, watched: float = math.inf, prune: retention.Schedule | None = None
) -> SweepResult:
    """One sweep, one transaction (see the module docstring for the rules); ``watched``:
    seconds this sweeper has had the database without a break (:func:`dead_hosts`; the
    server's own uptime bounds it too). ``prune``: after the sweep's commit, one batch of
    the periodic prune when one is due (``[cluster] prune_after``, in a transaction of its
    own: :class:`supervisor.cluster.retention.Schedule`).

    Raises:
        ClusterError: the database cannot be reached or refused (nothing is applied).
    """
    with connect(dsn, autocommit=False) as conn:
        try:
            got = conn.execute(query("sweep_lock"), (SWEEP_LOCK,)).fetchone()
            if not (got and got[0]):
                conn.rollback()
                return SweepResult(swept=False)
            result = _sweep(conn, watched)
            conn.commit()
            if prune is not None:
                prune.run(conn)
        except psycopg.Error as exc:
            conn.rollback()
            raise ClusterError(f"sweep failed: {one_line(exc)}") from exc
    return result


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
        hosts[host_id] = HostRow(host_id, "dead", *_rest(hosts[host_id]))
    gone = [h.host_id for h in hosts.values() if h.state == "dead"]
    done: dict[Fate, list[str]] = {"requeue": [], "host_lost": [], "restart": []}
    if gone:
        states = sorted(str(s) for s in UNCLAIMED | LIVE)
        for row in conn.execute(query("dead_hosts_tasks"), (gone, states)).fetchall():
            task = TaskRow(*row)
            fate = fate_of(task, hosts[task.owner_host])
            if fate is not None and _apply(conn, task, fate):
                done[fate].append(task.id)
    retried, failed = _stalled(conn, stale_after(hosts.values()))
    for task_id in done["requeue"] + done["restart"]:
        _ensure_job(conn, task_id)
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


def _rest(host: HostRow) -> tuple[float, float, str]:
    return host.age, host.host_timeout, host.on_host_lost


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
    """A task queued again gets a waiting job (its old one was on a worker not stale yet):
    none is deferred when one waits already (``queueing_lock`` = the task id)."""
    if conn.execute(query("waiting_job"), (task_id,)).fetchone() is None:
        conn.execute(
            query("defer_requeued"), (TASK_NAME, json.dumps({"task_id": task_id}), task_id)
        )


# ------------------------------------------------------------------ the periodic task


def worker_options(heartbeat: float, host_timeout: float) -> dict[str, Any]:
    """procrastinate worker options for every worker of a host: heartbeat every
    ``heartbeat`` seconds (its default 10 s would look stale to rule (d)), and prune
    workers silent for ``host_timeout`` (its ``stalled_worker_timeout``)."""
    return {"update_heartbeat_interval": heartbeat, "stalled_worker_timeout": host_timeout}


def make_app(dsn: str, prune_after: float | None = None) -> App:
    """A procrastinate app with the periodic sweep (one small pool of its own). The app
    counts how long its sweeps have reached the database without a break (``watched`` of
    :func:`dead_hosts`): from its first good sweep, reset by a failed one; :func:`serve`
    makes a new app, so a new count, whenever the worker restarts. ``prune_after``
    (seconds; ``[cluster] prune_after``): each sweep also runs the periodic prune
    (:class:`supervisor.cluster.retention.Schedule`)."""
    connector = PsycopgConnector(
        conninfo=dsn,
        min_size=1,
        max_size=2,
        timeout=CONNECT_TIMEOUT * 2,
        kwargs={
            "connect_timeout": CONNECT_TIMEOUT,
            "options": f"-c statement_timeout={int(STATEMENT_TIMEOUT * 1000)}",
        },
    )
    app = App(connector=connector)
    reached: dict[str, float] = {}  # "since": monotonic time of the first good sweep
    pruning = retention.Schedule(prune_after)

    @app.periodic(cron=SWEEP_CRON, periodic_id="sweep")
    @app.task(name=SWEEP_TASK, queue=SWEEP_QUEUE, queueing_lock=SWEEP_TASK)
    async def sweep(timestamp: int) -> None:
        since = reached.get("since")
        watched = 0.0 if since is None else time.monotonic() - since
        try:
            await asyncio.to_thread(sweep_once, dsn, watched, pruning)
        except ClusterError as exc:  # the next second tries again; no failed job piles up
            reached.pop("since", None)
            log.error("cluster: %s", exc)
            return
        reached.setdefault("since", time.monotonic() if since is None else since)

    return app


async def serve(
    dsn: str, host_id: str, heartbeat: float, host_timeout: float, prune_after: float | None = None
) -> None:
    """Run the sweeper's worker (queue :data:`SWEEP_QUEUE`, one job at a time) until
    cancelled; started again after :data:`BACKOFF` seconds if it dies. ``prune_after``:
    :func:`make_app`'s."""
    name = f"{host_id}:sweeper"
    _quiet_sweeps(name)
    while True:
        try:
            app = make_app(dsn, prune_after)
            async with app.open_async():
                await app.run_worker_async(
                    queues=[SWEEP_QUEUE],
                    name=name,
                    concurrency=1,
                    install_signal_handlers=False,
                    shutdown_graceful_timeout=1.0,
                    delete_jobs="successful",
                    **worker_options(heartbeat, host_timeout),
                )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("cluster sweeper died: %s; restarted in %g s", one_line(exc), BACKOFF)
        await asyncio.sleep(BACKOFF)


class _SweepNoise(logging.Filter):
    """Drops procrastinate's INFO lines about sweep jobs (two a second per host)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        job = getattr(record, "job", None) or {}
        name = job.get("task_name") if isinstance(job, dict) else None
        return name != SWEEP_TASK and getattr(record, "task_name", None) != SWEEP_TASK


def _quiet_sweeps(worker: str) -> None:
    """Filter the loggers that say so (a worker named ``worker`` logs on a child logger of
    its own: ``procrastinate.worker.<name>``, procrastinate's ``Worker.__init__``)."""
    for name in (
        "procrastinate.worker",
        f"procrastinate.worker.{worker}",
        "procrastinate.periodic",
        "procrastinate.manager",
    ):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _SweepNoise) for f in logger.filters):
            logger.addFilter(_SweepNoise())
