"""The budget row (issue 14): ``[monitor] max_cost_usd``.

Once the task's spend (``Signals.spent_usd``: the agent's reported cost summed over all
its runs; Claude Code's ``total_cost_usd`` of each run's ``result`` line) has reached
``max_cost_usd``, no further resume is started: a decision that would resume the agent or
put it on the way to a resume (``crashed``, ``hung``, ``waiting``) becomes ``abandoned``
with reason ``budget`` instead. A run in progress is not cut short (its cost is known only
when it ends), and a run that ended on its own still completes or fails as it ended.

Pure, like the rest of :mod:`supervisor.policy`.
"""

from __future__ import annotations

from supervisor.config import MonitorPolicy
from supervisor.policy.model import Action, Decision, Signals, TaskState
from supervisor.policy.outcomes import abandon
from supervisor.taskdir.states import AbandonReason, Status

#: Statuses from which the task would be resumed later (a resume is on its way).
_ON_THE_WAY = frozenset({Status.CRASHED, Status.HUNG, Status.WAITING})


def over_budget(signals: Signals, policy: MonitorPolicy) -> bool:
    """The spend has reached ``max_cost_usd`` (never when either is unknown)."""
    limit, spent = policy.max_cost_usd, signals.spent_usd
    return limit is not None and spent is not None and spent >= limit


def within_budget(
    state: TaskState, signals: Signals, policy: MonitorPolicy, decision: Decision
) -> Decision:
    """``decision``, or, when the budget is spent and it would resume the agent (now or
    after a backoff or a wait), :func:`abandon` with reason ``budget``."""
    if not over_budget(signals, policy):
        return decision
    resumes = Action.RESUME in decision.actions or decision.state.status in _ON_THE_WAY
    if not resumes:
        return decision
    spent, limit = signals.spent_usd, policy.max_cost_usd
    why = f"spent {spent:.6g} USD of max_cost_usd {limit:g}; not resumed"
    return abandon(state, AbandonReason.BUDGET, why)
