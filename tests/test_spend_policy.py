"""The daily cap's pure decision (issue 26, :mod:`supervisor.policy.spend`) and the split of a
task's spend over turns and days (:mod:`supervisor.costs`), property-tested."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor import costs
from supervisor.policy import spend

NOW = st.floats(min_value=0, max_value=4e9, allow_nan=False)
OFFSET = st.integers(min_value=-12 * 3600, max_value=14 * 3600)
USD = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(NOW, OFFSET, USD, st.one_of(st.none(), st.floats(min_value=1e-9, max_value=1e6)))
def test_the_hold_is_there_exactly_when_the_day_spent_the_cap(now, offset, spent, cap) -> None:
    hold = spend.daily_hold(now, offset, spent, cap)
    assert (hold is not None) is (cap is not None and spent >= cap)
    if hold is not None:
        assert hold.reason == f"daily budget reached: {spend.usd(spent)} of {spend.usd(cap)}"
        assert hold.day == spend.local_day(now, offset)
        assert now < hold.until <= now + spend.DAY
        # launches resume at the next local midnight: the day after, at its first second
        assert spend.local_day(hold.until, offset) != hold.day
        assert spend.local_day(hold.until - 1e-3, offset) == hold.day


@given(NOW, OFFSET)
def test_the_local_day_is_the_zone_s_calendar_day(now, offset) -> None:
    local = datetime.fromtimestamp(now + offset, UTC)
    assert spend.local_day(now, offset) == local.strftime("%Y-%m-%d")


@settings(max_examples=200)
@given(st.lists(st.tuples(st.floats(0, 5 * 86400), st.booleans(), st.booleans()), max_size=40))
def test_the_notifier_is_called_once_per_day_the_cap_is_reached(steps) -> None:
    """Any sequence of looks (time moving on, the cap reached or not, the engine killed
    while its call ran or not): one call per day the cap held, and again only for a call
    that a kill cut short."""
    record_day, settled, calls, kills = None, True, [], []
    now = 1.7e9
    for advance, reached, killed in steps:
        now += advance
        hold = spend.daily_hold(now, 3600, 10.0 if reached else 1.0, 5.0)
        if spend.notify_due(hold, record_day, settled):
            assert hold is not None
            calls.append(hold.day)
            record_day, settled = hold.day, not killed  # written ahead; "notified" after
            if killed:
                kills.append(hold.day)
    held_days = {spend.local_day(t, 3600) for t, reached in _times(steps) if reached}
    assert set(calls) == held_days  # every day it held, and only those
    for day in set(calls):
        assert calls.count(day) <= 1 + kills.count(day)  # again only after a cut-short call


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.floats(-2 * 3600, 3 * 86400), st.booleans(), st.booleans()), max_size=40)
)
def test_a_clock_stepped_back_never_notifies_a_day_twice(steps) -> None:
    """Time moving on and stepping back (up to two hours: over a midnight), the cap reached
    or not, kills during the call: a day is called again only after a cut-short call, and
    never for a day the cap did not hold."""
    record_day, settled, days, calls, kills = None, True, [], [], []
    now = 1.7e9
    for advance, reached, killed in steps:
        now += advance
        hold = spend.daily_hold(now, 3600, 10.0 if reached else 1.0, 5.0)
        if spend.notify_due(hold, record_day, settled, days):
            assert hold is not None
            calls.append(hold.day)
            record_day, settled = hold.day, not killed
            if killed:
                kills.append(hold.day)
            else:
                days = spend.remember(days, hold.day)
    held_days = {spend.local_day(t, 3600) for t, reached in _times(steps) if reached}
    assert set(calls) <= held_days
    for day in set(calls):
        assert calls.count(day) <= 1 + kills.count(day)


def test_the_record_s_days_are_bounded_and_survive_a_hand_edit() -> None:
    assert spend.told("2026-01-01") == [] and spend.told([1, None, "2026-01-01"]) == ["2026-01-01"]
    days: object = None
    for n in range(1, 20):
        days = spend.remember(days, f"2026-01-{n:02d}")
    assert days == [f"2026-01-{n:02d}" for n in range(12, 20)]
    assert spend.remember(days, "2026-01-15")[-1] == "2026-01-15"
    assert len(spend.remember(days, "2026-01-15")) == spend.NOTIFIED_DAYS


def _times(steps: list[tuple[float, bool, bool]]) -> list[tuple[float, bool]]:
    now, out = 1.7e9, []
    for advance, reached, _ in steps:
        now += advance
        out.append((now, reached))
    return out


def test_a_kill_during_the_call_makes_it_again_and_one_that_ended_never() -> None:
    hold = spend.daily_hold(1.7e9, 0, 3.0, 2.0)
    assert spend.notify_due(hold, None, True)
    assert spend.notify_due(hold, "1999-01-01", True)
    assert not spend.notify_due(hold, hold.day, True)  # notified (or running now)
    assert spend.notify_due(hold, hold.day, False)  # "notifying" left by a killed engine
    assert not spend.notify_due(None, None, False)


def test_amounts_below_a_cent_are_shown() -> None:
    assert spend.usd(12.4) == "$12.40"
    assert spend.usd(0.0042) == "$0.0042"
    assert spend.usd(0) == "$0.00"
    assert spend.usd(1234567.891) == "$1,234,567.89"


# ---------------------------------------------------------------- the split over turns

TURN = st.tuples(
    st.one_of(st.none(), st.floats(-5, 50, allow_nan=False)),
    st.one_of(st.none(), st.integers(0, 2_000_000_000)),
)


def _iso(when: int | None) -> str | None:
    if when is None:
        return None
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@given(
    st.one_of(st.none(), st.floats(0, 100, allow_nan=False), st.just(math.inf), st.just("x")),
    st.lists(TURN, max_size=8),
    st.one_of(st.none(), st.integers(0, 2_000_000_000)),
)
def test_a_task_s_pieces_add_up_to_its_total_whatever_its_turns_say(total, turns, checked):
    """Nothing counted twice or missed: however damaged the turns' running totals are
    (missing, negative, above the total, going down), the pieces add up to the task's
    total, each piece is positive, and a task without a reported cost has none."""
    manifest = {
        "claude": {"total_cost_usd": total},
        "turns": [{"cost_usd": c, "finished_at": _iso(t)} for c, t in turns],
        "last_checked_at": _iso(checked),
    }
    found = costs.pieces(manifest)
    known = costs.total_of(manifest)
    if known is None:
        assert found == ()
        return
    assert all(usd > 0 for _, usd in found)
    assert math.isclose(sum(usd for _, usd in found), known, abs_tol=1e-9)


def test_follow_up_turns_are_split_by_their_running_totals() -> None:
    """Turn 1 ended at 1.0 (its running total), turn 2 at 1.5, the current turn has the
    task at 2.25: 1.0 + 0.5 + 0.75, each dated when it ended; never 1.0 + 1.5 + 2.25."""
    manifest = {
        "claude": {"total_cost_usd": 2.25},
        "turns": [
            {"turn": 1, "cost_usd": 1.0, "finished_at": "2026-11-24T10:00:00Z"},
            {"turn": 2, "cost_usd": 1.5, "finished_at": "2026-11-25T10:00:00Z"},
        ],
        "finished_at": "2026-11-26T10:00:00Z",
        "last_checked_at": "2026-11-26T10:00:01Z",
    }
    found = costs.pieces(manifest)
    assert [usd for _, usd in found] == [1.0, 0.5, 0.75]
    assert [w for w, _ in found] == [
        costs.epoch("2026-11-24T10:00:00Z"),
        costs.epoch("2026-11-25T10:00:00Z"),
        costs.epoch("2026-11-26T10:00:00Z"),
    ]
