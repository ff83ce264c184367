"""Recognising usage limits, rate limits and overload errors in Claude Code's text.

Pure, standard library only. :func:`parse_limit` scans text the agent printed (a stream-json
``result``, a ``StopFailure`` hook's message, the last lines of its screen) for a line that
says the agent must wait, and parses when it may go on.

Sources of the templates (listed in ``tests/fixtures/claude/screens/README.md``):

* the strings of the Claude Code 2.1.328 binary: ``You've hit your ${limit}${resets}`` with
  ``limit`` one of ``5-hour limit``, ``weekly limit``, ``Opus limit``, ``Sonnet limit``,
  ``usage limit``, ``limit``, ``monthly spend limit``, ... and ``resets`` like
  `` · resets 5am (Europe/Berlin)``; ``You're out of usage credits · resets ...``;
  ``Usage limit reached · continuing automatically ...``; ``spend limit reached · resets Aug
  8``; ``Server is temporarily limiting requests (not your usage limit)``; ``Repeated 529
  Overloaded errors``; ``... is experiencing high load``;
* screens captured offline (``api_error_429_no_retry.txt``: ``API Error: Request rejected
  (429) · <message>``, ``api_error_529.txt``: ``API Error: 529 <message>``,
  ``api_retry_429_message_a.txt``: ``429 <message> · retrying in 9s · attempt 2/2``);
* older CLI versions (documented, cannot be produced offline): ``Claude AI usage limit
  reached|1763790000`` (epoch seconds after the bar), ``5-hour limit reached ∙ resets 5am``,
  ``Claude usage limit reached. Your limit will reset at 5pm (America/New_York).``

The reset time is printed by the CLI with ``toLocaleTimeString("en-US")`` made lower case
(``5am``, ``5:30pm``), or, when more than 24 h away, with the date (``Nov 25, 5am``, ``Nov 25,
2027, 5am``), followed by `` (Zone/Name)`` when the zone is shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Literal
from zoneinfo import ZoneInfo

from supervisor.agents.claude.screen import strip_ansi

__all__ = ["LimitHit", "LimitKind", "parse_limit", "parse_reset"]

LimitKind = Literal["usage_limit", "rate_limit", "overloaded"]

MAX_LINE = 2000
"""Longer lines are cut to this many characters before matching (bounds regex work)."""


@dataclass(frozen=True)
class LimitHit:
    """A limit found by :func:`parse_limit`.

    Attributes:
        kind: ``"usage_limit"`` (plan or spend limit: hours away), ``"rate_limit"`` (HTTP
            429: seconds to minutes) or ``"overloaded"`` (HTTP 529: retry soon).
        resume_at: epoch seconds when the limit resets, or None when the text gives no time
            (the caller backs off on its own).
        matched: the line that matched, stripped of escapes and outer whitespace.
    """

    kind: LimitKind
    resume_at: float | None
    matched: str


# ------------------------------------------------------------------------------- patterns

_LIMIT_NAME = (
    r"(?:5-hour|five[- ]hour|weekly|session|daily|opus|sonnet|fable|usage|usage credit"
    r"|(?:(?:org|organization|channel|team)'s )?monthly(?: spend| usage)?|spend|plan)"
)

_USAGE_RES = [
    # Claude AI usage limit reached|1763790000
    re.compile(r"\bclaude(?: ai)? usage limit reached\s*\|\s*(?P<epoch>\d{9,13})\b", re.I),
    # You've hit your limit · resets 5am / You've hit your weekly limit · resets Nov 25, 5am
    re.compile(r"\byou(?:'|’)ve (?:hit|reached) your (?!fast\b)(?:[\w'’-]+ ){0,4}?limit\b", re.I),
    # You're out of usage credits · resets ...
    re.compile(r"\byou(?:'|’)re out of usage credits\b", re.I),
    # 5-hour limit reached ∙ resets 5am / Claude usage limit reached. Your limit will reset at
    # Usage limit reached · continuing automatically / spend limit reached · resets Aug 8
    re.compile(rf"\b(?:claude(?: ai)? )?{_LIMIT_NAME} limits? (?:reached|exceeded|hit)\b", re.I),
    # Your limit will reset at 5pm (no "reached" on the line)
    re.compile(r"\byour (?:usage )?limit will reset\b", re.I),
    # The API's own message for a subscription: "... reached your specified ... usage limits"
    re.compile(r"\breached your specified[\w\s-]*?usage limits\b", re.I),
]

_RATE_RES = [
    re.compile(r"\bAPI Error:?\s*(?:Request rejected\s*)?\(?429\b", re.I),
    re.compile(r"\brate_limit_error\b"),
    re.compile(r"\b429 Too Many Requests\b", re.I),
    re.compile(r"^\W*429\s+\S.*\bretrying in\b", re.I),
    re.compile(r"\bServer is temporarily limiting requests\b", re.I),
]

_OVERLOAD_RES = [
    re.compile(r"\bAPI Error:?\s*(?:Request rejected\s*)?\(?529\b", re.I),
    re.compile(r"\boverloaded_error\b"),
    re.compile(r"\bRepeated 529 Overloaded errors\b", re.I),
    re.compile(r"\b529\b.{0,40}\boverloaded\b", re.I),
    re.compile(r"\bis experiencing high load\b", re.I),
]

_WARNING_RE = re.compile(r"^\W*(?:approaching\b|you(?:'|’)ve used \d+%|over \d+% of your\b)", re.I)
"""Warnings printed before a limit is hit (``Approaching 5-hour limit · resets 5am``, ``You've
used 90% of your weekly limit · resets ...``): nothing to wait for yet. Other limits the
supervisor need not wait for (``You've hit your fast limit``: fast mode falls back by itself;
``Context limit reached``: a compaction matter) are kept out by the patterns themselves."""

# ------------------------------------------------------------------------------- reset time

_MONTHS = {
    m: i
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
        start=1,
    )
}
_MONTH_RE = r"(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_TIME_RE = (
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>[ap]\.?m\.?)"
    r"|(?P<hour24>\d{1,2}):(?P<minute24>\d{2})"
)
_RESET_RE = re.compile(
    r"\b(?:resets?|until|continu(?:e|es|ing) automatically)\b(?:\s+(?:at|on))?\s+"
    rf"(?:{_MONTH_RE}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(?P<year>\d{{4}}))?,?\s*"
    r"(?:at\s+)?)?"
    rf"(?:{_TIME_RE})?"
    r"(?:\s*\((?P<zone>[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*)\))?",
    re.I | re.ASCII,  # ASCII: under re.I alone, "s" would match "ſ" (U+017F), "k" "K" (Kelvin)
)
_IN_RE = re.compile(
    r"\b(?:resets? in|retry(?:ing)? in|try again in|retry after)\s+"
    r"(?:(?P<h>\d+)\s*h(?:ours?)?\s*)?(?:(?P<m>\d+)\s*m(?:in(?:utes?)?)?\s*)?"
    r"(?:(?P<s>\d+)\s*s(?:ec(?:onds?)?)?)?\b",
    re.I | re.ASCII,
)


def _zone(name: str | None, now: datetime) -> tzinfo:
    """The named IANA zone, else ``now``'s zone, else the machine's local zone."""
    if name:
        try:
            return ZoneInfo(name)
        except (ValueError, KeyError, OSError):  # unknown, malformed or unreadable
            pass
    if now.tzinfo is not None:
        return now.tzinfo
    return datetime.now().astimezone().tzinfo or UTC


#: How far in the past a shown reset time may be and still mean "just now" (the CLI shows
#: "resets 5am" or "resets 3:10am": rounded down to the hour or minute).
JUST_PASSED = timedelta(hours=1)


def _aware(now: datetime) -> datetime:
    """``now`` as an aware datetime (a naive one is taken as local time)."""
    return now if now.tzinfo is not None else now.astimezone()


def parse_reset(line: str, now: datetime) -> float | None:
    """Parse the reset time in ``line`` as epoch seconds, or None if it names none.

    Forms: ``resets 5am``, ``resets at 5:30pm``, ``reset at 17:00``, ``resets Nov 25, 5am``,
    ``resets Nov 25, 2027, 5am``, ``resets Aug 8`` (midnight), each optionally followed by
    ``(Zone/Name)``; also relative ``resets in 3m``, ``retrying in 9s``, ``try again in 1h``.
    The zone is the named IANA zone when it exists, else ``now.tzinfo`` (local time for a
    naive ``now``). A time of day that passed more than :data:`JUST_PASSED` ago means
    tomorrow; one that passed less long ago is a reset that just happened (the CLI rounds
    the time down), so ``now`` is returned. A date more than a day in the past without a
    year means next year.
    """
    now = _aware(now)
    for match in _RESET_RE.finditer(line):
        has_date = match["mon"] is not None
        has_time = match["hour"] is not None or match["hour24"] is not None
        if not (has_date or has_time):
            continue
        zone = _zone(match["zone"], now)
        local_now = now.astimezone(zone)
        hour, minute = 0, 0
        if match["hour"] is not None:
            hour = int(match["hour"])
            minute = int(match["minute"] or 0)
            if not 1 <= hour <= 12:
                continue
            hour = hour % 12 + (12 if match["ampm"].lower().startswith("p") else 0)
        elif match["hour24"] is not None:
            hour, minute = int(match["hour24"]), int(match["minute24"])
            if hour > 23:
                continue
        if minute > 59:
            continue
        wall = time(hour, minute)
        if has_date:
            month = _MONTHS[match["mon"].lower()[:3]]
            year = int(match["year"]) if match["year"] else local_now.year
            try:
                day = date(year, month, int(match["day"]))
            except ValueError:
                continue
            when = datetime.combine(day, wall, tzinfo=zone)
            if match["year"] is None and when < local_now - timedelta(days=1):
                try:
                    when = when.replace(year=year + 1)
                except ValueError:  # Feb 29
                    continue
        else:
            when = datetime.combine(local_now.date(), wall, tzinfo=zone)
            if when <= local_now - JUST_PASSED:
                when = datetime.combine(local_now.date() + timedelta(days=1), wall, tzinfo=zone)
            elif when <= local_now:
                # The CLI shows the reset rounded down to the minute ("resets 3:10am" at
                # 3:10:36): a time that passed moments ago is the reset that just happened.
                when = local_now
        return when.timestamp()
    for match in _IN_RE.finditer(line):
        if not any(match[k] for k in ("h", "m", "s")):
            continue
        seconds = int(match["h"] or 0) * 3600 + int(match["m"] or 0) * 60 + int(match["s"] or 0)
        return now.timestamp() + seconds
    return None


def _epoch(value: str) -> float:
    number = float(value)
    return number / 1000 if number > 1e11 else number  # milliseconds


_KINDS: tuple[tuple[LimitKind, list[re.Pattern[str]]], ...] = (
    ("usage_limit", _USAGE_RES),
    ("rate_limit", _RATE_RES),
    ("overloaded", _OVERLOAD_RES),
)
"""Checked in this order: a line naming a usage limit is one even if it also says 429."""


def _classify(line: str) -> tuple[LimitKind, re.Match[str]] | None:
    for kind, patterns in _KINDS:
        for pattern in patterns:
            match = pattern.search(line)
            if match is not None:
                return kind, match
    return None


def parse_limit(text: str, now: datetime) -> LimitHit | None:
    """Find the last line of ``text`` that reports a usage limit, rate limit or overload.

    Args:
        text: agent output, any length; ANSI escapes are ignored.
        now: the current time (aware; a naive one is taken as local time); reset times
            without a zone are read in ``now``'s zone.

    Returns:
        A :class:`LimitHit` for the last matching line (the newest news), or None. Warnings
        (``Approaching ...``, ``You've used 90% of ...``), the fast-mode limit and the context
        limit do not count. ``resume_at`` is None when the line gives no reset time. Never
        raises.
    """
    lines = strip_ansi(text).split("\n")
    for raw in reversed(lines):
        line = raw.strip()[:MAX_LINE]
        if not line or _WARNING_RE.search(line):
            continue
        found = _classify(line)
        if found is None:
            continue
        kind, match = found
        epoch = match.groupdict().get("epoch")
        try:
            resume_at = _epoch(epoch) if epoch else parse_reset(line, now)
        except (OverflowError, ValueError, OSError):
            resume_at = None
        return LimitHit(kind=kind, resume_at=resume_at, matched=line)
    return None
