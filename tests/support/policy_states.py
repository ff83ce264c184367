"""Task states, policies and common checks for the pure policy's tests (moved from
tests/test_policy.py)."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from supervisor.config import DEFAULT_NOTIFY_ON, MonitorPolicy
from supervisor.policy import (
    MIN_CHECK,
    TERMINAL,
    VERDICTS,
    Action,
    Decision,
    TaskState,
)

A = Action
#: The order in which the engine performs actions (Action's declaration order).
ACTION_ORDER = (A.STOP_AGENT, A.RESUME, A.FINISH, A.CLEANUP, A.NOTIFY)
STATUSES = ("queued", "running", "crashed", "hung", "completed", "failed", "abandoned")
LIVE = ("running", "crashed", "hung")

T0 = 1_700_000_000.0  # a realistic epoch; every test time is T0 + offset

#: A small, easily reasoned-about policy: backoff 10, 20, 40 -> capped at 80.
P = MonitorPolicy(
    base_interval=10.0,
    max_interval=80.0,
    deadline=10_000.0,
    grace_period=20.0,
    stale_threshold=30.0,
    max_retries=3,
)


# ============================================================================ properties

ABANDON_REASONS = ("deadline", "max_retries", "stopped", "tmux_lost")
NOTIFY_EVENTS = ("completed", "failed", "abandoned", "crashed", "hung", "resumed", "stale")
times = st.floats(-1e5, 1e5, allow_nan=False).map(lambda x: T0 + x)
opt_times = st.none() | times


@st.composite
def policies(draw) -> MonitorPolicy:
    base = draw(st.floats(0.1, 1e4))
    return MonitorPolicy(
        base_interval=base,
        max_interval=base * draw(st.floats(1.0, 1e3)),
        deadline=draw(st.floats(0.001, 1e6)),
        grace_period=draw(st.just(0.0) | st.floats(0.0, 1e4)),
        stale_threshold=draw(st.none() | st.floats(0.1, 1e4)),
        max_retries=draw(st.integers(0, 12)),
        notify_on=draw(
            st.just(list(DEFAULT_NOTIFY_ON)) | st.lists(st.sampled_from(NOTIFY_EVENTS), unique=True)
        ),
    )


def task_states(statuses=STATUSES):
    return st.builds(
        TaskState,
        status=st.sampled_from(statuses),
        started_at=opt_times,
        launched_at=opt_times,
        retry_count=st.integers(0, 100),
        stale_since=opt_times,
        gone_since=opt_times,
        resume_at=opt_times,
        abandon_reason=st.none() | st.sampled_from(ABANDON_REASONS),
        exit_code=st.none() | st.integers(-255, 255),
        lost_session=st.booleans(),
    )


def _is_ordered(actions: tuple[Action, ...]) -> bool:
    positions = [ACTION_ORDER.index(a) for a in actions]
    return positions == sorted(positions) and len(set(actions)) == len(actions)


def check_common(state: TaskState, policy: MonitorPolicy, decision: Decision, noop: bool):
    """The invariants every transition shares (a check's, a launch's, a recovered ending's):
    a positive, finite next_check (at least MIN_CHECK unless nothing happens), one line of
    reason, actions in the engine's order, NOTIFY last exactly when an event is in
    notify_on, and a verdict with every new ending. Returns the actions before NOTIFY."""
    new, actions = decision.state, decision.actions
    # (b) next_check positive and finite; for a live task never below MIN_CHECK (a no-op
    # answers base_interval as is, which may be smaller).
    assert math.isfinite(decision.next_check)
    assert decision.next_check > 0
    assert noop or decision.next_check >= MIN_CHECK
    assert decision.reason and "\n" not in decision.reason
    assert _is_ordered(actions)
    assert new.status in STATUSES

    # NOTIFY: last, exactly when one of the events is in notify_on.
    notify = any(event in policy.notify_on for event in decision.events)
    assert (A.NOTIFY in actions) == notify
    if new.status in TERMINAL and state.status not in TERMINAL:
        assert new.verdict in VERDICTS
        assert decision.events == (new.status,)
    return actions[:-1] if notify else actions
