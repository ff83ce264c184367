"""The policy's rows for an interactive turn that ends on an API failure while the agent
lives on (Claude Code's ``StopFailure`` hook, the TUI at its prompt) and for a CLI that
continues by itself during a usage-limit wait (issue 21; :mod:`supervisor.policy.turns`).

Pure calls with an explicit ``now``, in the style of tests/test_policy_agent.py, plus
hypothesis properties over the signals of a check.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.config import MonitorPolicy
from supervisor.policy import Action, Signals, TaskState, backoff, decide
from supervisor.taskdir.states import TRANSIENT

A = Action
T0 = 1_700_000_000.0
P = MonitorPolicy(
    base_interval=10.0,
    max_interval=80.0,
    deadline=10_000.0,
    grace_period=20.0,
    stale_threshold=30.0,
    max_retries=3,
    notify_on=["escalated", "failed", "abandoned", "completed", "waiting"],
)
PERMANENT = ("auth", "billing", "invalid_request", "agent_error")
HOOK_ERRORS = ("authentication_failed", "server_error", "billing_error", "unknown")


def running(**changes: object) -> TaskState:
    fields: dict[str, object] = {"status": "running", "started_at": T0, "launched_at": T0}
    fields.update(changes)
    return TaskState(**fields)  # type: ignore[arg-type]


def alive(now: float, **changes: object) -> Signals:
    return Signals(now=now, agent_alive=True, output_mtime=now, **changes)  # type: ignore[arg-type]


class TestFailedTurnEndsTheRun:
    @pytest.mark.parametrize("failure", PERMANENT)
    def test_permanent_failure_ends_failed_with_its_reason_at_once(self, failure: str) -> None:
        now = T0 + 12
        sig = alive(now, turn_failure="authentication_failed", failure=failure)
        decision = decide(running(retry_count=1), sig, P)
        assert decision.state.status == "failed"
        assert decision.state.failure_reason == failure
        assert decision.state.verdict == "FAIL"
        assert decision.state.retry_count == 1
        assert decision.actions == (A.STOP_AGENT, A.FINISH, A.CLEANUP, A.NOTIFY)
        assert decision.events == ("failed",)
        assert failure in decision.reason and "authentication_failed" in decision.reason

    def test_transient_failure_stops_the_agent_and_waits_never_a_retry(self) -> None:
        now = T0 + 12
        sig = alive(now, turn_failure="server_error", failure=TRANSIENT)
        decision = decide(running(retry_count=2), sig, P)
        assert decision.state.status == "waiting"
        assert decision.state.retry_count == 2
        assert decision.state.transient_waits == 1
        assert decision.state.resume_at == now + backoff(0, P)
        assert decision.actions == (A.STOP_AGENT, A.NOTIFY)
        assert decision.events == ("waiting",)
        assert "server_error" in decision.reason

    def test_the_transient_wait_resumes_the_session_without_a_retry(self) -> None:
        now = T0 + 12
        sig = alive(now, turn_failure="server_error", failure=TRANSIENT)
        waiting = decide(running(), sig, P).state
        later = waiting.resume_at or 0.0
        resumed = decide(
            waiting, Signals(now=later, agent_alive=False, done=True, exit_code=143), P
        )
        assert resumed.state.status == "running" and resumed.state.retry_count == 0
        assert resumed.actions == (A.RESUME,)

    def test_exit_0_after_a_failed_turn_is_never_completed(self) -> None:
        # /exit typed into the TUI exits 0: the run still failed (issue 21).
        sig = Signals(
            now=T0 + 5,
            done=True,
            exit_code=0,
            agent_alive=False,
            turn_failure="authentication_failed",
            failure="auth",
        )
        decision = decide(running(), sig, P)
        assert (decision.state.status, decision.state.failure_reason) == ("failed", "auth")
        assert decision.state.exit_code == 0

    def test_exit_0_after_a_transient_failed_turn_waits(self) -> None:
        sig = Signals(
            now=T0 + 5,
            done=True,
            exit_code=0,
            agent_alive=False,
            turn_failure="server_error",
            failure=TRANSIENT,
        )
        decision = decide(running(), sig, P)
        assert decision.state.status == "waiting"
        assert A.STOP_AGENT not in decision.actions

    def test_the_deadline_still_comes_first(self) -> None:
        sig = alive(T0 + P.deadline, turn_failure="server_error", failure=TRANSIENT)
        decision = decide(running(), sig, P)
        assert (decision.state.status, decision.state.abandon_reason) == ("abandoned", "deadline")

    def test_a_failure_class_without_a_failed_turn_waits_for_the_done_file(self) -> None:
        # headless: the stream's result is read before the CLI exits; the exit decides
        decision = decide(running(), alive(T0 + 5, failure="auth"), P)
        assert decision.state.status == "running" and not decision.actions


class TestLimitWaitKeepsATuiThatMayContinue:
    def limited(self, now: float) -> TaskState:
        sig = alive(
            now,
            turn_failure="rate_limit",
            limit=True,
            limit_resume_at=now + 300,
            limit_reason="StopFailure hook: rate_limit",
        )
        decision = decide(running(), sig, P)
        assert decision.actions == (A.NOTIFY,), decision  # the agent is kept
        assert decision.state.agent_kept and decision.state.status == "waiting"
        return decision.state

    def test_work_during_the_wait_is_running_again_with_no_continue(self) -> None:
        state = self.limited(T0 + 10)
        decision = decide(state, alive(T0 + 320, agent_working=True), P)
        assert decision.state.status == "running"
        assert decision.events == ("continued",)
        assert A.RESUME not in decision.actions and A.STOP_AGENT not in decision.actions
        assert decision.state.retry_count == 0 and not decision.state.agent_kept
        assert decision.state.active_since == T0 + 320

    def test_no_work_by_the_reset_stops_the_kept_agent_then_resumes(self) -> None:
        state = self.limited(T0 + 10)
        decision = decide(state, alive(T0 + 310), P)
        assert decision.actions == (A.STOP_AGENT, A.RESUME)
        assert decision.state.retry_count == 0 and not decision.state.agent_kept

    def test_work_of_a_stopped_agent_is_not_a_continue(self) -> None:
        state = running(status="waiting", resume_at=T0 + 300, limit_waits=1)
        decision = decide(state, alive(T0 + 20, agent_working=True), P)
        assert decision.state.status == "waiting" and not decision.events

    def test_headless_limit_still_stops_the_agent(self) -> None:
        sig = alive(T0 + 10, limit=True, limit_resume_at=T0 + 300)
        decision = decide(running(), sig, P)
        assert decision.actions == (A.STOP_AGENT, A.NOTIFY)
        assert not decision.state.agent_kept


classes = st.sampled_from((TRANSIENT, *PERMANENT))


@settings(max_examples=300, deadline=None)
@given(
    offset=st.floats(0.0, 20_000.0),
    done=st.booleans(),
    exit_code=st.none() | st.integers(-1, 255),
    alive_=st.none() | st.booleans(),
    failure=classes,
    error=st.sampled_from(HOOK_ERRORS),
    retries=st.integers(0, 5),
)
def test_a_failed_turn_never_completes_nor_spends_a_retry(
    offset: float,
    done: bool,
    exit_code: int | None,
    alive_: bool | None,
    failure: str,
    error: str,
    retries: int,
) -> None:
    """Whatever the exit code, liveness and time: a run whose turn failed is never
    ``completed`` or ``hung``, never resumed as a retry, and a permanent class ends
    ``failed`` with that reason (or the deadline's ``abandoned``)."""
    now = T0 + offset
    sig = Signals(
        now=now,
        done=done,
        exit_code=exit_code,
        agent_alive=alive_,
        output_mtime=T0,
        turn_failure=error,
        failure=failure,
    )
    decision = decide(running(retry_count=retries), sig, P)
    new = decision.state
    assert new.status not in ("completed", "verifying", "hung")
    assert new.retry_count == retries
    if new.status == "failed":
        assert new.failure_reason == failure
    if failure != TRANSIENT and new.status != "abandoned" and (done or alive_):
        assert (new.status, new.failure_reason) == ("failed", failure)
    if failure == TRANSIENT and new.status == "waiting":
        assert A.RESUME not in decision.actions


def test_a_logged_continue_is_adopted_as_the_same_run_going_on() -> None:
    """The engine died after logging ``continued``, before the manifest said ``running``:
    the restarted engine must not resume the run a second time."""
    from support.policy_events import event, manifest

    from supervisor.policy import adopted

    m = manifest(status="waiting", started_at=T0, launched_at=T0, resume_at=T0 + 300, limit_waits=1)
    log = [event("launched", T0), event("waiting", T0 + 10), event("continued", T0 + 200)]
    state = adopted(m, log)
    assert (state.status, state.resume_at, state.launched_at) == ("running", None, T0)
    assert state.retry_count == 0
