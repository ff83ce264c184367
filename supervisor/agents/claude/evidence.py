"""Evidence of work on Claude Code's interactive screen (issue 21, "Interactive screen").

Pure, standard library only. :func:`.screen.normalize` takes every timer and counter out of
a capture, so that a stuck session hashes the same from one check to the next. Two of those
counters are evidence that the agent works, and this module reads them back:

* **the token counter** of the status line (``✢ Composing… (23s · ↓ 974 tokens)``): it
  grows while an answer streams, also while the answer is a tool call's input, which the
  TUI does not show until it is complete (a long Write: only ``↓ 3.5k`` → ``↓ 3.7k tokens``
  changes, ``evidence_tool_input_streaming_*.txt``);
* **a running tool's elapsed time**, on its description line and its command line
  (``● Mock step 1: run a shell command · 16s`` and ``⎿  $ python3 … (16s)``,
  ``evidence_tool_running_*.txt``): it advances while the tool runs, and the token counter
  stands still meanwhile.

What is *not* evidence: the spinner glyph and the status line's own elapsed time. An API
stall (the request sent, nothing comes back) shows exactly those: the glyph turns, the
timer counts, the token counter stays (``✶ Whirlpooling… (17s · ↓ 6 tokens)`` → ``(20s · ↓ 6
tokens)``, ``evidence_stall_*.txt``), and after about 45 s the line becomes ``✻ Waiting for
API response · will retry in 3m 59s`` with no counter at all. So a stall stays stale.

All of it measured with CLI 2.1.328 in tmux against the mock API
(``tests/support/mock_anthropic.py`` and ``tests/support/mock_drip.py``), captured every
3 s; the fixtures and the measurement are in ``tests/fixtures/claude/screens/README.md``
("Evidence of work") and docs/claude-screen.md.

A tool's timer counts only up to ``tool_limit`` seconds: a tool that hangs must not keep a
session alive for ever (Claude Code bounds its own Bash tool at 10 minutes at most; other
tools, MCP ones among them, are not bounded by the CLI).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from supervisor.agents.claude.screen import (
    _DURATION,
    _TOKENS_RE,
    SPINNER_GLYPHS,
    screen_hash,
    strip_ansi,
)
from supervisor.config.monitor import DEFAULT_TOOL_BUDGET

__all__ = [
    "TOOL_SCREEN_LIMIT",
    "Evidence",
    "ScreenProgress",
    "advanced",
    "evidence_of",
    "seconds_of",
]

TOOL_SCREEN_LIMIT = DEFAULT_TOOL_BUDGET
"""Seconds of a running tool's on-screen timer that still count as evidence of work when no
``[monitor] tool_budget`` is given (the adapter passes the task's): past it a tool that hangs
is judged by staleness again."""

_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_PART_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|[hms])")

_STATUS_RE = re.compile("^[" + re.escape(SPINNER_GLYPHS) + r"] \S")
"""The status line: a spinner glyph in column 0 (:data:`.screen.SPINNER_GLYPHS`)."""
_COUNT_RE = re.compile(r"(\d[\d,]*(?:\.\d+)?)([kKmM]?)")
"""The number in a token counter (:data:`.screen._TOKENS_RE`): ``974``, ``1.1k``, ``12,345``."""
_TOOL_TIMER_RE = re.compile(rf"(?: · ({_DURATION})| \(({_DURATION})\))$")
"""A running tool's timer ending a line that is not the status line: ``· 16s`` on the
description line, ``(16s)`` on the ``⎿  $ command`` line."""
_TOOL_LINE_RE = re.compile(r"^(?:[●⏺] |  ⎿  |  )\S")
"""Where the TUI puts a tool's lines: its description behind the (blinking) bullet ``●``
(``⏺`` on macOS) or two spaces, its command behind ``  ⎿  ``."""


def seconds_of(duration: str) -> float:
    """``"1m 5s"`` → 65.0, ``"250ms"`` → 0.25, ``"1h 2m 3s"`` → 3723.0 (seconds).

    Raises:
        ValueError: ``duration`` holds no ``<number><unit>`` part.
    """
    parts = _PART_RE.findall(duration)
    if not parts:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def _tokens(number: str, suffix: str) -> int:
    scale = {"": 1, "k": 1_000, "m": 1_000_000}[suffix.lower()]
    return int(float(number.replace(",", "")) * scale)


@dataclass(frozen=True)
class Evidence:
    """What a capture shows of work in progress (:func:`evidence_of`).

    Attributes:
        tokens: the status line's token counter (tokens; ``1.1k`` reads 1100), ``None``
            when no status line shows one (idle, an early spinner, "Waiting for API
            response").
        tools: the elapsed time of each running tool's timer on screen, top to bottom
            (seconds); empty when no tool runs.
    """

    tokens: int | None = None
    tools: tuple[float, ...] = ()


def evidence_of(text: str) -> Evidence:
    """Read the :class:`Evidence` of one capture (plain or with escapes). Never raises.

    The last status line gives ``tokens`` (the TUI shows one; an older one in scrollback
    would be a finished turn's). Tool timers are read from the tool lines above it only
    (:data:`_TOOL_LINE_RE`), never from the status line, whose own timer advances during a
    stall too.
    """
    lines = [line.replace("\xa0", " ").rstrip() for line in strip_ansi(text).split("\n")]
    status = max((i for i, line in enumerate(lines) if _STATUS_RE.match(line)), default=None)
    tokens = None
    if status is not None:
        found = _TOKENS_RE.search(lines[status])
        count = _COUNT_RE.search(found.group(0)) if found else None
        tokens = _tokens(count.group(1), count.group(2)) if count else None
    tools: list[float] = []
    for line in lines[:status]:
        if _STATUS_RE.match(line) or not _TOOL_LINE_RE.match(line):
            continue
        match = _TOOL_TIMER_RE.search(line)
        if match:
            tools.append(seconds_of(match.group(1) or match.group(2)))
    return Evidence(tokens=tokens, tools=tuple(tools))


def advanced(before: Evidence, after: Evidence, tool_limit: float = TOOL_SCREEN_LIMIT) -> bool:
    """Whether ``after`` (a later capture) shows work done since ``before``.

    True when the token counter grew, or when a tool timer at the same place advanced and
    still reads at most ``tool_limit`` seconds. A counter that appears, vanishes or runs
    back is no evidence (the status line shows its group only after 16 s, and a new turn
    starts again from zero: the screen's text changed then anyway). Pure.
    """
    if before.tokens is not None and after.tokens is not None and after.tokens > before.tokens:
        return True
    if len(before.tools) != len(after.tools):
        return False
    return any(b < a <= tool_limit for b, a in zip(before.tools, after.tools, strict=True))


class ScreenProgress:
    """When a session's screen last showed progress: its normalized text changed
    (:func:`.screen.screen_hash`) or it showed evidence of work advancing (:func:`advanced`).

    One per run (a new run starts it afresh). No I/O and no clock: the caller passes
    ``now``.
    """

    def __init__(self, tool_limit: float = TOOL_SCREEN_LIMIT) -> None:
        self.tool_limit = tool_limit
        self.digest: str | None = None
        self.evidence = Evidence()
        self.changed_at: float | None = None

    def feed(self, text: str, now: float) -> float:
        """Feed one capture taken at ``now`` (epoch s); returns when the screen last showed
        progress (epoch s): ``now`` for the first capture."""
        digest, evidence = screen_hash(text), evidence_of(text)
        moved = advanced(self.evidence, evidence, self.tool_limit)
        if digest != self.digest or moved or self.changed_at is None:
            self.changed_at = now
        self.digest, self.evidence = digest, evidence
        return self.changed_at
