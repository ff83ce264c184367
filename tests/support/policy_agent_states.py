"""Strategies of task states, signals and policies for the agent policy's tests (moved from
tests/test_policy_agent.py)."""

from __future__ import annotations

from hypothesis import strategies as st

from supervisor.config import MonitorPolicy
from supervisor.policy import (
    Signals,
    TaskState,
)
from supervisor.taskdir.states import Status
from support.policy_states import T0  # the same epoch as the other policy tests

#: The small policy of tests/test_policy.py: backoff 10, 20, 40 -> capped at 80; the
#: notifier also runs for ``waiting`` (opt-in since issue 14).
P = MonitorPolicy(
    base_interval=10.0,
    max_interval=80.0,
    deadline=10_000.0,
    grace_period=20.0,
    stale_threshold=30.0,
    max_retries=3,
    notify_on=["escalated", "failed", "abandoned", "completed", "waiting"],
)
ASK = "Bash 'rm -rf build' (default said deny)"
BREAKER = "circuit breaker: 3 consecutive denials or failed tool calls"

ALL_STATUSES: tuple[str, ...] = tuple(Status)


# ============================================================================ properties

times = st.floats(-1e5, 1e5, allow_nan=False).map(lambda x: T0 + x)
opt_times = st.none() | times
rare = st.sampled_from((False, False, False, True))
NOTIFY_EVENTS = (
    "completed",
    "failed",
    "abandoned",
    "crashed",
    "hung",
    "resumed",
    "stale",
    "escalated",
    "waiting",
)


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
            st.just(list(P.notify_on)) | st.lists(st.sampled_from(NOTIFY_EVENTS), unique=True)
        ),
    )


def task_states(statuses=ALL_STATUSES):
    return st.builds(
        TaskState,
        status=st.sampled_from(statuses),
        started_at=opt_times,
        launched_at=opt_times,
        retry_count=st.integers(0, 20),
        stale_since=opt_times,
        gone_since=opt_times,
        resume_at=opt_times,
        exit_code=st.none() | st.integers(-255, 255),
        lost_session=st.booleans(),
        escalation=st.none() | st.sampled_from((ASK, BREAKER)),
        paused=st.booleans(),
        limit_waits=st.integers(0, 70),
    )


def signal_sets(**fixed):
    fields = dict(
        now=times,
        done=rare,
        exit_code=st.none() | st.integers(-255, 255),
        agent_alive=st.none() | st.booleans(),
        output_mtime=opt_times,
        stop_requested=rare,
        resume_requested=rare,
        session_alive=st.none() | st.booleans(),
        signal=st.none() | st.sampled_from((9, 15)),
        escalate=st.none() | st.sampled_from((ASK, BREAKER)),
        escalate_pause=st.booleans(),
        approve_requested=rare,
        deny_requested=rare,
        limit=st.booleans(),
        limit_resume_at=opt_times,
        limit_reason=st.sampled_from(("", "API error 429: rate limited")),
        has_acceptance=st.booleans(),
        acceptance=st.none() | st.booleans(),
        acceptance_running=st.booleans(),
        turn_ended=st.booleans(),
        requests=st.sampled_from((0, 0, 1, 3)),
    )
    fields.update({k: st.just(v) if not isinstance(v, st.SearchStrategy) else v
                   for k, v in fixed.items()})  # fmt: skip
    return st.builds(Signals, **fields)
