"""The fleet's view for operators: the hosts and every host's tasks, read from the
database alone (``supervise hosts``, ``supervise status --cluster``)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row
from tabulate import tabulate

from supervisor.cluster.db import ClusterError, connect, one_line
from supervisor.cluster.sqlfiles import query
from supervisor.terminal import escape_controls


def _rows(dsn: str, sql: str) -> list[dict[str, Any]]:
    with connect(dsn) as conn:
        try:
            return list(conn.cursor(row_factory=dict_row).execute(sql).fetchall())
        except psycopg.errors.UndefinedTable as exc:
            raise ClusterError(
                "the cluster database has no supervise tables; run 'supervise cluster init'"
            ) from exc
        except psycopg.Error as exc:
            raise ClusterError(f"cannot read the fleet: {one_line(exc)}") from exc


def hosts(dsn: str) -> list[dict[str, Any]]:
    """One dict per host: ``host_id``, ``state`` (``alive`` | ``stopped`` | ``dead``: see
    :mod:`supervisor.cluster.sweeper`), ``age_s`` (seconds since its heartbeat),
    ``capacity``, ``running``, ``version``, ``queues``, ``last_error``, ``heartbeat_at``,
    ``lost_at``, ``stopped_at``, ``host_timeout`` (seconds), ``on_host_lost``,
    ``connections`` (what the host holds to the database, from its last heartbeat)."""
    return _rows(dsn, query("fleet_hosts"))


def tasks(dsn: str) -> list[dict[str, Any]]:
    """One dict per task, oldest submission first: id, name, state (a manifest status, or
    ``queued``/``claimed``/``rejected``/``host_lost``), owner_host, generation, queue, host
    (pinned), exit_code, failure_reason, verdict, retry_count, submitted_at, updated_at,
    error, restarted_from (the runs lost with their hosts: ``[{host_id, generation,
    session_id}]``), state_s (seconds since ``updated_at``, by the database's clock)."""
    return _rows(dsn, query("fleet_tasks"))


def table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """A plain table of ``columns``; every value escaped (names come from task files)."""
    body = [[escape_controls("" if r[c] is None else str(r[c])) for c in columns] for r in rows]
    return tabulate(body, headers=list(columns), tablefmt="plain") if body else "(none)"
