"""Which tasks a view shows, and in what order: ``supervise top --status … --filter …``
and its ``/`` key; ``status --sort`` (:func:`sort_tasks`).

A :class:`TaskFilter` keeps a task when its status (or its group: ``needs_you``,
``recovering``…; ``failed`` names both, and keeps the group: failed, abandoned and
damaged) is one of ``statuses`` (any, when empty) and every word of ``text``
occurs, ignoring case, in its id, its name or its status. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from supervisor.errors import SuperviseError
from supervisor.taskdir.states import Status
from supervisor.views import model

#: What ``--status`` accepts: every status, ``damaged``, and every group of the model.
CHOICES: tuple[str, ...] = (*(str(s) for s in Status), "damaged", *model.GROUPS)


#: Characters of the filter text a header shows (a pasted megabyte must not fill a view).
SHOWN_MAX = 60


class FilterError(SuperviseError, ValueError):
    """A ``--status`` value that is no status or group; ``str()`` is the one-line message."""


def parse_statuses(values: list[str] | None) -> frozenset[str]:
    """The statuses of ``--status`` options (each may hold several, comma-separated).

    Raises :class:`FilterError` naming the option, the bad value and the accepted ones.
    """
    out = set()
    for value in values or ():
        for word in value.split(","):
            word = word.strip().lower()
            if not word:
                continue
            if word not in CHOICES:
                raise FilterError(
                    f"--status {word!r} is no status or group; use one of {', '.join(CHOICES)}"
                )
            out.add(word)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """``statuses``: statuses or groups to keep (empty: every one); ``text``: words that
    must each occur in a task's id, name or status (case-insensitive; empty: any)."""

    statuses: frozenset[str] = frozenset()
    text: str = ""
    #: The words of ``text``, lower-cased once (a view asks :meth:`keeps` of every task at
    #: each refresh: splitting a pasted megabyte there would stall it).
    words: tuple[str, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "words", tuple(self.text.lower().split()))

    def keeps(self, task: model.Task) -> bool:
        """Whether ``task`` is shown."""
        if self.statuses and not {task.status, task.group} & self.statuses:
            return False
        if not self.words:
            return True
        haystack = " ".join((task.task_id, task.name or "", task.status)).lower()
        return all(word in haystack for word in self.words)

    def describe(self) -> str:
        """A short text for a view's header (``status running,hung · "parser"``); empty
        when the filter keeps everything."""
        parts = []
        if self.statuses:
            parts.append("status " + ",".join(sorted(self.statuses)))
        text = self.text.strip()
        if text:
            parts.append(repr(text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX] + "…"))
        return " · ".join(parts)


#: Sort keys of :func:`sort_tasks` (``supervise status --sort``).
SORTS = ("group", "name", "age", "status", "cost")


def sort_tasks(tasks: list[model.Task], key: str) -> list[model.Task]:
    """``tasks`` ordered by ``key`` (:data:`SORTS`): ``group`` (display order, then longest
    in state first), ``name``, ``age`` (longest in state first), ``status``, ``cost``
    (highest first). Ties keep task id order.

    Raises:
        ValueError: an unknown key.
    """
    order = list(model.GROUPS)
    keys = {
        "group": lambda t: (order.index(t.group), -(t.state_s or 0.0)),
        "name": lambda t: (t.name or "", t.task_id),
        "age": lambda t: -(t.state_s or 0.0),
        "status": lambda t: t.status,
        "cost": lambda t: -(t.cost_usd or 0.0),
    }
    if key not in keys:
        raise ValueError(f"unknown sort {key!r}; use one of {', '.join(SORTS)}")
    return sorted(tasks, key=keys[key])
