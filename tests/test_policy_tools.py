"""The tool-in-flight row of the policy (issue 21, :mod:`supervisor.policy.tools`): a tool
call that runs within ``[monitor] tool_budget`` keeps output staleness from counting; past
the budget the run is judged by staleness as before. Examples, then hypothesis properties."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.config import MonitorPolicy
from supervisor.policy import MIN_CHECK, STALE_SLACK, Signals, TaskState, decide

T0 = 1_700_000_000.0
#: stale 15 / grace 5, as a profile with low thresholds (Must show 2), budget 100 s.
P = MonitorPolicy(
    base_interval=1.0,
    max_interval=4.0,
    deadline=10_000.0,
    grace_period=5.0,
    stale_threshold=15.0,
    tool_budget=100.0,
)


def running(**changes: object) -> TaskState:
    return dataclasses.replace(
        TaskState(status="running", started_at=T0, launched_at=T0), **changes
    )


def alive(now: float, output_age: float, **changes: object) -> Signals:
    return Signals(now=now, agent_alive=True, output_mtime=now - output_age, **changes)


def test_a_silent_run_with_a_tool_in_flight_is_healthy() -> None:
    """Output silent for 45 s (three times stale + grace) while a Bash call runs: healthy,
    no ``stale`` event, no hang."""
    now = T0 + 45
    sig = alive(now, 45.0, tool_since=T0 + 0.5, tool_name="Bash")
    decision = decide(running(), sig, P)
    assert decision.state == running()
    assert decision.events == () and decision.actions == ()
    assert "Bash in flight" in decision.reason
    assert decision.next_check == P.base_interval


def test_without_the_tool_the_same_silence_is_stale() -> None:
    """The control case: the same signals without the tool start a grace period."""
    decision = decide(running(), alive(T0 + 45, 45.0), P)
    assert decision.events == ("stale",)


def test_a_tool_starting_cancels_the_grace_period() -> None:
    state = running(stale_since=T0 + 16)
    decision = decide(state, alive(T0 + 18, 18.0, tool_since=T0 + 17.5, tool_name="Bash"), P)
    assert decision.state.stale_since is None
    assert decision.events == ("fresh",)


def test_past_the_budget_the_run_is_judged_by_staleness_again() -> None:
    """Past ``tool_budget``: stale at once (output is old), hung after the grace period."""
    since = T0 + 1
    first = decide(running(), alive(since + 100, 101.0, tool_since=since), P)
    assert first.events == ("stale",)
    later = since + 100 + P.grace_period
    second = decide(first.state, alive(later, later - T0, tool_since=since), P)
    assert second.state.status == "hung" and "hung" in second.events


def test_the_next_check_comes_when_the_budget_runs_out() -> None:
    since = T0
    decision = decide(running(), alive(T0 + 99.5, 99.5, tool_since=since), P)
    assert abs(decision.next_check - (0.5 + STALE_SLACK)) < 1e-6


def test_a_tool_start_after_now_counts_as_now() -> None:
    """A start in the future (a record from before a clock step) gives no more than one
    budget from now."""
    decision = decide(running(), alive(T0 + 50, 50.0, tool_since=T0 + 1e9), P)
    assert decision.state.status == "running" and decision.events == ()
    assert decision.next_check <= P.base_interval


def test_a_budget_of_zero_turns_the_rule_off() -> None:
    policy = P.model_copy(update={"tool_budget": 0.0})
    decision = decide(running(), alive(T0 + 45, 45.0, tool_since=T0 + 44.9), policy)
    assert decision.events == ("stale",)


def test_an_escalation_still_comes_first() -> None:
    """A request the rules escalate is acted on at the same check, tool or not."""
    sig = alive(T0 + 5, 0.0, tool_since=T0 + 4, tool_name="Bash", escalate="Bash 'rm' (rule 2)")
    decision = decide(running(), sig, P)
    assert decision.state.status == "escalated" and decision.events == ("escalated",)


def test_a_dead_agent_with_a_tool_in_flight_is_still_a_crash() -> None:
    sig = Signals(now=T0 + 50, agent_alive=False, signal=9, tool_since=T0 + 40)
    assert decide(running(), sig, P).state.status == "crashed"


# ---------------------------------------------------------------------------- properties

times = st.floats(T0, T0 + 1e6)


@st.composite
def policies(draw: st.DrawFn) -> MonitorPolicy:
    base = draw(st.floats(0.1, 1e3))
    return MonitorPolicy(
        base_interval=base,
        max_interval=base * draw(st.floats(1.0, 10.0)),
        deadline=draw(st.floats(1.0, 1e7)),
        grace_period=draw(st.floats(0.0, 1e3)),
        stale_threshold=draw(st.none() | st.floats(0.1, 1e3)),
        tool_budget=draw(st.just(0.0) | st.floats(0.0, 1e4)),
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[TaskState, Signals, MonitorPolicy]:
    policy = draw(policies())
    now = draw(times)
    launched = draw(st.floats(T0, now))
    state = TaskState(
        status="running",
        started_at=launched,
        launched_at=launched,
        stale_since=draw(st.none() | st.floats(launched, now)),
        retry_count=draw(st.integers(0, 5)),
    )
    sig = Signals(
        now=now,
        agent_alive=True,
        output_mtime=draw(st.none() | st.floats(T0 - 1e3, now)),
        tool_since=draw(st.floats(T0 - 1e3, now + 1e3)),
        tool_name=draw(st.none() | st.sampled_from(["Bash", "Write", "\u202e\x00"])),
    )
    return state, sig, policy


def _within_budget(sig: Signals, policy: MonitorPolicy) -> bool:
    assert sig.tool_since is not None
    return max(0.0, sig.now - sig.tool_since) < policy.tool_budget


def _deadline_passed(state: TaskState, sig: Signals, policy: MonitorPolicy) -> bool:
    assert state.started_at is not None
    return sig.now - state.started_at >= policy.deadline


@given(case=cases())
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_within_the_budget_a_live_run_is_never_stale_nor_hung(case) -> None:
    state, sig, policy = case
    if not _within_budget(sig, policy) or _deadline_passed(state, sig, policy):
        return
    decision = decide(state, sig, policy)
    assert decision.state.status == "running"
    assert decision.state.stale_since is None
    assert decision.actions == ()
    assert decision.events == (("fresh",) if state.stale_since is not None else ())
    left = policy.tool_budget - max(0.0, sig.now - sig.tool_since)
    assert (
        MIN_CHECK
        <= decision.next_check
        <= max(MIN_CHECK, min(policy.base_interval, left + STALE_SLACK))
    )


@given(case=cases())
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_past_the_budget_the_decision_is_the_one_without_a_tool(case) -> None:
    state, sig, policy = case
    if _within_budget(sig, policy):
        return
    without = dataclasses.replace(sig, tool_since=None, tool_name=None)
    assert decide(state, sig, policy) == decide(state, without, policy)


@given(case=cases(), escalate=st.text(min_size=1, max_size=20))
@settings(max_examples=300, deadline=None)
def test_an_escalation_wins_over_a_tool_in_flight(case, escalate: str) -> None:
    state, sig, policy = case
    if _deadline_passed(state, sig, policy):
        return
    sig = dataclasses.replace(sig, escalate=escalate)
    without = dataclasses.replace(sig, tool_since=None, tool_name=None)
    decision = decide(state, sig, policy)
    assert decision.state.status == "escalated"
    assert decision == decide(state, without, policy)
