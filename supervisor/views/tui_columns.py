"""The columns of ``supervise top``'s table, chosen by the terminal's width, and their cells.

Every width shows the group, the task id (several tasks of one name differ by it), the
status, the time in state, the outcome (verdict and failure or abandon reason) and the last
output line. A wider terminal adds columns (:data:`COLUMNS`' ``min_width``): from
:data:`WIDE` (120) columns the model, the cost and the retries; from :data:`WIDER` (160)
the time since its last output and the workspace branch with its diffstat; from
:data:`WIDEST` (200) the task's name. The last output line takes the rest of the line.

Cells are :class:`rich.text.Text` built from terminal-safe strings (never parsed as markup).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from rich.text import Text

from supervisor.taskdir.states import LIVE
from supervisor.terminal import escape_controls
from supervisor.views import model

#: Terminal widths (columns) from which more table columns show.
WIDE = 120
WIDER = 160
WIDEST = 200
#: Columns a DataTable cell pads with (one each side) and the vertical scrollbar's width.
PAD = 2
SCROLLBAR = 2
#: The least width of the last column (the output's last line).
LAST_MIN = 8
#: Characters kept from the end of a task id cut to fit (the random suffix that tells two
#: tasks of one name apart).
ID_TAIL = 6

_STYLE = {
    "needs_you": "bold yellow",
    "failed": "red",
    "recovering": "magenta",
    "waiting": "cyan",
    "running": "green",
    "done": "dim",
    "queued": "",
}


@dataclass(frozen=True, slots=True)
class Column:
    """One table column: ``key`` (the DataTable column key), ``title``, ``width``
    (characters; ``None``: the rest of the line) and ``min_width`` (the least terminal
    width, in columns, that shows it)."""

    key: str
    title: str
    width: int | None
    min_width: int = 0


#: Every column, in table order.
COLUMNS: tuple[Column, ...] = (
    Column("group", "Group", 12),
    Column("id", "Task id", 16),
    Column("name", "Name", 16, WIDEST),
    Column("status", "Status", 9),
    Column("state", "State", 7),
    Column("outcome", "Outcome", 12),
    Column("model", "Model", 15, WIDE),
    Column("cost", "Cost", 6, WIDE),
    Column("retries", "Rt", 2, WIDE),
    Column("output", "Output", 6, WIDER),
    Column("branch", "Branch", 22, WIDER),
    Column("last", "Last line", None),
)


def columns_for(width: int) -> tuple[Column, ...]:
    """The columns a terminal ``width`` columns wide shows, in table order, the last one
    (``width None`` in :data:`COLUMNS`) given the rest of the line (at least
    :data:`LAST_MIN`)."""
    shown = [c for c in COLUMNS if width >= c.min_width]
    used = sum((c.width or 0) + PAD for c in shown) + SCROLLBAR
    return tuple(
        replace(c, width=max(LAST_MIN, width - used)) if c.width is None else c for c in shown
    )


def short_id(task_id: str, width: int) -> str:
    """``task_id`` cut to ``width`` characters keeping its head and its last
    :data:`ID_TAIL` characters around an ellipsis (``check-t…3d4e5f``); as it is when it
    fits. Terminal-safe."""
    safe = escape_controls(task_id)
    if len(safe) <= width or width <= ID_TAIL + 1:
        return safe
    return f"{safe[: width - ID_TAIL - 1]}…{safe[-ID_TAIL:]}"


def outcome(task: model.Task) -> str:
    """The verdict and the reason (``FAIL auth``, ``ABANDONED stopped``; ``damaged``'s
    reason for a damaged folder; why a queued task's account holds it back, issue 26);
    empty while none is known. Terminal-safe."""
    parts = [task.verdict or "", task.reason or task.damaged or task.held or ""]
    return escape_controls(" ".join(p for p in parts if p))


def _state(task: model.Task) -> str:
    if task.resume_in_s is not None and task.group in ("waiting", "recovering"):
        return f"→{model.duration(task.resume_in_s)}"
    return model.duration(task.state_s)


def _branch(task: model.Task) -> str:
    return " ".join(p for p in (escape_controls(task.branch or ""), task.diffstat() or "") if p)


def _cut(text: str, style: str = "") -> Text:
    """One line, cut with an ellipsis at the column's edge."""
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def _right(text: str) -> Text:
    return Text(text, justify="right")


#: Cell builders by column key (group and status are built in :func:`cells`): each takes
#: the task and the column's width.
_CELLS: dict[str, Callable[[model.Task, int], Text]] = {
    "id": lambda t, w: Text(short_id(t.task_id, w), no_wrap=True),
    "name": lambda t, w: _cut(escape_controls(t.label())),
    "state": lambda t, w: _right(_state(t)),
    "outcome": lambda t, w: _cut(outcome(t), "red" if t.group == "failed" else ""),
    "model": lambda t, w: _cut(escape_controls(t.model or "-")),
    "cost": lambda t, w: _right("" if t.cost_usd is None else f"{t.cost_usd:.2f}"),
    "retries": lambda t, w: _right(str(t.retries)),
    "output": lambda t, w: _right(model.duration(t.since_output_s)),
    "branch": lambda t, w: _cut(_branch(t)),
    "last": lambda t, w: _cut(t.last_line or ""),
}


def cells(
    task: model.Task, first: int, columns: tuple[Column, ...], engine_down: str | None = None
) -> tuple[Text, ...]:
    """A task's cells for ``columns`` (``first``: on the first row of its group, the
    group's size, shown with its title; else 0). Texts are escaped, never markup.
    ``engine_down``: the state of this host's engine when it is not running
    (:class:`supervisor.views.sources.Engine`'s ``not running``, ``stale``; None while it
    runs): a launched task not ended (:data:`~supervisor.taskdir.states.LIVE`) on a host whose
    engine is not running says so in its status cell, in red (issue 25: nobody watches it;
    on a fleet host, the host is stopped or lost)."""
    style = _STYLE.get(task.group, "")
    out = []
    for column in columns:
        if column.key == "group":
            title = f"{model.GROUPS.get(task.group, task.group)} {first}" if first else ""
            out.append(Text(title, style=style))
        elif column.key == "status":
            text = task.status + ("*" if task.requests else "")
            if engine_down is not None and task.status in LIVE:
                text, style = f"{text} (engine {engine_down})", "bold red"
            out.append(Text(text, style=style))
        else:
            out.append(_CELLS[column.key](task, column.width or 0))
    return tuple(out)
