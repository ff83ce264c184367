"""Tests of the agent-aware rows of :func:`supervisor.policy.decide`: usage-limit waits
(``waiting``), escalations to a human (``escalated``), the acceptance check
(``verifying``), an interactive agent's finished turn, and the ``verdict`` of every
terminal state.

The rows come from the state table in the module docstring of :mod:`supervisor.policy`;
the style and helpers follow tests/test_policy.py (pure calls, explicit ``now``).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.policy_agent_states import (
    ALL_STATUSES,
    ASK,
    BREAKER,
    T0,
    P,
    policies,
    rare,
    signal_sets,
    task_states,
)

from supervisor.config import MonitorPolicy
from supervisor.policy import (
    EXIT_SETTLE,
    MIN_CHECK,
    Action,
    Decision,
    Signals,
    TaskState,
    backoff,
    decide,
    first_check,
)
from supervisor.taskdir.states import TERMINAL, Verdict

A = Action
END = (A.FINISH, A.CLEANUP, A.NOTIFY)
STOP_END = (A.STOP_AGENT, A.FINISH, A.CLEANUP, A.NOTIFY)
DEADLINE = T0 + P.deadline
#: Live statuses that layer 1 (the done-file) and the deadline apply to.
LIVE = ("running", "crashed", "hung", "waiting", "escalated")


def running(**changes) -> TaskState:
    """A running task launched at T0 (its first launch)."""
    fields = {"status": "running", "started_at": T0, "launched_at": T0}
    fields.update(changes)
    return TaskState(**fields)


def waiting(resume_at: float | None = T0 + 500, **changes) -> TaskState:
    """A task stopped for a usage limit, due to resume at ``resume_at``."""
    return running(**{"status": "waiting", "limit_waits": 1, "resume_at": resume_at, **changes})


def escalated(paused: bool = False, **changes) -> TaskState:
    """A task waiting for a human's answer (``paused``: a circuit-breaker escalation)."""
    reason = BREAKER if paused else ASK
    return running(**{"status": "escalated", "escalation": reason, "paused": paused, **changes})


def verifying(**changes) -> TaskState:
    """A task whose agent exited 0 and whose [acceptance] check decides."""
    return running(**{"status": "verifying", "exit_code": 0, **changes})


def alive(now: float, output_age: float = 0.0, **changes) -> Signals:
    """Signals of a live agent whose output was written ``output_age`` seconds ago."""
    return Signals(now=now, agent_alive=True, output_mtime=now - output_age, **changes)


def dead(now: float, **changes) -> Signals:
    return Signals(now=now, agent_alive=False, **changes)


def with_notify(policy: MonitorPolicy, events: list[str]) -> MonitorPolicy:
    return policy.model_copy(update={"notify_on": events})


# ============================================================================ waiting


class TestLimitStartsWaiting:
    """running + usage/rate limit -> waiting: stop, wait until resume_at."""

    def test_limit_with_reset_time_waits_until_it(self):
        now = T0 + 100
        state = running(retry_count=2, stale_since=T0 + 50, gone_since=T0 + 90)
        sig = alive(now, limit=True, limit_resume_at=T0 + 400, limit_reason="API error 429")
        decision = decide(state, sig, P)
        assert decision.state == running(
            status="waiting", retry_count=2, resume_at=T0 + 400, limit_waits=1
        )
        assert decision.actions == (A.STOP_AGENT, A.NOTIFY)
        assert decision.events == ("waiting",)
        assert decision.next_check == pytest.approx(300.0)
        assert decision.state.verdict is None
        assert "API error 429" in decision.reason

    @pytest.mark.parametrize(("limit_waits", "wait"), [(0, 10.0), (1, 20.0), (2, 40.0), (3, 80.0)])
    def test_limit_without_reset_time_backs_off_on_limit_waits(self, limit_waits, wait):
        now = T0 + 100
        state = running(retry_count=1, limit_waits=limit_waits)
        decision = decide(state, alive(now, limit=True), P)
        assert decision.state == running(
            status="waiting", retry_count=1, resume_at=now + wait, limit_waits=limit_waits + 1
        )
        assert decision.actions == (A.STOP_AGENT, A.NOTIFY)
        assert decision.events == ("waiting",)
        assert decision.next_check == pytest.approx(wait)

    def test_limit_waits_back_off_independently_of_retries(self):
        # retry_count 2 would mean a 40 s crash backoff; limit_waits 0 means 10 s.
        now = T0 + 100
        decision = decide(running(retry_count=2), alive(now, limit=True), P)
        assert decision.state.resume_at == now + backoff(0, P) == now + 10

    @pytest.mark.parametrize("past", [0.0, 1.0, 5000.0])
    def test_reset_time_not_in_the_future_backs_off(self, past):
        now = T0 + 100
        sig = alive(now, limit=True, limit_resume_at=now - past)
        decision = decide(running(), sig, P)
        assert decision.state.status == "waiting"
        assert decision.state.resume_at == now + 10

    def test_done_file_with_error_and_limit_waits(self):
        # claude -p exits 1 on a 429 (tests/fixtures/claude/headless/captures.json).
        now = T0 + 100
        sig = Signals(now, done=True, exit_code=1, agent_alive=False, limit=True,
                      limit_resume_at=T0 + 1000)  # fmt: skip
        decision = decide(running(retry_count=1), sig, P)
        assert decision.state == running(
            status="waiting", retry_count=1, resume_at=T0 + 1000, limit_waits=1
        )
        assert decision.actions == (A.STOP_AGENT, A.NOTIFY)
        assert decision.events == ("waiting",)
        assert decision.state.exit_code is None
        assert decision.state.verdict is None

    def test_done_file_with_exit_zero_completes_despite_limit(self):
        sig = Signals(T0 + 100, done=True, exit_code=0, limit=True, limit_resume_at=T0 + 999)
        decision = decide(running(), sig, P)
        assert decision.state.status == "completed"
        assert decision.state.verdict == "PASS"
        assert decision.actions == END

    def test_limit_at_max_retries_waits_instead_of_abandoning(self):
        now = T0 + 100
        state = running(retry_count=3, gone_since=now - 10)
        decision = decide(state, dead(now, limit=True, session_alive=False), P)
        assert decision.state.status == "waiting"
        assert decision.state.retry_count == 3
        assert decision.state.abandon_reason is None

    def test_limit_wins_over_a_hang_and_an_escalation_and_a_finished_turn(self):
        now = T0 + 500
        state = running(stale_since=now - 100)
        sig = alive(now, output_age=400, limit=True, escalate=ASK, turn_ended=True)
        decision = decide(state, sig, P)
        assert decision.state.status == "waiting"
        assert decision.events == ("waiting",)
        assert decision.state.escalation is None

    def test_waiting_is_not_notified_when_not_selected(self):
        policy = with_notify(P, ["completed"])
        decision = decide(running(), alive(T0 + 5, limit=True), policy)
        assert decision.actions == (A.STOP_AGENT,)

    def test_next_check_clipped_to_deadline(self):
        now = DEADLINE - 7
        sig = alive(now, limit=True, limit_resume_at=DEADLINE + 3600)
        decision = decide(running(), sig, P)
        assert decision.state.resume_at == DEADLINE + 3600  # resume_at itself is not clipped
        assert decision.next_check == pytest.approx(7.0)

    @pytest.mark.parametrize("status", ["crashed", "hung", "escalated", "verifying"])
    def test_limit_is_only_acted_on_while_running(self, status):
        now = T0 + 100
        state = running(
            status=status, resume_at=now + 50 if status in ("crashed", "hung") else None
        )
        if status == "verifying":
            state = verifying()
        decision = decide(state, alive(now, limit=True, acceptance_running=True), P)
        assert decision.state.status == status
        assert "waiting" not in decision.events


def test_operator_stop_is_not_lost_when_the_limited_run_exits():
    now = T0 + 100
    sig = Signals(now, done=True, exit_code=1, agent_alive=False, limit=True,
                  limit_resume_at=T0 + 1000, stop_requested=True)  # fmt: skip
    decision = decide(running(), sig, P)
    assert decision.state.status == "abandoned"
    assert decision.state.abandon_reason == "stopped"
    assert decision.state.verdict == "ABANDONED"


class TestWaiting:
    """waiting -> running at resume_at, without counting a retry."""

    @pytest.mark.parametrize(
        "sig",
        [
            alive(T0 + 100),
            alive(T0 + 100, output_age=1e5),
            dead(T0 + 100),
            dead(T0 + 100, session_alive=False),
            Signals(T0 + 100),  # no pid file, long after START_TIMEOUT
            alive(T0 + 100, limit=True, escalate=ASK, turn_ended=True),
        ],
        ids=["healthy", "stale", "dead", "session-lost", "no-pid", "limit-escalate-turn"],
    )
    def test_before_resume_at_nothing_happens(self, sig):
        state = waiting(resume_at=T0 + 500, retry_count=1)
        decision = decide(state, sig, P)
        assert decision.state == state
        assert decision.actions == ()
        assert decision.events == ()
        assert decision.next_check == pytest.approx(400.0)

    @pytest.mark.parametrize("late", [0.0, 0.001, 3.0, 1000.0])
    def test_at_resume_at_resumes_without_counting_a_retry(self, late):
        now = T0 + 500 + late
        state = waiting(resume_at=T0 + 500, retry_count=1, limit_waits=2)
        decision = decide(state, dead(now), P)
        assert decision.state == running(launched_at=now, retry_count=1, limit_waits=2)
        assert decision.actions == (A.RESUME,)
        assert decision.events == ("resumed",)
        assert decision.next_check == first_check(P) == 10.0
        assert decision.state.verdict is None

    def test_at_max_retries_still_resumes(self):
        now = T0 + 500
        state = waiting(resume_at=now, retry_count=3)
        decision = decide(state, dead(now), P)
        assert decision.state.status == "running"
        assert decision.state.retry_count == 3
        assert decision.actions == (A.RESUME,)

    def test_without_resume_at_resumes_at_once(self):
        now = T0 + 100
        decision = decide(waiting(resume_at=None), alive(now), P)
        assert decision.state == running(launched_at=now, limit_waits=1)
        assert decision.actions == (A.RESUME,)

    def test_remaining_below_min_check_is_floored(self):
        now = T0 + 100
        state = waiting(resume_at=now + MIN_CHECK / 10)
        decision = decide(state, dead(now), P)
        assert decision.state == state
        assert decision.next_check == MIN_CHECK

    def test_next_check_clipped_to_deadline(self):
        now = DEADLINE - 4
        state = waiting(resume_at=DEADLINE + 3600)
        decision = decide(state, dead(now), P)
        assert decision.state == state
        assert decision.next_check == pytest.approx(4.0)

    @pytest.mark.parametrize("past", [0.0, 1.0, 1e5])
    def test_deadline_abandons_with_verdict_timeout(self, past):
        now = DEADLINE + past
        state = waiting(resume_at=now + 100, retry_count=2)
        decision = decide(state, dead(now), P)
        assert decision.state == running(
            status="abandoned",
            retry_count=2,
            limit_waits=1,
            abandon_reason="deadline",
            verdict="TIMEOUT",
        )
        assert decision.actions == STOP_END
        assert decision.events == ("abandoned",)

    def test_deadline_wins_over_a_due_resume(self):
        now = DEADLINE
        decision = decide(waiting(resume_at=now - 100), dead(now), P)
        assert decision.state.abandon_reason == "deadline"
        assert A.RESUME not in decision.actions

    def test_operator_stop_abandons(self):
        now = T0 + 100
        decision = decide(waiting(), alive(now, stop_requested=True), P)
        assert decision.state == running(
            status="abandoned", limit_waits=1, abandon_reason="stopped", verdict="ABANDONED"
        )
        assert decision.actions == STOP_END
        assert decision.events == ("abandoned",)

    def test_operator_resume_resumes_now_and_counts(self):
        now = T0 + 100
        state = waiting(resume_at=T0 + 5000, retry_count=1)
        decision = decide(state, dead(now, resume_requested=True), P)
        assert decision.state == running(launched_at=now, retry_count=2, limit_waits=1)
        assert decision.actions == (A.STOP_AGENT, A.RESUME)
        assert decision.events == ("resumed",)

    @pytest.mark.parametrize("code", [None, 0, 1, 137])
    @pytest.mark.parametrize("has_acceptance", [False, True])
    def test_done_file_means_nothing_while_waiting(self, code, has_acceptance):
        # The limited run's done-file stays on disk until the resume clears the run files.
        state = waiting(resume_at=T0 + 500)
        sig = Signals(T0 + 200, done=True, exit_code=code, agent_alive=False,
                      has_acceptance=has_acceptance, limit=True)  # fmt: skip
        decision = decide(state, sig, P)
        assert decision.state == state
        assert decision.actions == ()
        assert decision.events == ()
        due = decide(state, dataclasses.replace(sig, now=T0 + 500), P)
        assert due.state == running(launched_at=T0 + 500, limit_waits=1)
        assert due.actions == (A.RESUME,)

    @pytest.mark.parametrize("at", [T0 + 200, T0 + 500], ids=["before-resume_at", "at-resume_at"])
    def test_done_file_of_the_limited_run_does_not_fail_the_waiting_task(self, at):
        files = dict(done=True, exit_code=1, agent_alive=False, limit=True,
                     limit_resume_at=T0 + 500)  # fmt: skip
        first = decide(running(), Signals(T0 + 100, **files), P)
        assert first.state.status == "waiting"
        # The next check: the same run files are still on disk.
        later = decide(first.state, Signals(at, **files), P)
        assert later.state.status != "failed"
        if at < T0 + 500:
            assert later.state == first.state
            assert later.actions == ()
        else:
            assert later.state == running(launched_at=at, limit_waits=1)
            assert later.actions == (A.RESUME,)


# ============================================================================ escalated


class TestEscalation:
    """running + escalate -> escalated; the operator approves or denies."""

    def test_request_escalation_notifies_only(self):
        now = T0 + 100
        state = running(retry_count=1, stale_since=T0 + 80)
        decision = decide(state, alive(now, escalate=ASK), P)
        assert decision.state == running(status="escalated", retry_count=1, escalation=ASK)
        assert decision.actions == (A.NOTIFY,)
        assert decision.events == ("escalated",)
        assert decision.next_check == P.base_interval
        assert ASK in decision.reason

    def test_breaker_escalation_pauses_the_agent(self):
        now = T0 + 100
        decision = decide(running(), alive(now, escalate=BREAKER, escalate_pause=True), P)
        assert decision.state == running(status="escalated", escalation=BREAKER, paused=True)
        assert decision.actions == (A.PAUSE_AGENT, A.NOTIFY)
        assert decision.events == ("escalated",)

    @pytest.mark.parametrize(("pause", "actions"), [(False, ()), (True, (A.PAUSE_AGENT,))])
    def test_no_notify_when_not_selected(self, pause, actions):
        policy = with_notify(P, ["completed", "waiting"])
        sig = alive(T0 + 5, escalate=ASK, escalate_pause=pause)
        assert decide(running(), sig, policy).actions == actions

    def test_escalation_next_check_clipped_to_deadline(self):
        now = DEADLINE - 3
        decision = decide(running(), alive(now, escalate=ASK), P)
        assert decision.next_check == pytest.approx(3.0)

    @pytest.mark.parametrize("paused", [False, True])
    @pytest.mark.parametrize("age", [0.0, P.stale_after + 1, 1e4, 1e6])
    def test_escalated_is_never_stale(self, paused, age):
        now = T0 + 5000
        state = escalated(paused=paused, launched_at=T0)
        decision = decide(state, alive(now, output_age=age), P)
        assert decision.state == state
        assert decision.actions == ()
        assert decision.events == ()
        assert decision.next_check == P.base_interval

    def test_new_escalations_wait_their_turn(self):
        state = escalated()
        decision = decide(state, alive(T0 + 100, escalate="another", escalate_pause=True), P)
        assert decision.state == state
        assert decision.actions == ()

    def test_approve_a_request(self):
        now = T0 + 300
        state = escalated(retry_count=1)
        decision = decide(state, alive(now, approve_requested=True), P)
        assert decision.state == running(active_since=now, retry_count=1)
        assert decision.actions == (A.ANSWER_APPROVE,)
        assert decision.events == ("approved",)
        assert decision.next_check == first_check(P)

    def test_an_answer_keeps_the_run_and_its_pid_guard_but_restarts_output_age(self):
        # The same agent run goes on after an answer: launched_at (the PID-reuse guard's
        # reference before) must not move, or the live agent looks like a reused PID and a
        # healthy run is declared crashed (seen with the real CLI: 'crashed' ~2 s after
        # 'supervise approve'). Output age counts from the answer.
        now = T0 + 300
        for request in ("approve_requested", "deny_requested"):
            answered = decide(escalated(), alive(now, **{request: True}), P).state
            assert answered.launched_at == T0
            assert answered.active_since == now
            later = decide(answered, alive(now + P.stale_after - 1, output_age=400), P)
            assert later.state.status == "running"
            assert later.state.stale_since is None

    def test_deny_a_request(self):
        now = T0 + 300
        state = escalated(retry_count=1)
        decision = decide(state, alive(now, deny_requested=True), P)
        assert decision.state == running(active_since=now, retry_count=1)
        assert decision.actions == (A.ANSWER_DENY,)
        assert decision.events == ("denied",)

    def test_approve_a_paused_escalation_continues_the_agent(self):
        now = T0 + 300
        decision = decide(escalated(paused=True), alive(now, approve_requested=True), P)
        assert decision.state == running(active_since=now)
        assert decision.actions == (A.CONTINUE_AGENT,)
        assert decision.events == ("approved",)

    def test_deny_a_paused_escalation_abandons_it(self):
        now = T0 + 300
        state = escalated(paused=True, retry_count=2)
        decision = decide(state, alive(now, deny_requested=True), P)
        assert decision.state == dataclasses.replace(
            state, status="abandoned", abandon_reason="denied", verdict="ABANDONED"
        )
        assert decision.actions == STOP_END
        assert decision.events == ("abandoned",)

    def test_answer_after_a_long_wait_is_not_a_hang(self):
        # launched_at moves to the answer, so the long wait is not counted as silence.
        now = T0 + 5000
        decision = decide(escalated(), alive(now, output_age=4000, approve_requested=True), P)
        later = decide(decision.state, alive(now + 1, output_age=4001), P)
        assert later.state.status == "running"
        assert later.events == ()

    @pytest.mark.parametrize("paused", [False, True])
    def test_deadline_abandons_with_verdict_escalate(self, paused):
        now = DEADLINE
        state = escalated(paused=paused)
        decision = decide(state, alive(now, approve_requested=True), P)
        assert decision.state == dataclasses.replace(
            state, status="abandoned", abandon_reason="deadline", verdict="ESCALATE"
        )
        assert decision.actions == STOP_END
        assert decision.events == ("abandoned",)

    def test_operator_stop_wins_over_an_answer(self):
        now = T0 + 300
        state = escalated()
        decision = decide(state, alive(now, stop_requested=True, approve_requested=True), P)
        assert decision.state == dataclasses.replace(
            state, status="abandoned", abandon_reason="stopped", verdict="ESCALATE"
        )
        assert decision.actions == STOP_END

    @pytest.mark.parametrize(("code", "status", "verdict"), [(0, "completed", "PASS"),
                                                             (2, "failed", "FAIL")])  # fmt: skip
    def test_done_file_wins_and_clears_the_escalation(self, code, status, verdict):
        sig = Signals(T0 + 300, done=True, exit_code=code, approve_requested=True)
        decision = decide(escalated(paused=True), sig, P)
        failure = None if code == 0 else "exit_code"
        assert decision.state == running(
            status=status, exit_code=code, verdict=verdict, failure_reason=failure
        )
        assert decision.actions == END

    def test_operator_resume_clears_the_escalation_and_counts(self):
        now = T0 + 300
        decision = decide(escalated(paused=True), alive(now, resume_requested=True), P)
        assert decision.state == running(launched_at=now, retry_count=1)
        assert decision.actions == (A.STOP_AGENT, A.RESUME)
        assert decision.events == ("resumed",)

    def test_dead_agent_while_escalated_is_a_crash(self):
        now = T0 + 300
        first = decide(escalated(), dead(now), P)
        assert first.state.status == "escalated"
        assert first.state.gone_since == now
        crash = decide(first.state, dead(now + EXIT_SETTLE), P)
        assert crash.state.status == "crashed"
        assert crash.events == ("crashed",)

    @pytest.mark.parametrize("status", ["running", "waiting", "crashed", "hung"])
    @pytest.mark.parametrize("answer", ["approve_requested", "deny_requested"])
    def test_answers_without_an_escalation_change_nothing(self, status, answer):
        now = T0 + 100
        state = running(status=status, resume_at=now + 50 if status != "running" else None)
        sig = alive(now)
        assert decide(state, dataclasses.replace(sig, **{answer: True}), P) == decide(state, sig, P)


# ============================================================================ verifying


class TestRulings:
    """Permission requests are answered only when the policy says so (RULE_REQUESTS): the
    task was running and stays running, or one of them escalates it."""

    def test_requests_of_a_running_agent_are_ruled_on_first(self):
        decision = decide(running(), alive(T0 + 5, requests=2), P)
        assert decision.actions == (A.RULE_REQUESTS,)
        assert decision.state.status == "running"

    def test_an_escalating_request_is_ruled_on_then_notified(self):
        decision = decide(running(), alive(T0 + 5, requests=1, escalate=ASK), P)
        assert decision.state.status == "escalated"
        assert decision.actions == (A.RULE_REQUESTS, A.NOTIFY)

    def test_no_requests_no_ruling(self):
        assert A.RULE_REQUESTS not in decide(running(), alive(T0 + 5), P).actions

    @pytest.mark.parametrize(
        ("state", "sig"),
        [
            (escalated(), alive(T0 + 5, requests=1)),  # one escalation at a time
            (waiting(), alive(T0 + 5, requests=1)),  # stopped for a limit
            (running(), alive(T0 + 5, requests=1, state_disk_full=True)),  # held
            (running(), alive(T0 + 5, requests=1, stop_requested=True)),  # being stopped
            (running(), alive(T0 + 5, requests=1, done=True, exit_code=0)),  # the run ended
            (running(), alive(T0 + 5, requests=1, limit=True)),  # a limit stops the run
            (running(stale_since=T0), alive(T0 + 100, output_age=90, requests=1)),  # hung
        ],
    )
    def test_requests_wait_while_the_run_is_not_going_on(self, state, sig):
        assert A.RULE_REQUESTS not in decide(state, sig, P).actions


class TestVerifying:
    """running + done exit 0 + [acceptance] -> verifying -> completed (PASS/FAIL)."""

    def test_exit_zero_with_acceptance_verifies(self):
        now = T0 + 100
        state = running(retry_count=1, stale_since=T0 + 60, gone_since=T0 + 99)
        sig = Signals(now, done=True, exit_code=0, has_acceptance=True)
        decision = decide(state, sig, P)
        assert decision.state == verifying(retry_count=1)
        assert decision.actions == (A.CLEANUP, A.ACCEPT)
        assert decision.events == ("verifying",)
        assert decision.next_check == P.base_interval
        assert decision.state.verdict is None

    @pytest.mark.parametrize("status", ["escalated", "crashed"])
    def test_from_other_live_states_too(self, status):
        state = running(status=status, escalation=ASK if status == "escalated" else None,
                        paused=status == "escalated")  # fmt: skip
        sig = Signals(T0 + 100, done=True, exit_code=0, has_acceptance=True)
        decision = decide(state, sig, P)
        assert decision.state == verifying()
        assert decision.actions == (A.CLEANUP, A.ACCEPT)

    def test_exit_nonzero_with_acceptance_fails_without_checking(self):
        sig = Signals(T0 + 100, done=True, exit_code=1, has_acceptance=True)
        decision = decide(running(), sig, P)
        assert decision.state == running(
            status="failed", exit_code=1, verdict="FAIL", failure_reason="exit_code"
        )
        assert decision.actions == END

    @pytest.mark.parametrize(("passed", "verdict"), [(True, "PASS"), (False, "FAIL")])
    def test_acceptance_result_completes(self, passed, verdict):
        state = verifying(retry_count=2)
        decision = decide(state, Signals(T0 + 200, acceptance=passed), P)
        assert decision.state == verifying(status="completed", retry_count=2, verdict=verdict)
        assert decision.actions == (A.FINISH, A.NOTIFY)
        assert decision.events == ("completed",)

    def test_acceptance_result_not_notified_when_not_selected(self):
        policy = with_notify(P, ["failed"])
        decision = decide(verifying(), Signals(T0 + 200, acceptance=False), policy)
        assert decision.actions == (A.FINISH,)

    def test_acceptance_running_waits(self):
        state = verifying()
        decision = decide(state, Signals(T0 + 200, acceptance_running=True), P)
        assert decision.state == state
        assert decision.actions == ()
        assert decision.events == ()
        assert decision.next_check == P.base_interval

    def test_acceptance_not_running_is_started_again(self):
        state = verifying()
        decision = decide(state, Signals(T0 + 200), P)
        assert decision.state == state
        assert decision.actions == (A.ACCEPT,)
        assert decision.events == ()

    @pytest.mark.parametrize("result", [None, True, False])
    def test_operator_stop_abandons(self, result):
        state = verifying()
        sig = Signals(T0 + 200, stop_requested=True, acceptance=result)
        decision = decide(state, sig, P)
        assert decision.state == verifying(
            status="abandoned", abandon_reason="stopped", verdict="ABANDONED"
        )
        assert decision.actions == STOP_END
        assert decision.events == ("abandoned",)

    def test_agent_signals_are_ignored_while_verifying(self):
        state = verifying()
        sig = Signals(
            T0 + 200, done=True, exit_code=3, agent_alive=False, session_alive=False,
            output_mtime=T0, limit=True, escalate=ASK, turn_ended=True, resume_requested=True,
            approve_requested=True, acceptance_running=True,
        )  # fmt: skip
        decision = decide(state, sig, P)
        assert decision.state == state
        assert decision.actions == ()
        assert decision.events == ()


# ============================================================================ turn ended


class TestTurnEnded:
    """Interactive agent finished its turn -> ask it to exit (/exit)."""

    def test_turn_ended_ends_the_session(self):
        state = running(retry_count=1)
        decision = decide(state, alive(T0 + 100, turn_ended=True), P)
        assert decision.state == state
        assert decision.actions == (A.END_SESSION,)
        assert decision.events == ()
        assert decision.next_check == 1.0

    def test_next_check_is_base_interval_when_shorter(self):
        policy = P.model_copy(update={"base_interval": 0.25})
        decision = decide(running(), alive(T0 + 100, turn_ended=True), policy)
        assert decision.next_check == 0.25

    def test_turn_ended_wins_over_stale_output(self):
        now = T0 + 500
        state = running(stale_since=now - 100)
        decision = decide(state, alive(now, output_age=400, turn_ended=True), P)
        assert decision.state == state
        assert decision.actions == (A.END_SESSION,)

    @pytest.mark.parametrize("agent_alive", [False, None])
    def test_needs_a_live_agent(self, agent_alive):
        now = T0 + 100
        sig = Signals(now, agent_alive=agent_alive, session_alive=False, turn_ended=True)
        decision = decide(running(), sig, P)
        assert A.END_SESSION not in decision.actions
        assert decision.state.gone_since == now

    def test_done_file_wins(self):
        decision = decide(running(), Signals(T0 + 9, done=True, exit_code=0, turn_ended=True), P)
        assert decision.state.status == "completed"
        assert decision.actions == END

    def test_escalation_wins(self):
        decision = decide(running(), alive(T0 + 9, escalate=ASK, turn_ended=True), P)
        assert decision.state.status == "escalated"
        assert A.END_SESSION not in decision.actions

    @pytest.mark.parametrize("state", [escalated(), waiting()], ids=["escalated", "waiting"])
    def test_only_while_running(self, state):
        decision = decide(state, alive(T0 + 100, turn_ended=True), P)
        assert decision.state == state
        assert decision.actions == ()


# ============================================================================ verdicts

VERDICT_CASES = {
    "done exit 0": (running(), Signals(T0 + 9, done=True, exit_code=0), "completed", "PASS"),
    "done exit 1": (running(), Signals(T0 + 9, done=True, exit_code=1), "failed", "FAIL"),
    "done no code": (running(), Signals(T0 + 9, done=True), "failed", "FAIL"),
    "acceptance pass": (verifying(), Signals(T0 + 9, acceptance=True), "completed", "PASS"),
    "acceptance fail": (verifying(), Signals(T0 + 9, acceptance=False), "completed", "FAIL"),
    "deadline": (running(), alive(DEADLINE), "abandoned", "TIMEOUT"),
    "deadline crashed": (
        running(status="crashed", resume_at=DEADLINE + 9),
        dead(DEADLINE),
        "abandoned",
        "TIMEOUT",
    ),
    "deadline waiting": (waiting(), dead(DEADLINE), "abandoned", "TIMEOUT"),
    "deadline escalated": (escalated(), alive(DEADLINE), "abandoned", "ESCALATE"),
    "stop running": (running(), alive(T0 + 9, stop_requested=True), "abandoned", "ABANDONED"),
    "stop escalated": (escalated(), alive(T0 + 9, stop_requested=True), "abandoned", "ESCALATE"),
    "deny paused": (
        escalated(paused=True),
        alive(T0 + 9, deny_requested=True),
        "abandoned",
        "ABANDONED",
    ),
    "max_retries": (
        running(retry_count=3, gone_since=T0 + 1),
        dead(T0 + 9),
        "abandoned",
        "ABANDONED",
    ),
    "tmux_lost": (
        running(retry_count=3, gone_since=T0 + 1),
        dead(T0 + 9, session_alive=False),
        "abandoned",
        "ABANDONED",
    ),
    "max_retries escalated": (
        escalated(retry_count=3, gone_since=T0 + 1),
        dead(T0 + 9),
        "abandoned",
        "ESCALATE",
    ),
}


@pytest.mark.parametrize("case", list(VERDICT_CASES))
def test_verdict_of_every_terminal_state(case):
    state, sig, status, verdict = VERDICT_CASES[case]
    decision = decide(state, sig, P)
    assert decision.state.status == status
    assert decision.state.verdict == verdict
    assert verdict in set(Verdict)


def test_stopped_queued_task_has_a_verdict():
    decision = decide(TaskState("queued"), Signals(T0, stop_requested=True), P)
    assert decision.state.status == "abandoned"
    assert decision.state.verdict == "ABANDONED"


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_terminal_states_keep_their_verdict(status):
    state = running(status=status, verdict="FAIL", exit_code=1)
    sig = Signals(T0 + 9, done=True, exit_code=0, acceptance=True, approve_requested=True)
    assert decide(state, sig, P).state == state


# ============================================================================ whole lives


def live(policy: MonitorPolicy, observe, start: float = T0, limit: int = 10_000):
    """Run a task's life from ``start``, checking whenever the decision asks, until
    terminal; ``observe(now, state)`` returns the Signals seen at ``now``."""
    state = TaskState("running", started_at=start, launched_at=start)
    now = start
    history: list[tuple[float, Decision]] = []
    for _ in range(limit):
        decision = decide(state, observe(now, state), policy)
        history.append((now, decision))
        state = decision.state
        if state.status in TERMINAL:
            return history
        now += decision.next_check
    raise AssertionError("the task never ended")


class TestLives:
    def test_429_on_three_runs_then_success(self):
        """Each limited run exits on its own; the engine resumes at the reset time; the
        fourth run finishes. No retry is counted, even with max_retries 0."""
        policy = P.model_copy(update={"max_retries": 0})
        runs = {"n": 0, "launched": T0}

        def observe(now, state):
            if state.launched_at != runs["launched"]:  # a resume: a new run
                runs["n"] += 1
                runs["launched"] = state.launched_at
            if now - state.launched_at < 5:
                return alive(now)
            if runs["n"] < 3:
                return Signals(now, agent_alive=False, limit=True, limit_resume_at=now + 600)
            return Signals(now, done=True, exit_code=0, agent_alive=False)

        history = live(policy, observe)
        names = [e for _, d in history for e in d.events]
        assert names == ["waiting", "resumed"] * 3 + ["completed"]
        final = history[-1][1].state
        assert (final.status, final.verdict, final.retry_count, final.limit_waits) == (
            "completed",
            "PASS",
            0,
            3,
        )

    def test_endless_limit_ends_at_the_deadline_with_timeout(self):
        policy = P.model_copy(update={"deadline": 2000.0, "max_retries": 1})
        history = live(policy, lambda now, state: alive(now, limit=True))
        final = history[-1][1].state
        assert final.status == "abandoned"
        assert final.abandon_reason == "deadline"
        assert final.verdict == "TIMEOUT"
        assert final.retry_count == 0
        waits = [d.state.resume_at - now for now, d in history if d.events == ("waiting",)]
        assert waits[:5] == [10, 20, 40, 80, 80]

    def test_escalation_with_stale_output_waits_for_the_deadline(self):
        policy = P.model_copy(update={"deadline": 3000.0})

        def observe(now, state):
            if now < T0 + 20:
                return alive(now)
            return alive(now, output_age=now - T0, escalate=ASK)  # silent from now on

        history = live(policy, observe)
        names = [e for _, d in history for e in d.events]
        assert names == ["escalated", "abandoned"]
        final = history[-1][1].state
        assert (final.abandon_reason, final.verdict) == ("deadline", "ESCALATE")


def past_deadline(state: TaskState, sig: Signals, policy: MonitorPolicy) -> bool:
    return state.started_at is not None and sig.now - state.started_at >= policy.deadline


def check_common(state: TaskState, sig: Signals, policy: MonitorPolicy, decision: Decision):
    """Invariants shared by every step of the agent-aware properties."""
    new = decision.state
    assert new.status in ALL_STATUSES
    assert decision.next_check > 0
    assert decision.reason and "\n" not in decision.reason
    notify = bool(decision.notified(policy.notify_on))
    assert (A.NOTIFY in decision.actions) == notify
    if notify:
        assert decision.actions[-1] is A.NOTIFY
    assert len(set(decision.actions)) == len(decision.actions)
    # retry_count never goes down and moves by at most one.
    assert state.retry_count <= new.retry_count <= state.retry_count + 1
    assert new.limit_waits in (state.limit_waits, state.limit_waits + 1)
    assert (new.limit_waits == state.limit_waits + 1) == ("waiting" in decision.events)
    # (d) every terminal decision carries a verdict; PASS only when completed.
    if new.status in TERMINAL and state.status not in TERMINAL and state.status != "queued":
        assert new.verdict in set(Verdict)
        if new.verdict == "PASS":
            assert new.status == "completed"
        if new.status == "failed":
            assert new.verdict == "FAIL"
        if new.status == "completed":
            assert new.verdict in ("PASS", "FAIL")
        if new.status == "abandoned":
            assert new.verdict in ("ESCALATE", "TIMEOUT", "ABANDONED")
            if state.status == "escalated" and new.abandon_reason != "denied":
                assert new.verdict == "ESCALATE"
            elif new.abandon_reason == "deadline":
                assert new.verdict == "TIMEOUT"
            else:
                assert new.verdict == "ABANDONED"
    elif new.status not in TERMINAL:
        assert new.verdict is None
    # Waiting and escalated tasks are never judged stale, hung or (waiting) crashed.
    if state.status in ("waiting", "escalated"):
        assert "stale" not in decision.events
        assert new.status != "hung"
    if state.status == "waiting":
        assert new.status in ("waiting", "running", "abandoned")
        assert new.abandon_reason in (None, "deadline", "stopped")


@given(
    state=task_states(tuple(s for s in ALL_STATUSES if s != "queued")),
    sig=signal_sets(),
    policy=policies(),
)
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_invariants_single_step(state, sig, policy):
    decision = decide(state, sig, policy)
    check_common(state, sig, policy, decision)
    assert decide(state, sig, policy) == decision  # pure and deterministic


@given(state=task_states(("waiting",)), sig=signal_sets(resume_requested=False), policy=policies())
@settings(max_examples=500, deadline=None)
def test_a_waiting_task_never_counts_a_retry(state, sig, policy):
    """(a) whatever happens to a waiting task (resume, deadline, done-file...), its
    retry_count stays; only an operator's resume counts."""
    decision = decide(state, sig, policy)
    assert decision.state.retry_count == state.retry_count
    assert decision.state.status in ("waiting", "running", "abandoned")
    if A.RESUME in decision.actions:
        assert tuple(a for a in decision.actions if a is not A.NOTIFY) == (A.RESUME,)
        assert decision.state.status == "running"
        assert decision.state.limit_waits == state.limit_waits
        assert state.resume_at is None or sig.now >= state.resume_at


@given(
    state=task_states(("running",)),
    sig=signal_sets(limit=True, exit_code=st.none() | st.integers(1, 255), resume_requested=False),
    policy=policies(),
)
@settings(max_examples=500, deadline=None)
def test_a_usage_limit_never_abandons_for_max_retries(state, sig, policy):
    """(b) a running task that hits a limit waits, whatever its retry_count; only the
    deadline or the operator can end it (also when the limited run left a done-file)."""
    decision = decide(state, sig, policy)
    new = decision.state
    assert new.abandon_reason not in ("max_retries", "tmux_lost")
    assert new.retry_count == state.retry_count
    if not past_deadline(state, sig, policy) and not sig.stop_requested:
        assert new.status == "waiting"
        assert decision.events == ("waiting",)
        assert decision.actions[0] is A.STOP_AGENT
        assert new.resume_at is not None and new.resume_at > sig.now
    else:
        assert new.status == "abandoned"
        assert new.abandon_reason in ("deadline", "stopped")


@given(
    state=task_states(("escalated",)),
    ages=st.lists(st.floats(0.0, 1e7), min_size=1, max_size=30),
    step=st.floats(0.0, 1e4),
    policy=policies(),
)
@settings(max_examples=500, deadline=None)
def test_escalated_never_goes_hung_however_stale(state, ages, step, policy):
    """(c) any amount of stale output, over any number of checks, while escalated."""
    policy = policy.model_copy(update={"deadline": 1e12})
    state = dataclasses.replace(state, gone_since=None)
    now = state.launched_at or T0
    for age in ages:
        now += step
        decision = decide(state, alive(now, output_age=age), policy)
        assert decision.state == state
        assert decision.actions == ()
        assert decision.events == ()
        state = decision.state


@given(
    state=task_states((*LIVE, "verifying")),
    sig=signal_sets(),
    policy=policies(),
)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_terminal_decision_has_a_verdict(state, sig, policy):
    """(d) verdict is a Verdict at every terminal decision; PASS only with completed."""
    decision = decide(state, sig, policy)
    new = decision.state
    if new.status in TERMINAL:
        assert new.verdict in set(Verdict)
        assert new.verdict != "PASS" or new.status == "completed"
    else:
        assert new.verdict is None


@given(
    state=task_states(("waiting", "escalated")),
    sig=signal_sets(done=False),
    past=st.floats(0.0, 1e6),
    policy=policies(),
)
@settings(max_examples=500, deadline=None)
@example(state=waiting(resume_at=None), sig=Signals(T0, approve_requested=True), past=0.0, policy=P)
def test_deadline_abandons_waiting_and_escalated(state, sig, past, policy):
    """(e) TIMEOUT for a waiting task, ESCALATE for an escalated one."""
    state = dataclasses.replace(state, started_at=T0)
    now = T0 + policy.deadline + past
    while now - T0 < policy.deadline:  # float rounding at epoch magnitudes
        now = math.nextafter(now, math.inf)
    sig = dataclasses.replace(sig, now=now)
    decision = decide(state, sig, policy)
    new = decision.state
    assert new.status == "abandoned"
    assert new.abandon_reason == "deadline"
    assert new.verdict == ("TIMEOUT" if state.status == "waiting" else "ESCALATE")
    assert decision.actions[:3] == STOP_END[:3]
    assert decision.events == ("abandoned",)
    assert new.retry_count == state.retry_count


@given(
    state=task_states(tuple(s for s in LIVE if s not in ("waiting", "hung"))),
    sig=signal_sets(done=True, exit_code=0, has_acceptance=True),
    policy=policies(),
)
@settings(max_examples=500, deadline=None)
def test_exit_zero_with_acceptance_always_verifies_first(state, sig, policy):
    """(f) a done-file with exit 0 and [acceptance] goes to verifying, never completed."""
    decision = decide(state, sig, policy)
    new = decision.state
    assert new.status == "verifying"
    assert new.exit_code == 0
    assert new.verdict is None
    assert new.retry_count == state.retry_count
    assert new.escalation is None and new.paused is False and new.resume_at is None
    assert decision.actions == (A.CLEANUP, A.ACCEPT)
    assert decision.events == ("verifying",)


@given(
    state=task_states(tuple(s for s in ALL_STATUSES if s != "escalated")),
    sig=signal_sets(approve_requested=False, deny_requested=False),
    approve=st.booleans(),
    deny=st.booleans(),
    policy=policies(),
)
@settings(max_examples=500, deadline=None)
def test_answers_without_an_escalation_are_ignored(state, sig, approve, deny, policy):
    """(g) approve/deny on a task that is not escalated changes nothing."""
    answered = dataclasses.replace(sig, approve_requested=approve, deny_requested=deny)
    decision = decide(state, answered, policy)
    assert decision == decide(state, sig, policy)
    assert not {A.ANSWER_APPROVE, A.ANSWER_DENY, A.CONTINUE_AGENT} & set(decision.actions)
    assert not {"approved", "denied"} & set(decision.events)


# One observation in a random life: how long until it, and what is seen.
observations = st.tuples(
    st.one_of(st.just(None), st.floats(0.0, 50.0), st.floats(0.0, 5000.0)),  # wait
    st.sampled_from([True, False, None]),  # agent_alive
    st.one_of(st.none(), st.floats(0.0, 200.0)),  # output age
    st.integers(0, 30),  # 0: the done-file appears
    st.sampled_from([0, 1, 137]),  # its exit code
    st.integers(0, 60),  # 0 stop, 1 resume, 2 approve, 3 deny (when operator)
    st.integers(0, 6),  # 0: a usage limit
    st.none() | st.floats(-100.0, 5000.0),  # its reset time, from now
    st.integers(0, 12),  # 0: an escalation, 1: a paused one
    st.integers(0, 8),  # 0: the interactive turn ended
    st.sampled_from([None, None, True, False]),  # the acceptance result
)


@given(
    policy=policies(),
    steps=st.lists(observations, min_size=1, max_size=80),
    operator=st.booleans(),
    has_acceptance=st.booleans(),
)
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_life_invariants(policy, steps, operator, has_acceptance):
    """Random lives through every new state: retry_count never decreases, a limit wait
    never counts, automatic resumes stay within max_retries, every end has a verdict."""
    state = TaskState("running", started_at=T0, launched_at=T0)
    now = T0
    counted = operator_resumes = waits = 0
    last_next = policy.base_interval
    for step in steps:
        wait, agent_alive, age, done_roll, code, op, limit_roll, reset, esc, turn, result = step
        now += last_next if wait is None else wait
        sig = Signals(
            now=now,
            done=done_roll == 0,
            exit_code=code,
            agent_alive=agent_alive,
            output_mtime=None if age is None else now - age,
            stop_requested=operator and op == 0,
            resume_requested=operator and op == 1,
            approve_requested=operator and op == 2,
            deny_requested=operator and op == 3,
            limit=limit_roll == 0,
            limit_resume_at=None if reset is None else now + reset,
            escalate=ASK if esc == 0 else BREAKER if esc == 1 else None,
            escalate_pause=esc == 1,
            has_acceptance=has_acceptance,
            acceptance=result,
            acceptance_running=result is None and done_roll % 2 == 1,
            turn_ended=turn == 0,
        )
        decision = decide(state, sig, policy)
        check_common(state, sig, policy, decision)
        new = decision.state
        if A.RESUME in decision.actions:
            by_operator = A.STOP_AGENT in decision.actions
            assert by_operator == sig.resume_requested
            if state.status != "waiting" or by_operator:
                counted += 1
            operator_resumes += by_operator
        waits += "waiting" in decision.events
        # Limit waits never count; everything else that resumes does.
        assert new.retry_count == counted
        assert new.limit_waits == waits
        assert new.retry_count <= policy.max_retries + operator_resumes
        if not operator:
            assert new.retry_count <= policy.max_retries
        gave_up = new.abandon_reason in ("max_retries", "tmux_lost")
        if new.status == "abandoned" and state.status not in TERMINAL and gave_up:
            assert state.status != "waiting"
            assert not (state.status == "running" and sig.limit)
            assert new.retry_count >= policy.max_retries
        if state.status in TERMINAL:
            assert new == state
        state, last_next = new, decision.next_check


@given(
    policy=policies(),
    steps=st.lists(
        st.tuples(
            st.floats(0.0, 3000.0),  # wait
            st.integers(0, 3),  # 0: a usage limit
            st.none() | st.floats(-10.0, 3000.0),  # its reset time
            st.booleans(),  # the limited run exited (done-file, exit 1)
        ),
        min_size=1,
        max_size=60,
    ),
)
@settings(max_examples=500, deadline=None)
def test_life_of_limits_never_counts_retries(policy, steps):
    """A healthy agent that keeps hitting usage limits: no retry is ever counted, and it
    is never abandoned for max_retries (even with max_retries 0)."""
    state = TaskState("running", started_at=T0, launched_at=T0)
    now = T0
    done_file = False  # the limited run's done-file stays until a resume clears it
    for wait, limit_roll, reset, exited in steps:
        now += wait
        limited = limit_roll == 0 and state.status == "running"
        if limited and exited:
            done_file = True
        sig = Signals(
            now=now,
            done=done_file,
            exit_code=1 if done_file else None,
            agent_alive=not done_file,
            output_mtime=now,
            limit=limited or done_file,
            limit_resume_at=None if reset is None else now + reset,
        )
        decision = decide(state, sig, policy)
        new = decision.state
        if A.RESUME in decision.actions:
            done_file = False
        assert new.retry_count == 0
        assert new.abandon_reason in (None, "deadline")
        assert new.status in ("running", "waiting", "abandoned")
        if new.status == "abandoned":
            assert new.verdict == "TIMEOUT"
            break
        state = new


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(state=task_states(), sig=signal_sets(state_disk_full=rare), policy=policies())
def test_rulings_exactly_when_the_run_goes_on(state, sig, policy):
    decision = decide(state, sig, policy)
    goes_on = decision.state.status in ("running", "escalated") and not {
        A.STOP_AGENT,
        A.RESUME,
        A.FINISH,
        A.CLEANUP,
    }.intersection(decision.actions)
    expected = (
        sig.requests > 0 and state.status == "running" and not sig.state_disk_full
        and goes_on
    )  # fmt: skip
    assert (A.RULE_REQUESTS in decision.actions) == expected
    if expected:
        assert decision.actions[0] is A.RULE_REQUESTS
