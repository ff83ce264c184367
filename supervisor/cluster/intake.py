""":class:`ClusterIntake`: tasks from the fleet's database, next to the spool folder.

procrastinate's worker runs inside the engine's process, on a thread of its own with its
own asyncio loop, taking jobs from the shared queues and ``host.<id>``. Its concurrency is
``max_concurrent`` and each job lives as long as its task: a full host fetches no job, and a
slot freeing anywhere lets that host's worker fetch the next one at once (LISTEN/NOTIFY;
procrastinate 3.10 measured defer -> start p50 2.5 ms on PostgreSQL 15 here).

Exactly-once starts: procrastinate is at-least-once, so a job first claims its task with
one atomic ``UPDATE ... WHERE state = 'queued' RETURNING generation``; a job whose claim
finds the task taken does nothing. The claimed task is materialized like a spool claim
(:func:`supervisor.spool.finish_claim`: validated again against this host's profile) and
handed to the engine through :meth:`take`; the engine launches it as usual and reports its
transitions (:meth:`report`), written to the database by :mod:`supervisor.cluster.writer`.
A task this host cannot run (its ``project_dir`` missing here, a key its ``task_may_set``
refuses) is recorded ``rejected`` with the reason, and its file kept in
``spool/rejected/``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
import tomli_w
from procrastinate import App, PsycopgConnector

from supervisor import spool, statefs
from supervisor.cluster.db import (
    CONNECT_TIMEOUT,
    STATEMENT_TIMEOUT,
    ClusterError,
    connect,
    dsn_of,
    one_line,
)
from supervisor.cluster.health import (
    RECONNECT_EVERY,
    Health,
    ReconnectingPool,
    fetch_polling_interval,
)
from supervisor.cluster.listener import ControlListener
from supervisor.cluster.submit import TASK_NAME
from supervisor.cluster.writer import Transition, Writer
from supervisor.config import LoadedProfile, ResolvedTask
from supervisor.config.cluster import host_queue
from supervisor.engine import stats
from supervisor.engine.intake import SpoolIntake, Taken
from supervisor.taskdir import Manifest, TaskDir, atomic_write

log = logging.getLogger("supervise.cluster")
#: The claim record in a task folder: ``{"host_id", "generation"}``.
CLAIM_FILE = "cluster.json"
#: The writer's outbox in ``state_dir`` (:mod:`supervisor.cluster.writer`).
OUTBOX = "cluster-outbox.jsonl"
#: Seconds before a worker that died is started again (doubling up to :data:`MAX_BACKOFF`).
BACKOFF = 1.0
MAX_BACKOFF = 30.0
#: ``application_name`` of the worker's connections, plus the host id (``pg_stat_activity``).
WORKER_APPLICATION = "supervise-worker-"

_CLAIM = """
UPDATE supervise_tasks SET state = 'claimed', owner_host = %s, generation = generation + 1,
    claimed_at = now(), updated_at = now()
WHERE id = %s AND state = 'queued'
RETURNING generation, spec"""


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
        self._claiming = 0  # jobs fetched whose claim has not finished (worker's loop)
        self.health: Health | None = None  # the running worker's
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="supervise-cluster-worker",
                                        daemon=True)  # fmt: skip
        self.writer = Writer(
            self.dsn, self.cluster.host_id, profile.spec.max_concurrent, self.running,
            stats.version() or "unknown", self.queues, self.cluster.heartbeat,
            profile.state_dir / OUTBOX,
        )  # fmt: skip
        # Operator requests routed here from other machines (supervisor.cluster.listener).
        self.listener = ControlListener(self.dsn, self.cluster.host_id, profile.state_dir,
                                        profile.tasks_dir, CLAIM_FILE)  # fmt: skip

    # ------------------------------------------------------------ the Intake protocol
    def notice(self, name: str) -> bool:
        """A spool event (see :meth:`SpoolIntake.notice`)."""
        return self.spool.notice(name)

    def recover(self) -> None:
        """Recover the spool's interrupted claims."""
        self.spool.recover()

    def submit_initial(self) -> list[tuple[TaskDir, ResolvedTask]]:
        """After adoption: start the writer and the worker; the profile's ``[[tasks]]``."""
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
            self._not_ours.add(task_id)  # never counted again (engine worker only)
        self.writer.put(Transition(
            task_id, generation, event, status, manifest.session_id,
            manifest.started_at, manifest.finished_at, manifest.exit_code,
            manifest.retry_count,
            str(manifest.failure_reason) if manifest.failure_reason else None,
            str(manifest.verdict) if manifest.verdict else None,
        ))  # fmt: skip
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
            self._not_ours.add(task_id)
            return None
        generation = int(claim["generation"])
        with self._lock:
            self._owned[task_id] = generation
        return generation

    def _serve(self) -> None:
        """The worker thread: run procrastinate's worker; start it again when it dies.

        A worker that dies aborts its jobs, but never the tasks: they go on in the engine,
        still owned here (``_owned``), and :meth:`_may_fetch` counts them against
        ``max_concurrent`` until they end, so the next worker fetches only into free
        slots. Each death waits for the database to answer (a probe every
        :data:`~supervisor.cluster.health.RECONNECT_EVERY` s), then :data:`BACKOFF`
        seconds, doubling up to :data:`MAX_BACKOFF` while the worker dies with the
        database up (a bug, not an outage)."""
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
            self._claiming = 0
            if self._wait_for_database():
                delay = BACKOFF  # an outage, not the worker's fault: no growing backoff
            if self._stopping.wait(delay):
                return
            delay = min(delay * 2, MAX_BACKOFF)

    def _wait_for_database(self) -> bool:
        """Until a connection succeeds or the engine stops; True if it was down."""
        was_down = False
        while not self._stopping.is_set():
            try:
                connect(self.dsn).close()
                return was_down
            except ClusterError:
                was_down = True
                self._stopping.wait(RECONNECT_EVERY)
        return was_down

    def _may_fetch(self) -> bool:
        """A free slot here: tasks owned (with a job or left by a dead worker) plus jobs
        being claimed stay under ``max_concurrent`` (worker's loop)."""
        with self._lock:
            owned = len(self._owned)
        return owned + self._claiming < self.profile.spec.max_concurrent

    def _fetched(self, job: object) -> None:
        if getattr(job, "task_name", None) == TASK_NAME:
            self._claiming += 1

    async def _run_worker(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        # procrastinate's pool already checks each connection before lending it
        # (AsyncConnectionPool.check_connection): one the server dropped is replaced.
        connector = PsycopgConnector(
            conninfo=self.dsn, min_size=1, max_size=4, timeout=CONNECT_TIMEOUT * 2,
            pool_factory=ReconnectingPool,
            kwargs={"connect_timeout": CONNECT_TIMEOUT,
                    "application_name": WORKER_APPLICATION + self.cluster.host_id,
                    "options": f"-c statement_timeout={int(STATEMENT_TIMEOUT * 1000)}"},
        )  # fmt: skip
        app = App(connector=connector)
        app.task(name=TASK_NAME)(self._job)
        channel = "procrastinate_queue_v1#" + host_queue(self.cluster.host_id)
        self.health = Health(app.job_manager, self.dsn, channel, self._stopping,
                             self._may_fetch, self._fetched)  # fmt: skip
        self.health.install()
        async with app.open_async():
            watch = asyncio.create_task(self.health.watch(), name="supervise-listen-check")
            try:
                await app.run_worker_async(
                    queues=self.queues,
                    name=self.cluster.host_id,
                    concurrency=self.profile.spec.max_concurrent,
                    install_signal_handlers=False,
                    shutdown_graceful_timeout=1.0,
                    delete_jobs="successful",
                    fetch_job_polling_interval=fetch_polling_interval(),
                )
            finally:
                watch.cancel()
                await asyncio.gather(watch, return_exceptions=True)

    async def _job(self, task_id: str) -> None:
        """One job: claim, materialize, hand to the engine, live until the task ends."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Registered by the claim itself, before the engine can see the task (a short task
        # may end before this job awaits), and only then: a duplicate job whose claim fails
        # must not touch the running job's entry.
        try:
            claimed = await asyncio.to_thread(self._claim, task_id, done)
        finally:
            self._claiming = max(0, self._claiming - 1)
        if claimed:
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
        """Claim and materialize ``task_id`` (a plain thread). False: not ours to run.

        A connect that fails (the server down or restarting) is tried again every
        :data:`~supervisor.cluster.health.RECONNECT_EVERY` s: no statement was sent, and a
        job that failed here would leave its task ``queued`` with no job.

        Raises:
            ClusterError: the engine stops while the database is down, or the claim's
                statement failed (the job fails; the task stays ``queued``).
        """
        while True:
            try:
                conn = connect(self.dsn)
                break
            except ClusterError:
                if self._stopping.wait(RECONNECT_EVERY):
                    raise
        with conn:
            try:
                row = conn.execute(_CLAIM, (self.cluster.host_id, task_id)).fetchone()
            except psycopg.Error as exc:
                raise ClusterError(f"claim of {task_id} failed: {one_line(exc)}") from exc
            if row is None:
                log.info("cluster: %s is taken already; its job does nothing", task_id)
                return False
            generation, document = int(row[0]), row[1]
            try:
                error = self._materialize(task_id, generation, document, done)
            except Exception as exc:  # claimed but not runnable here: say so, never hang
                log.exception("cluster: cannot materialize %s", task_id)
                error = f"cannot materialize on host {self.cluster.host_id}: {exc!r}"
            if error is not None:
                conn.execute("UPDATE supervise_tasks SET state = 'rejected', error = %s, "
                             "updated_at = now() WHERE id = %s AND generation = %s",
                             (error, task_id, generation))  # fmt: skip
                return False
        return True

    def _materialize(
        self, task_id: str, generation: int, document: dict, done: asyncio.Future[None]
    ) -> str | None:
        """The task folder, as a spool claim makes it; the error text if it is rejected."""
        folder = self.profile.tasks_dir / task_id
        self.profile.tasks_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder.mkdir(mode=0o700)
        atomic_write(folder / "task.toml", tomli_w.dumps(document).encode())
        shown = Path("postgresql") / f"{task_id}.toml"
        claimed = spool.finish_claim(TaskDir(folder), self.profile, original=shown)
        if claimed.error is not None:
            log.warning("cluster: rejected %s: %s", task_id, claimed.error)
            return claimed.error
        assert claimed.task_dir is not None and claimed.resolved is not None
        record = {"host_id": self.cluster.host_id, "generation": generation}
        atomic_write(folder / CLAIM_FILE, json.dumps(record).encode())
        with self._lock:
            self._owned[task_id] = generation
            self._jobs[task_id] = done
        self._handed.put((claimed.task_dir, claimed.resolved))
        return None


def _finish(job: asyncio.Future[None]) -> None:
    if not job.done():
        job.set_result(None)
