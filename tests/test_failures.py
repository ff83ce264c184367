"""Failure classes: what the real CLI says when a run ends in error, and what the policy does.

The texts are the real Claude Code 2.1.328's results, measured on this machine
(``../shared/notes/real-world-facts.md``, ``docs/conformance.md``).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.agents.claude.failures import classify, classify_hook_error
from supervisor.config import MonitorPolicy
from supervisor.policy import Action, Signals, TaskState, backoff, decide
from supervisor.taskdir.states import TERMINAL, TRANSIENT, FailureReason

T0 = 1_700_000_000.0
P = MonitorPolicy(base_interval=10, max_interval=300, deadline=3600, grace_period=5)

REAL = {
    # (api_error_status, result text, is_error) -> class
    "500 after retries": (
        500,
        "API Error: 500 Internal server error. This is a server-side issue, usually temporary"
        " — try again in a moment.",
        True,
        TRANSIENT,
    ),
    "529 overloaded": (529, "API Error: Repeated 529 Overloaded errors", True, TRANSIENT),
    "connection refused": (
        None,
        "API Error: Connection refused. Unable to connect to API (ECONNREFUSED)",
        True,
        TRANSIENT,
    ),
    "dns": (None, "API Error: getaddrinfo ENOTFOUND api.example (ENOTFOUND)", True, TRANSIENT),
    "credit balance": (400, "Credit balance is too low", True, "billing"),
    "credit balance, no status": (None, "Credit balance is too low", True, "billing"),
    "not logged in": (None, "Not logged in · Please run /login", True, "auth"),
    "401": (401, "API Error: 401 authentication_error: invalid x-api-key", True, "auth"),
    "400 invalid": (400, "API Error: 400 invalid_request_error: bad", True, "invalid_request"),
    "other error": (None, "Something went wrong in a tool", True, "agent_error"),
    "max turns": (None, "", True, "agent_error"),
}


@pytest.mark.parametrize("case", list(REAL))
def test_the_real_clis_endings_are_classified(case):
    status, text, is_error, expected = REAL[case]
    assert classify(status, text, is_error) == expected


def test_a_successful_run_has_no_class():
    assert classify(None, "all done", False) is None
    assert classify(None, None, None) is None


def test_hook_errors_of_interactive_runs():
    assert classify_hook_error("server_error", "") == TRANSIENT
    assert classify_hook_error("authentication_failed", "") == "auth"
    assert classify_hook_error("billing_error", "") == "billing"
    assert classify_hook_error("invalid_request", "") == "invalid_request"
    assert classify_hook_error("unknown", "Credit balance is too low") == "billing"
    assert classify_hook_error("unknown", "") is None


@given(st.one_of(st.none(), st.integers(100, 599)), st.text(max_size=200), st.booleans())
def test_classify_is_total(status, text, is_error):
    result = classify(status, text, is_error)
    assert result is None or result == TRANSIENT or result in set(FailureReason)


def running(**changes) -> TaskState:
    return TaskState(**{"status": "running", "started_at": T0, "launched_at": T0, **changes})


def ended(now: float, code: int = 1, failure: str | None = None) -> Signals:
    return Signals(now=now, done=True, exit_code=code, agent_alive=False, failure=failure)


def test_a_transient_ending_waits_then_resumes_the_same_session_without_a_retry():
    now = T0 + 100
    decision = decide(running(retry_count=1), ended(now, failure=TRANSIENT), P)
    new = decision.state
    assert new.status == "waiting"
    assert new.retry_count == 1
    assert new.transient_waits == 1
    assert new.resume_at == now + backoff(0, P)
    assert decision.events == ("waiting",)
    assert Action.STOP_AGENT not in decision.actions
    # The backoff passes; the done-file of the failed run is still there and means nothing.
    later = decide(new, ended(new.resume_at, failure=TRANSIENT), P)
    assert later.state.status == "running"
    assert later.state.retry_count == 1
    assert later.actions == (Action.RESUME,)


def test_transient_waits_back_off_and_stay_within_the_deadline():
    state = running(transient_waits=5)
    now = T0 + P.deadline - 3
    decision = decide(state, ended(now, failure=TRANSIENT), P)
    assert decision.state.resume_at == now + backoff(5, P)
    assert now + decision.next_check <= T0 + P.deadline
    after = decide(decision.state, ended(T0 + P.deadline, failure=TRANSIENT), P)
    assert after.state.status == "abandoned"
    assert after.state.abandon_reason == "deadline"


@pytest.mark.parametrize("reason", ["auth", "billing", "invalid_request", "agent_error"])
def test_a_permanent_ending_fails_with_its_reason(reason):
    decision = decide(running(), ended(T0 + 50, failure=reason), P)
    assert decision.state.status == "failed"
    assert decision.state.failure_reason == reason
    assert decision.state.verdict == "FAIL"
    assert reason in decision.reason


def test_a_plain_nonzero_exit_fails_with_reason_exit_code():
    decision = decide(running(), ended(T0 + 50, code=3), P)
    assert decision.state.failure_reason == "exit_code"


def test_exit_zero_is_completed_whatever_the_class():
    decision = decide(running(), ended(T0 + 50, code=0, failure=TRANSIENT), P)
    assert decision.state.status == "completed"
    assert decision.state.failure_reason is None


@given(
    retry_count=st.integers(0, 10),
    transient_waits=st.integers(0, 70),
    failure=st.sampled_from([None, TRANSIENT, *FailureReason]),
    code=st.integers(0, 255),
    offset=st.floats(0, 4000),
)
@settings(max_examples=500)
def test_a_transient_ending_never_counts_and_never_ends_the_task(
    retry_count, transient_waits, failure, code, offset
):
    state = running(retry_count=retry_count, transient_waits=transient_waits)
    decision = decide(state, ended(T0 + offset, code=code, failure=failure), P)
    new = decision.state
    assert new.retry_count == retry_count
    if offset >= P.deadline:
        assert new.status in TERMINAL
    elif code != 0 and failure == TRANSIENT:
        assert new.status == "waiting"
        assert new.transient_waits == transient_waits + 1
    elif code != 0:
        assert new.status == "failed"
        assert new.failure_reason == (failure or "exit_code")
    else:
        assert dataclasses.replace(new, status="x").failure_reason is None
