"""A follow-up (``supervise continue``, issue 22): an ended task's conversation goes on
with a new prompt, as a new turn of the same task.

Pure: the engine (:mod:`supervisor.engine.followups`) records the decision and queues the
task; its launch is then an ordinary :func:`supervisor.policy.launched`, so the new turn
gets a new deadline (``deadline`` seconds from its own launch) and its retries count from 0.
"""

from __future__ import annotations

from supervisor.policy.model import TERMINAL, Decision, TaskState
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import Status

#: Where a follow-up waits for a live task: an escalated task is stopped cleanly first
#: (ending ``abandoned``, reason ``stopped``), then continued.
STOP_FIRST = frozenset({Status.ESCALATED})


def refusal(status: str) -> str | None:
    """Why a task in ``status`` takes no follow-up (the end of a line that starts with the
    task id), or ``None``: an ended task takes one, an escalated one is stopped first."""
    if status in TERMINAL or status in STOP_FIRST:
        return None
    if status == Status.QUEUED:
        return "is queued and has not run yet: wait for it or stop it first"
    return f"is still {status}: wait for it or stop it first"


def continue_turn(state: TaskState, turn: int) -> Decision:
    """terminal -> ``queued``: open turn ``turn`` (the previous one + 1) of an ended task.

    The new state remembers nothing of the ended turn: no deadline yet (it starts at the
    launch), ``retry_count`` 0, no verdict, reason or exit code.

    Raises:
        ValueError: ``state`` is not terminal (a live task is stopped first, see
            :data:`STOP_FIRST`), or ``turn`` < 2.
    """
    if state.status not in TERMINAL:
        raise ValueError(f"only an ended task is continued, not a {state.status} one")
    if turn < 2:
        raise ValueError(f"a follow-up opens turn 2 or later, not {turn}")
    return Decision(
        state=TaskState(status=Status.QUEUED),
        events=(Event.FOLLOWED_UP,),
        reason=f"turn {turn}: continued with a new prompt after it ended {state.status}",
    )
