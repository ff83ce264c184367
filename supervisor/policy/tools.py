"""The tool-in-flight row (issue 21): a tool call that runs is evidence of work.

Pure: no I/O, no clock. Taken just before output staleness (:func:`supervisor.policy.steps.
_staleness`), for a ``running`` task whose agent lives, after the done-file, the deadline,
the operator, the agent's own facts (an escalation comes first) and liveness:

    running  a tool in flight (``Signals.tool_since``) for   running  healthy: output age is
             less than ``tool_budget`` s                              not counted; a grace
                                                                      period is cancelled

Claude Code's Bash tool may run 10 minutes (its maximum timeout), printing nothing in a TUI
and only a ``tool_progress`` heartbeat every 30 s in ``-p`` mode, so silence while a tool
runs is not a hang. Past ``tool_budget`` the run is judged by output staleness again
(stale, then hung after ``grace_period``): a tool stuck for ever is still caught.
"""

from __future__ import annotations

import dataclasses

from supervisor.config import MonitorPolicy
from supervisor.policy.model import STALE_SLACK, Decision, Signals, TaskState, bounded
from supervisor.taskdir.events import Event


def tool_in_flight(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision | None:
    """The decision while a tool runs within its budget, else ``None`` (staleness decides).

    A start after ``signals.now`` counts as starting now. The next check comes no later
    than ``base_interval`` and the moment the budget runs out (seconds, never below
    :data:`supervisor.policy.model.MIN_CHECK`); a grace period running since output went
    stale is cancelled with the ``fresh`` event.
    """
    since = signals.tool_since
    if since is None:
        return None
    now = signals.now
    ran = max(0.0, now - since)
    left = policy.tool_budget - ran
    if left <= 0:
        return None
    events: tuple[str, ...] = ()
    if state.stale_since is not None:
        state = dataclasses.replace(state, stale_since=None)
        events = (Event.FRESH,)
    name = signals.tool_name or "a tool"
    return Decision(
        state=state,
        events=events,
        next_check=bounded(min(policy.base_interval, left + STALE_SLACK), state, now, policy),
        reason=f"healthy: {name} in flight for {ran:.1f} s (tool_budget {policy.tool_budget:g} s)",
    )
