"""The engine's side of routed requests (:mod:`supervisor.cluster.control`).

A thread of its own, with no connection of its own (issue 25): the engine's LISTEN
connection hears a request's notification on this host's channel
(:func:`~supervisor.cluster.control.host_channel`) and calls :meth:`ControlListener.poke`;
the thread then reads this host's pending ``supervise_controls`` rows on a connection
borrowed from the engine's pool, as it does every :data:`POLL_EVERY` seconds anyway (the
backstop for a notification missed while the LISTEN connection was down; the LISTEN
connection pokes it again each time it listens again). Each row gets one handler thread.
The handler turns the row into the local request
(:func:`supervisor.taskdir.control.request`: the engine's intake applies it on its next tick, as for
``supervise stop -c``), waits (at most :data:`APPLY_TIMEOUT` seconds, polling the manifest)
until the manifest shows the effect, then writes ``done_at``, ``ok`` and ``result`` (the
line the local verb prints) and ``NOTIFY``s the reply channel. A row for a task this host
does not own (no task folder, or its claim record's generation is not the row's) is
answered ``ok = false`` with one line. Nothing here runs on the engine's check worker.
A database that does not answer is told to the engine's
:class:`~supervisor.cluster.connections.Outage` (one line per outage).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import psycopg

from supervisor.cluster.connections import Outage
from supervisor.cluster.control import REPLY_CHANNEL
from supervisor.cluster.db import ClusterError, Source, borrow, one_line
from supervisor.cluster.sqlfiles import query
from supervisor.taskdir import control, layout

log = logging.getLogger("supervise.cluster")
#: Seconds between polls of this host's pending rows when nothing pokes the listener.
POLL_EVERY = 30.0
#: Seconds a handler waits for the engine to apply a request (the requester's default
#: ``--wait`` is 15 s: the answer comes before it gives up).
APPLY_TIMEOUT = 12.0
#: Seconds before reading again after a failed read (doubling up to MAX_BACKOFF).
BACKOFF = 0.5
MAX_BACKOFF = 10.0


class ControlListener:
    """The listener thread of one engine.

    Args:
        source: the database: the engine's pool (or a DSN).
        host_id: this host.
        state_dir: where requests go (``state_dir/control``).
        tasks_dir: the task folders (their manifests and claim records).
        claim_file: the claim record's name in a task folder (``{"host_id", "generation"}``).
        outage: the engine's :class:`~supervisor.cluster.connections.Outage` (None: each
            failure is logged).
    """

    def __init__(
        self,
        source: Source,
        host_id: str,
        state_dir: Path,
        tasks_dir: Path,
        claim_file: str,
        outage: Outage | None = None,
    ) -> None:
        self.source, self.host_id, self.outage = source, host_id, outage
        self._poked = threading.Event()
        self.state_dir, self.tasks_dir, self.claim_file = state_dir, tasks_dir, claim_file
        self._busy: set[int] = set()  # row ids a handler works on
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, name="supervise-cluster-control", daemon=True
        )

    def start(self) -> None:
        """Start the thread (it reads the pending rows at once)."""
        self._poked.set()
        self._thread.start()

    def poke(self) -> None:
        """A request for this host was notified, or the LISTEN connection listens again:
        read the pending rows now (any thread)."""
        self._poked.set()

    def close(self, timeout: float = 5.0) -> None:
        """Stop (at most ``timeout`` seconds; handlers are daemon threads)."""
        self._stopping.set()
        self._poked.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _serve(self) -> None:
        delay = BACKOFF
        while not self._stopping.is_set():
            self._poked.wait(POLL_EVERY)
            self._poked.clear()
            if self._stopping.is_set():
                return
            began = time.monotonic()
            try:
                with borrow(self.source) as conn:
                    self._take_pending(conn)
                delay = BACKOFF
            except (psycopg.Error, ClusterError) as exc:
                self._failed(exc, "the control listener", began)
                self._poked.set()  # read again after the backoff
                if self._stopping.wait(delay):
                    return
                delay = min(delay * 2, MAX_BACKOFF)

    def _failed(self, exc: BaseException, what: str, began: float | None = None) -> None:
        if self.outage is not None:
            self.outage.failed(exc, what, began)
        else:
            log.warning("cluster: %s: %s", what, one_line(exc))

    def _take_pending(self, conn: psycopg.Connection) -> None:
        """A handler thread for each pending row of this host no handler has yet."""
        for row_id, task_id, verb, owner, generation in conn.execute(
            query("pending_controls"), (self.host_id,)
        ).fetchall():
            with self._lock:
                if row_id in self._busy:
                    continue
                self._busy.add(row_id)
            threading.Thread(
                target=self._handle,
                args=(row_id, task_id, verb, owner, generation),
                name=f"supervise-control-{row_id}",
                daemon=True,
            ).start()

    def _handle(
        self, row_id: int, task_id: str, verb: str, owner: str | None, generation: int | None
    ) -> None:
        try:
            ok, result = self._apply(task_id, verb, owner, generation)
        except Exception as exc:  # a handler never dies silently: the requester is told
            log.exception("cluster: control request %d (%s %s) failed", row_id, verb, task_id)
            ok, result = False, f"host {self.host_id} could not {verb} {task_id}: {exc!r}"
        try:
            with borrow(self.source) as conn, conn.transaction():
                conn.execute(query("answer_control"), (ok, result, row_id))
                conn.execute(query("notify"), (REPLY_CHANNEL, str(row_id)))
        except (psycopg.Error, ClusterError) as exc:
            # Left pending: the next poll hands it to a new handler (a stop applied twice
            # finds the task ended and answers again).
            self._failed(exc, f"the answer to control request {row_id}")
        finally:
            with self._lock:
                self._busy.discard(row_id)

    def _apply(
        self, task_id: str, verb: str, owner: str | None, generation: int | None
    ) -> tuple[bool, str]:
        """Leave the local request and wait for its effect; ``(ok, one line)``."""
        folder = self.tasks_dir / task_id
        try:
            claim = json.loads((folder / self.claim_file).read_text())
            claimed = (claim["host_id"], int(claim["generation"]))
        except (OSError, ValueError, KeyError, TypeError):
            claimed = None
        if claimed is None or claimed != (owner, generation) or owner != self.host_id:
            return False, (
                f"task {task_id} is not run by host {self.host_id} (the fleet says "
                f"owner {owner}, generation {generation})"
            )
        before = _manifest(folder)
        if before is None:
            return False, f"host {self.host_id} cannot read the manifest of {task_id}"
        refused = control.refusal(task_id, before["status"], verb)
        if refused:
            return False, refused
        control.request(self.state_dir, task_id, verb)
        deadline = time.monotonic() + APPLY_TIMEOUT
        while time.monotonic() < deadline and not self._stopping.is_set():
            after = _manifest(folder)
            if after is not None and control.acted(verb, before, after):
                return True, control.applied_line(task_id, after)
            time.sleep(0.1)  # the handler's own thread
        return False, (
            f"host {self.host_id} has not applied '{verb}' for {task_id} "
            f"within {APPLY_TIMEOUT:g} s (the request stays in its control "
            "folder)"
        )


def _manifest(folder: Path) -> dict | None:
    """The task's manifest (``None``: missing or being replaced)."""
    try:
        data = json.loads((folder / layout.MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("status"), str) else None
