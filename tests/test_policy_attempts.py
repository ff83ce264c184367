"""Issue 26, part 2: the pure decision of a group of attempts (supervisor/policy/attempts.py)
and the ``discarded`` decision, through the whole policy too."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from supervisor import policy
from supervisor.config import MonitorPolicy
from supervisor.policy import Action, Signals, TaskState
from supervisor.policy import attempts as rules
from supervisor.policy.attempts import ALL, FIRST_PASS, Attempt, decide, discard
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import DAMAGED, TERMINAL, AbandonReason, Status, Verdict

statuses = st.sampled_from([*Status, DAMAGED, None])
verdicts = st.sampled_from([*Verdict, None])
times = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def groups(draw: st.DrawFn) -> list[Attempt]:
    n = draw(st.integers(min_value=2, max_value=8))
    return [
        Attempt(f"t{k}", k, draw(statuses), draw(verdicts), draw(times)) for k in range(1, n + 1)
    ]


def _passed(a: Attempt) -> bool:
    return a.status == Status.COMPLETED and a.verdict == Verdict.PASS


def _ended(a: Attempt) -> bool:
    return a.status is None or a.status in {*TERMINAL, DAMAGED}


@given(groups())
def test_first_pass_winner_is_the_earliest_pass_and_the_unended_rest_are_discarded(
    found: list[Attempt],
) -> None:
    out = decide(FIRST_PASS, None, found)
    passed = [a for a in found if _passed(a)]
    if not passed:
        assert out.winner is None and out.discard == ()
        assert out.outcome == ("none_passed" if all(map(_ended, found)) else None)
        return
    winner = next(a for a in found if a.task_id == out.winner)
    assert _passed(winner) and out.outcome == "passed"
    key = [
        (math.inf if a.finished_at is None or math.isnan(a.finished_at) else a.finished_at, a.index)
        for a in passed
    ]
    assert (key[passed.index(winner)]) == min(key)
    assert set(out.discard) == {a.task_id for a in found if not _ended(a)}
    assert out.winner not in out.discard
    assert out.closed == all(map(_ended, found))


@given(groups(), st.integers(min_value=1, max_value=8))
def test_a_recorded_winner_stays_the_winner(found: list[Attempt], k: int) -> None:
    recorded = found[min(k, len(found)) - 1].task_id
    out = decide(FIRST_PASS, recorded, found)
    assert out.winner == recorded and out.outcome == "passed"
    assert recorded not in out.discard
    assert all(not _ended(a) for a in found if a.task_id in out.discard)


@given(groups())
def test_pick_all_never_discards_nor_names_a_winner(found: list[Attempt]) -> None:
    out = decide(ALL, None, found)
    assert out.winner is None and out.discard == ()
    assert out.closed == all(map(_ended, found))
    assert out.outcome == ("ended" if out.closed else None)


def test_two_passing_in_the_same_tick_give_one_winner_the_lower_index() -> None:
    same = 1_700_000_000.0
    found = [
        Attempt("a", 1, Status.COMPLETED, Verdict.PASS, same),
        Attempt("b", 2, Status.COMPLETED, Verdict.PASS, same),
        Attempt("c", 3, Status.RUNNING),
    ]
    out = decide(FIRST_PASS, None, list(reversed(found)))
    assert (out.winner, out.discard, out.closed) == ("a", ("c",), False)
    # b passed too and keeps its completed end; nothing discards an ended attempt
    later = decide(FIRST_PASS, "a", [*found[:2], Attempt("c", 3, Status.ABANDONED)])
    assert later.discard == () and later.closed and later.winner == "a"


@given(st.sampled_from([s for s in Status if s not in TERMINAL]))
def test_discard_ends_abandoned_discarded_and_stops_only_a_launched_one(status: Status) -> None:
    decision = discard(TaskState(status=status))
    assert decision.state.status == Status.ABANDONED
    assert decision.state.abandon_reason == AbandonReason.DISCARDED
    assert decision.state.verdict == Verdict.ABANDONED
    assert decision.events == (Event.ABANDONED,)
    launched = status not in (Status.QUEUED, Status.BLOCKED)
    assert (Action.STOP_AGENT in decision.actions) == launched
    assert Action.FINISH in decision.actions and Action.NOTIFY not in decision.actions


def test_the_policy_takes_a_discard_before_a_done_file_and_for_a_queued_task() -> None:
    p = MonitorPolicy()
    running = TaskState(status=Status.RUNNING, started_at=0.0)
    done = Signals(now=1.0, done=True, exit_code=0, discarded=True)
    assert policy.decide(running, done, p).state.abandon_reason == AbandonReason.DISCARDED
    queued = TaskState(status=Status.QUEUED)
    out = policy.decide(queued, Signals(now=1.0, discarded=True), p)
    assert out.state.status == Status.ABANDONED and out.actions[0] == Action.FINISH
    assert Action.STOP_AGENT not in out.actions  # it never launched
    ended = TaskState(status=Status.COMPLETED, verdict=Verdict.PASS)
    assert policy.decide(ended, Signals(now=1.0, discarded=True), p).state == ended


@given(
    pick=st.sampled_from([rules.FIRST_PASS, rules.ALL]),
    winner=st.sampled_from([None, "w-000001", "a-000001"]),
    outcome=st.sampled_from([None, rules.PASSED, rules.FAILED, rules.OVER]),
)
def test_an_attempt_stands_for_its_group_s_winner_once_there_is_one(
    pick: str, winner: str | None, outcome: str | None
) -> None:
    """What a successor's gate reads for the attempt ``a-000001``: under first-pass the
    winner once recorded, itself once the group is over without one, nothing (wait) while
    undecided; under pick = all always itself."""
    got = rules.stands_for("a-000001", pick, winner, outcome)
    if pick == rules.ALL:
        assert got == "a-000001"
    elif winner is not None:
        assert got == winner
    else:
        assert got == ("a-000001" if outcome is not None else None)


@given(groups(), st.sampled_from(["", "t9", "../etc", "t1 ", "winner"]))
def test_a_recorded_winner_that_is_no_attempt_of_the_group_is_not_kept(
    found: list[Attempt], stranger: str
) -> None:
    """Found by attack: a hand-edited ``group.json`` whose ``winner`` names no attempt of
    the group made every live attempt a loser (all discarded, the group ``passed`` with no
    attempt passing). It is decided as if no winner were recorded."""
    assert decide(FIRST_PASS, stranger, found) == decide(FIRST_PASS, None, found)
