"""Issue 26, the account's limits under attack (attack classes: hostile values, odd file
types, huge inputs): a book (``state_dir/accounts.json``) that a hand, a torn disk or another
local user made hostile holds nothing back and never raises, in the engine
(:func:`supervisor.engine.accountbook.load`) or in the views
(:func:`supervisor.accounts.read_limits`, :func:`~supervisor.accounts.hold_of`); a reset
nobody should believe (not finite, over 8 days ahead) is never noted.

Found by attacking the merged work: ``Infinity``/``1e20`` crashed the intake tick and
``status`` (``OverflowError`` in ``time.localtime``), year 9999 held an account for ever,
100,000 nested brackets raised ``RecursionError``, and a FIFO blocked the engine's start and
``status`` for ever."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor import accounts
from supervisor.engine.accountbook import load
from supervisor.policy import accounts as rules
from supervisor.policy.accounts import AccountLimit
from supervisor.taskdir import layout

ACCOUNT = "acct-0123456789ab"
NOW = 1_790_000_000.0
#: A limit entry, then the time written raw (JSON may hold Infinity, which Python reads).
ENTRY = '{"%s": {"until": %s, "by": "t-1", "last_start": %s}}'


def _in_time(call: Callable[[], Any]) -> Any:
    """``call()`` on a thread: a hang (a FIFO read) fails the test instead of blocking it."""
    found: list[Any] = []
    worker = threading.Thread(target=lambda: found.append(call()), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the read blocked"
    return found[0]


def _both(state: Path) -> tuple[dict, dict]:
    """What the engine and the views make of ``state``'s book, at NOW."""
    book = _in_time(lambda: load(state / layout.ACCOUNTS, NOW))
    limits = _in_time(lambda: accounts.read_limits(state, NOW))
    assert accounts.hold_of(limits, ACCOUNT, NOW) is None or ACCOUNT in book
    return book, limits


@pytest.mark.parametrize(
    ("until", "last"),
    [
        ("Infinity", "null"),
        ("-Infinity", "null"),
        ("NaN", "null"),
        ("1e20", "null"),
        ("1e308", "null"),
        ("253402300799", "null"),  # 9999-12-31: held for ever, shown without a date
        (str(NOW + accounts.MAX_AHEAD + 1), "null"),
        (str(NOW + 60), "Infinity"),  # a start 'after' the end of time: staggered for ever
        (str(NOW + 60), "1e20"),
        ('"soon"', "null"),
        ("true", "null"),
    ],
)
def test_an_unbelievable_time_in_the_book_holds_nothing(tmp_path: Path, until, last) -> None:
    (tmp_path / layout.ACCOUNTS).write_text(ENTRY % (ACCOUNT, until, last))
    assert _both(tmp_path) == ({}, {})


def test_a_believable_limit_still_holds_and_shows_its_date_when_not_today(tmp_path: Path) -> None:
    until = NOW + 2 * 86400.0
    (tmp_path / layout.ACCOUNTS).write_text(ENTRY % (ACCOUNT, until, "null"))
    book, limits = _both(tmp_path)
    assert book == {ACCOUNT: AccountLimit(until=until, by="t-1", last_start=None)}
    shown = accounts.hold_of(limits, ACCOUNT, NOW)
    day = time.strftime("%Y-%m-%d", time.localtime(until))
    assert shown is not None and shown.startswith(f"account limited until {day} ")


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.mkdir()


def _symlink(path: Path) -> None:
    elsewhere = path.parent / "elsewhere.json"
    elsewhere.write_text(ENTRY % (ACCOUNT, NOW + 60, "null"))
    path.symlink_to(elsewhere)


def _huge(path: Path) -> None:
    with path.open("wb") as out:
        out.truncate(accounts.BOOK_MAX + 1)


def _nested(path: Path) -> None:
    path.write_text("[" * 100_000 + "]" * 100_000)


def _not_utf8(path: Path) -> None:
    path.write_bytes(b'{"\xff\xfe": 1}')


@pytest.mark.parametrize("make", [_fifo, _folder, _symlink, _huge, _nested, _not_utf8])
def test_an_odd_book_file_holds_nothing_and_never_blocks(tmp_path: Path, make) -> None:
    make(tmp_path / layout.ACCOUNTS)
    assert _both(tmp_path) == ({}, {})


@given(reset=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**30), 10**30))
def test_an_unbelievable_reset_is_never_noted(reset: float) -> None:
    """``noted`` (the policy) keeps a reset only when it is finite, after now and at most
    MAX_AHEAD ahead; then the line it gives never raises."""
    book = rules.noted({}, ACCOUNT, reset, "t-1", NOW)
    kept = math.isfinite(reset) and NOW < reset <= NOW + accounts.MAX_AHEAD  # ints compare exactly
    assert (ACCOUNT in book) == kept
    if kept:
        assert accounts.limited_text(book[ACCOUNT].until, NOW).startswith("account limited")


@given(moment=st.floats(allow_nan=True, allow_infinity=True))
def test_the_clock_text_of_any_time_never_raises(moment: float) -> None:
    assert accounts.clock_text(moment, NOW)
