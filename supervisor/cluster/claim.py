"""The claim of a fleet task's row: the one statement that makes a start exactly-once, and
the rejection of a claimed task this host cannot run. The cluster intake's jobs call both
(:meth:`supervisor.cluster.intake.ClusterIntake._claim`, on plain threads).

procrastinate delivers a job at least once; the claim's ``UPDATE ... WHERE state =
'queued'`` lets only one of a task's jobs take it, and raises the row's generation so that
an older copy elsewhere finds itself superseded (:mod:`supervisor.cluster.ownership`).
"""

from __future__ import annotations

from typing import Any

import psycopg

from supervisor.cluster.db import ClusterError, one_line
from supervisor.cluster.sqlfiles import query


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
