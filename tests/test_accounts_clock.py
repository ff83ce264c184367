"""Attack (issue 26): the wall clock stepped back while an account staggers its starts.

The stagger spaces two starts of an account ``stagger`` seconds apart. The last start is
kept as an epoch time (it must survive a restart), so a clock stepped back an hour after a
start made every later start of the account wait that hour plus the stagger: a start
"in the future" is a clock step, never a reason to wait longer than ``stagger``.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from supervisor.policy import accounts as rules
from supervisor.policy.accounts import AccountLimit

ACCOUNT = "acct-clock"
times = st.floats(min_value=1e9, max_value=2e9, allow_nan=False)
staggers = st.floats(min_value=0.5, max_value=600, allow_nan=False)
steps_back = st.floats(min_value=1, max_value=8 * 86400, allow_nan=False)


@given(times, staggers, steps_back)
def test_a_clock_stepped_back_never_stretches_the_stagger(now, stagger, back) -> None:
    """A start admitted at ``now``, then the clock stepped back ``back`` s: the next start
    waits for the reset when the step went behind it (the API's time), else at most
    ``stagger`` s; it is admitted once the hold it was given has passed, then staggered."""
    reset = now - 10
    book: rules.Book = {ACCOUNT: AccountLimit(until=reset, by="t1")}
    first = rules.admit(book, ACCOUNT, now, stagger)
    assert first.hold is None
    moment = now - back  # the clock stepped back
    book = first.book
    for _ in range(3):
        book = rules.pruned(book, moment, stagger)
        answer = rules.admit(book, ACCOUNT, moment, stagger)
        book = answer.book
        if answer.hold is None:
            return
        assert answer.hold.until is not None
        assert answer.hold.until <= max(reset, moment + stagger) + 1e-6
        moment = answer.hold.until
    raise AssertionError("still held after the reset and one stagger")


def test_one_hour_back_holds_the_stagger_not_the_hour() -> None:
    """The must-show case: 5 s of stagger, the clock stepped back 3,600 s."""
    now, stagger = 1_800_000_000.0, 5.0
    book: rules.Book = {ACCOUNT: AccountLimit(until=now - 7200, by="t1", last_start=now)}
    answer = rules.admit(rules.pruned(book, now - 3600, stagger), ACCOUNT, now - 3600, stagger)
    assert answer.hold is not None and answer.hold.until == now - 3600 + stagger
