"""Plans in the views (issue 26): what a blocked task waits for, and the plan's edges as
``A (a-1) → B (b-2)`` lines (``supervise status``). Pure: it works on a snapshot's tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from supervisor.taskdir.states import ENDED, Status
from supervisor.terminal import escape_controls

if TYPE_CHECKING:  # model calls mark_blocked: no import back at run time
    from supervisor.views.model import Task


def _label(by_id: dict[str, Task], task_id: str) -> str:
    task = by_id.get(task_id)
    name = task.name if task is not None else None
    return f"{name} ({task_id})" if name else task_id


def mark_blocked(tasks: list[Task]) -> None:
    """Set each blocked task's ``blocked_on`` (its predecessors' ids that have not ended;
    one whose folder is gone has ended) and its ``reason`` (``blocked on NAME (ID), ...``),
    which every view prints beside the verdict."""
    by_id = {task.task_id: task for task in tasks}
    for task in tasks:
        if task.status != Status.BLOCKED:
            continue
        task.blocked_on = [i for i in task.after if i in by_id and by_id[i].status not in ENDED]
        if task.blocked_on:
            task.reason = "blocked on " + ", ".join(_label(by_id, i) for i in task.blocked_on)
        else:
            task.reason = "blocked: its predecessors ended; it starts at the next intake"


def edges(tasks: list[Task]) -> list[str]:
    """``PREDECESSOR → TASK`` for each ``after`` of the shown tasks, then ``[STATUS]`` of the
    successor; terminal-safe. Empty when no task names a predecessor."""
    by_id = {task.task_id: task for task in tasks}
    lines = []
    for task in tasks:
        for before in task.after:
            line = f"{_label(by_id, before)} → {_label(by_id, task.task_id)} [{task.status}]"
            lines.append(escape_controls(line))
    return lines
