"""Pure policy rows of issue 14: ``waiting`` notified once per limit (not per retry cycle),
and the budget (``max_cost_usd``): no resume once the spend reaches it, the task ends
``abandoned`` with reason ``budget``. Style of tests/test_policy_agent.py (explicit ``now``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

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
