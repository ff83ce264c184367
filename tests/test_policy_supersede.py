"""Pure policy rows of issue 15: a cluster task whose row in the fleet's database went to a
newer generation ends ``superseded`` on this host: its agent stopped (the operator stop's
bounded path), finished and cleaned up, never resumed, no acceptance. Style of
tests/test_policy_ops.py (explicit ``now``, hypothesis over every state and signal set)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.policy_agent_states import policies, signal_sets, task_states

from supervisor.config import MonitorPolicy
from supervisor.policy import TERMINAL, Action, Signals, TaskState, decide, recovered_ending
from supervisor.taskdir.states import LIVE, Status

A = Action
T0 = 1_700_000_000.0
P = MonitorPolicy(base_interval=10.0, max_interval=80.0, deadline=100_000.0,
                  grace_period=20.0, stale_threshold=30.0, max_retries=3)  # fmt: skip


def test_a_running_copy_is_stopped_and_ends_superseded() -> None:
    state = TaskState(status="running", started_at=T0, launched_at=T0)
    decision = decide(state, Signals(now=T0 + 5, agent_alive=True, superseded=True), P)
    assert decision.state.status == "superseded" and decision.state.verdict == "ABANDONED"
    assert decision.actions == (A.STOP_AGENT, A.FINISH, A.CLEANUP)
    assert decision.events == ("superseded",)
    assert "newer generation" in decision.reason and "\n" not in decision.reason


@pytest.mark.parametrize("status", ["queued", "blocked"])
def test_a_queued_or_blocked_copy_only_finishes(status: str) -> None:
    """Never launched: no agent to stop, nothing to clean up (found by attack for a
    blocked copy, which was asked to stop and clean up)."""
    decision = decide(TaskState(status=status), Signals(now=T0, superseded=True), P)
    assert decision.state.status == "superseded"
    assert decision.actions == (A.FINISH,) and decision.events == ("superseded",)


def test_it_wins_over_the_done_file_and_the_acceptance_check() -> None:
    """Whatever this copy did, the task's outcome is the newer generation's."""
    state = TaskState(status="running", started_at=T0, launched_at=T0)
    done = Signals(now=T0 + 5, done=True, exit_code=0, has_acceptance=True, superseded=True)
    decision = decide(state, done, P)
    assert decision.state.status == "superseded" and A.ACCEPT not in decision.actions
    verifying = dataclasses.replace(state, status="verifying", exit_code=0)
    decision = decide(verifying, Signals(now=T0 + 6, acceptance_running=True, superseded=True), P)
    assert decision.state.status == "superseded" and A.ACCEPT not in decision.actions


def test_a_full_state_disk_holds_it_like_every_decision() -> None:
    state = TaskState(status="running", started_at=T0, launched_at=T0)
    held = decide(state, Signals(now=T0 + 5, superseded=True, state_disk_full=True), P)
    assert held.state.status == "running" and held.actions == () and held.events == ()


def test_a_logged_superseded_ending_is_completed_with_a_stop() -> None:
    """supervise died between the event and the manifest: the agent is stopped again."""
    state = TaskState(status="running", started_at=T0, launched_at=T0)
    last = {"event": "superseded", "reason": "superseded: ...", "verdict": "ABANDONED"}
    decision = recovered_ending(state, last, [last], P)
    assert decision.state.status == "superseded" and decision.actions[0] is A.STOP_AGENT
    assert A.RESUME not in decision.actions


@given(
    state=task_states(tuple(s for s in Status if s not in TERMINAL)),
    sig=signal_sets(superseded=True, state_disk_full=False),
    policy=policies(),
)
def test_superseded_always_ends_the_copy_and_never_resumes(
    state: TaskState, sig: Signals, policy: MonitorPolicy
) -> None:
    decision = decide(state, sig, policy)
    assert decision.state.status == "superseded"
    assert decision.state.verdict == "ABANDONED"
    assert decision.events == ("superseded",)
    assert A.RESUME not in decision.actions and A.ACCEPT not in decision.actions
    assert A.FINISH in decision.actions
    if state.status in LIVE:  # a launched copy: its agent is stopped, its session killed
        assert decision.actions[0] is A.STOP_AGENT and A.CLEANUP in decision.actions


@given(
    state=task_states(tuple(s for s in Status if s in TERMINAL)),
    sig=signal_sets(superseded=st.booleans()),
    policy=policies(),
)
def test_an_ended_task_is_never_superseded(
    state: TaskState, sig: Signals, policy: MonitorPolicy
) -> None:
    decision = decide(state, sig, policy)
    assert decision.state == state and decision.actions == () and decision.events == ()


@given(state=task_states(), sig=signal_sets(superseded=False), policy=policies())
def test_nothing_else_leads_to_superseded(
    state: TaskState, sig: Signals, policy: MonitorPolicy
) -> None:
    if state.status != "superseded":
        assert decide(state, sig, policy).state.status != "superseded"
