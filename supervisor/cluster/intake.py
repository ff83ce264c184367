""":class:`ClusterIntake`: tasks from the fleet's database, next to the spool folder.

procrastinate's worker runs inside the engine's process, on a thread of its own with its
own asyncio loop, taking jobs from the shared queues and ``host.<id>``. Its concurrency is
``max_concurrent`` and each job lives as long as its task: a full host fetches no job, and a
slot freeing anywhere lets that host's worker fetch the next one at once (LISTEN/NOTIFY;
procrastinate 3.10 measured defer -> start p50 2.5 ms on PostgreSQL 15 here).

Exactly-once starts: procrastinate is at-least-once, so a job first claims its task
(:mod:`supervisor.cluster.claim`: one atomic ``UPDATE ... WHERE state = 'queued'``, then
the task folder, or ``rejected``); a job whose claim finds the task taken does nothing. The
claimed task is handed to the engine through :meth:`take`; the engine launches it as usual
and reports its transitions (:meth:`report`), written to the database by
:mod:`supervisor.cluster.writer`.

Ownership (issue 15, :mod:`supervisor.cluster.ownership`): a task whose row went to a newer
generation or another host (at start, after adoption; then from the writer) is handed to
the engine as a ``supersede`` request (:mod:`supervisor.taskdir.control`), which the policy turns
into the ``superseded`` ending. Slots after a restart: before the worker fetches anything,
each adopted task gets a high-priority *hold* job on ``host.<id>`` that lives until the
task ends, like a claim's job, so a restarted host fetches no more than its free slots
(procrastinate fetches ``ORDER BY priority DESC, id``: its ``procrastinate_fetch_job_v2``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable

import psycopg
from procrastinate import App
from procrastinate.exceptions import AlreadyEnqueued

from supervisor.cluster import sweeper as sweep
from supervisor.cluster.accountstore import AccountStore
from supervisor.cluster.claim import claim_task
from supervisor.cluster.connections import EnginePool, Outage, SharedConnector
from supervisor.cluster.control import host_channel
from supervisor.cluster.db import ClusterError, borrow, dsn_of, one_line
from supervisor.cluster.health import Health, fetch_polling_interval, wait_for_database
from supervisor.cluster.lease import LeaseKeeper, host_fence, stopped_run_on
from supervisor.cluster.listener import ControlListener
from supervisor.cluster.ownership import (
    CLAIM_FILE,
    adopted_claims,
    lost_before_adoption,
    lost_claims,
)
from supervisor.cluster.submit import TASK_NAME
from supervisor.cluster.writer import Transition, Writer
from supervisor.config import LoadedProfile, ResolvedTask
from supervisor.config.cluster import host_queue
from supervisor.engine import statefs, stats
from supervisor.engine.intake import SpoolIntake, Taken
from supervisor.taskdir import control, layout
from supervisor.taskdir.folder import Manifest, TaskDir

log = logging.getLogger("supervise.cluster")
#: The procrastinate task that holds a worker slot for an adopted task until it ends.
HOLD_NAME = "supervise.hold"
#: Its priority: above every task job (priority 0), so a restarted worker fetches holds first.
HOLD_PRIORITY = 1000
#: The writer's outbox in ``state_dir`` (:mod:`supervisor.cluster.writer`).
OUTBOX = layout.CLUSTER_OUTBOX
#: Seconds before a worker that died is started again (doubling up to :data:`MAX_BACKOFF`).
BACKOFF = 1.0
MAX_BACKOFF = 30.0
#: Seconds after which a task still owned here is asked to supersede again (the engine
#: ignores a request for a task it does not know yet, e.g. one claimed and not yet queued;
#: a stop under way takes at most the stop's grace period plus its SIGKILL wait).
REASK = 30.0


class ClusterIntake:
    """The spool folder plus the fleet's queue, as one :class:`~supervisor.engine.intake.Intake`.

    Args:
        profile: a profile with ``[cluster]``.
        disk: the state filesystem (the spool's intake waits while it is full).
        wake: called (on the worker's thread) when a claimed task is ready to queue.

    Raises:
        ConfigError: no DSN (``SUPERVISE_CLUSTER_DSN`` or ``[cluster] dsn``).
    """

    def __init__(
        self, profile: LoadedProfile, disk: statefs.StateDisk, wake: Callable[[], None]
    ) -> None:
        assert profile.spec.cluster is not None
        self.profile = profile
        self.cluster = profile.spec.cluster
        self.dsn = dsn_of(profile)
        self.spool = SpoolIntake(profile, disk)
        self.wake = wake
        self.queues = [*self.cluster.queues, host_queue(self.cluster.host_id)]
        self._handed: queue.SimpleQueue[tuple[TaskDir, ResolvedTask]] = queue.SimpleQueue()
        self._owned: dict[str, int] = {}  # task id -> generation, for tasks claimed here
        self._not_ours: set[str] = set()  # task folders without a claim file (spool tasks)
        self._reported: dict[str, tuple[str, str]] = {}  # engine worker only
        self._jobs: dict[str, asyncio.Future[None]] = {}  # task id -> its job's end
        self.health: Health | None = None  # the running worker's
        self._superseded: dict[str, float] = {}  # task id -> when asked (monotonic s)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None  # a reference keeps it alive
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, name="supervise-cluster-worker", daemon=True
        )
        # Issue 25: two steady connections, the pool (everything below borrows from it)
        # and the LISTEN connection (the worker's connector's); one account of outages.
        self.outage = Outage()
        self.pool = EnginePool(self.dsn, self.cluster.host_id, self.outage)
        self.accounts = AccountStore(self.pool, self.cluster.host_id, self.outage)  # issue 26
        self.alive = 1  # hosts alive, as the last heartbeat found (_fleet)
        self._connector: SharedConnector | None = None  # the running worker's
        # Fencing (issue 20): the agents of this host's fleet tasks stop when it lapses.
        self.lease = LeaseKeeper(profile.state_dir, host_fence(self.cluster))
        self.writer = Writer(
            self.pool,
            self.cluster.host_id,
            profile.spec.max_concurrent,
            self.running,
            stats.version() or "unknown",
            self.queues,
            self.cluster.heartbeat,
            profile.state_dir / OUTBOX,
            self.cluster.host_timeout,
            self.cluster.on_host_lost,
            self._owned_now,
            self._lost,
            self.lease,
            self.outage,
            self.connections,
            self.cluster.stopped_host_grace,
            self._fleet,
        )
        # Operator requests routed here from other machines (supervisor.cluster.listener).
        self.listener = ControlListener(
            self.pool,
            self.cluster.host_id,
            profile.state_dir,
            profile.tasks_dir,
            CLAIM_FILE,
            self.outage,
        )

    # ------------------------------------------------------------ the Intake protocol
    def notice(self, name: str) -> bool:
        """A spool event (see :meth:`SpoolIntake.notice`)."""
        return self.spool.notice(name)

    def recover(self) -> None:
        """Before adoption: recover the spool's interrupted claims, and leave a
        ``supersede`` request for each live task folder this host claimed whose row went
        to a newer generation or another host meanwhile (issue 20: adoption hands it to the
        task's first check, so an agent that ended while no engine ran records no ending,
        no acceptance and no notification of its own). The database not answering is
        logged: the first heartbeat checks again."""
        self.spool.recover()
        for task_id, why in lost_before_adoption(
            self.dsn, self.profile.tasks_dir, self.cluster.host_id
        ).items():
            self._lost(task_id, why)

    def submit_initial(self) -> list[tuple[TaskDir, ResolvedTask]]:
        """After adoption: start the lease, the writer and the worker; the profile's
        ``[[tasks]]``. The adopted claims are owned from the first heartbeat on, so its
        ownership check covers them before the lease is renewed."""
        with self._lock:
            for task_id, generation in adopted_claims(
                self.profile.tasks_dir, self.cluster.host_id
            ).items():
                if task_id not in self._not_ours:
                    self._owned.setdefault(task_id, generation)
        self.pool.open(wait=False)
        self.lease.start()
        self.writer.start()
        self._thread.start()
        self.listener.start()
        return self.spool.submit_initial()

    def take(self) -> Taken:
        """The spool's batch, plus every task the worker claimed since the last call."""
        taken = self.spool.take()
        while True:
            try:
                taken.tasks.append(self._handed.get_nowait())
            except queue.Empty:
                break
            taken.claimed += 1
        return taken

    def waiting(self) -> bool:
        """Spool files wait (the fleet's queue is never "idle" for one host)."""
        return self.spool.waiting()

    def report(self, task: TaskDir, manifest: Manifest, event: str, ended: bool) -> None:
        """A transition of ``task`` (engine worker; no I/O but a stat for a task not seen
        before). ``ended``: the task left the engine, its job ends and frees the slot."""
        task_id, event = task.task_id, str(event)
        generation = self._generation(task)
        if generation is None:
            return
        status = str(manifest.status)
        if not ended and self._reported.get(task_id) == (event, status):
            return  # a check that changed nothing: nothing to write
        self._reported[task_id] = (event, status)
        if ended:  # before the write: a heartbeat after it never counts the task
            self._reported.pop(task_id, None)
            with self._lock:
                self._owned.pop(task_id, None)
                self._not_ours.add(task_id)  # never counted or held again
                self._superseded.pop(task_id, None)
        self.writer.put(
            Transition(
                task_id,
                generation,
                event,
                status,
                manifest.session_id,
                manifest.started_at,
                manifest.finished_at,
                manifest.exit_code,
                manifest.retry_count,
                str(manifest.failure_reason) if manifest.failure_reason else None,
                str(manifest.verdict) if manifest.verdict else None,
            )
        )
        if ended:
            with self._lock:
                job = self._jobs.pop(task_id, None)
            if job is not None and self._loop is not None:
                with contextlib.suppress(RuntimeError):  # its worker died meanwhile
                    self._loop.call_soon_threadsafe(_finish, job)

    def running(self) -> int:
        """Tasks claimed here that have not ended (the heartbeat's running count)."""
        with self._lock:
            return len(self._owned)

    def connections(self) -> int:
        """Connections this engine holds to the database now: the pool's, and the LISTEN
        connection while it listens (``supervise hosts``' ``connections``)."""
        connector = self._connector
        listening = 1 if connector is not None and connector.listening else 0
        return self.pool.connections() + listening

    def full(self) -> bool:
        """No free slot: every one is held by a task claimed here."""
        return self.running() >= self.profile.spec.max_concurrent

    def close(self) -> None:
        """Stop the worker (tasks keep running in tmux; their jobs stay ``doing`` until
        a sweeper retries them, which the claim then refuses) and flush the writer."""
        self._stopping.set()
        if self._loop is not None and self._main is not None:
            with contextlib.suppress(RuntimeError):  # that worker's loop ended already
                self._loop.call_soon_threadsafe(self._main.cancel)
        if self._thread.is_alive():
            self._thread.join(15)
        self.listener.close()
        self.writer.close()
        self.pool.close(timeout=5.0)
        # Released only once the host is recorded stopped (never declared dead): else the
        # lease runs out and this host's fleet agents stop (issue 20).
        if self.writer.stopped:
            self.lease.release(stopped_run_on(self.cluster))
        else:
            self.lease.stop()

    # ------------------------------------------------------------ internals
    def _generation(self, task: TaskDir) -> int | None:
        task_id = task.task_id
        with self._lock:
            if task_id in self._owned:
                return self._owned[task_id]
            if task_id in self._not_ours:
                return None
        try:  # adopted after a restart of this engine
            claim = json.loads(task.file(CLAIM_FILE).read_text())
        except (OSError, ValueError):
            with self._lock:
                self._not_ours.add(task_id)
            return None
        generation = int(claim["generation"])
        with self._lock:
            self._owned[task_id] = generation
        return generation

    def _owned_now(self) -> dict[str, int]:
        """The tasks this host owns now (task id -> generation; the writer's thread)."""
        with self._lock:
            return dict(self._owned)

    def _lost(self, task_id: str, why: str) -> None:
        """``task_id``'s row no longer names this host and its generation (any thread but
        the engine's worker): leave the engine one ``supersede`` request for it."""
        now = time.monotonic()
        with self._lock:
            asked = self._superseded.get(task_id)
            if task_id in self._not_ours or (asked is not None and now - asked < REASK):
                return  # ended here already, or its stop is under way
            self._superseded[task_id] = now
        log.warning("cluster: %s is no longer this host's: %s; stopping this copy", task_id, why)
        try:
            control.request(self.profile.state_dir, task_id, "supersede")
        except (OSError, ValueError) as exc:
            with self._lock:  # asked again at the next heartbeat
                self._superseded.pop(task_id, None)
            log.error("cluster: cannot leave the supersede request of %s: %s", task_id, exc)
            return
        self.wake()

    def _check_adopted(self) -> list[str]:
        """At each start of the worker (a plain thread): register the live task folders
        this host claimed (:func:`adopted_claims`), compare every owned task with its row
        in one query (a lost one gets its ``supersede`` request), and return the others.

        Raises:
            ClusterError: the database cannot be reached (the worker starts later).
        """
        found = adopted_claims(self.profile.tasks_dir, self.cluster.host_id)
        with self._lock:
            for task_id, generation in found.items():
                if task_id not in self._not_ours:
                    self._owned.setdefault(task_id, generation)
        owned = self._owned_now()
        with borrow(self.pool) as conn:
            try:
                lost = lost_claims(conn, self.cluster.host_id, owned)
            except psycopg.Error as exc:
                raise ClusterError(f"ownership check failed: {one_line(exc)}") from exc
        for task_id, why in lost.items():
            self._lost(task_id, why)
        return [task_id for task_id in owned if task_id not in lost]

    async def _hold_adopted(self, app: App) -> None:
        """Before the worker fetches: one :data:`HOLD_NAME` job per owned task without a
        job in this worker (adopted after a restart, or left by a worker that died), so
        the worker's ``max_concurrent`` slots count the tasks already running here."""
        loop = asyncio.get_running_loop()
        for task_id in await asyncio.to_thread(self._check_adopted):
            with self._lock:
                job = self._jobs.get(task_id)
                if task_id in self._not_ours or (job is not None and job.get_loop() is loop):
                    continue
                self._jobs[task_id] = loop.create_future()
            deferrer = app.configure_task(
                HOLD_NAME,
                queue=host_queue(self.cluster.host_id),
                priority=HOLD_PRIORITY,
                queueing_lock=f"hold:{task_id}",
            )
            with contextlib.suppress(AlreadyEnqueued):  # one left by an earlier run holds it
                await deferrer.defer_async(task_id=task_id)

    async def _hold(self, task_id: str) -> None:
        """A hold job: keep one worker slot until ``task_id`` ends on this host (at once
        when it already ended, or the hold was left by an earlier run of the engine)."""
        with self._lock:
            done = self._jobs.get(task_id)
        if done is None or done.get_loop() is not asyncio.get_running_loop():
            return
        try:
            await done
        except asyncio.CancelledError:
            if not self._stopping.is_set():
                raise

    def _fleet(self, alive: int, max_connections: int, reserved: int) -> None:
        """After each heartbeat (the writer's thread): the hosts alive size the pool's
        burst (:meth:`EnginePool.fit`) and space the sweeps (:func:`sweep.sweep_every`)."""
        self.alive = alive
        self.pool.fit(alive, max_connections, reserved)

    def _serve(self) -> None:
        """The worker thread: run procrastinate's worker; start it again when it dies.

        A worker that dies aborts its jobs, but never the tasks: they go on in the engine,
        still owned here (``_owned``), and the next worker holds their slots with hold
        jobs (:meth:`_hold_adopted`) until they end. Each death waits for the database
        to answer (a probe every :data:`~supervisor.cluster.health.RECONNECT_EVERY` s),
        then :data:`BACKOFF` seconds, doubling up to :data:`MAX_BACKOFF` while the worker
        dies with the database up (a bug, not an outage). With
        :mod:`~supervisor.cluster.health` an outage no longer kills the worker."""
        delay = BACKOFF
        while not self._stopping.is_set():
            try:
                asyncio.run(self._run_worker())
            except BaseException as exc:
                if self._stopping.is_set():
                    return
                log.error("cluster worker died: %s; restarted in %g s", one_line(exc), delay)
            with self._lock:
                self._jobs.clear()  # futures of the dead loop; their tasks still count
            if wait_for_database(self.pool, self._stopping):
                delay = BACKOFF  # an outage, not the worker's fault: no growing backoff
            if self._stopping.wait(delay):
                return
            delay = min(delay * 2, MAX_BACKOFF)

    async def _run_worker(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        host_id = self.cluster.host_id
        self._connector = connector = SharedConnector(
            self.pool, self.dsn, host_id, host_channel(host_id), self.listener.poke, self.full
        )
        app = App(connector=connector)
        app.task(name=TASK_NAME)(self._job)
        app.task(name=HOLD_NAME)(self._hold)
        beat, timeout = self.cluster.heartbeat, self.cluster.host_timeout
        # The sweeps run on this loop, on the pool (asyncio.run, in _serve, cancels them).
        self._sweeper = asyncio.create_task(
            sweep.serve(self.pool, self.outage, self.cluster.prune_after, lambda: self.alive)
        )
        self.health = Health(app.job_manager, self.outage, self._stopping, self.listener.poke)
        self.health.install()
        connector.on_listening = self.health.listening
        async with app.open_async():
            await self._hold_adopted(app)
            await app.run_worker_async(
                queues=self.queues,
                name=host_id,
                concurrency=self.profile.spec.max_concurrent,
                install_signal_handlers=False,
                shutdown_graceful_timeout=1.0,
                delete_jobs="successful",
                fetch_job_polling_interval=fetch_polling_interval(),
                **sweep.worker_options(beat, timeout),
            )

    async def _job(self, task_id: str) -> None:
        """One job: claim, materialize, hand to the engine, live until the task ends."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Registered by the claim itself, before the engine can see the task (a short task
        # may end before this job awaits), and only then: a duplicate job whose claim fails
        # must not touch the running job's entry.
        if await asyncio.to_thread(self._claim, task_id, done):
            self.wake()
            try:
                await done
            except asyncio.CancelledError:
                if not self._stopping.is_set():
                    raise
                # The engine stops and leaves the task running in tmux; the next start
                # adopts it from its folder (CLAIM_FILE). The job is done: a sweeper must
                # not hand the task to another host for this.
                log.info("cluster: %s left running; its job ends with this engine", task_id)

    def _claim(self, task_id: str, done: asyncio.Future[None]) -> bool:
        """Claim and materialize ``task_id`` (:func:`~supervisor.cluster.claim.claim_task`,
        a plain thread), then own it and hand it to the engine. False: not ours to run.

        Raises:
            ClusterError: as :func:`~supervisor.cluster.claim.claim_task`.
        """
        claimed = claim_task(self.pool, self.profile, task_id, self._stopping)
        if claimed is None:
            return False
        with self._lock:
            self._owned[task_id] = claimed.generation
            self._jobs[task_id] = done
        self._handed.put((claimed.task_dir, claimed.resolved))
        return True


def _finish(job: asyncio.Future[None]) -> None:
    if not job.done():
        job.set_result(None)
