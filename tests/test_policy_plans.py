"""Issue 26, part 1: the pure gate of a blocked task (supervisor/policy/plans.py)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.config import MonitorPolicy
from supervisor.policy import Action, TaskState
from supervisor.policy.plans import (
    Predecessor,
    dependency_failed,
    find_cycle,
    gate,
    stopped,
    unblocked,
)
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import DAMAGED, TERMINAL, AbandonReason, Status, Verdict

P = MonitorPolicy(notify_on=["abandoned"])
BLOCKED = TaskState(status=Status.BLOCKED)

statuses = st.sampled_from([*Status, DAMAGED, None])
verdicts = st.sampled_from([*Verdict, None])
predecessors = st.lists(
    st.builds(Predecessor, st.text(min_size=1, max_size=5), statuses, verdicts), max_size=6
)


def _passed(one: Predecessor) -> bool:
    return one.status == Status.COMPLETED and one.verdict == Verdict.PASS


def _ended(one: Predecessor) -> bool:
    return one.status is None or one.status in {*TERMINAL, DAMAGED}


@given(predecessors)
def test_pass_starts_only_when_every_predecessor_passed(found: list[Predecessor]) -> None:
    answer = gate("pass", found)
    assert answer.ready == all(_passed(one) for one in found)
    bad = [one for one in found if _ended(one) and not _passed(one)]
    assert answer.failed == (bad[0] if bad else None)
    assert not (answer.ready and answer.failed)
    if answer.failed is None:
        assert answer.waiting_for == tuple(one.task_id for one in found if not _ended(one))


@given(predecessors)
def test_end_starts_when_every_predecessor_ended_and_never_fails(found: list[Predecessor]) -> None:
    answer = gate("end", found)
    assert answer.failed is None
    assert answer.ready == all(_ended(one) for one in found)
    assert answer.waiting_for == tuple(one.task_id for one in found if not _ended(one))


@given(st.sampled_from(list(Status)))
def test_only_a_blocked_task_is_unblocked_or_failed(status: Status) -> None:
    state = TaskState(status=status)
    culprit = Predecessor("a-1", Status.FAILED, Verdict.FAIL)
    if status == Status.BLOCKED:
        assert unblocked(state, "ok").state.status == Status.QUEUED
        return
    with pytest.raises(ValueError):
        unblocked(state, "ok")
    with pytest.raises(ValueError):
        dependency_failed(state, culprit, "pass", P)


def test_unblocked_is_queued_with_its_event_and_no_action() -> None:
    decision = unblocked(BLOCKED, "A passed")
    assert decision.state.status == Status.QUEUED
    assert decision.events == (Event.UNBLOCKED,) and decision.actions == ()


def test_a_failed_dependency_abandons_naming_the_predecessor_without_launching() -> None:
    culprit = Predecessor("a-123456", Status.COMPLETED, Verdict.FAIL)
    decision = dependency_failed(BLOCKED, culprit, "pass", P)
    state = decision.state
    assert (state.status, state.abandon_reason, state.verdict) == (
        Status.ABANDONED,
        AbandonReason.DEPENDENCY,
        Verdict.ABANDONED,
    )
    assert decision.events == (Event.ABANDONED,)
    assert decision.actions == (Action.FINISH, Action.NOTIFY)  # no stop, no cleanup: no agent
    assert "a-123456 ended completed (verdict FAIL)" in decision.reason
    gone = dependency_failed(BLOCKED, Predecessor("a-9", None), "pass", P)
    assert "gone" in gone.reason


def test_a_stopped_blocked_task_only_finishes() -> None:
    decision = stopped(BLOCKED)
    assert decision.state.abandon_reason == AbandonReason.STOPPED
    assert decision.actions == (Action.FINISH,)


names = st.sampled_from("abcdefgh")


@given(st.dictionaries(names, st.lists(names, max_size=4, unique=True), max_size=8))
def test_find_cycle_finds_one_exactly_when_there_is_one(edges: dict[str, list[str]]) -> None:
    cycle = find_cycle(edges)
    # Kahn's algorithm: a graph without a cycle can be emptied of nodes with no predecessor
    nodes = set(edges) | {n for after in edges.values() for n in after}
    waiting = {n: set(edges.get(n, ())) for n in nodes}
    while True:
        free = [n for n, after in waiting.items() if not after]
        if not free:
            break
        for n in free:
            del waiting[n]
        for after in waiting.values():
            after.difference_update(free)
    assert (cycle is None) == (not waiting)
    if cycle is not None:
        assert cycle[0] == cycle[-1]
        for node, nxt in itertools.pairwise(cycle):
            assert nxt in edges.get(node, ())


def test_find_cycle_on_a_long_chain_needs_no_recursion() -> None:
    edges = {str(i): [str(i + 1)] for i in range(20_000)}
    assert find_cycle(edges) is None
    edges["19999"] = ["0"]
    assert find_cycle(edges) is not None
