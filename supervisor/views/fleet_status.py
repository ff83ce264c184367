"""``supervise status --cluster``: every host's tasks, read from the fleet's database, shown
with the local status view's ``--status``, ``--sort`` and ``--snapshot``
(:mod:`supervisor.views.status`; the same selection and order code, issue 20).

Each row of :func:`supervisor.cluster.fleet.tasks` becomes a :class:`~.model.Task` for
selecting and ordering (its group from its state: the fleet's own states ``claimed``
(queued), ``rejected`` and ``host_lost`` (failed) included); what is printed stays the
fleet's row: the table's columns, ``--json``'s rows (in submission order unless ``--sort``),
and ``--snapshot``'s ``{"hosts": [...], "tasks": [...], "totals": {...}}`` (every task;
``totals`` as the local model's: tasks per group and in all).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from supervisor.views import model
from supervisor.views.status import pick

#: The table's columns (``supervise status --cluster`` without ``--json``).
COLUMNS = (
    "id",
    "name",
    "state",
    "owner_host",
    "generation",
    "queue",
    "exit_code",
    "failure_reason",
)


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
        group=model.GROUP_OF.get(state) or model.FLEET_GROUP_OF.get(state, "failed"),
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

    rows = fleet.tasks(dsn)
    tasks = [as_task(row) for row in rows]
    if args.snapshot:
        hosts = fleet.hosts(dsn)
        print(_json({"hosts": hosts, "tasks": rows, "totals": model.totals(tasks)}))
        return 0
    by_id = {row["id"]: row for row in rows}
    shown = [by_id[task.task_id] for task in pick(tasks, args.statuses, args.sort)]
    if args.json:
        print(json.dumps(shown, default=str))
        return 0
    print(fleet.table(shown, COLUMNS))
    return 0
