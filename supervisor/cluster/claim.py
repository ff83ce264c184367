"""The claim of a fleet task: the one statement that makes a start exactly-once, the task
folder made from the claimed row, and the rejection of a claimed task this host cannot run.
The cluster intake's jobs call :func:`claim_task` (:meth:`supervisor.cluster.intake.
ClusterIntake._claim`, on plain threads), which does all three.

procrastinate delivers a job at least once; the claim's ``UPDATE ... WHERE state =
'queued'`` lets only one of a task's jobs take it, and raises the row's generation so that
an older copy elsewhere finds itself superseded (:mod:`supervisor.cluster.ownership`).
The claimed task is materialized like a spool claim (:func:`supervisor.spool.finish_claim`:
validated again against this host's profile); a task this host cannot run (its
``project_dir`` missing here, a key its ``task_may_set`` refuses) is recorded ``rejected``
with the reason, and its file kept in ``spool/rejected/``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import tomli_w

from supervisor import spool
from supervisor.cluster.db import ClusterError, Source, acquire, one_line, release
from supervisor.cluster.health import RECONNECT_EVERY
from supervisor.cluster.ownership import CLAIM_FILE, ready_to_claim
from supervisor.cluster.sqlfiles import query
from supervisor.config import LoadedProfile, ResolvedTask
from supervisor.taskdir import layout
from supervisor.taskdir.folder import TaskDir, atomic_write

log = logging.getLogger("supervise.cluster")


@dataclass(frozen=True)
class Claimed:
    """A task this host claimed at ``generation`` and materialized: its folder (holding
    :data:`~supervisor.cluster.lease.CLAIM_FILE`) and the task as this host resolved it."""

    generation: int
    task_dir: TaskDir
    resolved: ResolvedTask


def claim_task(
    source: Source, profile: LoadedProfile, task_id: str, stopping: threading.Event
) -> Claimed | None:
    """Claim and materialize ``task_id`` (a plain thread) on a connection from ``source``
    (the engine's pool: issue 25). None: not ours to run (another job took it, it is no
    longer ``queued``, or this host rejected it).

    A connection that cannot be had (the server down or restarting, or out of connection
    slots: the pool tells the engine's outage log) is tried again every
    :data:`~supervisor.cluster.health.RECONNECT_EVERY` s: no statement was sent, and a
    job that failed here would leave its task ``queued`` with no job.

    Raises:
        ClusterError: ``stopping`` is set while the database is down, or the claim's
            statement failed (the job fails; the task stays ``queued``).
    """
    assert profile.spec.cluster is not None
    host_id = profile.spec.cluster.host_id
    lend = functools.partial(lent, source, stopping)
    if not ready_to_claim(lend, profile, task_id, stopping):
        return None
    with lend() as conn:
        claimed = claim_queued(conn, host_id, task_id)
    if claimed is None:
        log.info("cluster: %s is taken already; its job does nothing", task_id)
        return None
    generation, document = claimed
    try:  # the task folder: disk work, with no connection held
        made = materialize(profile, task_id, generation, document)
    except Exception as exc:  # claimed but not runnable here: say so, never hang
        log.exception("cluster: cannot materialize %s", task_id)
        made = f"cannot materialize on host {host_id}: {exc!r}"
    if isinstance(made, str):
        with lend() as conn:
            reject_claimed(conn, task_id, generation, made)
        return None
    return made


@contextlib.contextmanager
def lent(source: Source, stopping: threading.Event) -> Iterator[psycopg.Connection]:
    """A connection from ``source`` for one ``with`` block, given back at its end. One
    that cannot be had (the server down or restarting, or out of connection slots: the
    pool tells the engine's outage log) is tried again every
    :data:`~supervisor.cluster.health.RECONNECT_EVERY` s: no statement was sent yet.

    Raises:
        ClusterError: ``stopping`` is set while no connection can be had.
    """
    while True:
        try:
            conn = acquire(source)
            break
        except ClusterError:
            if stopping.wait(RECONNECT_EVERY):
                raise
    try:
        yield conn
    finally:
        release(source, conn)


def materialize(
    profile: LoadedProfile, task_id: str, generation: int, document: dict[str, Any]
) -> Claimed | str:
    """The task folder of the claimed ``document``, as a spool claim makes it, with this
    host's claim record; the error text (one line) if the task is rejected.

    Raises:
        OSError: the folder cannot be made (the caller rejects the task with the reason).
    """
    assert profile.spec.cluster is not None
    folder = profile.tasks_dir / task_id
    profile.tasks_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.mkdir(mode=0o700)
    atomic_write(folder / layout.TASK_TOML, tomli_w.dumps(document).encode())
    shown = Path("postgresql") / f"{task_id}.toml"
    claimed = spool.finish_claim(TaskDir(folder), profile, original=shown)
    if claimed.error is not None:  # one line, here and in the row (supervise show)
        reason = f"host {profile.spec.cluster.host_id} cannot run it: {claimed.error}"
        log.warning("cluster: rejected %s: %s", task_id, reason)
        return reason
    assert claimed.task_dir is not None and claimed.resolved is not None
    record = {"host_id": profile.spec.cluster.host_id, "generation": generation}
    atomic_write(folder / CLAIM_FILE, json.dumps(record).encode())
    return Claimed(generation, claimed.task_dir, claimed.resolved)


def claim_queued(
    conn: psycopg.Connection, host_id: str, task_id: str
) -> tuple[int, dict[str, Any]] | None:
    """Claim ``task_id`` for ``host_id`` if its row is ``queued``: ``(generation, spec)``,
    the spec being the task's table as submitted; None when another job took it first.

    Raises:
        ClusterError: the statement failed (the job fails; the task stays ``queued``).
    """
    try:
        row = conn.execute(query("claim_task"), (host_id, task_id)).fetchone()
    except psycopg.Error as exc:
        raise ClusterError(f"claim of {task_id} failed: {one_line(exc)}") from exc
    return None if row is None else (int(row[0]), row[1])


def reject_claimed(conn: psycopg.Connection, task_id: str, generation: int, error: str) -> None:
    """Record the claimed ``task_id`` (at ``generation``) as ``rejected`` with ``error``,
    the one line that says why this host cannot run it.

    Raises:
        psycopg.Error: the database refused.
    """
    conn.execute(query("reject_task"), (error, task_id, generation))
