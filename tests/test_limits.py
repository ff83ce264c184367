"""Tests for :mod:`supervisor.agents.claude.limits`.

Templates: the strings of the Claude Code 2.1.328 binary, the captured screens in
``tests/fixtures/claude/screens/`` and the documented texts of older versions (see the README
there).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.agents.claude.limits import LimitHit, parse_limit, parse_reset

SCREENS = Path(__file__).resolve().parent / "fixtures" / "claude" / "screens"

NOW = datetime(2025, 11, 22, 3, 0, tzinfo=UTC)
"""Saturday 2025-11-22 03:00 UTC (04:00 in Berlin, 22:00 the day before in New York)."""


def at(*args: int, tz: str = "UTC") -> float:
    """Epoch seconds of a wall-clock time in zone ``tz``."""
    return datetime(*args, tzinfo=ZoneInfo(tz)).timestamp()  # type: ignore[misc]


def hit(text: str, now: datetime = NOW) -> LimitHit:
    found = parse_limit(text, now)
    assert found is not None, text
    return found


# ------------------------------------------------------------------------------ templates


@pytest.mark.parametrize(
    ("text", "kind", "resume_at"),
    [
        # older CLI: epoch after the bar
        ("Claude AI usage limit reached|1763790000", "usage_limit", 1763790000.0),
        ("Claude AI usage limit reached|1763790000000", "usage_limit", 1763790000.0),  # ms
        # older CLI
        ("5-hour limit reached ∙ resets 5am", "usage_limit", at(2025, 11, 22, 5)),
        (
            "Claude usage limit reached. Your limit will reset at 5pm (America/New_York).",
            "usage_limit",
            at(2025, 11, 22, 17, tz="America/New_York"),
        ),
        # 2.1.328: You've hit your ${limit} · resets ${time}
        (
            "You've hit your limit · resets 5am (Europe/Berlin)",
            "usage_limit",
            at(2025, 11, 22, 5, tz="Europe/Berlin"),
        ),
        ("You've hit your weekly limit · resets Nov 25, 5am", "usage_limit", at(2025, 11, 25, 5)),
        ("You've hit your 5-hour limit · resets 5:30pm", "usage_limit", at(2025, 11, 22, 17, 30)),
        (
            "You've hit your Opus limit · resets Nov 27, 2:15pm (Asia/Tokyo) · progress saved",
            "usage_limit",
            at(2025, 11, 27, 14, 15, tz="Asia/Tokyo"),
        ),
        ("You’ve hit your session limit · resets 5am", "usage_limit", at(2025, 11, 22, 5)),
        ("You've hit your monthly spend limit.", "usage_limit", None),
        ("You're out of usage credits · resets Dec 1", "usage_limit", at(2025, 12, 1)),
        (
            "Usage limit reached · continuing automatically at 6am · esc to cancel",
            "usage_limit",
            at(2025, 11, 22, 6),
        ),
        (
            "Usage limit reached · continuing automatically shortly · esc to cancel",
            "usage_limit",
            None,
        ),
        ("spend limit reached · resets Aug 8", "usage_limit", at(2026, 8, 8)),
        # rate limits (HTTP 429)
        ('API Error: 429 {"type":"error","error":{"type":"rate_limit_error"}}', "rate_limit", None),
        ("API Error: Request rejected (429) · mock rate_limit_error", "rate_limit", None),
        ("Server is temporarily limiting requests (not your usage limit)", "rate_limit", None),
        (
            "✻ 429 mock rate_limit_error · retrying in 9s · attempt 2/2",
            "rate_limit",
            NOW.timestamp() + 9,
        ),
        # overload (HTTP 529)
        ("API Error: 529 mock overloaded_error. This is a server-side issue", "overloaded", None),
        (
            '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            "overloaded",
            None,
        ),
        ("Repeated 529 Overloaded errors", "overloaded", None),
        (
            "Opus is experiencing high load, please use /model to switch to Sonnet",
            "overloaded",
            None,
        ),
    ],
)
def test_templates(text: str, kind: str, resume_at: float | None) -> None:
    found = hit(text)
    assert found.kind == kind
    assert found.resume_at == resume_at
    assert found.matched == text.strip()


@pytest.mark.parametrize(
    ("fixture", "kind"),
    [
        ("api_error_429_no_retry", "rate_limit"),
        ("api_error_429_retries_exhausted", "rate_limit"),
        ("api_error_529", "overloaded"),
        ("api_retry_429_message_a", "rate_limit"),
    ],
)
def test_captured_screens(fixture: str, kind: str) -> None:
    for suffix in ("txt", "ansi"):
        text = (SCREENS / f"{fixture}.{suffix}").read_text(encoding="utf-8")
        assert hit(text).kind == kind


@pytest.mark.parametrize(
    "fixture",
    ["idle_after_turn", "working_spinner_a", "permission_bash", "working_stalled_retry_a"],
)
def test_no_limit_on_ordinary_screens(fixture: str) -> None:
    assert parse_limit((SCREENS / f"{fixture}.txt").read_text(encoding="utf-8"), NOW) is None


@pytest.mark.parametrize(
    "text",
    [
        "the limit of the loop",
        "We hit the limit of the loop after 10 iterations; it resets at 5am each day.",
        "Approaching 5-hour limit · resets 5am",
        "You've used 90% of your weekly limit · resets Nov 25, 5am",
        "Over 75% of your weekly limit used · resets Nov 25",
        "You've hit your fast limit · resets in 3m",
        "Context limit reached · /compact or /clear to continue",
        "Subagent nesting limit reached (depth 3 of 3).",
        "I increased the rate limit to 429 requests per minute.",
        "the function is overloaded for ints and floats",
        "",
    ],
)
def test_no_false_positive(text: str) -> None:
    assert parse_limit(text, NOW) is None


def test_last_matching_line_wins() -> None:
    text = (
        "API Error: Request rejected (429) · slow down\n"
        "some output\n"
        "You've hit your limit · resets 7am\n"
    )
    found = hit(text)
    assert found.kind == "usage_limit"
    assert found.matched == "You've hit your limit · resets 7am"
    assert found.resume_at == at(2025, 11, 22, 7)


def test_ansi_is_ignored() -> None:
    found = hit("\x1b[38;5;210m● \x1b[39mYou've hit your limit \x1b[2m· resets 5am\x1b[0m")
    assert found.matched == "● You've hit your limit · resets 5am"
    assert found.resume_at == at(2025, 11, 22, 5)


# ------------------------------------------------------------------------------ reset time


def test_past_time_rolls_over_to_tomorrow() -> None:
    assert parse_reset("resets 2am", NOW) == at(2025, 11, 23, 2)  # 1 h ago or more: tomorrow
    assert parse_reset("resets 3:01am", NOW) == at(2025, 11, 22, 3, 1)


def test_a_time_just_passed_is_the_reset_that_just_happened() -> None:
    # The CLI rounds the reset down ("resets 3am" at 3:00, "3:10am" at 3:10:36): resume now.
    assert parse_reset("resets 3am", NOW) == NOW.timestamp()
    assert parse_reset("resets 2:30am", NOW) == NOW.timestamp()


def test_time_forms() -> None:
    assert parse_reset("resets 12am", NOW) == at(2025, 11, 23, 0)
    assert parse_reset("resets 12pm", NOW) == at(2025, 11, 22, 12)
    assert parse_reset("resets 5 p.m.", NOW) == at(2025, 11, 22, 17)
    assert parse_reset("reset at 17:00", NOW) == at(2025, 11, 22, 17)
    assert parse_reset("resets at 00:30", NOW) == at(2025, 11, 23, 0, 30)
    assert parse_reset("resets Nov 25, 2027, 5am", NOW) == at(2027, 11, 25, 5)
    assert parse_reset("resets Jan 2, 5am", NOW) == at(2026, 1, 2, 5)  # next year
    assert parse_reset("resets Nov 22, 1am", NOW) == at(2025, 11, 22, 1)  # just past: as is
    assert parse_reset("resets in 1h 30m", NOW) == NOW.timestamp() + 5400
    assert parse_reset("try again in 45s", NOW) == NOW.timestamp() + 45


@pytest.mark.parametrize(
    "text",
    ["resets soon", "resets 13pm", "resets 25:00", "resets Feb 30, 5am", "resets in", "no time"],
)
def test_unparsable_reset_is_none(text: str) -> None:
    assert parse_reset(text, NOW) is None


def test_timezones() -> None:
    # The named zone wins over now's zone.
    assert parse_reset("resets 5am (Europe/Berlin)", NOW) == at(2025, 11, 22, 5, tz="Europe/Berlin")
    # 5am in New York already passed there? It is 22:00 the day before: later today, NY time.
    assert parse_reset("resets 5am (America/New_York)", NOW) == at(
        2025, 11, 22, 5, tz="America/New_York"
    )
    # An unknown zone falls back to now's zone.
    plus2 = NOW.astimezone(timezone(timedelta(hours=2)))  # 05:00 at +02:00
    assert (
        parse_reset("resets 6am (Mars/Olympus_Mons)", plus2)
        == datetime(2025, 11, 22, 6, tzinfo=timezone(timedelta(hours=2))).timestamp()
    )
    # No zone: now's zone; 4am at +02:00 has passed (it is 05:00 there), so tomorrow.
    assert (
        parse_reset("resets 4am", plus2)
        == datetime(2025, 11, 23, 4, tzinfo=timezone(timedelta(hours=2))).timestamp()
    )


def test_dst_zone() -> None:
    # The day after the US switch back to standard time (2 Nov 2025, 2am).
    now = datetime(2025, 11, 2, 12, 0, tzinfo=UTC)  # 07:00 EST
    assert (
        parse_reset("resets 5pm (America/New_York)", now)
        == datetime(2025, 11, 2, 22, 0, tzinfo=UTC).timestamp()
    )


def test_naive_now_is_local_time() -> None:
    naive = datetime(2025, 11, 22, 3, 0)
    expected = datetime(2025, 11, 22, 5, 0).astimezone().timestamp()
    assert parse_reset("resets 5am", naive) == expected


# ------------------------------------------------------------------------------ properties


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_arbitrary_text(text: str) -> None:
    parse_limit(text, NOW)
    parse_reset(text, NOW)


_limit_alphabet = st.sampled_from(
    [
        "You've hit your limit",
        " · resets ",
        "5am",
        "12:99",
        "99pm",
        "Nov 31, ",
        "Feb 29, ",
        "9999",
        ", 0000, ",
        "(Europe/Berlin)",
        "(../../etc/passwd)",
        "(A/B/C)",
        "usage limit reached|",
        "99999999999999",
        "API Error: 429",
        "in 99999999999h",
        "\n",
        " ",
    ]
)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(_limit_alphabet, max_size=12).map("".join),
    st.datetimes(
        min_value=datetime(1970, 1, 3), max_value=datetime(9990, 1, 1), timezones=st.just(UTC)
    ),
)
def test_never_raises_on_limit_like_text(text: str, now: datetime) -> None:
    found = parse_limit(text, now)
    if found is not None:
        assert found.kind in ("usage_limit", "rate_limit", "overloaded")
        assert found.matched in text


@pytest.mark.parametrize("text", ["resets ſep 5, 5am", "resets 5am (ſ/K)", "resets ５am"])
def test_non_ascii_lookalikes_do_not_break_parsing(text: str) -> None:
    parse_reset(text, NOW)
    parse_limit(f"You've hit your limit · {text}", NOW)
