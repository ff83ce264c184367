"""Task dependencies (issue 26, part 1), decided purely: when a ``blocked`` task may start.

A task whose file names predecessors in ``after`` is claimed ``blocked``: it holds no
``max_concurrent`` slot and never launches until :func:`gate` says so. The engine reads
each predecessor's manifest (its status and verdict, or that its folder is gone) and asks
:func:`gate`; it performs the :class:`~supervisor.policy.model.Decision` of :func:`unblocked`
or :func:`dependency_failed`. No I/O and no clock here: ``now`` is never needed, the facts
are parameters.

Rules (``requires`` of the successor):

- ``pass`` (the default): every predecessor must end ``completed`` with verdict ``PASS``.
  As soon as one has ended otherwise (``FAIL``, ``TIMEOUT``, ``ABANDONED``, ``ESCALATE``,
  or its folder is gone and its verdict cannot be read), the successor ends ``abandoned``
  with reason ``dependency`` naming it, without launching, even while others still run.
- ``end``: every predecessor must merely have ended (a terminal status, or its folder gone:
  only ended folders are archived).

State table rows (added to :mod:`supervisor.policy`'s)::

    blocked   every predecessor ended as required       queued      event unblocked
    blocked   a required predecessor ended otherwise    abandoned   finish, notify
                                                                    (reason dependency)
    blocked   operator: supervise stop                  abandoned   finish (reason stopped)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from supervisor.config import MonitorPolicy
from supervisor.policy.model import Action, Decision, TaskState, with_notify
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import ENDED, AbandonReason, Status, Verdict

#: ``requires`` values (:data:`supervisor.config.plankeys.Requires`).
PASS, END = "pass", "end"


@dataclass(frozen=True)
class Predecessor:
    """What the engine read of one predecessor: its id, its manifest's ``status`` and
    ``verdict`` (``None`` for both when its folder is gone: archived, or removed; status
    ``damaged`` when its manifest cannot be read: it is never run again)."""

    task_id: str
    status: str | None
    verdict: str | None = None

    @property
    def ended(self) -> bool:
        """It ended: a terminal status, or no folder any more (only ended ones go)."""
        return self.status is None or self.status in ENDED

    def passed(self) -> bool:
        """It ended ``completed`` with verdict ``PASS``."""
        return self.status == Status.COMPLETED and self.verdict == Verdict.PASS

    def describe(self) -> str:
        """``ID ended STATUS (verdict V)``, or that its folder is gone."""
        if self.status is None:
            return f"{self.task_id} is gone from the state dir (its verdict cannot be read)"
        return f"{self.task_id} ended {self.status} (verdict {self.verdict or 'none'})"


@dataclass(frozen=True)
class Gate:
    """:func:`gate`'s answer: ``ready`` (start it), ``failed`` (the predecessor that ended
    otherwise than required: abandon it) or neither (``waiting_for``: the ids not ended)."""

    ready: bool = False
    failed: Predecessor | None = None
    waiting_for: tuple[str, ...] = ()


def gate(requires: str, predecessors: Sequence[Predecessor]) -> Gate:
    """Whether a blocked task may start, given its ``requires`` (``pass`` or ``end``) and
    its predecessors in ``after`` order. An empty list is ready. The first predecessor (in
    order) that ended otherwise than ``pass`` requires fails the task at once."""
    if requires == PASS:
        for one in predecessors:
            if one.ended and not one.passed():
                return Gate(failed=one)
    waiting = tuple(one.task_id for one in predecessors if not one.ended)
    return Gate(ready=not waiting, waiting_for=waiting)


def unblocked(state: TaskState, why: str) -> Decision:
    """``blocked`` -> ``queued`` (event ``unblocked``): it starts as any queued task.

    Raises:
        ValueError: ``state`` is not ``blocked``.
    """
    if state.status != Status.BLOCKED:
        raise ValueError(f"only a blocked task is unblocked, not a {state.status} one")
    new = dataclasses.replace(state, status=Status.QUEUED)
    return Decision(state=new, events=(Event.UNBLOCKED,), reason=why)


def dependency_failed(
    state: TaskState, culprit: Predecessor, requires: str, policy: MonitorPolicy
) -> Decision:
    """``blocked`` -> ``abandoned`` with reason ``dependency`` and verdict ``ABANDONED``:
    a predecessor ended otherwise than ``requires`` asks. Nothing was launched, so the
    only actions are finish and the notifier (when ``notify_on`` has ``abandoned``).

    Raises:
        ValueError: ``state`` is not ``blocked``.
    """
    if state.status != Status.BLOCKED:
        raise ValueError(f"only a blocked task fails on a dependency, not a {state.status} one")
    new = dataclasses.replace(
        state,
        status=Status.ABANDONED,
        abandon_reason=AbandonReason.DEPENDENCY,
        verdict=Verdict.ABANDONED,
    )
    why = f"dependency: predecessor {culprit.describe()}; requires = {requires!r}"
    decision = Decision(state=new, actions=(Action.FINISH,), events=(Event.ABANDONED,), reason=why)
    return with_notify(decision, policy)


def stopped(state: TaskState) -> Decision:
    """``blocked`` -> ``abandoned`` (reason ``stopped``): ``supervise stop`` before it
    started; as a queued task's stop, it only finishes."""
    new = dataclasses.replace(
        state,
        status=Status.ABANDONED,
        abandon_reason=AbandonReason.STOPPED,
        verdict=Verdict.ABANDONED,
    )
    why = "stopped by the operator while it waited for its predecessors"
    return Decision(state=new, actions=(Action.FINISH,), events=(Event.ABANDONED,), reason=why)


def find_cycle(edges: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle of ``edges`` (node -> the nodes it comes after), as the nodes along it with
    the first repeated at the end (``[a, b, a]``), or ``None``. Nodes absent from ``edges``
    have no predecessors. Iterative (no recursion limit on a long chain)."""
    done: set[str] = set()
    for start in edges:
        if start in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            node, index = stack.pop()
            if index == 0:
                path.append(node)
                on_path.add(node)
            nexts = edges.get(node, ())
            if index < len(nexts):
                stack.append((node, index + 1))
                succ = nexts[index]
                if succ in on_path:
                    return [*path[path.index(succ) :], succ]
                if succ not in done:
                    stack.append((succ, 0))
                continue
            path.pop()
            on_path.discard(node)
            done.add(node)
    return None
