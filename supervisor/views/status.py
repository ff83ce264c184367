"""``supervise status``: the status model (:mod:`.model`) as a table or JSON.

Table (for a person): an engine line first (``engine: running (pid ..., up ...)``, ``not
running`` or ``stale (why)``), then the spool files not claimed yet, then one row per task,
grouped (Needs you first) unless ``--sort`` says otherwise, with time in state, retries,
cost, verdict or reason, diffstat, the agent kind's own columns
(:func:`supervisor.agents.kinds.columns`) and the last output line; a totals line at the end.

``--json`` (for scripts): the rows as a JSON list in task id order (or ``--sort``'s), each
holding every key it always had plus the model's new ones (``$defs/Task`` of
``schemas/status.schema.json``); the engine and spool lines go to stderr. ``--snapshot``: the
whole model as one JSON object (engine, spool, tasks, totals; ``schemas/status.schema.json``).
``--plans``: the plan graph only (:func:`supervisor.views.plangraph.graph`: each edge with
both tasks' status, why a blocked task waits), as text or with ``--json`` as ``serve``'s
``/api/plans``. Each ``--json`` row holds ``after`` (its predecessors' ids) and
``blocked_on`` (those it still waits for), so the rows alone give the edges too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from supervisor.taskdir.states import ENDED, Status
from supervisor.terminal import escape_controls
from supervisor.views import model, plangraph, taskfilter

#: What ``--status`` accepts: every status of :mod:`supervisor.taskdir.states`, plus ``damaged``
#: (a folder whose manifest cannot be read), the group names of :data:`model.GROUPS`
#: that are no status, and the fleet's own states (``status --cluster``).
STATUS_CHOICES = (
    *model.GROUP_OF,
    *(g for g in model.GROUPS if g not in model.GROUP_OF),
    *model.FLEET_GROUP_OF,
)
#: Characters of the last output line shown in the table.
LAST_LINE_CHARS = 48


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``status``'s options (``-c`` is added by the caller)."""
    parser.add_argument("--json", action="store_true", help="the task rows as a JSON list")
    parser.add_argument(
        "--snapshot", action="store_true", help="everything (engine, spool, tasks) as JSON"
    )
    parser.add_argument(
        "--plans",
        action="store_true",
        help="the plans only: each edge (predecessor -> successor) with both tasks' status "
        "and why a blocked task waits; with --json the graph as /api/plans gives it",
    )
    parser.add_argument(
        "--sort",
        choices=taskfilter.SORTS,
        default=None,
        help="order: group (the table's default), name, age (longest in state first), "
        "status, cost (highest first); --json defaults to task id",
    )
    parser.add_argument(
        "--status",
        "--state",
        action="append",
        choices=STATUS_CHOICES,
        metavar="STATUS",
        dest="statuses",
        help="only tasks with this status or in this group (repeatable): "
        + ", ".join(STATUS_CHOICES),
    )


def select(snap: model.Snapshot, statuses: list[str] | None, sort: str | None) -> list[model.Task]:
    """:func:`pick` over a snapshot's tasks (task id order when ``sort`` is ``None``)."""
    return pick(snap.tasks, statuses, sort)


def pick(tasks: list[model.Task], statuses: list[str] | None, sort: str | None) -> list[model.Task]:
    """The tasks to show: those whose status is in ``statuses``, or whose group is, for a
    group name that is no status (``needs_you``, ``recovering``, ``done``; ``failed`` is the
    status); all when ``None``. Ordered by ``sort``, else kept in the order given. Used by
    ``status`` and ``status --cluster`` (:mod:`.fleet_status`)."""
    wanted = set(statuses or ())
    groups = wanted - set(model.GROUP_OF)
    chosen = [t for t in tasks if not wanted or t.status in wanted or t.group in groups]
    return taskfilter.sort_tasks(chosen, sort) if sort else chosen


def spool_line(snap: model.Snapshot) -> str | None:
    """``spool: 2 file(s) waiting to be claimed: a.toml (40s), b.toml (5s)`` or ``None``."""
    if not snap.spool:
        return None
    shown = ", ".join(
        f"{escape_controls(f.name)} ({model.duration(f.age_s)})" for f in snap.spool[:5]
    )
    more = f", +{len(snap.spool) - 5} more" if len(snap.spool) > 5 else ""
    return f"spool: {len(snap.spool)} file(s) waiting to be claimed: {shown}{more}"


def table_row(task: model.Task) -> dict[str, Any]:
    """One table row: every text escaped (:func:`escape_controls`), times as durations."""
    line = task.last_line or ""
    if len(line) > LAST_LINE_CHARS:
        line = line[: LAST_LINE_CHARS - 1] + "…"
    outcome = task.verdict or ""
    if task.reason or task.damaged or task.held:
        outcome = f"{outcome} {task.reason or task.damaged or task.held}".strip()
    waiting = task.resume_in_s is not None and task.status not in (Status.RUNNING, Status.VERIFYING)
    state = model.duration(task.state_s) + (
        f" (resume in {model.duration(task.resume_in_s)})" if waiting else ""
    )
    return {
        "group": model.GROUPS.get(task.group, task.group),
        "task_id": task.task_id,
        "name": escape_controls(task.label("")),
        "status": task.status + (f" [{','.join(task.requests)}]" if task.requests else ""),
        "in state": state,
        "retries": task.retries,
        "cost": "-" if task.cost_usd is None else f"${task.cost_usd:.2f}",
        "outcome": escape_controls(outcome) or "-",
        "model": escape_controls(task.model or "-"),
        "diff": task.diffstat() or "-",
        **{name: _cell(value) for name, value in task.columns.items()},
        "last line": line or "-",
    }


def _cell(value: Any) -> str:
    """An agent kind's own column value as table text (``-`` when unknown), escaped."""
    return "-" if value is None else escape_controls(str(value))


def totals_line(snap: model.Snapshot) -> str:
    """``11 tasks: 1 needs you, 1 waiting, ...; cost $1.67``."""
    parts = [
        f"{snap.totals[g]} {title.lower()}" for g, title in model.GROUPS.items() if snap.totals[g]
    ]
    tokens = snap.totals.get("tokens")
    extra = f", {tokens:,} tokens" if tokens else ""
    cost = f"cost ${snap.totals['cost_usd']:.2f}{extra}"
    return f"{snap.totals['tasks']} tasks: {', '.join(parts)}; {cost}"


def _plans(snap: model.Snapshot, args: argparse.Namespace) -> int:
    """``status --plans``: :func:`plangraph.graph` of every task (a filter would cut plans
    apart), as text or (``--json``) as ``{"plans", "edges_left_out"}``; returns 0."""
    found = plangraph.graph(snap.tasks)
    print(json.dumps(found.to_dict(), indent=2) if args.json else plangraph.text(found))
    return 0


def run(profile: Any, args: argparse.Namespace) -> int:
    """Print the status of ``profile`` (a ``LoadedProfile``) as ``args`` asks; returns 0."""
    snap = model.snapshot(profile, time.time())
    head = [snap.engine.line(), spool_line(snap)]
    if args.snapshot:
        print(json.dumps(snap.to_dict(), indent=2))
        return 0
    if getattr(args, "plans", False):
        return _plans(snap, args)
    tasks = select(snap, args.statuses, args.sort)
    if args.json:
        for line in filter(None, head):
            print(line, file=sys.stderr)
        print(json.dumps([t.row() for t in tasks], indent=2))
        return 0
    for line in filter(None, head):
        print(line)
    if not snap.tasks:
        print(f"no tasks in {profile.tasks_dir}")
        return 0
    if not tasks:
        print(f"no task with status {', '.join(args.statuses)}")
        return 0
    from tabulate import tabulate

    rows = [table_row(t) for t in (tasks if args.sort else taskfilter.sort_tasks(tasks, "group"))]
    print(tabulate(rows, headers="keys", missingval="-", disable_numparse=True))
    graph = plangraph.edges([t for t in tasks if t.status not in ENDED])
    if graph:  # the plans of the tasks shown that have not ended (issue 26)
        print("plans:\n  " + "\n  ".join(graph))
    print(totals_line(snap))
    return 0
