"""Pure policy rows of issue 14: ``waiting`` notified once per limit (not per retry cycle),
and the budget (``max_cost_usd``): no resume once the spend reaches it, the task ends
``abandoned`` with reason ``budget``. Style of tests/test_policy_agent.py (explicit ``now``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from support.policy_agent_states import policies, signal_sets, task_states

from supervisor.config import MonitorPolicy
from supervisor.policy import Action, Signals, TaskState, decide

A = Action
T0 = 1_700_000_000.0
P = MonitorPolicy(
    base_interval=10.0, max_interval=80.0, deadline=100_000.0, grace_period=20.0,
    stale_threshold=30.0, max_retries=3,
    notify_on=["escalated", "failed", "abandoned", "completed", "waiting"],
)  # fmt: skip


def running(**changes: object) -> TaskState:
    fields: dict[str, object] = {"status": "running", "started_at": T0, "launched_at": T0}
    fields.update(changes)
    return TaskState(**fields)  # type: ignore[arg-type]


def limited(now: float) -> Signals:
    return Signals(now=now, agent_alive=True, output_mtime=now, limit=True)


def transient(now: float) -> Signals:
    return Signals(now=now, done=True, exit_code=1, agent_alive=False, failure="transient")


# ============================================================================ waiting


class TestWaitingOncePerLimit:
    def test_a_limit_that_comes_back_at_once_is_not_notified_again(self) -> None:
        first = decide(running(), limited(T0 + 5), P)
        assert first.events == ("waiting",) and A.NOTIFY in first.actions
        due = first.state.resume_at
        assert due is not None
        resumed = decide(first.state, Signals(now=due, agent_alive=False), P)
        assert resumed.events == ("resumed",) and resumed.state.status == "running"
        again = decide(resumed.state, limited(due + 3), P)
        assert again.events == ("waiting",)  # logged
        assert A.NOTIFY not in again.actions and again.quiet == ("waiting",)
        assert again.notified(P.notify_on) == []

    def test_a_run_that_got_past_the_limit_notifies_the_next_one(self) -> None:
        state = running(limit_waits=1, launched_at=T0 + 1000)
        late = decide(state, limited(T0 + 1000 + P.max_interval), P)
        assert A.NOTIFY in late.actions and late.quiet == ()

    def test_transient_waits_follow_the_same_rule(self) -> None:
        first = decide(running(), transient(T0 + 5), P)
        assert first.events == ("waiting",) and A.NOTIFY in first.actions
        again = decide(running(transient_waits=1, launched_at=T0 + 40), transient(T0 + 50), P)
        assert again.events == ("waiting",) and A.NOTIFY not in again.actions

    @given(
        waits=st.integers(0, 5),
        transients=st.integers(0, 5),
        age=st.floats(0, 1000),
        kind=st.sampled_from(["limit", "transient"]),
    )
    def test_notified_exactly_on_a_first_wait_or_after_a_long_run(
        self, waits: int, transients: int, age: float, kind: str
    ) -> None:
        now = T0 + 5000
        state = running(limit_waits=waits, transient_waits=transients, launched_at=now - age)
        signals = limited(now) if kind == "limit" else transient(now)
        decision = decide(state, signals, P)
        assert decision.events == ("waiting",)
        expected = waits + transients == 0 or age >= P.max_interval
        assert (A.NOTIFY in decision.actions) == expected
        assert ("waiting" in decision.quiet) == (not expected)


# ============================================================================ budget

BUDGET = 0.5
LIVE_STATUSES = ("running", "crashed", "hung", "waiting", "escalated", "verifying")
RESUMING = ("crashed", "hung", "waiting")


def budgeted(policy: MonitorPolicy, limit: float | None = BUDGET) -> MonitorPolicy:
    return policy.model_copy(update={"max_cost_usd": limit})


class TestBudget:
    def test_a_crash_over_budget_is_abandoned_not_resumed(self) -> None:
        state = running(gone_since=T0 + 5)
        spent = Signals(now=T0 + 9, agent_alive=False, spent_usd=0.51)
        decision = decide(state, spent, budgeted(P))
        assert decision.state.status == "abandoned"
        assert decision.state.abandon_reason == "budget"
        assert decision.state.verdict == "ABANDONED"
        assert decision.events == ("abandoned",)
        assert A.RESUME not in decision.actions and A.NOTIFY in decision.actions
        assert "0.51 USD of max_cost_usd 0.5" in decision.reason
        # under the budget the same crash is resumed later, as without one
        cheap = decide(state, Signals(now=T0 + 9, agent_alive=False, spent_usd=0.49), budgeted(P))
        assert cheap == decide(state, Signals(now=T0 + 9, agent_alive=False), P)
        assert cheap.state.status == "crashed"

    def test_a_wait_that_ends_over_budget_is_not_resumed(self) -> None:
        state = running(status="waiting", limit_waits=1, resume_at=T0 + 100)
        decision = decide(state, Signals(now=T0 + 100, spent_usd=BUDGET), budgeted(P))
        assert decision.state.abandon_reason == "budget"

    def test_a_run_that_ends_on_its_own_keeps_its_ending(self) -> None:
        done = Signals(now=T0 + 9, done=True, exit_code=0, spent_usd=9.0)
        assert decide(running(), done, budgeted(P)).state.status == "completed"
        live = Signals(now=T0 + 9, agent_alive=True, output_mtime=T0 + 9, spent_usd=9.0)
        assert decide(running(), live, budgeted(P)).state.status == "running"

    @given(
        state=task_states(LIVE_STATUSES),
        sig=signal_sets(spent_usd=st.floats(BUDGET, 1e6)),
        policy=policies(),
    )
    def test_over_budget_no_resume_ever_starts(self, state, sig, policy) -> None:
        policy = budgeted(policy)
        decision = decide(state, sig, policy)
        assert A.RESUME not in decision.actions
        assert decision.state.status not in RESUMING
        unlimited = decide(state, sig, budgeted(policy, None))
        would_resume = A.RESUME in unlimited.actions or unlimited.state.status in RESUMING
        if would_resume:
            assert decision.state.status == "abandoned"
            assert decision.state.abandon_reason == "budget"
        else:
            assert decision == unlimited

    @given(
        state=task_states(LIVE_STATUSES),
        sig=signal_sets(spent_usd=st.none() | st.floats(0, BUDGET, exclude_max=True)),
        policy=policies(),
    )
    def test_under_budget_or_unknown_spend_changes_nothing(self, state, sig, policy) -> None:
        assert decide(state, sig, budgeted(policy)) == decide(state, sig, budgeted(policy, None))
