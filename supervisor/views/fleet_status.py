"""``supervise status --cluster``: every host's tasks, read from the fleet's database, shown
with the local status view's ``--status``, ``--sort`` and ``--snapshot``
(:mod:`supervisor.views.status`; the same selection and order code, issue 20).

Each row of :func:`supervisor.cluster.fleet.tasks` becomes a :class:`~.model.Task` for
selecting and ordering (its group from its state: the fleet's own states ``claimed``
(queued), ``rejected`` and ``host_lost`` (failed) included); what is printed stays the
fleet's row: the table's columns, ``--json``'s rows (in submission order unless ``--sort``),
and ``--snapshot``'s ``{"hosts": [...], "tasks": [...], "totals": {...}}`` (every task;
``totals`` as the local model's: tasks per group and in all).

Issue 25: the rows are selected on the server, never all of them. ``--status``/``--state``
(its groups turned into the fleet states they hold: :func:`fleet_states`), ``--host``,
``--after TASK_ID`` (the next page, in submission order) and ``--limit N`` (default
:data:`DEFAULT_LIMIT`; 0: no limit) become the query's ``WHERE``
and ``LIMIT``; ``--sort`` orders the page. When more rows follow, one line on stderr says how
to get them. ``--snapshot``'s ``totals`` count every task the filters select (one ``GROUP BY``
query), its ``tasks`` are the page. Each row carries ``host_state``, its owner's state
(``alive``/``stopped``/``dead``); the table shows it for a task not ended.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from supervisor.cli.common import err
from supervisor.views import model
from supervisor.views.status import pick

#: Task rows ``status --cluster`` prints unless ``--limit`` says otherwise (a screenful or
#: two; the rest is a page away: ``--after`` the last one shown).
DEFAULT_LIMIT = 100
#: The table's columns (``supervise status --cluster`` without ``--json``).
COLUMNS = (
    "id",
    "name",
    "state",
    "owner_host",
    "host_state",
    "generation",
    "queue",
    "exit_code",
    "failure_reason",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``status --cluster``'s own options: the page (``--limit``, ``--after``) and
    ``--host`` (``--status``/``--state`` is :func:`supervisor.views.status.add_arguments`')."""
    parser.add_argument(
        "--limit",
        type=_limit,
        default=None,
        metavar="N",
        help=f"with --cluster: at most N tasks (default {DEFAULT_LIMIT}; 0: all)",
    )
    parser.add_argument(
        "--after",
        metavar="TASK_ID",
        help="with --cluster: the page after this task (submission order)",
    )
    parser.add_argument(
        "--host", metavar="HOST_ID", help="with --cluster: only the tasks of this host"
    )


#: The largest ``--limit`` (PostgreSQL's ``LIMIT`` is a bigint; nobody reads more rows).
MAX_LIMIT = 10**9


def _limit(text: str) -> int:
    """``--limit``'s value: a whole number from 0 (all) to :data:`MAX_LIMIT`."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a row count (0 to {MAX_LIMIT}; 0: all)"
        )
    return value


#: ``status``'s options that only ``--cluster`` takes (their ``argparse`` dests).
CLUSTER_ONLY = ("limit", "after", "host")


def fleet_states(statuses: list[str] | None) -> tuple[str, ...] | None:
    """The fleet states ``--status`` values select, as :func:`supervisor.views.status.pick`
    selects (a status, or a group name that is no status), for the query's ``WHERE``; None
    when there is no ``--status`` (every state)."""
    from supervisor.taskdir.states import FleetState

    if not statuses:
        return None
    wanted = set(statuses)
    groups = wanted - set(model.GROUP_OF)
    return tuple(str(s) for s in FleetState if s in wanted or _group(s) in groups)


def _group(state: str) -> str:
    """The status model's group of a fleet state (its own states included)."""
    return model.GROUP_OF.get(state) or model.FLEET_GROUP_OF.get(state, "failed")


def as_task(row: dict[str, Any]) -> model.Task:
    """A fleet row as the status model's task (for selection and order only): ``state_s``
    is its ``state_s`` (seconds since ``updated_at``, measured by the database's clock)."""
    state = str(row["state"])
    return model.Task(
        task_id=row["id"],
        name=row["name"],
        status=state,
        retries=row["retry_count"] or 0,
        exit_code=row["exit_code"],
        verdict=row["verdict"],
        reason=row["failure_reason"] or row["error"],
        group=_group(state),
        state_s=row.get("state_s"),
    )


def _json(value: Any) -> str:
    def plain(item: Any) -> Any:
        return item.isoformat() if isinstance(item, datetime) else str(item)

    return json.dumps(value, default=plain, indent=2)


def run(args: argparse.Namespace, dsn: str) -> int:
    """Print the fleet's tasks as ``args`` asks (``statuses``, ``sort``, ``json``,
    ``snapshot``: :func:`supervisor.views.status.add_arguments`'s options); returns 0.

    Raises:
        ClusterError: the database cannot be read (one line, printed by the caller).
    """
    from supervisor.cluster import fleet

    limit = DEFAULT_LIMIT if args.limit is None else args.limit or None
    where = fleet.TaskFilter(fleet_states(args.statuses), args.host, args.after, limit)
    # One row more than the page: whether another page follows.
    rows = fleet.tasks(dsn, replace(where, limit=None if limit is None else limit + 1))
    more = limit is not None and len(rows) > limit
    rows = rows[:limit]
    if more:
        err(f"more tasks: supervise status --cluster --after {rows[-1]['id']} (or --limit 0)")
    tasks = [as_task(row) for row in rows]
    if args.snapshot:
        hosts = fleet.hosts(dsn)
        totals = _totals(fleet.task_counts(dsn, where))
        print(_json({"hosts": hosts, "tasks": rows, "totals": totals}))
        return 0
    by_id = {row["id"]: row for row in rows}
    shown = [by_id[task.task_id] for task in pick(tasks, args.statuses, args.sort)]
    if args.json:
        print(json.dumps(shown, default=str))
        return 0
    print(fleet.table([_host_shown(row) for row in shown], COLUMNS))
    return 0


def _totals(counts: dict[str, int]) -> dict[str, Any]:
    """:func:`supervisor.views.model.totals`' shape from tasks per fleet state (the fleet's
    rows have no cost or tokens)."""
    groups: dict[str, Any] = dict.fromkeys(model.GROUPS, 0)
    for state, n in counts.items():
        group = _group(state)
        groups[group] += n
    return {**groups, "tasks": sum(counts.values()), "cost_usd": 0.0, "tokens": None}


def _host_shown(row: dict[str, Any]) -> dict[str, Any]:
    """The table's row: ``host_state`` only for a task not ended (an ended task's host
    state says nothing about it)."""
    from supervisor.taskdir.states import FINAL

    return {**row, "host_state": None if row["state"] in FINAL else row["host_state"]}
