"""The engine's writes to the fleet's database, off the check worker.

The worker only puts a :class:`Transition` on a queue (no I/O); this module's thread
writes it: the task row (state and the manifest's summary fields, only while this host
owns the claim's generation) and one ``supervise_events`` row. It also upserts this host's
``supervise_hosts`` row every ``heartbeat`` seconds. Each statement is bounded by
:data:`~supervisor.cluster.db.STATEMENT_TIMEOUT`.

Ownership (issue 15, :mod:`supervisor.cluster.ownership`): a task UPDATE that matches no
row means the task's row went to a newer generation or another host; so does a row that
:func:`~supervisor.cluster.ownership.lost_claims` finds changed, checked with every
heartbeat for the tasks this host owns. Either is handed to ``on_lost``. The database keeps
the newer generation's state: such a transition writes no task row, and its event row only
for ``superseded`` itself (the record that this host stopped its copy).

While the database cannot be reached, transitions wait in order, in memory and in the
outbox file ``state_dir/cluster-outbox.jsonl`` (rewritten atomically after each failed try,
so an engine stopped or killed meanwhile loses at most the last :data:`RETRY_EVERY` seconds);
the next start of the engine loads it first, and the file is removed once everything in it
is written. Each transition carries an id, unique in ``supervise_events``, so one written
just before a crash and replayed from the outbox is not counted twice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from supervisor.cluster.connections import Outage
from supervisor.cluster.db import ClusterError, Source, borrow, one_line
from supervisor.cluster.lease import LeaseKeeper
from supervisor.cluster.ownership import lost_claims
from supervisor.cluster.sqlfiles import query
from supervisor.taskdir.folder import atomic_write
from supervisor.taskdir.states import FleetState

log = logging.getLogger("supervise.cluster")
#: Seconds between tries while the database does not answer (also how late, at most,
#: the outbox starts flushing after the database's return).
RETRY_EVERY = 1.0


@dataclass(frozen=True)
class Transition:
    """One state change of a task this host owns (generation ``generation``)."""

    task_id: str
    generation: int
    event: str
    state: str
    session_id: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    retry_count: int | None = None
    failure_reason: str | None = None
    verdict: str | None = None
    error: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)


class Writer:
    """The writer thread.

    Args:
        source: the database: the engine's shared pool (a connection borrowed for each
            round of writes), or a DSN (tests).
        host_id: this host.
        capacity: ``max_concurrent``.
        running: called on the writer thread for the heartbeat's running count.
        version: this supervise's version.
        queues: the queues this host takes from.
        heartbeat: seconds between heartbeats.
        outbox: the outbox file (see the module docstring).
        host_timeout: seconds of silence after which the sweeper declares this host dead
            (``[cluster] host_timeout``; written in every heartbeat).
        on_host_lost: ``report`` | ``restart``: what the sweeper does with this host's
            running tasks then (``[cluster] on_host_lost``).
        owned: called on the writer thread for the tasks this host owns (task id ->
            generation), checked against their rows with each heartbeat.
        on_lost: called on the writer thread with a task id and why (one line) when this
            host no longer owns that task.
        lease: the host's lease (:mod:`supervisor.cluster.lease`): armed before each
            heartbeat, confirmed by one whose ownership check found nothing lost.
        stopped_host_grace: seconds a clean stop of this host may keep its tasks before
            the sweeper applies ``on_host_lost`` to them (``[cluster] stopped_host_grace``;
            written in every heartbeat; None: for ever).
        on_fleet: called on the writer thread after each heartbeat with the hosts alive,
            the server's ``max_connections`` and its ``superuser_reserved_connections``
            (:meth:`supervisor.cluster.connections.EnginePool.fit`).
    """

    def __init__(
        self,
        source: Source,
        host_id: str,
        capacity: int,
        running: Callable[[], int],
        version: str,
        queues: list[str],
        heartbeat: float,
        outbox: Path,
        host_timeout: float = 30.0,
        on_host_lost: str = "report",
        owned: Callable[[], dict[str, int]] | None = None,
        on_lost: Callable[[str, str], None] | None = None,
        lease: LeaseKeeper | None = None,
        outage: Outage | None = None,
        connections: Callable[[], int | None] | None = None,
        stopped_host_grace: float | None = None,
        on_fleet: Callable[[int, int, int], None] | None = None,
    ) -> None:
        self.source = source
        self.on_fleet = on_fleet
        self.outage = outage
        self.connections = connections
        self.host_id = host_id
        self.capacity = capacity
        self.running = running
        self.version = version
        self.queues = queues
        self.heartbeat = heartbeat
        self.outbox = outbox
        self.host_timeout = host_timeout
        self.on_host_lost = on_host_lost
        self.owned = owned
        self.on_lost = on_lost
        self.lease = lease
        self.stopped_host_grace = stopped_host_grace
        #: The host's ``stopped`` state was written by :meth:`close` (a clean stop).
        self.stopped = False
        self._saved = outbox.exists()  # an outbox file on disk, to remove once written
        self._queue: queue.SimpleQueue[Transition | None] = queue.SimpleQueue()
        self._pending: deque[Transition] = deque()
        self._last_error: str | None = None
        self._thread = threading.Thread(
            target=self._loop, name="supervise-cluster-writer", daemon=True
        )

    def start(self) -> None:
        """Start the thread (the first heartbeat is written at once)."""
        self._thread.start()

    def put(self, transition: Transition) -> None:
        """Queue a transition (any thread; no I/O)."""
        self._queue.put(transition)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (at most ``timeout`` seconds; the rest stays in the
        outbox), mark this host ``stopped`` (``stopped_at``), then stop. Nothing to do if
        the thread never started."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)

    def _load_outbox(self) -> None:
        """Transitions a previous run could not write go first, in their order."""
        try:
            lines = self.outbox.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        except OSError as exc:
            log.error("cluster: cannot read the outbox %s: %s", self.outbox, exc)
            return
        for line in lines:
            try:
                self._pending.append(Transition(**json.loads(line)))
            except (ValueError, TypeError) as exc:
                log.error("cluster: skipped a damaged outbox line in %s: %s", self.outbox, exc)
        log.info("cluster: %d transition(s) from the outbox to write", len(self._pending))

    def _save_outbox(self) -> None:
        """Keep what is pending in the outbox file (atomically; errors logged)."""
        text = "".join(json.dumps(dataclasses.asdict(t)) + "\n" for t in self._pending)
        try:
            atomic_write(self.outbox, text.encode())
            self._saved = True
        except OSError as exc:
            log.error("cluster: cannot write the outbox %s: %s", self.outbox, exc)

    def _loop(self) -> None:
        self._load_outbox()
        next_beat = 0.0
        stopping = False
        while not (stopping and not self._pending):
            wait = max(0.0, next_beat - time.monotonic())
            try:
                timeout = min(wait, RETRY_EVERY) if self._pending else wait
                item = self._queue.get(timeout=timeout)
                if item is None:
                    stopping = True
                else:
                    self._pending.append(item)
                while True:  # take everything queued now: one connection round for all
                    item = self._queue.get_nowait()
                    stopping = stopping or item is None
                    if item is not None:
                        self._pending.append(item)
            except queue.Empty:
                pass
            beat = stopping or time.monotonic() >= next_beat  # a last one at shutdown
            if self._flush(beat, stopping):
                if beat:
                    next_beat = time.monotonic() + self.heartbeat
                if self._saved:  # everything in it is written now
                    self.outbox.unlink(missing_ok=True)
                    self._saved = False
                continue
            self._save_outbox()
            if stopping:
                log.error(
                    "cluster: %d transition(s) kept in %s for the next start: %s",
                    len(self._pending),
                    self.outbox,
                    self._last_error,
                )
                return
            time.sleep(RETRY_EVERY)  # the writer's own thread: nothing else waits

    def _beat(self, conn: psycopg.Connection) -> None:
        """The heartbeat, then the ownership check of the tasks this host owns; the lease
        is armed before and confirmed after a check that found nothing lost (issue 20).

        Raises:
            psycopg.Error: a statement failed (the caller tries again).
        """
        if self.lease is not None:
            self.lease.arm()
        beat = (self.host_id, self.capacity, self.running(), self.version, self.queues)
        error = self._last_error or (self.outage.error if self.outage is not None else None)
        held = self.connections() if self.connections is not None else None
        declared = (self.host_timeout, self.on_host_lost, held, self.stopped_host_grace)
        fleet = conn.execute(query("heartbeat"), (*beat, error, *declared)).fetchone()
        if fleet is not None and self.on_fleet is not None:
            self.on_fleet(*fleet)
        # Reported once, by the first beat that got through; the next good beat clears
        # it, so 'hosts' shows only an error that is recent.
        self._last_error = None
        lost = lost_claims(conn, self.host_id, self.owned()) if self.owned is not None else {}
        for task_id, why in lost.items():
            if self.on_lost is not None:
                self.on_lost(task_id, why)
        if self.lease is not None and not lost:
            self.lease.confirm()

    def _flush(self, beat: bool, stopping: bool = False) -> bool:
        """Write pending transitions in order (and the heartbeat; when ``stopping``, the
        host's ``stopped`` state after them); False on failure."""
        began = time.monotonic()
        try:
            with borrow(self.source) as conn:
                self._write(conn, beat, stopping)
            if self.outage is not None:
                self.outage.ok()
            return True
        except (psycopg.Error, ClusterError) as exc:
            message = one_line(exc)
            if self.outage is not None:
                self.outage.failed(exc, "the writer", began)
            elif message != self._last_error:
                log.error("cluster: cannot write to the database: %s", message)
            # what 'hosts' shows after the outage: its cause (and fix), not the pool's wait
            outage_line = self.outage.error if self.outage is not None else None
            self._last_error = outage_line or message
            return False

    def _write(self, conn: psycopg.Connection, beat: bool, stopping: bool) -> None:
        """:meth:`_flush` on ``conn``.

        Raises:
            psycopg.Error: a statement failed (what was written stays written).
        """
        while self._pending:
            item = self._pending[0]
            with conn.transaction():
                row = (
                    item.state,
                    item.session_id,
                    item.started_at,
                    item.finished_at,
                    item.exit_code,
                    item.retry_count,
                    item.failure_reason,
                    item.verdict,
                    item.error,
                    item.task_id,
                    self.host_id,
                    item.generation,
                )
                mine = conn.execute(query("update_task"), row).rowcount > 0
                if mine or item.state == FleetState.SUPERSEDED:
                    conn.execute(
                        query("insert_event"),
                        (
                            item.id,
                            item.task_id,
                            self.host_id,
                            item.generation,
                            item.event,
                            item.state,
                        ),
                    )
            self._pending.popleft()
            if not mine and self.on_lost is not None:
                self.on_lost(
                    item.task_id,
                    f"its row no longer names this host and generation {item.generation}",
                )
        if beat:
            self._beat(conn)
        if stopping and not self._pending:
            conn.execute(query("host_stopped"), (self.running(), self.host_id))
            self.stopped = True
