"""The fleet's view for operators: the hosts and every host's tasks, read from the
database alone (``supervise hosts``, ``supervise status --cluster``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row
from tabulate import tabulate

from supervisor.cluster.db import NO_TABLES, ClusterError, connect, one_line
from supervisor.cluster.sqlfiles import query
from supervisor.terminal import escape_controls


@dataclass(frozen=True)
class TaskFilter:
    """What ``status --cluster`` asks the server for: ``states`` (None: every state),
    ``host`` (the owner, or the pinned host of a task no host owns; None: every host),
    ``after`` (a task id: the page starts after it in submission order; None: from the
    first), ``limit`` (rows at most; None: no limit)."""

    states: tuple[str, ...] | None = None
    host: str | None = None
    after: str | None = None
    limit: int | None = None

    def params(self) -> tuple[Any, ...]:
        """The ``fleet_tasks`` query's parameters."""
        states = None if self.states is None else list(self.states)
        return (states, states, self.host, self.host, self.after, self.after, self.limit)


def _rows(dsn: str, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    with connect(dsn) as conn:
        try:
            return list(conn.cursor(row_factory=dict_row).execute(sql, params).fetchall())
        except psycopg.errors.UndefinedTable as exc:
            raise ClusterError(NO_TABLES) from exc
        except psycopg.Error as exc:
            raise ClusterError(f"cannot read the fleet: {one_line(exc)}") from exc


def hosts(dsn: str) -> list[dict[str, Any]]:
    """One dict per host: ``host_id``, ``state`` (``alive`` | ``stopped`` | ``dead``: see
    :mod:`supervisor.cluster.sweeper`), ``age_s`` (seconds since its heartbeat),
    ``capacity``, ``running``, ``version``, ``queues``, ``last_error``, ``heartbeat_at``,
    ``lost_at``, ``stopped_at``, ``host_timeout`` (seconds), ``on_host_lost``,
    ``connections`` (what the host holds to the database, from its last heartbeat)."""
    return _rows(dsn, query("fleet_hosts"))


def tasks(dsn: str, where: TaskFilter | None = None) -> list[dict[str, Any]]:
    """One dict per task that ``where`` selects (all when None), oldest submission first,
    selected and cut in SQL (``WHERE``/``LIMIT``; a page is a keyset on ``(submitted_at,
    id)``): id, name, state (a manifest status, or ``queued``/``claimed``/``rejected``/
    ``host_lost``), owner_host, host_state (the owner's ``supervise_hosts`` state:
    ``alive``/``stopped``/``dead``; None without an owner or its row), generation, queue,
    host (pinned), exit_code, failure_reason, verdict, retry_count, submitted_at,
    updated_at, error, restarted_from (the runs lost with their hosts: ``[{host_id,
    generation, session_id}]``), state_s (seconds since ``updated_at``, by the database's
    clock).

    Raises:
        ClusterError: the database cannot be read, or ``where.after`` names no task.
    """
    where = where or TaskFilter()
    found = _rows(dsn, query("fleet_tasks"), where.params())
    if (
        where.after is not None
        and not found
        and not _rows(dsn, query("task_exists"), (where.after,))
    ):
        raise ClusterError(
            f"no task '{escape_controls(where.after)}' in the fleet to page after; "
            "give --after the id of a task 'supervise status --cluster' listed"
        )
    return found


def task_counts(dsn: str, where: TaskFilter | None = None) -> dict[str, int]:
    """Tasks per state under ``where``'s ``states`` and ``host`` (its page ignored).

    Raises:
        ClusterError: the database cannot be read.
    """
    where = where or TaskFilter()
    params = where.params()[:4]
    return {r["state"]: r["count"] for r in _rows(dsn, query("fleet_task_counts"), params)}


def table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """A plain table of ``columns``; every value escaped (names come from task files)."""
    body = [[escape_controls("" if r[c] is None else str(r[c])) for c in columns] for r in rows]
    return tabulate(body, headers=list(columns), tablefmt="plain") if body else "(none)"
