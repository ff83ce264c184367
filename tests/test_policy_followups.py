"""The follow-up transition (:mod:`supervisor.policy.followups`, issue 22): an ended task
opens its next turn as ``queued`` with nothing of the ended turn left; a live one is
refused (or, escalated, stopped first). Pure calls, like tests/test_policy_transitions.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.policy_states import P, task_states

from supervisor.policy import TERMINAL, Action, TaskState, continue_turn, launched
from supervisor.policy.followups import STOP_FIRST, refusal
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import Status

turns = st.integers(2, 10**6)


@given(state=task_states(tuple(TERMINAL)), turn=turns)
@settings(max_examples=300, deadline=None)
def test_an_ended_task_opens_a_queued_turn_with_nothing_left_of_the_last(state, turn):
    decision = continue_turn(state, turn)
    assert decision.state == TaskState(status="queued")  # retries 0, no deadline, no verdict
    assert decision.events == (Event.FOLLOWED_UP,)
    assert Action.RESUME not in decision.actions and Action.STOP_AGENT not in decision.actions
    assert f"turn {turn}" in decision.reason
    assert refusal(state.status) is None


@given(state=task_states(tuple(s.value for s in Status if s not in TERMINAL)), turn=turns)
@settings(max_examples=300, deadline=None)
def test_a_live_task_is_never_continued_directly(state, turn):
    with pytest.raises(ValueError, match="only an ended task"):
        continue_turn(state, turn)
    why = refusal(state.status)
    if state.status in STOP_FIRST:
        assert why is None  # stopped first, then continued
    else:
        assert why is not None and "wait for it or stop it first" in why


@given(state=task_states(tuple(TERMINAL)), turn=st.integers(-5, 1))
def test_a_follow_up_opens_turn_two_or_later(state, turn):
    with pytest.raises(ValueError, match="turn 2 or later"):
        continue_turn(state, turn)


@given(state=task_states(tuple(TERMINAL)), now=st.floats(1e9, 2e9))
@settings(max_examples=100, deadline=None)
def test_the_new_turn_launches_with_a_new_deadline(state, now):
    """The queued turn is launched like any queued task: its deadline counts from now."""
    started = launched(continue_turn(state, 2).state, now, P)
    assert started.state.started_at == now and started.state.retry_count == 0
