"""``supervise submit`` with a ``[cluster]`` profile: the task goes into PostgreSQL.

The file is validated exactly as for the spool (:func:`supervisor.config.load_task`: the
same size limits and ``task_may_set``), then stored with its prompt inline (a
``prompt_file`` names a path on the submitting machine), and a procrastinate job is deferred
on the shared queue, or ``host.<id>`` when the task names ``host``, with ``queueing_lock`` =
the task id (procrastinate refuses a second waiting job for it). The host that runs it
validates it again against its own profile when it claims it (its ``project_dir`` must
exist there).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from procrastinate import App, SyncPsycopgConnector

from supervisor.cluster.db import (
    CONNECT_TIMEOUT,
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
    data: dict[str, Any] = spec.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
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


def submit(dsn: str, profile: LoadedProfile, resolved: ResolvedTask) -> Submitted:
    """Insert the task (``queued``) and defer its job, in one transaction on one
    connection: either both are stored or neither (no half-submitted task to clean up,
    which a ``supervise_submit`` login could not delete anyway), and a submit costs one
    connection (it was two: measured 28-29 ms p50 per submit, ``benchmarks/cluster.py``).

    Raises:
        ClusterError: the database refused or cannot be reached; nothing is stored.
    """
    cluster = profile.spec.cluster
    assert cluster is not None
    host = resolved.spec.host
    queue = host_queue(host) if host else cluster.queues[0]
    document = json.dumps(task_document(resolved))
    with connect(dsn, autocommit=False) as conn:  # the block commits, or rolls back
        task_id = _insert(conn, resolved.spec.name, document, host, queue)
        try:
            row = conn.execute(
                query("defer_job"), (queue, TASK_NAME, task_id, json.dumps({"task_id": task_id}))
            ).fetchone()
        except psycopg.Error as exc:
            raise ClusterError(
                f"cannot queue the task's job: {one_line(exc)}; nothing was submitted"
            ) from exc
        assert row is not None
    return Submitted(task_id, queue, int(row[0]))


def _insert(
    conn: psycopg.Connection, name: str, document: str, host: str | None, queue: str
) -> str:
    """Insert the row under a fresh id; a taken id is drawn again."""
    for _ in range(ID_TRIES):
        task_id = new_task_id(name)
        try:
            row = conn.execute(
                query("insert_task"), (task_id, name, document, host, queue)
            ).fetchone()
        except psycopg.errors.UndefinedTable as exc:
            raise ClusterError(
                "the cluster database has no supervise tables; run "
                "'supervise cluster init -c PROFILE'"
            ) from exc
        except psycopg.Error as exc:
            raise ClusterError(f"cannot store the task: {one_line(exc)}") from exc
        if row is not None:
            return task_id
    raise ClusterError(f"no free task id for {name!r} after {ID_TRIES} tries; submit again")
