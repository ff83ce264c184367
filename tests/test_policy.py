"""Tests of the pure monitor policy (:mod:`supervisor.policy`): no I/O, explicit ``now``.

The rules come from the module docstring of :mod:`supervisor.policy` (the seed monitor's
three layers: done-file, liveness, output staleness; deadline; backoff; max_retries).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.policy_states import (
    LIVE,
    T0,
    A,
    P,
    check_common,
    opt_times,
    policies,
    task_states,
    times,
)

from supervisor.config import DEFAULT_NOTIFY_ON, MAX_SECONDS, MonitorPolicy
from supervisor.policy import (
    EXIT_SETTLE,
    MIN_CHECK,
    START_TIMEOUT,
    TERMINAL,
    Action,
    Decision,
    Signals,
    TaskState,
    backoff,
    decide,
)

END = (A.FINISH, A.CLEANUP, A.NOTIFY)
STOP_END = (A.STOP_AGENT, A.FINISH, A.CLEANUP, A.NOTIFY)


def running(**changes) -> TaskState:
    """A running task launched at T0 (its first launch)."""
    fields = {"status": "running", "started_at": T0, "launched_at": T0}
    fields.update(changes)
    return TaskState(**fields)


def alive(now: float, output_age: float = 0.0, **changes) -> Signals:
    """Signals of a live agent whose output was written ``output_age`` seconds ago."""
    return Signals(now=now, agent_alive=True, output_mtime=now - output_age, **changes)


def dead(now: float, **changes) -> Signals:
    return Signals(now=now, agent_alive=False, **changes)


# ============================================================================ layer 1


class TestDoneFile:
    def test_exit_zero_completes(self):
        state = running(retry_count=2)
        decision = decide(state, Signals(now=T0 + 100, done=True, exit_code=0), P)
        assert decision.state == TaskState(
            status="completed",
            started_at=T0,
            launched_at=T0,
            retry_count=2,
            exit_code=0,
            verdict="PASS",
        )
        assert decision.actions == END
        assert decision.events == ("completed",)
        assert decision.reason

    @pytest.mark.parametrize("code", [1, 2, 3, 42, 127, 130, 137, 143, 255, -1, -15])
    def test_nonzero_exit_fails(self, code):
        decision = decide(running(), Signals(now=T0 + 5, done=True, exit_code=code), P)
        assert decision.state.status == "failed"
        assert decision.state.exit_code == code
        assert decision.state.abandon_reason is None
        assert decision.actions == END
        assert decision.events == ("failed",)

    def test_done_without_exit_code_fails(self):
        # "the exit code decides completed (0) or failed (anything else)": unknown is not 0.
        decision = decide(running(), Signals(now=T0 + 5, done=True), P)
        assert decision.state.status == "failed"
        assert decision.actions == END
        assert decision.events == ("failed",)

    def test_done_clears_transient_fields(self):
        state = running(stale_since=T0 + 1, gone_since=T0 + 2, retry_count=1)
        decision = decide(state, Signals(now=T0 + 50, done=True, exit_code=0), P)
        assert decision.state.stale_since is None
        assert decision.state.gone_since is None
        assert decision.state.resume_at is None
        assert decision.state.retry_count == 1
        assert decision.state.started_at == T0
        assert decision.state.launched_at == T0

    # Each case: a state and signals that, without the done-file, would mean something else.
    DONE_WINS: ClassVar[dict[str, tuple[TaskState, dict]]] = {
        "dead agent, settle elapsed": (
            running(gone_since=T0 + 10),
            dict(now=T0 + 100, agent_alive=False),
        ),
        "dead agent, first sight": (running(), dict(now=T0 + 100, agent_alive=False)),
        "no pid file after START_TIMEOUT": (
            running(gone_since=T0 + START_TIMEOUT),
            dict(now=T0 + START_TIMEOUT + 10, agent_alive=None),
        ),
        "stale output, grace elapsed": (
            running(stale_since=T0 + 40),
            dict(now=T0 + 500, agent_alive=True, output_mtime=T0),
        ),
        "stale output, first sight": (
            running(),
            dict(now=T0 + 500, agent_alive=True, output_mtime=T0),
        ),
        "deadline passed": (running(), dict(now=T0 + P.deadline + 1, agent_alive=True)),
        "deadline exactly": (running(), dict(now=T0 + P.deadline, agent_alive=False)),
        "crashed, backoff pending": (
            TaskState("crashed", T0, T0, retry_count=1, resume_at=T0 + 1000),
            dict(now=T0 + 100, agent_alive=False),
        ),
        "crashed, backoff elapsed": (
            TaskState("crashed", T0, T0, retry_count=1, resume_at=T0 + 50),
            dict(now=T0 + 100, agent_alive=False),
        ),
        "crashed at max_retries": (
            TaskState("crashed", T0, T0, retry_count=3, resume_at=T0 + 50),
            dict(now=T0 + 100, agent_alive=False),
        ),
        "running at max_retries, dead": (
            running(retry_count=3, gone_since=T0 + 10),
            dict(now=T0 + 100, agent_alive=False),
        ),
        "crashed, deadline passed": (
            TaskState("crashed", T0, T0, retry_count=1, resume_at=T0 + 20_000),
            dict(now=T0 + 20_000, agent_alive=False),
        ),
    }

    @pytest.mark.parametrize("code", [0, 1])
    @pytest.mark.parametrize("case", list(DONE_WINS))
    def test_done_wins_over_everything(self, case, code):
        state, signal_fields = self.DONE_WINS[case]
        decision = decide(state, Signals(done=True, exit_code=code, **signal_fields), P)
        assert decision.state.status == ("completed" if code == 0 else "failed")
        assert decision.state.exit_code == code
        assert decision.state.retry_count == state.retry_count
        assert decision.state.resume_at is None
        assert decision.state.abandon_reason is None
        assert decision.actions == END
        assert decision.events == (decision.state.status,)

    # A hung task's agent was stopped by us: the real CLI answers SIGTERM with exit 143
    # (and a done-file), a generic agent may exit with any code. That is not the task's end.
    HUNG: ClassVar[dict[str, tuple[TaskState, dict]]] = {
        "hung, backoff pending": (
            TaskState("hung", T0, T0, retry_count=2, resume_at=T0 + 1000),
            dict(now=T0 + 100, agent_alive=False, output_mtime=T0),
        ),
        "hung, backoff elapsed": (
            TaskState("hung", T0, T0, retry_count=2, resume_at=T0 + 50),
            dict(now=T0 + 100, agent_alive=False, output_mtime=T0),
        ),
    }

    @pytest.mark.parametrize("code", [0, 1, 129, 143])
    @pytest.mark.parametrize("case", list(HUNG))
    def test_a_hung_agent_answering_our_stop_is_resumed_not_ended(self, case, code):
        state, signal_fields = self.HUNG[case]
        decision = decide(state, Signals(done=True, exit_code=code, **signal_fields), P)
        if state.resume_at > signal_fields["now"]:
            assert decision.state == state
            assert decision.actions == ()
        else:
            assert decision.state.status == "running"
            assert decision.state.retry_count == state.retry_count + 1
            assert decision.actions == (Action.RESUME,)
            assert decision.events == ("resumed",)


# ============================================================================ deadline


class TestDeadline:
    @pytest.mark.parametrize("past", [0.0, 0.001, 1.0, 5000.0])
    @pytest.mark.parametrize(
        "signals_for",
        [
            lambda now: alive(now),
            lambda now: alive(now, output_age=10_000),
            lambda now: dead(now),
            lambda now: Signals(now=now),
        ],
        ids=["healthy", "stale", "dead", "no-pid"],
    )
    def test_running_abandoned_at_deadline(self, past, signals_for):
        now = T0 + P.deadline + past
        state = running(retry_count=1, stale_since=now - 5)
        decision = decide(state, signals_for(now), P)
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "deadline"
        assert decision.state.retry_count == 1
        assert decision.state.resume_at is None
        assert decision.state.stale_since is None
        assert decision.actions == STOP_END
        assert decision.events == ("abandoned",)

    @pytest.mark.parametrize("status", ["crashed", "hung"])
    def test_crashed_or_hung_abandoned_at_deadline_even_with_backoff_pending(self, status):
        now = T0 + P.deadline
        state = TaskState(status, T0, T0 + 500, retry_count=2, resume_at=now + 30)
        decision = decide(state, dead(now), P)
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "deadline"
        assert decision.state.resume_at is None
        assert decision.state.retry_count == 2
        assert decision.actions == STOP_END

    @pytest.mark.parametrize("status", ["crashed", "hung"])
    def test_deadline_wins_over_due_resume(self, status):
        now = T0 + P.deadline + 1
        state = TaskState(status, T0, T0, retry_count=0, resume_at=now - 100)
        decision = decide(state, dead(now), P)
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "deadline"
        assert A.RESUME not in decision.actions
        assert decision.state.retry_count == 0

    def test_deadline_wins_over_crash(self):
        now = T0 + P.deadline
        decision = decide(running(gone_since=now - 10), dead(now), P)
        assert decision.state.abandon_reason == "deadline"

    def test_deadline_wins_over_max_retries(self):
        now = T0 + P.deadline
        decision = decide(running(retry_count=3, gone_since=now - 10), dead(now), P)
        assert decision.state.abandon_reason == "deadline"

    def test_just_before_deadline_is_not_abandoned(self):
        now = T0 + P.deadline - 0.5
        decision = decide(running(), alive(now), P)
        assert decision.state.status == "running"
        assert decision.actions == ()
        assert decision.next_check == pytest.approx(0.5)

    def test_deadline_counts_from_started_at_not_launched_at(self):
        now = T0 + P.deadline
        state = running(launched_at=now - 1, retry_count=2)
        decision = decide(state, alive(now), P)
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "deadline"

    def test_no_started_at_means_no_deadline(self):
        now = T0 + 100 * P.deadline
        state = TaskState("running", started_at=None, launched_at=now - 1)
        decision = decide(state, alive(now), P)
        assert decision.state.status == "running"
        assert decision.next_check == P.base_interval

    # next_check never points past the deadline -------------------------------------------

    def test_healthy_next_check_clipped_to_deadline(self):
        now = T0 + P.deadline - 3
        decision = decide(running(launched_at=now - 1), alive(now), P)
        assert decision.next_check == pytest.approx(3.0)

    def test_settle_next_check_clipped_to_deadline(self):
        now = T0 + P.deadline - 1
        decision = decide(running(), dead(now), P)
        assert decision.state.gone_since == now
        assert decision.next_check == pytest.approx(1.0)

    def test_crash_backoff_next_check_clipped_to_deadline(self):
        now = T0 + P.deadline - 7
        decision = decide(running(retry_count=2, gone_since=now - 5), dead(now), P)
        assert decision.state.status == "crashed"
        assert decision.state.resume_at == now + 40  # resume_at itself is not clipped
        assert decision.next_check == pytest.approx(7.0)

    def test_backoff_wait_next_check_clipped_to_deadline(self):
        now = T0 + P.deadline - 4
        state = TaskState("crashed", T0, T0, retry_count=1, resume_at=now + 60)
        decision = decide(state, dead(now), P)
        assert decision.state == state
        assert decision.next_check == pytest.approx(4.0)

    def test_grace_next_check_clipped_to_deadline(self):
        now = T0 + P.deadline - 2
        decision = decide(running(launched_at=T0), alive(now, output_age=1000), P)
        assert decision.events == ("stale",)
        assert decision.next_check == pytest.approx(2.0)

    def test_resume_next_check_clipped_to_deadline(self):
        now = T0 + P.deadline - 6
        state = TaskState("hung", T0, T0, retry_count=0, resume_at=now)
        decision = decide(state, alive(now), P)
        assert decision.actions == (A.RESUME,)
        assert decision.next_check == pytest.approx(6.0)

    def test_next_check_floor_is_min_check_right_before_deadline(self):
        # Less than MIN_CHECK before the deadline the delay is floored at MIN_CHECK: the
        # next check lands at most MIN_CHECK past the deadline (and then abandons).
        now = T0 + P.deadline - MIN_CHECK / 5
        decision = decide(running(launched_at=now - 1), alive(now), P)
        assert decision.state.status == "running"
        assert decision.next_check == MIN_CHECK
        later = decide(decision.state, alive(now + decision.next_check), P)
        assert later.state.abandon_reason == "deadline"


# ============================================================================ layer 2


class TestLiveness:
    def test_first_sight_of_dead_agent_only_records_gone_since(self):
        now = T0 + 50
        decision = decide(running(), dead(now), P)
        assert decision.state == running(gone_since=now)
        assert decision.actions == ()
        assert decision.events == ()
        assert decision.next_check == EXIT_SETTLE

    def test_still_settling(self):
        now = T0 + 50
        state = running(gone_since=now - 0.5)
        decision = decide(state, dead(now), P)
        assert decision.state == state
        assert decision.actions == ()
        assert decision.events == ()
        assert decision.next_check == pytest.approx(EXIT_SETTLE - 0.5)

    def test_settle_is_not_restarted_by_a_second_sighting(self):
        now = T0 + 50
        state = running(gone_since=now - 1)
        decision = decide(state, dead(now), P)
        assert decision.state.gone_since == now - 1

    @pytest.mark.parametrize(("retries", "wait"), [(0, 10.0), (1, 20.0), (2, 40.0)])
    def test_gone_after_settle_is_a_crash_with_backoff(self, retries, wait):
        now = T0 + 50
        state = running(retry_count=retries, gone_since=now - EXIT_SETTLE, stale_since=now - 3)
        decision = decide(state, dead(now), P)
        assert decision.state == TaskState(
            status="crashed",
            started_at=T0,
            launched_at=T0,
            retry_count=retries,
            resume_at=now + wait,
        )
        assert decision.actions == ()  # the agent is already gone: nothing to stop
        assert decision.events == ("crashed",)
        assert decision.next_check == wait

    def test_crash_backoff_is_capped(self):
        policy = MonitorPolicy(base_interval=10, max_interval=25, max_retries=10)
        now = T0 + 50
        decision = decide(running(retry_count=2, gone_since=now - 3), dead(now), policy)
        assert decision.state.resume_at == now + 25
        assert decision.next_check == 25

    def test_agent_back_alive_clears_gone_since(self):
        now = T0 + 50
        decision = decide(running(gone_since=now - 1), alive(now), P)
        assert decision.state == running()
        assert decision.actions == ()
        assert decision.events == ()
        assert decision.next_check == P.base_interval

    def test_agent_back_alive_after_settle_time_is_not_a_crash(self):
        now = T0 + 50
        decision = decide(running(gone_since=now - 100), alive(now), P)
        assert decision.state.status == "running"
        assert decision.state.gone_since is None

    def test_gone_then_back_then_gone_restarts_settle(self):
        t = T0 + 50
        d1 = decide(running(), dead(t), P)
        d2 = decide(d1.state, alive(t + 1), P)
        d3 = decide(d2.state, dead(t + 2.5), P)
        assert d3.state.status == "running"
        assert d3.state.gone_since == t + 2.5
        d4 = decide(d3.state, dead(t + 2.5 + EXIT_SETTLE - 0.01), P)
        assert d4.state.status == "running"
        d5 = decide(d4.state, dead(t + 2.5 + EXIT_SETTLE), P)
        assert d5.state.status == "crashed"

    @pytest.mark.parametrize("age", [0.0, 1.0, START_TIMEOUT / 2, START_TIMEOUT - 0.001])
    def test_no_pid_file_within_start_timeout_is_fine(self, age):
        now = T0 + age
        decision = decide(running(), Signals(now=now, output_mtime=None), P)
        assert decision.state == running()
        assert decision.actions == ()
        assert decision.events == ()

    def test_no_pid_file_within_start_timeout_clears_gone_since(self):
        now = T0 + 5
        decision = decide(running(gone_since=now - 1), Signals(now=now), P)
        assert decision.state.gone_since is None

    @pytest.mark.parametrize("age", [START_TIMEOUT, START_TIMEOUT + 0.001, 1000.0])
    def test_no_pid_file_after_start_timeout_is_gone(self, age):
        now = T0 + age
        decision = decide(running(), Signals(now=now, output_mtime=now), P)
        assert decision.state == running(gone_since=now)
        assert decision.actions == ()
        assert decision.next_check == EXIT_SETTLE
        crash = decide(decision.state, Signals(now=now + EXIT_SETTLE, output_mtime=now), P)
        assert crash.state.status == "crashed"
        assert crash.state.resume_at == now + EXIT_SETTLE + backoff(0, P)
        assert crash.events == ("crashed",)

    def test_start_timeout_counts_from_latest_launch(self):
        launched = T0 + 500  # a resume
        now = launched + START_TIMEOUT - 1
        state = running(launched_at=launched, retry_count=1)
        decision = decide(state, Signals(now=now), P)
        assert decision.state == state
        later = decide(state, Signals(now=launched + START_TIMEOUT), P)
        assert later.state.gone_since == launched + START_TIMEOUT

    def test_dead_wins_over_stale_output(self):
        now = T0 + 500
        decision = decide(running(), dead(now, output_mtime=T0), P)
        assert decision.state.gone_since == now
        assert decision.state.stale_since is None
        assert decision.events == ()

    def test_dead_with_grace_running_keeps_stale_since_until_crash(self):
        now = T0 + 500
        state = running(stale_since=now - 10)
        d1 = decide(state, dead(now, output_mtime=T0), P)
        assert d1.state.stale_since == now - 10
        assert d1.events == ()
        assert A.STOP_AGENT not in d1.actions
        d2 = decide(d1.state, dead(now + EXIT_SETTLE, output_mtime=T0), P)
        assert d2.state.status == "crashed"
        assert d2.state.stale_since is None
        assert d2.actions == ()


# ============================================================================ waiting


class TestCrashedHungWaiting:
    @pytest.mark.parametrize("status", ["crashed", "hung"])
    @pytest.mark.parametrize("remaining", [7.0, 0.5, 79.0])
    def test_before_resume_at_nothing_happens(self, status, remaining):
        now = T0 + 100
        state = TaskState(status, T0, T0, retry_count=1, resume_at=now + remaining)
        for signals in (dead(now), alive(now), alive(now, output_age=1e4), Signals(now=now)):
            decision = decide(state, signals, P)
            assert decision.state == state
            assert decision.actions == ()
            assert decision.events == ()
            assert decision.next_check == pytest.approx(remaining)

    def test_remaining_below_min_check_is_floored(self):
        now = T0 + 100
        state = TaskState("crashed", T0, T0, retry_count=1, resume_at=now + MIN_CHECK / 10)
        decision = decide(state, dead(now), P)
        assert decision.state == state
        assert decision.next_check == MIN_CHECK

    @pytest.mark.parametrize("status", ["crashed", "hung"])
    @pytest.mark.parametrize("late", [0.0, 0.001, 3.0, 1000.0])
    def test_at_or_after_resume_at_resumes(self, status, late):
        resume_at = T0 + 100
        now = resume_at + late
        state = TaskState(
            status, T0, T0, retry_count=1, resume_at=resume_at, stale_since=T0 + 1, gone_since=T0
        )
        decision = decide(state, dead(now), P)
        assert decision.state == TaskState(
            status="running", started_at=T0, launched_at=now, retry_count=2
        )
        assert decision.actions == (A.RESUME,)
        assert decision.events == ("resumed",)
        assert decision.next_check == P.base_interval

    def test_resume_without_resume_at_is_immediate(self):
        now = T0 + 100
        decision = decide(TaskState("crashed", T0, T0, retry_count=0), dead(now), P)
        assert decision.actions == (A.RESUME,)
        assert decision.state.retry_count == 1
        assert decision.state.launched_at == now

    def test_just_resumed_task_is_not_instantly_stale_or_gone(self):
        resume_at = T0 + 1000
        state = TaskState("hung", T0, T0, retry_count=0, resume_at=resume_at)
        resumed = decide(state, alive(resume_at, output_age=1000), P).state
        # The pane's output is old, and the new agent has no pid file yet.
        now = resume_at + P.base_interval
        decision = decide(resumed, Signals(now=now, output_mtime=T0), P)
        assert decision.state == resumed
        assert decision.events == ()
        assert decision.actions == ()


# ============================================================================ backoff


class TestBackoff:
    @pytest.mark.parametrize("n", range(11))
    def test_formula(self, n):
        policy = MonitorPolicy(base_interval=1.5, max_interval=1000.0)
        assert backoff(n, policy) == min(1.5 * 2**n, 1000.0)

    @pytest.mark.parametrize("n", range(11))
    def test_formula_defaults(self, n):
        policy = MonitorPolicy()  # seed: base 30, max 300
        assert backoff(n, policy) == min(30.0 * 2**n, 300.0)

    def test_seed_sequence(self):
        policy = MonitorPolicy(base_interval=30, max_interval=300)
        assert [backoff(n, policy) for n in range(6)] == [30, 60, 120, 240, 300, 300]

    def test_base_equals_max(self):
        policy = MonitorPolicy(base_interval=7, max_interval=7)
        assert [backoff(n, policy) for n in range(5)] == [7] * 5

    @pytest.mark.parametrize("n", [63, 64, 1023, 1024, 1025, 10**6, 10**18, 2**70, 10**100])
    def test_huge_retry_count_no_overflow(self, n):
        assert backoff(n, P) == P.max_interval

    def test_huge_retry_count_with_huge_max_is_finite(self):
        # The largest intervals a profile may declare (one year, config.MAX_SECONDS).
        policy = MonitorPolicy(base_interval=MAX_SECONDS, max_interval=MAX_SECONDS)
        value = backoff(10**9, policy)
        assert math.isfinite(value)
        assert 0 < value <= policy.max_interval

    @given(
        base=st.floats(0.1, 1e6),
        factor=st.floats(1.0, 1e6),
        n=st.integers(0, 10**30),
    )
    @settings(max_examples=300, deadline=None)
    def test_backoff_properties(self, base, factor, n):
        policy = MonitorPolicy(base_interval=base, max_interval=min(base * factor, MAX_SECONDS))
        value = backoff(n, policy)
        assert math.isfinite(value)
        assert base <= value <= policy.max_interval
        assert backoff(n + 1, policy) >= value
        if n <= 60:
            assert value == min(base * 2.0**n, policy.max_interval)

    def test_fresh_output_never_resets_retry_count(self):
        now = T0 + 500
        state = running(retry_count=2, launched_at=T0 + 400, stale_since=now - 5)
        decision = decide(state, alive(now, output_age=0), P)
        assert decision.state.retry_count == 2
        assert decision.state.stale_since is None
        assert decision.events == ("fresh",)
        healthy = decide(decision.state, alive(now + 10), P)
        assert healthy.state.retry_count == 2

    def test_backoff_grows_over_life_despite_healthy_stretches(self):
        # crash, resume, a long healthy stretch, crash again: the wait doubles.
        policy = MonitorPolicy(
            base_interval=10, max_interval=1000, deadline=1e6, stale_threshold=100, max_retries=5
        )
        state = running()
        t = T0 + 10
        waits = []
        for _ in range(3):
            state = decide(state, dead(t), policy).state
            t += EXIT_SETTLE
            crash = decide(state, dead(t), policy)
            assert crash.state.status == "crashed"
            waits.append(crash.state.resume_at - t)
            t = crash.state.resume_at
            state = decide(crash.state, dead(t), policy).state
            for _ in range(50):  # healthy, with fresh output
                t += 10
                healthy = decide(state, alive(t, output_age=1), policy)
                assert healthy.state.retry_count == state.retry_count
                state = healthy.state
        assert waits == [10, 20, 40]
        assert state.retry_count == 3


# ============================================================================ max_retries


class TestMaxRetries:
    def test_crash_at_max_retries_abandons(self):
        now = T0 + 500
        state = running(retry_count=3, launched_at=T0 + 400, gone_since=now - EXIT_SETTLE)
        decision = decide(state, dead(now), P)
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "max_retries"
        assert decision.state.retry_count == 3
        assert decision.state.resume_at is None
        assert decision.actions == STOP_END
        assert decision.events == ("abandoned",)

    def test_hang_at_max_retries_abandons(self):
        now = T0 + 500
        state = running(retry_count=3, launched_at=T0 + 100, stale_since=now - P.grace_period)
        decision = decide(state, alive(now, output_age=300), P)
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "max_retries"
        assert decision.state.stale_since is None
        assert decision.actions == STOP_END
        assert decision.events == ("abandoned",)

    def test_crash_below_max_retries_does_not_abandon(self):
        now = T0 + 500
        state = running(retry_count=2, gone_since=now - EXIT_SETTLE)
        decision = decide(state, dead(now), P)
        assert decision.state.status == "crashed"

    def test_crashed_at_max_retries_is_abandoned_not_resumed(self):
        # State table: "crashed/hung  retry_count >= max_retries  abandoned  stop, end".
        # Reachable when a task is re-adopted after a restart under a lower max_retries
        # (the engine re-merges profile + MONITOR_* env on adoption).
        now = T0 + 500
        state = TaskState("crashed", T0, T0, retry_count=P.max_retries, resume_at=now - 1)
        decision = decide(state, dead(now), P)
        assert A.RESUME not in decision.actions
        assert decision.state.retry_count == P.max_retries
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "max_retries"
        assert decision.actions == STOP_END

    def test_max_retries_zero_abandons_on_first_crash(self):
        policy = MonitorPolicy(base_interval=10, max_interval=80, max_retries=0)
        now = T0 + 50
        decision = decide(running(gone_since=now - EXIT_SETTLE), dead(now), policy)
        assert decision.state.abandon_reason == "max_retries"
        assert decision.actions == STOP_END

    def test_max_retries_zero_abandons_on_first_hang(self):
        policy = MonitorPolicy(
            base_interval=10, max_interval=80, max_retries=0, stale_threshold=30, grace_period=5
        )
        now = T0 + 100
        state = running(stale_since=now - 5)
        decision = decide(state, alive(now, output_age=100), policy)
        assert decision.state.abandon_reason == "max_retries"
        assert decision.actions == STOP_END


def live(
    policy: MonitorPolicy, observe, start: float = T0, limit: int = 10_000
) -> list[tuple[float, Decision]]:
    """Run a task's life: check at ``start``, then whenever the decision asks, until terminal.

    ``observe(now, state)`` returns the Signals seen at ``now``.
    """
    state = TaskState("running", started_at=start, launched_at=start)
    now = start
    history = []
    for _ in range(limit):
        decision = decide(state, observe(now, state), policy)
        history.append((now, decision))
        state = decision.state
        if state.status in TERMINAL:
            return history
        now += decision.next_check
    raise AssertionError("the task never ended")


def _transitions(history):
    """(now, event) for every event, plus the actions, in order."""
    events = [(now, e) for now, d in history for e in d.events]
    actions = [a for _, d in history for a in d.actions]
    return events, actions


class TestWholeLife:
    def test_crash_on_every_run(self):
        policy = MonitorPolicy(
            base_interval=10, max_interval=25, deadline=1e6, grace_period=20, max_retries=3
        )
        history = live(policy, lambda now, state: dead(now))
        events, actions = _transitions(history)
        assert actions.count(A.RESUME) == 3
        assert actions == [A.RESUME] * 3 + list(STOP_END)
        assert [e for _, e in events] == ["crashed", "resumed"] * 3 + ["abandoned"]
        final = history[-1][1].state
        assert final.status == "abandoned"
        assert final.abandon_reason == "max_retries"
        assert final.retry_count == 3
        # Waits between each crash and its resume: base, 2 base, 4 base capped at max.
        crash_times = [t for t, e in events if e == "crashed"]
        resume_times = [t for t, e in events if e == "resumed"]
        assert [r - c for c, r in zip(crash_times, resume_times, strict=True)] == [10, 20, 25]
        # Each crash is declared exactly EXIT_SETTLE after the agent was first seen gone.
        for (now, decision), (_, nxt) in itertools.pairwise(history):
            if nxt.events == ("crashed",):
                assert decision.state.gone_since == now
                assert decision.next_check == EXIT_SETTLE

    def test_crash_on_every_run_uncapped(self):
        policy = MonitorPolicy(base_interval=3, max_interval=1000, deadline=1e6, max_retries=5)
        history = live(policy, lambda now, state: dead(now))
        events, actions = _transitions(history)
        assert actions.count(A.RESUME) == 5
        crash_times = [t for t, e in events if e == "crashed"]
        resume_times = [t for t, e in events if e == "resumed"]
        waits = [r - c for c, r in zip(crash_times, resume_times, strict=True)]
        assert waits == [3, 6, 12, 24, 48]
        assert history[-1][1].state.abandon_reason == "max_retries"

    def test_hang_on_every_run(self):
        policy = MonitorPolicy(
            base_interval=10,
            max_interval=25,
            deadline=1e6,
            grace_period=20,
            stale_threshold=30,
            max_retries=3,
        )
        # The agent stays alive and prints once at T0 and never again.
        history = live(policy, lambda now, state: Signals(now, agent_alive=True, output_mtime=T0))
        events, actions = _transitions(history)
        names = [e for _, e in events]
        assert names == ["stale", "hung", "resumed"] * 3 + ["stale", "abandoned"]
        assert actions == [A.STOP_AGENT, A.RESUME] * 3 + list(STOP_END)
        final = history[-1][1].state
        assert (final.status, final.abandon_reason, final.retry_count) == (
            "abandoned",
            "max_retries",
            3,
        )
        hung_times = [t for t, e in events if e == "hung"]
        resume_times = [t for t, e in events if e == "resumed"]
        stale_times = [t for t, e in events if e == "stale"]
        assert [r - h for h, r in zip(hung_times, resume_times, strict=True)] == [10, 20, 25]
        # Grace: hung exactly grace_period after stale was first seen.
        for stale, hung in zip(stale_times, hung_times, strict=False):
            assert hung - stale == pytest.approx(policy.grace_period)
        # Staleness counts from the (re)launch: first stale strictly after launch + threshold.
        launches = [T0, *resume_times]
        for launch, stale in zip(launches, stale_times, strict=True):
            assert stale - launch > policy.stale_after
            assert stale - launch <= policy.stale_after + policy.base_interval

    def test_healthy_task_completes(self):
        def observe(now, state):
            if now >= T0 + 100:
                return Signals(now, done=True, exit_code=0, agent_alive=False)
            return alive(now, output_age=1)

        history = live(P, observe)
        events, actions = _transitions(history)
        assert [e for _, e in events] == ["completed"]
        assert actions == list(END)
        assert all(d.next_check == P.base_interval for _, d in history[:-1])

    def test_endless_healthy_task_is_abandoned_at_deadline(self):
        policy = MonitorPolicy(base_interval=7, max_interval=70, deadline=100)
        history = live(policy, lambda now, state: alive(now, output_age=0))
        last_now, last = history[-1]
        assert last.state.abandon_reason == "deadline"
        assert last.actions == STOP_END
        assert last_now == pytest.approx(T0 + 100)
        assert all(now < T0 + 100 for now, _ in history[:-1])


# ============================================================================ layer 3


class TestStaleness:
    def test_age_equal_to_threshold_is_not_stale(self):
        now = T0 + 500
        decision = decide(running(), alive(now, output_age=P.stale_after), P)
        assert decision.state == running()
        assert decision.events == ()

    def test_first_stale_check_starts_grace_only(self):
        now = T0 + 500
        decision = decide(running(), alive(now, output_age=P.stale_after + 0.5), P)
        assert decision.state == running(stale_since=now)
        assert decision.actions == ()
        assert decision.events == ("stale",)
        assert decision.next_check == min(P.base_interval, P.grace_period)

    def test_first_stale_next_check_is_grace_when_shorter_than_base(self):
        policy = MonitorPolicy(
            base_interval=10, max_interval=80, grace_period=4, stale_threshold=30
        )
        now = T0 + 500
        decision = decide(running(), alive(now, output_age=100), policy)
        assert decision.next_check == 4

    @pytest.mark.parametrize(("elapsed", "next_check"), [(0.0, 10.0), (10.0, 10.0), (15.0, 5.0)])
    def test_grace_running(self, elapsed, next_check):
        now = T0 + 500
        state = running(stale_since=now - elapsed)
        decision = decide(state, alive(now, output_age=100), P)
        assert decision.state == state
        assert decision.actions == ()
        assert decision.events == ()
        assert decision.next_check == pytest.approx(next_check)

    @pytest.mark.parametrize("extra", [0.0, 0.01, 500.0])
    @pytest.mark.parametrize(("retries", "wait"), [(0, 10.0), (1, 20.0), (2, 40.0)])
    def test_still_stale_after_grace_is_a_hang(self, extra, retries, wait):
        now = T0 + 800
        state = running(retry_count=retries, stale_since=now - P.grace_period - extra)
        decision = decide(state, alive(now, output_age=200), P)
        assert decision.state == TaskState(
            "hung", started_at=T0, launched_at=T0, retry_count=retries, resume_at=now + wait
        )
        assert decision.actions == (A.STOP_AGENT,)
        assert decision.events == ("hung",)
        assert decision.next_check == wait

    def test_fresh_output_during_grace_cancels_it(self):
        now = T0 + 500
        state = running(stale_since=now - 10, retry_count=1)
        decision = decide(state, alive(now, output_age=1), P)
        assert decision.state == running(retry_count=1)
        assert decision.actions == ()
        assert decision.events == ("fresh",)
        assert decision.next_check == P.base_interval

    def test_fresh_then_stale_again_restarts_grace(self):
        t = T0 + 500
        d1 = decide(running(), alive(t, output_age=100), P)
        d2 = decide(d1.state, alive(t + 10, output_age=0), P)
        assert d2.state.stale_since is None
        d3 = decide(d2.state, alive(t + 50, output_age=40), P)
        assert d3.state.stale_since == t + 50
        assert d3.events == ("stale",)
        d4 = decide(d3.state, alive(t + 50 + P.grace_period - 0.01, output_age=60), P)
        assert d4.state.status == "running"
        d5 = decide(d3.state, alive(t + 50 + P.grace_period, output_age=60), P)
        assert d5.state.status == "hung"

    def test_age_is_measured_from_launch_when_output_older(self):
        launched = T0 + 1000
        now = launched + 5
        state = running(launched_at=launched, retry_count=1)
        decision = decide(state, Signals(now, agent_alive=True, output_mtime=T0), P)
        assert decision.state == state
        assert decision.events == ()

    def test_age_from_launch_becomes_stale_after_threshold(self):
        launched = T0 + 1000
        now = launched + P.stale_after + 1
        state = running(launched_at=launched, retry_count=1)
        decision = decide(state, Signals(now, agent_alive=True, output_mtime=T0), P)
        assert decision.events == ("stale",)
        assert decision.state.stale_since == now

    def test_missing_output_log_counts_from_launch(self):
        now = T0 + 20
        state = running()
        assert decide(state, Signals(now, agent_alive=True), P).events == ()
        now = T0 + P.stale_after + 0.1
        assert decide(state, Signals(now, agent_alive=True), P).events == ("stale",)

    def test_output_newer_than_launch_is_used(self):
        now = T0 + 500
        state = running()
        decision = decide(state, Signals(now, agent_alive=True, output_mtime=now - 29), P)
        assert decision.events == ()
        decision = decide(state, Signals(now, agent_alive=True, output_mtime=now - 31), P)
        assert decision.events == ("stale",)

    def test_output_mtime_in_the_future_is_fresh(self):
        now = T0 + 500
        decision = decide(running(), Signals(now, agent_alive=True, output_mtime=now + 100), P)
        assert decision.events == ()
        assert decision.state == running()

    def test_default_stale_threshold_is_three_base_intervals(self):
        policy = MonitorPolicy(base_interval=10, max_interval=80)
        assert policy.stale_after == 30
        now = T0 + 500
        assert decide(running(), alive(now, output_age=30), policy).events == ()
        assert decide(running(), alive(now, output_age=30.1), policy).events == ("stale",)

    def test_zero_grace_period_still_skips_the_first_stale_check(self):
        policy = MonitorPolicy(
            base_interval=10, max_interval=80, grace_period=0, stale_threshold=30
        )
        now = T0 + 500
        first = decide(running(), alive(now, output_age=100), policy)
        assert first.actions == ()
        assert first.events == ("stale",)
        assert first.next_check == MIN_CHECK
        second = decide(first.state, alive(now + MIN_CHECK, output_age=100), policy)
        assert second.state.status == "hung"
        assert second.actions == (A.STOP_AGENT,)


# ============================================================================ no-ops


class TestNoOps:
    @pytest.mark.parametrize("status", ["completed", "failed", "abandoned", "queued"])
    @pytest.mark.parametrize(
        "signal_fields",
        [
            dict(done=True, exit_code=0),
            dict(done=True, exit_code=1),
            dict(agent_alive=False),
            dict(agent_alive=True, output_mtime=T0),
            dict(),
            dict(resume_requested=True),
            dict(resume_requested=True, agent_alive=False),
        ],
        ids=["done0", "done1", "dead", "stale", "none", "resume", "resume-dead"],
    )
    @pytest.mark.parametrize("offset", [1.0, 1e6])  # 1e6 s: long past the deadline
    def test_no_op(self, status, signal_fields, offset):
        state = TaskState(
            status,
            started_at=T0,
            launched_at=T0,
            retry_count=2,
            gone_since=T0,
            stale_since=T0,
            resume_at=T0 + 1,
            abandon_reason="deadline" if status == "abandoned" else None,
            exit_code=7 if status == "failed" else None,
        )
        decision = decide(state, Signals(now=T0 + offset, **signal_fields), P)
        assert decision.state == state
        assert decision.actions == ()
        assert decision.events == ()
        assert decision.next_check == P.base_interval

    @pytest.mark.parametrize("status", sorted(TERMINAL))
    def test_stop_request_on_terminal_is_a_no_op(self, status):
        state = TaskState(status, T0, T0, retry_count=1, abandon_reason=None, exit_code=0)
        decision = decide(state, Signals(now=T0 + 5, stop_requested=True), P)
        assert decision.state == state
        assert decision.actions == ()
        assert decision.events == ()


# ============================================================================ operator


class TestOperatorStop:
    @pytest.mark.parametrize(
        "state",
        [
            running(),
            running(stale_since=T0 + 1, gone_since=T0 + 2, retry_count=2),
            TaskState("crashed", T0, T0, retry_count=1, resume_at=T0 + 1000),
            TaskState("hung", T0, T0, retry_count=1, resume_at=T0 + 1),
        ],
        ids=["running", "running-grace-settle", "crashed-waiting", "hung-due"],
    )
    def test_stop_abandons_a_live_task(self, state):
        now = T0 + 100
        decision = decide(state, alive(now, stop_requested=True), P)
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "stopped"
        assert decision.state.retry_count == state.retry_count
        assert decision.state.resume_at is None
        assert decision.state.stale_since is None
        assert decision.actions == STOP_END
        assert decision.events == ("abandoned",)

    def test_stop_of_a_queued_task_only_finishes(self):
        state = TaskState("queued")
        decision = decide(state, Signals(now=T0, stop_requested=True), P)
        assert decision.state == TaskState(
            "abandoned", abandon_reason="stopped", verdict="ABANDONED"
        )
        # Nothing was launched: nothing to stop or clean up.
        assert decision.actions == (A.FINISH, A.NOTIFY)
        assert decision.events == ("abandoned",)

    @pytest.mark.parametrize("code", [0, 3])
    def test_done_wins_over_stop(self, code):
        now = T0 + 100
        signals = Signals(now, done=True, exit_code=code, stop_requested=True)
        decision = decide(running(), signals, P)
        assert decision.state.status == ("completed" if code == 0 else "failed")
        assert decision.actions == END

    def test_deadline_wins_over_stop(self):
        now = T0 + P.deadline
        decision = decide(running(), alive(now, stop_requested=True), P)
        assert decision.state.abandon_reason == "deadline"
        assert decision.actions == STOP_END

    def test_stop_wins_over_resume(self):
        now = T0 + 100
        signals = alive(now, stop_requested=True, resume_requested=True)
        decision = decide(running(), signals, P)
        assert decision.state.abandon_reason == "stopped"
        assert A.RESUME not in decision.actions

    def test_stop_wins_over_crash_and_hang(self):
        now = T0 + 500
        state = running(gone_since=now - 10, stale_since=now - 100)
        decision = decide(state, dead(now, stop_requested=True), P)
        assert decision.state.abandon_reason == "stopped"


class TestOperatorResume:
    @pytest.mark.parametrize(
        "state",
        [
            running(retry_count=0, stale_since=T0 + 1, gone_since=T0 + 2),
            TaskState("crashed", T0, T0, retry_count=1, resume_at=T0 + 1000),
            TaskState("hung", T0, T0, retry_count=2, resume_at=T0 + 1000, stale_since=T0),
        ],
        ids=["running", "crashed-waiting", "hung-waiting"],
    )
    def test_resume_request_resumes_now(self, state):
        now = T0 + 100
        decision = decide(state, dead(now, resume_requested=True), P)
        assert decision.state == TaskState(
            "running", started_at=T0, launched_at=now, retry_count=state.retry_count + 1
        )
        assert decision.actions == (A.STOP_AGENT, A.RESUME)
        assert decision.events == ("resumed",)
        assert decision.next_check == P.base_interval

    def test_resume_request_next_check_clipped_to_deadline(self):
        now = T0 + P.deadline - 3
        decision = decide(running(), alive(now, resume_requested=True), P)
        assert decision.next_check == pytest.approx(3.0)

    def test_done_wins_over_resume_request(self):
        now = T0 + 100
        signals = Signals(now, done=True, exit_code=0, resume_requested=True)
        decision = decide(running(), signals, P)
        assert decision.state.status == "completed"
        assert A.RESUME not in decision.actions

    def test_deadline_wins_over_resume_request(self):
        now = T0 + P.deadline
        decision = decide(running(), alive(now, resume_requested=True), P)
        assert decision.state.abandon_reason == "deadline"
        assert A.RESUME not in decision.actions

    def test_resume_request_counts_against_max_retries(self):
        # Operator resumes are counted in retry_count, like automatic ones: past the limit
        # the operator may still resume, but the next crash abandons.
        now = T0 + 100
        state = running(retry_count=P.max_retries)
        resumed = decide(state, alive(now, resume_requested=True), P)
        assert resumed.state.retry_count == P.max_retries + 1
        assert resumed.actions == (A.STOP_AGENT, A.RESUME)
        gone = decide(resumed.state, dead(now + 1), P)
        crash = decide(gone.state, dead(now + 1 + EXIT_SETTLE), P)
        assert crash.state.abandon_reason == "max_retries"


# ============================================================================ tmux session


class TestTmuxSession:
    def test_no_pid_and_session_gone_is_gone_at_once(self):
        now = T0 + 1  # well within START_TIMEOUT
        decision = decide(running(), Signals(now, session_alive=False), P)
        assert decision.state == running(gone_since=now)
        assert decision.actions == ()
        assert decision.events == ()
        assert decision.next_check == EXIT_SETTLE

    def test_no_pid_and_session_gone_after_settle_is_a_lost_session_crash(self):
        now = T0 + 10
        state = running(gone_since=now - EXIT_SETTLE, retry_count=1)
        decision = decide(state, Signals(now, session_alive=False), P)
        assert decision.state == TaskState(
            "crashed", T0, T0, retry_count=1, resume_at=now + 20, lost_session=True
        )
        assert decision.events == ("crashed",)
        assert decision.actions == ()

    def test_dead_agent_and_session_gone_is_a_lost_session_crash(self):
        now = T0 + 100
        state = running(gone_since=now - EXIT_SETTLE)
        decision = decide(state, dead(now, session_alive=False), P)
        assert decision.state.status == "crashed"
        assert decision.state.lost_session is True

    @pytest.mark.parametrize("session_alive", [True, None])
    def test_dead_agent_with_session_is_a_plain_crash(self, session_alive):
        now = T0 + 100
        state = running(gone_since=now - EXIT_SETTLE, lost_session=True)  # earlier loss
        decision = decide(state, dead(now, session_alive=session_alive), P)
        assert decision.state.status == "crashed"
        assert decision.state.lost_session is False

    def test_live_pid_wins_over_missing_session(self):
        # Layer 2: only "no pid file and no session" counts as gone; a live PID is alive.
        now = T0 + 100
        decision = decide(running(), alive(now, session_alive=False), P)
        assert decision.state == running()
        assert decision.events == ()

    def test_no_pid_session_alive_waits_for_start_timeout(self):
        now = T0 + START_TIMEOUT - 1
        decision = decide(running(), Signals(now, session_alive=True), P)
        assert decision.state == running()
        later = decide(running(), Signals(T0 + START_TIMEOUT, session_alive=True), P)
        assert later.state.gone_since == T0 + START_TIMEOUT

    def test_lost_session_crash_at_max_retries_abandons_as_tmux_lost(self):
        now = T0 + 100
        state = running(retry_count=3, gone_since=now - EXIT_SETTLE)
        decision = decide(state, dead(now, session_alive=False), P)
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "tmux_lost"
        assert decision.actions == STOP_END
        assert decision.events == ("abandoned",)

    def test_plain_crash_at_max_retries_after_an_earlier_loss_is_max_retries(self):
        now = T0 + 100
        state = running(retry_count=3, gone_since=now - EXIT_SETTLE, lost_session=True)
        decision = decide(state, dead(now, session_alive=True), P)
        assert decision.state.abandon_reason == "max_retries"

    def test_hang_at_max_retries_after_an_earlier_loss_is_max_retries(self):
        # The state table: "(reason tmux_lost if the session was gone, else max_retries)";
        # abandon_reason: tmux_lost only "when the last failure was a lost tmux session".
        # Here the last failure is a hang with a live agent in a live session.
        now = T0 + 500
        state = running(
            retry_count=3, launched_at=T0 + 100, stale_since=now - 20, lost_session=True
        )
        decision = decide(state, alive(now, output_age=300, session_alive=True), P)
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "max_retries"

    def test_crashed_with_lost_session_beyond_lowered_max_retries_is_tmux_lost(self):
        now = T0 + 100
        state = TaskState("crashed", T0, T0, retry_count=3, resume_at=now, lost_session=True)
        decision = decide(state, dead(now, session_alive=False), P)
        assert decision.state.abandon_reason == "tmux_lost"
        assert decision.actions == STOP_END

    @pytest.mark.parametrize("code", [0, 1])
    def test_done_wins_over_lost_session(self, code):
        now = T0 + 100
        state = running(gone_since=now - 10, retry_count=3)
        signals = Signals(now, done=True, exit_code=code, session_alive=False)
        decision = decide(state, signals, P)
        assert decision.state.status == ("completed" if code == 0 else "failed")
        assert decision.actions == END

    def test_session_lost_on_every_run(self):
        policy = MonitorPolicy(base_interval=10, max_interval=25, deadline=1e6, max_retries=3)
        history = live(policy, lambda now, state: Signals(now, session_alive=False))
        events, actions = _transitions(history)
        assert [e for _, e in events] == ["crashed", "resumed"] * 3 + ["abandoned"]
        assert actions == [A.RESUME] * 3 + list(STOP_END)
        final = history[-1][1].state
        assert (final.abandon_reason, final.retry_count) == ("tmux_lost", 3)


# ============================================================================ notify_on


class TestNotifyOn:
    def test_default_notifies_terminal_events_and_those_needing_a_human(self):
        assert tuple(MonitorPolicy().notify_on) == DEFAULT_NOTIFY_ON
        # issue 14: waiting is opt-in (it is notified once per limit when chosen)
        assert DEFAULT_NOTIFY_ON == ("escalated", "failed", "abandoned", "completed")

    @pytest.mark.parametrize(
        ("state", "signals", "events", "actions"),
        [
            (running(), Signals(T0 + 9, done=True, exit_code=0), ("completed",), END[:-1]),
            (running(), Signals(T0 + 9, done=True, exit_code=2), ("failed",), END[:-1]),
            (running(), alive(T0 + P.deadline), ("abandoned",), STOP_END[:-1]),
            (running(gone_since=T0 + 5), dead(T0 + 9), ("crashed",), ()),
            (running(), alive(T0 + 99, output_age=99), ("stale",), ()),
            (
                running(stale_since=T0 + 50),
                alive(T0 + 99, output_age=99),
                ("hung",),
                (A.STOP_AGENT,),
            ),
            (TaskState("hung", T0, T0, resume_at=T0), alive(T0 + 9), ("resumed",), (A.RESUME,)),
            (running(stale_since=T0 + 50), alive(T0 + 60), ("fresh",), ()),
        ],
        ids=["completed", "failed", "abandoned", "crashed", "stale", "hung", "resumed", "fresh"],
    )
    @pytest.mark.parametrize(
        "notify_on",
        [[], ["completed"], ["crashed", "hung"], ["stale", "resumed", "abandoned", "failed"]],
    )
    def test_notify_exactly_for_selected_events(self, state, signals, events, actions, notify_on):
        policy = P.model_copy(update={"notify_on": notify_on})
        decision = decide(state, signals, policy)
        assert decision.events == events
        wanted = any(event in notify_on for event in events)
        assert decision.actions == ((*actions, A.NOTIFY) if wanted else actions)

    def test_no_events_no_notify_even_with_every_event_selected(self):
        every = ["completed", "failed", "abandoned", "crashed", "hung", "resumed", "stale"]
        policy = P.model_copy(update={"notify_on": every})
        decision = decide(running(), alive(T0 + 9), policy)
        assert decision.events == ()
        assert decision.actions == ()


states = task_states()

signals = st.builds(
    Signals,
    now=times,
    done=st.booleans(),
    exit_code=st.none() | st.integers(-255, 255),
    agent_alive=st.none() | st.booleans(),
    output_mtime=opt_times,
    stop_requested=st.booleans(),
    resume_requested=st.booleans(),
    session_alive=st.none() | st.booleans(),
)


def check_decision(state: TaskState, sig: Signals, policy: MonitorPolicy, decision: Decision):
    """Every invariant of one step (shared by the single-step and the life properties)."""
    new, actions = decision.state, decision.actions
    queued_stop = state.status == "queued" and sig.stop_requested
    noop = state.status in TERMINAL or (state.status == "queued" and not queued_stop)
    live = state.status in LIVE
    body = check_common(state, policy, decision, noop)

    # (d) terminal (and queued, unless stopped) states never change.
    if noop:
        assert new == state
        assert actions == ()
        assert decision.events == ()
        return
    if queued_stop:
        assert new == dataclasses.replace(
            state, status="abandoned", abandon_reason="stopped", verdict="ABANDONED"
        )
        assert body == (A.FINISH,)
        assert decision.events == ("abandoned",)
        return
    assert live

    # (a) the done-file wins over everything, except in a hung task, where it is the
    # agent's answer to our own stop.
    if sig.done and state.status != "hung":
        assert new.status in ("completed", "failed")
        assert new.status == ("completed" if sig.exit_code == 0 else "failed")
        if sig.exit_code is not None:
            assert new.exit_code == sig.exit_code
        assert body == END[:-1]
        assert decision.events == (new.status,)
        assert new.retry_count == state.retry_count
        assert new.resume_at is None
        return
    assert new.status not in ("completed", "failed")

    deadline_passed = state.started_at is not None and sig.now - state.started_at >= policy.deadline
    operator_resume = sig.resume_requested and not sig.stop_requested and not deadline_passed

    # (c) retry_count: never down, at most +1, +1 exactly with RESUME.
    assert state.retry_count <= new.retry_count <= state.retry_count + 1
    assert (new.retry_count == state.retry_count + 1) == (A.RESUME in actions)

    # (e) RESUME only from crashed/hung (or on the operator's request), to running, now.
    if A.RESUME in actions:
        assert new.status == "running"
        assert new.launched_at == sig.now
        assert new.resume_at is None
        assert new.stale_since is None and new.gone_since is None
        assert decision.events == ("resumed",)
        if operator_resume:
            assert body == (A.STOP_AGENT, A.RESUME)
        else:
            assert state.status in ("crashed", "hung")
            assert body == (A.RESUME,)
            assert state.resume_at is None or sig.now >= state.resume_at
            assert state.retry_count < policy.max_retries
    elif operator_resume:
        raise AssertionError("an operator resume request was ignored")

    # Terminal results end the task; live ones never do.
    if new.status in TERMINAL:
        assert body[-2:] == (A.FINISH, A.CLEANUP)
    else:
        assert A.FINISH not in actions and A.CLEANUP not in actions

    # Abandonment: the three documented reasons, in priority order, stopping the agent.
    if new.status == "abandoned":
        assert body == STOP_END[:-1]
        assert decision.events == ("abandoned",)
        assert new.resume_at is None
        assert new.retry_count == state.retry_count
        if deadline_passed:
            assert new.abandon_reason == "deadline"
        elif sig.stop_requested:
            assert new.abandon_reason == "stopped"
        else:
            assert new.abandon_reason in ("max_retries", "tmux_lost")
            assert state.retry_count >= policy.max_retries
            if state.status == "crashed":
                assert (new.abandon_reason == "tmux_lost") == state.lost_session
            elif state.status == "running":
                # tmux_lost exactly when this failure is a crash with the session gone: a
                # hang (agent alive) is never reported as a lost session.
                session_lost_crash = sig.agent_alive is not True and sig.session_alive is False
                assert (new.abandon_reason == "tmux_lost") == session_lost_crash
    else:
        assert not deadline_passed
        assert not sig.stop_requested

    # crashed / hung carry a resume_at exactly one backoff away.
    if new.status == "crashed" and state.status == "running":
        assert new.lost_session == (sig.session_alive is False)
    if new.status in ("crashed", "hung") and state.status == "running":
        assert new.resume_at == sig.now + backoff(state.retry_count, policy)
        assert decision.events == (new.status,)
        assert state.retry_count < policy.max_retries
        assert body == ((A.STOP_AGENT,) if new.status == "hung" else ())
    if A.STOP_AGENT in actions:
        assert new.status in ("hung", "abandoned") or operator_resume

    # next_check never points past the deadline (up to the MIN_CHECK floor).
    if new.status not in TERMINAL and state.started_at is not None:
        end = state.started_at + policy.deadline
        remaining = end - sig.now
        if remaining >= MIN_CHECK:
            tolerance = 4 * math.ulp(abs(end) + abs(sig.now))  # float rounding only
            assert sig.now + decision.next_check <= end + tolerance
        else:
            assert decision.next_check == MIN_CHECK


@given(state=states, sig=signals, policy=policies())
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_invariants_single_step(state, sig, policy):
    decision = decide(state, sig, policy)
    check_decision(state, sig, policy, decision)
    assert decide(state, sig, policy) == decision  # pure and deterministic


@given(state=states, sig=signals, policy=policies())
@settings(max_examples=1000, deadline=None)
def test_done_never_resumes_or_stops(state, sig, policy):
    sig = dataclasses.replace(sig, done=True)
    decision = decide(state, sig, policy)
    if state.status == "hung":  # we stopped it: its done-file answers that stop
        assert decision.state.status in ("hung", "running", "abandoned")
        stops_ok = decision.state.status == "abandoned" or sig.resume_requested
        assert A.STOP_AGENT not in decision.actions or stops_ok
        return
    if state.status in LIVE:
        assert decision.state.status in ("completed", "failed")
    elif state.status == "queued" and sig.stop_requested:
        assert decision.state.status == "abandoned"
    else:
        assert decision.state == state
    assert decision.state.status not in ("crashed", "hung") or decision.state == state
    assert A.RESUME not in decision.actions
    assert A.STOP_AGENT not in decision.actions


@given(
    state=task_states(sorted(TERMINAL)),
    sig=signals,
    policy=policies(),
)
@settings(max_examples=500, deadline=None)
def test_terminal_never_changes(state, sig, policy):
    decision = decide(state, sig, policy)
    assert decision.state == state
    assert decision.actions == ()
    assert decision.events == ()


# One observation of the life property: how long until it, and what is seen.
observations = st.tuples(
    st.one_of(
        st.just(None),  # None: check exactly when the decision asked
        st.floats(0.0, 50.0),
        st.floats(0.0, 5000.0),
    ),
    st.sampled_from([True, False, None]),  # agent_alive
    st.one_of(st.none(), st.floats(0.0, 200.0)),  # output age; None = no output.log
    st.integers(0, 40),  # 0: the done-file appears
    st.sampled_from([0, 1, 137]),  # exit code written with done
    st.integers(0, 60),  # 0: operator stop, 1: operator resume
)


@given(
    policy=policies(),
    steps=st.lists(observations, min_size=1, max_size=120),
    operator=st.booleans(),
)
@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_life_invariants(policy, steps, operator):
    state = TaskState("running", started_at=T0, launched_at=T0)
    now = T0
    resumes = operator_resumes = 0
    last_next = policy.base_interval
    for wait, agent_alive, age, done_roll, code, operator_roll in steps:
        now += last_next if wait is None else wait
        sig = Signals(
            now=now,
            done=done_roll == 0,
            exit_code=code,
            agent_alive=agent_alive,
            output_mtime=None if age is None else now - age,
            stop_requested=operator and operator_roll == 0,
            resume_requested=operator and operator_roll == 1,
        )
        decision = decide(state, sig, policy)
        check_decision(state, sig, policy, decision)
        new = decision.state
        if A.RESUME in decision.actions:
            resumes += 1
            operator_resumes += sig.resume_requested
        assert new.retry_count == resumes
        # Automatic resumes never go past max_retries; only the operator may.
        assert new.retry_count <= policy.max_retries + operator_resumes
        if not operator:
            assert new.retry_count <= policy.max_retries
        if (
            state.status not in TERMINAL
            and new.status == "abandoned"
            and new.abandon_reason in ("max_retries", "tmux_lost")
        ):
            assert new.retry_count >= policy.max_retries
            if not operator:
                assert new.retry_count == policy.max_retries
        if state.status in TERMINAL:
            assert new == state
        state, last_next = new, decision.next_check


@given(policy=policies())
@settings(max_examples=300, deadline=None)
def test_life_crash_loop_resumes_exactly_max_retries_times(policy):
    """Agent dies at random moments on every run; follow next_check; deadline out of reach."""
    policy = policy.model_copy(update={"deadline": 1e12})
    state = TaskState("running", started_at=T0, launched_at=T0)
    now = T0
    waits = []
    crashed_at = None
    for _ in range(10_000):
        decision = decide(state, dead(now), policy)
        if decision.events == ("crashed",):
            crashed_at = now
        if decision.events == ("resumed",):
            waits.append(now - crashed_at)
        state = decision.state
        if state.status in TERMINAL:
            break
        now += decision.next_check
    assert state.status == "abandoned"
    assert state.abandon_reason == "max_retries"
    assert state.retry_count == policy.max_retries
    assert len(waits) == policy.max_retries
    for n, wait in enumerate(waits):
        expected = max(backoff(n, policy), MIN_CHECK)  # checks are never closer than that
        assert wait == pytest.approx(expected, rel=1e-9, abs=1e-6)


def test_healthy_check_is_due_when_output_would_turn_stale() -> None:
    """With base_interval 30 and stale_threshold 5, a quiet agent is looked at again just
    after its output turns stale, not 30 s later (issue 5: hang acted on within
    stale_threshold + grace_period + 1 s)."""
    policy = MonitorPolicy(base_interval=30, max_interval=300, stale_threshold=5, grace_period=2)
    t0 = 1_700_000_000.0
    state = TaskState("running", started_at=t0, launched_at=t0)
    decision = decide(state, Signals(now=t0 + 1, agent_alive=True, output_mtime=t0 + 0.5), policy)
    assert decision.reason == "healthy"
    assert decision.next_check == pytest.approx(4.5 + 0.01)
    # Fresh output keeps the full base interval when staleness is further away.
    busy = MonitorPolicy(base_interval=1, max_interval=10, stale_threshold=5)
    decision = decide(state, Signals(now=t0 + 1, agent_alive=True, output_mtime=t0 + 1), busy)
    assert decision.next_check == 1


def test_recorded_exit_without_done_file_is_a_crash_at_once() -> None:
    """The wrapper wrote exit_code (a signal death) but no done-file: no settle wait."""
    policy = MonitorPolicy(base_interval=30, max_interval=300)
    t0 = 1_700_000_000.0
    state = TaskState("running", started_at=t0, launched_at=t0)
    signals = Signals(now=t0 + 5, agent_alive=False, exit_code=137, signal=9, output_mtime=t0 + 4)
    decision = decide(state, signals, policy)
    assert decision.state.status == "crashed"
    assert decision.events == ("crashed",)
    assert decision.state.resume_at == pytest.approx(t0 + 5 + 30)
    # An exit code with no done-file *yet* is a normal exit being recorded (the wrapper
    # writes exit_code, then done): only the settle wait, never a crash on the spot.
    for code in (None, 0, 3):
        seen = Signals(now=t0 + 5, agent_alive=False, exit_code=code, output_mtime=t0 + 4)
        gone = decide(state, seen, policy)
        assert gone.state.status == "running" and gone.state.gone_since == t0 + 5
    # A resume exit code never gets a done-file: a crash at once.
    resumable = MonitorPolicy(base_interval=30, max_interval=300, resume_exit_codes=[75])
    seen = Signals(now=t0 + 5, agent_alive=False, exit_code=75, output_mtime=t0 + 4)
    assert decide(state, seen, resumable).state.status == "crashed"
