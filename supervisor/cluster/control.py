"""Operator requests routed to the host that owns a task, and one task read across hosts.

``supervise stop|resume|approve|deny ID`` from any machine with only the DSN: when the task
is not in a local state dir, :func:`route` refuses as the local verbs do
(:func:`supervisor.taskdir.control.refusal` with the row's state), refuses a host that is not alive
(no row is written then), inserts a ``supervise_controls`` row for the task's
``owner_host``, ``NOTIFY``s that host's own channel (:func:`host_channel`, issue 25: only
that host's engine wakes; payload ``{"type": CONTROL_TYPE, "id": <row id>}``) and waits,
bounded, for the row's ``done_at``: ``LISTEN`` on :data:`REPLY_CHANNEL` (payload: the row
id) with a poll every :data:`POLL_EVERY` seconds as the fallback. The owner's engine
answers through :mod:`supervisor.cluster.listener`.

Channel names are fixed identifiers (``LISTEN`` takes no parameter); host ids travel in the
payload (PostgreSQL docs, NOTIFY: the payload is a string under 8000 bytes, delivered at
commit, to every session listening on the channel).

:func:`show_row` and :func:`final_rows` serve ``supervise show`` / ``supervise wait`` for
a task on another host.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from supervisor.cluster.db import ClusterError, connect, one_line
from supervisor.cluster.sqlfiles import listen, query
from supervisor.taskdir import control
from supervisor.taskdir.states import FINAL, UNCLAIMED, FleetState

#: The ``type`` of a request's notification on its host's channel (:func:`host_channel`);
#: procrastinate's worker ignores a type that is not its own (``Worker._handle_notification``).
CONTROL_TYPE = "supervise_control"
#: Answers: payload ``"<row id>"``.
REPLY_CHANNEL = "supervise_control_done"
#: Seconds between polls of the row while waiting (the net under a missed notification).
POLL_EVERY = 1.0


def host_channel(host_id: str) -> str:
    """The channel of ``host_id``'s requests: its host queue's procrastinate channel
    (``procrastinate_queue_v1#host.<id>``, procrastinate's ``get_channel_for_queues``),
    which that host's engine LISTENs on anyway (:mod:`supervisor.cluster.connections`)."""
    from procrastinate.manager import get_channel_for_queues

    from supervisor.config.cluster import host_queue

    return next(iter(get_channel_for_queues([host_queue(host_id)])))


def control_payload(request_id: int) -> str:
    """The notification of request ``request_id`` (JSON)."""
    return json.dumps({"type": CONTROL_TYPE, "id": request_id})


@dataclass(frozen=True)
class Answer:
    """What :func:`route` got: ``ok`` (the host applied it), ``text`` (one line: the local
    verb's line, or why not), ``code`` (the local verb's exit status: 0 applied, 1 refused,
    4 not answered in time), ``host_id``."""

    ok: bool
    text: str
    code: int
    host_id: str | None = None


def _task(conn: psycopg.Connection, task_id: str) -> dict[str, Any] | None:
    cursor = conn.cursor(row_factory=dict_row)
    return cursor.execute(query("task_owner"), (task_id,)).fetchone()


def host_down(conn: psycopg.Connection, host_id: str) -> str | None:
    """Why ``host_id`` cannot answer (one line), or ``None`` when it is alive: its
    ``supervise_hosts.state`` is not ``alive``, or its heartbeat is older than its own
    ``host_timeout`` (seconds)."""
    row = conn.cursor(row_factory=dict_row).execute(query("host_alive"), (host_id,)).fetchone()
    if row is None:
        return f"host {host_id} has never reported to the fleet"
    if row["state"] != "alive":
        return f"host {host_id} is {row['state']}"
    if row["age"] > row["host_timeout"]:
        return f"host {host_id} has sent no heartbeat for {row['age']:.0f} s"
    return None


def route(dsn: str, task_id: str, verb: str, timeout: float, requested_by: str) -> Answer:
    """Ask the host owning ``task_id`` to apply ``verb``; wait at most ``timeout`` seconds.

    Returns:
        the answer; ``None``-free: an unknown task, a refusal, a host not alive are
        answers with ``code`` 1 and nothing written.

    Raises:
        ClusterError: the database cannot be reached or refused.
    """
    try:
        with connect(dsn) as conn:
            row = _task(conn, task_id)
            if row is None:
                return Answer(
                    False, f"no task {task_id!r} in the fleet; see 'supervise status --cluster'", 1
                )
            state, host = str(row["state"]), row["owner_host"]
            refused = control.refusal(task_id, state, verb)
            if state in FINAL:
                refused = f"task {task_id} already ended: {state}"
            elif verb == "stop" and state == FleetState.QUEUED and host is None:
                return _cancel_queued(conn, task_id, requested_by)
            elif state in UNCLAIMED or host is None:
                refused = f"task {task_id} is {state}, on no host yet: nothing to {verb}"
            if refused:
                return Answer(False, refused, 1, host)
            down = host_down(conn, host)
            if down:
                return Answer(False, f"{down}: cannot {verb} {task_id}", 1, host)
            conn.execute(listen(REPLY_CHANNEL))
            with conn.transaction():
                cursor = conn.execute(query("insert_control"), (task_id, host, verb, requested_by))
                request_id = int(cursor.fetchone()[0])  # type: ignore[index]
                conn.execute(query("notify"), (host_channel(host), control_payload(request_id)))
            return _await(conn, request_id, host, task_id, verb, timeout)
    except psycopg.Error as exc:
        raise ClusterError(f"cannot route '{verb}' for {task_id}: {one_line(exc)}") from exc


def _cancel_queued(conn: psycopg.Connection, task_id: str, requested_by: str) -> Answer:
    """``stop`` of a task no host has claimed: ``supervise_cancel_queued`` (schema v3) ends
    it ``abandoned`` and cancels its waiting job; a host that claimed it a moment before
    wins (then ``stop`` is to be asked again, of that host)."""
    done = conn.execute(query("cancel_queued"), (task_id, requested_by))
    row = done.fetchone()
    if row and row[0]:
        return Answer(True, f"{task_id}: abandoned (stopped before any host claimed it)", 0)
    return Answer(False, f"task {task_id} was claimed by a host just now; ask again", 1)


def _await(
    conn: psycopg.Connection, request_id: int, host: str, task_id: str, verb: str, timeout: float
) -> Answer:
    """Until the row is answered (a reply notification, or the poll); at ``timeout`` the
    row is closed unanswered so that a host coming back later does not act on it."""
    deadline = time.monotonic() + timeout
    while True:
        done, ok, result = conn.execute(query("control_answer"), (request_id,)).fetchone()  # type: ignore[misc]
        if done:
            return Answer(bool(ok), str(result or ""), 0 if ok else 1, host)
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for note in conn.notifies(timeout=min(left, POLL_EVERY)):
            if note.channel == REPLY_CHANNEL and note.payload == str(request_id):
                break
    closed = conn.execute(
        query("answer_control"), (False, f"not answered within {timeout:g} s", request_id)
    )
    if closed.rowcount == 0:  # answered in the last instant
        return _await(conn, request_id, host, task_id, verb, 0)
    return Answer(
        False,
        f"requested '{verb}' for {task_id} on host {host}; not answered "
        f"within {timeout:g} s (the request is withdrawn)",
        4,
        host,
    )


# ---------------------------------------------------------------- show and wait


def show_row(dsn: str, task_id: str) -> dict[str, Any] | None:
    """The fleet's record of ``task_id`` (``None``: unknown): the summary fields of its
    manifest (``status`` is the row's ``state``), ``owner_host``, ``generation``,
    ``restarted_from`` and ``events`` (``[{at, host_id, generation, event, state}]``,
    oldest first).

    Raises:
        ClusterError: the database cannot be reached or refused.
    """
    try:
        with connect(dsn) as conn:
            cursor = conn.cursor(row_factory=dict_row)
            row = cursor.execute(query("task_rows"), ([task_id],)).fetchone()
            if row is None:
                return None
            row["events"] = cursor.execute(query("task_events"), (task_id,)).fetchall()
            return row
    except psycopg.Error as exc:
        raise ClusterError(f"cannot read task {task_id}: {one_line(exc)}") from exc


def final_rows(dsn: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """``task id -> row`` (as :func:`show_row`, without events) for each of ``ids`` the
    fleet knows.

    Raises:
        ClusterError: the database cannot be reached or refused.
    """
    try:
        with connect(dsn) as conn:
            cursor = conn.cursor(row_factory=dict_row)
            rows = cursor.execute(query("task_rows"), (ids,)).fetchall()
    except psycopg.Error as exc:
        raise ClusterError(f"cannot read the fleet's tasks: {one_line(exc)}") from exc
    return {row["task_id"]: row for row in rows}
