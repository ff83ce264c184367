"""Reading Claude Code's headless event stream (``--output-format stream-json --verbose``).

Pure: :class:`StreamState` is fed one parsed line at a time and keeps what the manifest
reports. Facts it relies on (measured with Claude Code 2.1.328, see docs/claude-hooks.md and
tests/fixtures/claude/headless/):

* every line is one JSON object with a ``type``: ``system`` (``subtype`` ``init`` carries
  ``session_id``; ``api_retry`` carries ``attempt``, ``retry_delay_ms``, ``error_status``),
  ``assistant``, ``user`` (tool results, with ``is_error`` on a failed or denied call) and
  a last ``result`` line (``subtype``, ``is_error``, ``result``, ``num_turns``,
  ``total_cost_usd``, ``session_id``, ``api_error_status`` on an API failure);
* ``type`` is not the first key of the ``result`` line, so lines are parsed, never
  prefix-matched;
* the wrapper writes a ``{"type": "supervise_launch"}`` marker before each run, so the
  per-run fields (``result``, ``is_error``, ``api_error_status``) never leak from one run
  into the next.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervisor.diskio import NotRegularFile, read_end

#: API statuses that mean "come back later" rather than "broken": rate limited (429) and
#: overloaded (529), per the Anthropic API errors reference.
LIMIT_STATUSES = frozenset({429, 529})
#: How many API errors the manifest keeps (the latest ones).
KEEP_ERRORS = 5
#: Characters of result text kept.
MAX_RESULT = 4000
#: ``type`` of the first line of a rotated ``stream.jsonl`` (:mod:`supervisor.logrotate`):
#: the totals of the runs in the files rotated away, so a reader starting over sums them.
CARRY = "supervise_carry"
#: ``type`` of the line the engine writes to ``stream.jsonl`` before the first run of a
#: follow-up's turn (``supervise continue``, issue 22; :func:`turn_line`): the facts of
#: the turn before are forgotten there, and the budget counts from there.
TURN_MARK = "supervise_turn"
#: The manifest's ``claude`` keys that belong to one turn: cleared when a follow-up opens
#: the next (:func:`supervisor.turnlog.open_turn`) and reset by :data:`TURN_MARK`, so a
#: Brain reading ``claude.result`` after turn 2 never gets turn 1's answer.
PER_TURN = (
    "result",
    "is_error",
    "subtype",
    "api_retries",
    "api_errors",
    "turn_cost_usd",
    "last_notification",
    "tools_in_flight",
)
#: Fields a carry line holds (:meth:`StreamState.carry`).
_CARRIED = (
    "session_id",
    "runs",
    "num_turns",
    "total_cost_usd",
    "api_retries",
    "api_errors",
    "result",
    "is_error",
    "subtype",
    "turn_base_usd",
)


@dataclass
class StreamState:
    """What the stream said so far (all runs of one task).

    Attributes:
        session_id: Claude Code's session id (``system/init`` or ``result``).
        runs: ``supervise_launch`` markers seen (launches and resumes).
        result: the last run's final text (clipped to :data:`MAX_RESULT`), or ``None``.
        is_error: the last run's ``result`` line said ``is_error``.
        subtype: the last ``result`` line's ``subtype`` (``success``, ``error_...``).
        num_turns: summed over all runs.
        total_cost_usd: summed over all runs.
        api_retries: ``system/api_retry`` lines over all runs.
        api_errors: the latest :data:`KEEP_ERRORS` API errors: ``{"status", "text"}`` from
            results and ``{"status", "attempt", "retry_delay_ms"}`` from retries.
        api_error_status: the current run's final API error status, or ``None``.
        run_ended: the current run has written its ``result`` line.
        tool_failures: tool results with ``is_error`` since the last successful one.
        limit_resets_at: the current run's ``rate_limit_event`` said ``rejected`` with
            this ``resetsAt`` (epoch s); subscription limits, CLI 2.1.328.
        limit_type: its ``rateLimitType`` (``five_hour``, ``seven_day``, ...).
        turn_base_usd: ``total_cost_usd`` when the current turn began (the last
            :data:`TURN_MARK`; 0 in turn 1): :attr:`turn_cost_usd` is the turn's own spend.
    """

    session_id: str | None = None
    runs: int = 0
    result: str | None = None
    is_error: bool | None = None
    subtype: str | None = None
    num_turns: int = 0
    total_cost_usd: float = 0.0
    api_retries: int = 0
    api_errors: list[dict[str, Any]] = field(default_factory=list)
    api_error_status: int | None = None
    run_ended: bool = False
    tool_failures: int = 0
    limit_resets_at: float | None = None
    limit_type: str | None = None
    turn_base_usd: float = 0.0

    @property
    def turn_cost_usd(self) -> float:
        """USD spent since the current turn began: what ``max_cost_usd`` is checked against
        (:mod:`supervisor.policy.budget`; each follow-up's turn has the whole budget)."""
        return max(0.0, self.total_cost_usd - self.turn_base_usd)

    def new_turn(self) -> None:
        """A follow-up's turn begins (:data:`TURN_MARK`): forget the last turn's answer,
        errors, retries and failed tool calls; its spend so far becomes the turn's base."""
        self.result = self.is_error = self.subtype = self.api_error_status = None
        self.limit_resets_at = self.limit_type = None
        self.api_errors, self.api_retries, self.tool_failures = [], 0, 0
        self.run_ended = False
        self.turn_base_usd = self.total_cost_usd

    def end_run(self) -> None:
        """The current run is history: a new one starts (its ``supervise_launch`` line, or
        the engine's resume before that line is written). Its answer, error and limit no
        longer describe the task; totals (cost, turns, runs) stay."""
        self.result = self.is_error = self.subtype = self.api_error_status = None
        self.limit_resets_at = self.limit_type = None
        self.run_ended = False

    def feed_line(self, line: bytes | str) -> dict[str, Any] | None:
        """Parse one line and :meth:`feed` it; returns the object, or ``None`` for a line
        that is not a JSON object (a stray print is ignored, never fatal)."""
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        if not isinstance(obj, dict):
            return None
        self.feed(obj)
        return obj

    def feed(self, obj: dict[str, Any]) -> None:
        """Take one stream event into account."""
        kind = obj.get("type")
        if kind == CARRY:
            self._restore(obj)
        elif kind == TURN_MARK:
            self.new_turn()
        elif kind == "supervise_launch":
            self.runs += 1
            self.end_run()
        elif kind == "rate_limit_event":
            info = obj.get("rate_limit_info")
            if isinstance(info, dict) and info.get("status") == "rejected":
                self.limit_resets_at = finite_number(info.get("resetsAt"))
                kind_name = info.get("rateLimitType")
                self.limit_type = kind_name if isinstance(kind_name, str) else "unknown"
        elif kind == "system":
            if isinstance(obj.get("session_id"), str):
                self.session_id = obj["session_id"]
            if obj.get("subtype") == "api_retry":
                self.api_retries += 1
                self.record_error(
                    {
                        "status": _int(obj.get("error_status")),
                        "attempt": _int(obj.get("attempt")),
                        "retry_delay_ms": _int(obj.get("retry_delay_ms")),
                    }
                )
        elif kind == "user":
            for block in _content(obj):
                if block.get("type") == "tool_result":
                    self.tool_failures = self.tool_failures + 1 if block.get("is_error") else 0
        elif kind == "result":
            self.run_ended = True
            if isinstance(obj.get("session_id"), str):
                self.session_id = obj["session_id"]
            text = obj.get("result")
            self.result = text[:MAX_RESULT] if isinstance(text, str) else None
            self.is_error = bool(obj.get("is_error"))
            self.subtype = obj.get("subtype") if isinstance(obj.get("subtype"), str) else None
            self.num_turns += _int(obj.get("num_turns")) or 0
            self.total_cost_usd += finite_number(obj.get("total_cost_usd")) or 0.0
            self.api_error_status = _int(obj.get("api_error_status"))
            if self.api_error_status is not None:
                text = (self.result or "")[:300]
                self.record_error({"status": self.api_error_status, "text": text})

    def carry(self) -> dict[str, Any]:
        """The line that starts a rotated ``stream.jsonl``: ``{"type": CARRY, ...}`` with
        the totals so far and the last run's result."""
        return {"type": CARRY, **{name: getattr(self, name) for name in _CARRIED}}

    def _restore(self, obj: dict[str, Any]) -> None:
        """Take the totals of a carry line (values of a wrong type are ignored)."""
        if isinstance(obj.get("session_id"), str):
            self.session_id = obj["session_id"]
        for name in ("runs", "num_turns", "api_retries"):
            setattr(self, name, getattr(self, name) + (_int(obj.get(name)) or 0))
        self.total_cost_usd += finite_number(obj.get("total_cost_usd")) or 0.0
        self.turn_base_usd += finite_number(obj.get("turn_base_usd")) or 0.0
        errors = obj.get("api_errors")
        if isinstance(errors, list):
            self.api_errors = [e for e in errors if isinstance(e, dict)][-KEEP_ERRORS:]
        text = obj.get("result")
        self.result = text[:MAX_RESULT] if isinstance(text, str) else self.result
        if isinstance(obj.get("is_error"), bool):
            self.is_error = obj["is_error"]
        if isinstance(obj.get("subtype"), str):
            self.subtype = obj["subtype"]

    @property
    def limited(self) -> bool:
        """The current run ended on a rate limit or overload (429/529, or a ``rejected``
        ``rate_limit_event``)."""
        return self.run_ended and (
            self.api_error_status in LIMIT_STATUSES or self.limit_type is not None
        )

    def record_error(self, entry: dict[str, Any]) -> None:
        """Keep ``entry`` among the latest :data:`KEEP_ERRORS` API errors."""
        self.api_errors = [*self.api_errors, entry][-KEEP_ERRORS:]

    def report(self) -> dict[str, Any]:
        """The manifest's ``claude`` object."""
        return {
            "session_id": self.session_id,
            "result": self.result,
            "is_error": self.is_error,
            "subtype": self.subtype,
            "num_turns": self.num_turns,
            "total_cost_usd": round(self.total_cost_usd, 6),
            "turn_cost_usd": round(self.turn_cost_usd, 6),
            "api_retries": self.api_retries,
            "api_errors": self.api_errors,
        }


def turn_line(path: Path) -> bytes:
    """The :data:`TURN_MARK` line to append to the stream file ``path`` (after a newline
    when the file ends inside a line, as :func:`supervisor.streamcopy.launch_line` does)."""
    last, size = read_end(path, 1)
    line = json.dumps({"type": TURN_MARK, "at": time.time()}).encode() + b"\n"
    return line if size == 0 or last == b"\n" else b"\n" + line


def mark_turn(path: Path) -> None:
    """Append the :data:`TURN_MARK` line to ``path`` (no run writes it: the turn before
    has ended). Written before the turn's launch, so every later reading of the file,
    an engine's after a restart included, starts the turn there.

    Raises:
        OSError: the file cannot be written (the launch then fails as any launch would).
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)  # a FIFO the agent put there: ENXIO, never a wait
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(path, os.fstat(fd).st_mode)
        os.write(fd, turn_line(path))
    finally:
        os.close(fd)


def finite_number(value: Any) -> float | None:
    """A finite float from a JSON number, else ``None`` (no bools, NaN, inf or huge ints)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _content(obj: dict[str, Any]) -> list[dict[str, Any]]:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
