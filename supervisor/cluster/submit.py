"""``supervise submit`` with a ``[cluster]`` profile: the task goes into PostgreSQL.

The file is validated exactly as for the spool (:func:`supervisor.config.load_task`: the
same size limits and ``task_may_set``), then stored with its prompt inline (a
``prompt_file`` names a path on the submitting machine), and a procrastinate job is deferred
on the shared queue, or ``host.<id>`` when the task names ``host``, with ``queueing_lock`` =
the task id (procrastinate refuses a second waiting job for it). The host that runs it
validates it again against its own profile when it claims it: its ``project_dir`` must
exist there, and is not checked on the submitting machine unless ``submit --check-local``
asks (issue 25: a laptop submits to the fleet).

``--retry-for S`` rides out a database that does not answer (a restart, a failover): the
connect, the insert and the commit are tried again with backoff for up to ``S`` seconds,
under the task id drawn first. A try whose commit went through but whose answer was lost
finds its own row (same id, same spec) and stops there, so the task is stored once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from procrastinate import App, SyncPsycopgConnector

from supervisor.cluster.db import (
    CONNECT_TIMEOUT,
    NO_TABLES,
    STATEMENT_TIMEOUT,
    ClusterError,
    connect,
    one_line,
)
from supervisor.cluster.sqlfiles import query
from supervisor.config import LoadedProfile, ResolvedTask
from supervisor.config.cluster import host_queue
from supervisor.spool import new_task_id

#: The procrastinate task every submission defers (:mod:`supervisor.cluster.intake` runs it).
TASK_NAME = "supervise.run_task"
#: Tries for a unique task id (6 random hex digits each: a clash is rare, never silent).
ID_TRIES = 5
#: ``--retry-for``'s first wait and its longest, seconds (doubling in between).
RETRY_FIRST = 0.25
RETRY_MAX = 2.0


@dataclass(frozen=True)
class Submitted:
    """A stored task: its ``task_id``, ``queue`` and procrastinate ``job_id``."""

    task_id: str
    queue: str
    job_id: int


def task_document(resolved: ResolvedTask) -> dict[str, Any]:
    """The task as stored in ``supervise_tasks.spec``: the file's keys as validated
    (paths absolute), the prompt inline instead of ``prompt_file``."""
    spec = resolved.spec
    # by alias: the file says `[workspace] copy`, the model `copy_paths`
    data: dict[str, Any] = spec.model_dump(
        mode="json", exclude_none=True, exclude_defaults=True, by_alias=True
    )
    data.pop("prompt_file", None)
    data.update(name=spec.name, project_dir=str(spec.project_dir), prompt=resolved.prompt)
    return data


def sync_app(dsn: str) -> App:
    """A procrastinate app for deferring from a plain thread (one pooled connection)."""
    connector = SyncPsycopgConnector(
        conninfo=dsn,
        min_size=1,
        max_size=1,
        timeout=CONNECT_TIMEOUT * 2,
        kwargs={
            "connect_timeout": CONNECT_TIMEOUT,
            "options": f"-c statement_timeout={int(STATEMENT_TIMEOUT * 1000)}",
        },
    )
    return App(connector=connector)


def submit(
    dsn: str,
    profile: LoadedProfile,
    resolved: ResolvedTask,
    retry_for: float = 0.0,
    on_retry: Callable[[str, float], None] | None = None,
) -> Submitted:
    """Insert the task (``queued``) and defer its job, in one transaction on one
    connection: either both are stored or neither (no half-submitted task to clean up,
    which a ``supervise_submit`` login could not delete anyway), and a submit costs one
    connection (it was two: measured 28-29 ms p50 per submit, ``benchmarks/cluster.py``).

    Args:
        retry_for: seconds to keep trying while the database does not answer
            (:func:`transient`); 0: one try.
        on_retry: called once, at the first failed try, with its one line and the seconds
            left.

    Raises:
        ClusterError: the database refused, or did not answer within ``retry_for``;
            nothing is stored.
    """
    cluster = profile.spec.cluster
    assert cluster is not None
    host = resolved.spec.host
    queue = host_queue(host) if host else cluster.queues[0]
    document = json.dumps(task_document(resolved))
    name = resolved.spec.name
    deadline, delay = time.monotonic() + retry_for, RETRY_FIRST
    task_id, drawn = new_task_id(name), 1
    while True:
        try:
            done = _submit_once(dsn, task_id, name, document, host, queue)
        except ClusterError as exc:
            left = deadline - time.monotonic()
            if not transient(exc) or left <= 0:
                raise
            if on_retry is not None and delay == RETRY_FIRST:
                on_retry(str(exc), left)
            time.sleep(min(delay, left))
            delay = min(delay * 2, RETRY_MAX)
            continue
        if done is not None:
            return done
        if drawn >= ID_TRIES:  # the id is another task's: draw again
            raise ClusterError(f"no free task id for {name!r} after {ID_TRIES} tries; submit again")
        task_id, drawn = new_task_id(name), drawn + 1


def transient(exc: BaseException) -> bool:
    """The database did not answer, or went away mid-way (``psycopg.OperationalError`` in
    ``exc`` or its causes: a failed connect, "the database system is starting up", a
    server shut down under the statement), as opposed to one that refused."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, psycopg.OperationalError):
            return True
        seen = seen.__cause__
    return False


def _submit_once(
    dsn: str, task_id: str, name: str, document: str, host: str | None, queue: str
) -> Submitted | None:
    """One try: the row and its job under ``task_id``, committed; None when ``task_id`` is
    another task's.

    Raises:
        ClusterError: as :func:`submit`.
    """
    try:
        with connect(dsn, autocommit=False) as conn:  # the block commits, or rolls back
            if not _insert(conn, task_id, name, document, host, queue):
                row = conn.execute(query("submitted_job"), (task_id, document)).fetchone()
                if row is None:
                    return None
                return Submitted(task_id, queue, int(row[0]))  # an earlier try's commit
            try:
                row = conn.execute(
                    query("defer_job"),
                    (queue, TASK_NAME, task_id, json.dumps({"task_id": task_id})),
                ).fetchone()
            except psycopg.Error as exc:
                raise ClusterError(
                    f"cannot queue the task's job: {one_line(exc)}; nothing was submitted"
                ) from exc
            assert row is not None
    except psycopg.OperationalError as exc:  # the commit itself
        raise ClusterError(f"cannot store the task: {one_line(exc)}") from exc
    return Submitted(task_id, queue, int(row[0]))


def _insert(
    conn: psycopg.Connection, task_id: str, name: str, document: str, host: str | None, queue: str
) -> bool:
    """Insert the row; False when ``task_id`` is taken.

    Raises:
        ClusterError: the database refused or went away.
    """
    try:
        row = conn.execute(query("insert_task"), (task_id, name, document, host, queue)).fetchone()
    except psycopg.errors.UndefinedTable as exc:
        raise ClusterError(NO_TABLES) from exc
    except psycopg.Error as exc:
        raise ClusterError(f"cannot store the task: {one_line(exc)}") from exc
    return row is not None
