"""A task's ``events.jsonl`` for a person (``supervise events``): one line per event.

Each line: the time (local ISO-8601 to the second, or how long ago), the event name, the
status change ``from→to`` (the status before is the last one an earlier event set), then
the fields an operator looks for first (:data:`FIRST`: reason, by, tool, subject, exit
code, verdict ...), then every other field as ``key=value`` in compact JSON, each value cut
to :data:`MAX_VALUE` characters. Everything is escaped (:mod:`supervisor.terminal`).

Parsing is separate from showing: :func:`parse_lines` keeps the stored text of each good
line (for ``--json``) and reports each damaged one (not JSON, not an object, no string
``event``) by its line number instead of failing. Standard library only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from supervisor.diskio import parse_iso
from supervisor.terminal import escape_controls

#: Fields shown first, in this order, after the status change.
FIRST = (
    "reason",
    "abandon_reason",
    "failure_reason",
    "by",
    "decision",
    "tool",
    "subject",
    "rule",
    "detail",
    "exit_code",
    "signal",
    "verdict",
    "retry_count",
    "notified_event",
)
#: Fields never repeated after the event name: the time, the name, the status.
SHOWN = ("ts", "event", "status")
#: Longest value shown of one field, in characters (the JSON output keeps every byte).
MAX_VALUE = 200


@dataclass(frozen=True)
class Parsed:
    """One line of ``events.jsonl``: ``number`` (1-based), ``text`` (as stored, without the
    newline), ``event`` (the object) or ``problem`` (why the line is damaged)."""

    number: int
    text: str
    event: dict[str, Any] | None = None
    problem: str | None = None


def parse_lines(text: str, first_number: int = 1) -> list[Parsed]:
    """Every non-empty line of ``text`` (numbered from ``first_number``), each parsed or
    with its problem; a line is good when it is a JSON object with a string ``event``."""
    out = []
    for number, line in enumerate(text.split("\n"), start=first_number):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            out.append(Parsed(number, line, problem=f"not JSON ({getattr(exc, 'msg', exc)})"))
            continue
        except RecursionError:  # "[[[[…": an agent can append to its own log
            out.append(Parsed(number, line, problem="not JSON (nested too deep)"))
            continue
        if not isinstance(value, dict) or not isinstance(value.get("event"), str):
            out.append(Parsed(number, line, problem="not an event object with a string 'event'"))
            continue
        out.append(Parsed(number, line, event=value))
    return out


def ago(seconds: float) -> str:
    """``seconds`` as a short age: ``42s ago``, ``3m05s ago``, ``2h10m ago``, ``3d4h ago``
    (``in 5s`` for a time in the future)."""
    past, s = seconds >= 0, int(abs(seconds))
    if s < 60:
        text = f"{s}s"
    elif s < 3600:
        text = f"{s // 60}m{s % 60:02d}s"
    elif s < 86400:
        text = f"{s // 3600}h{s % 3600 // 60:02d}m"
    else:
        text = f"{s // 86400}d{s % 86400 // 3600}h"
    return f"{text} ago" if past else f"in {text}"


def when(ts: Any, relative: bool, now: float | None = None) -> str:
    """An event's ``ts`` (ISO-8601 UTC) as local ISO time to the second, or its age with
    ``relative``; a missing or unreadable stamp is shown escaped as it is."""
    try:
        epoch = parse_iso(ts) if isinstance(ts, str) else None
        if epoch is not None and relative:
            return ago((time.time() if now is None else now) - epoch)
        if epoch is not None:
            return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")
    except (ValueError, OverflowError, OSError):  # a stamp no calendar or clock can show
        pass
    return escape_controls(str(ts))


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if len(text) > MAX_VALUE:
        text = text[:MAX_VALUE] + "…"
    return escape_controls(text)


class Renderer:
    """Turns events into lines, remembering the status the last one set (for ``from→to``)."""

    def __init__(self, relative: bool = False) -> None:
        self.relative = relative
        self.status: str | None = None

    def line(self, event: dict[str, Any], now: float | None = None) -> str:
        """One line for ``event`` (an object with a string ``event``)."""
        parts = [when(event.get("ts"), self.relative, now), escape_controls(event["event"])]
        status = event.get("status")
        if isinstance(status, str):
            if status != self.status:
                change = f"{self.status}→{status}" if self.status else f"→{status}"
                parts.append(escape_controls(change))
            self.status = status
        rest = [k for k in event if k not in SHOWN and k not in FIRST]
        for key in [k for k in FIRST if k in event] + rest:
            if event[key] is not None and event[key] != "":
                parts.append(f"{escape_controls(key)}={_value(event[key])}")
        return "  ".join(parts)


#: Longest line kept, in bytes; a longer one is reported as damaged, never held whole.
MAX_LINE = 16 * 1024 * 1024


class Splitter:
    """Bytes in, :class:`Parsed` lines out, as whole lines arrive (a line being written is
    kept until its newline). A line longer than :data:`MAX_LINE` bytes is dropped as it
    streams and reported once, so memory stays bounded whatever the file holds."""

    def __init__(self) -> None:
        self.pending = b""
        self.number = 0  # lines seen so far
        self.oversized = False

    def feed(self, data: bytes) -> list[Parsed]:
        """The lines that ``data`` completes, parsed (:func:`parse_lines`). Linear in
        ``data``: each line is cut out by index, never by copying what follows it."""
        out: list[Parsed] = []
        start = 0
        while start < len(data):
            cut = data.find(b"\n", start)
            end = len(data) if cut < 0 else cut + 1
            piece, start = data[start:end], end
            if not self.oversized:
                self.pending += piece
                if len(self.pending) > MAX_LINE:
                    self.pending, self.oversized = b"", True
            if not piece.endswith(b"\n"):
                break
            self.number += 1
            if self.oversized:
                problem = f"longer than {MAX_LINE} bytes"
                out.append(Parsed(self.number, "", problem=problem))
            else:
                text = self.pending.decode("utf-8", errors="replace")
                out += parse_lines(text.rstrip("\n"), self.number)
            self.pending, self.oversized = b"", False
        return out


#: Bytes read at a time from the end of a log (:func:`tail_offset`).
TAIL_BLOCK = 1024 * 1024
#: Bytes before the shown window searched for the status its first event changes from.
STATUS_SCAN = 1024 * 1024


def tail_offset(read_at: Callable[[int, int], bytes], size: int, count: int) -> int:
    """Where the last ``count`` lines of a file of ``size`` bytes begin: just after the
    ``count + 1``-th newline from its end (0 when it has fewer lines), found reading
    backwards :data:`TAIL_BLOCK` bytes at a time with ``read_at(offset, length)``. So
    ``events -n N`` of a 1 GB log reads its last lines, not the whole file. A last line
    without its newline yet lies past that point and is read whole later."""
    if count <= 0:
        return size
    wanted, pos = count + 1, size
    while pos > 0:
        start = max(0, pos - TAIL_BLOCK)
        data = read_at(start, pos - start)
        index = len(data)
        while (cut := data.rfind(b"\n", 0, index)) >= 0:
            wanted -= 1
            if wanted == 0:
                return start + cut + 1
            index = cut
        pos = start
    return 0


def status_before(read_at: Callable[[int, int], bytes], offset: int) -> str | None:
    """The status the last event before ``offset`` set (a string ``status``), searched in
    the :data:`STATUS_SCAN` bytes before it; ``None`` when none is there."""
    start = max(0, offset - STATUS_SCAN)
    lines = read_at(start, offset - start).split(b"\n")
    for raw in reversed(lines[1:] if start else lines):  # the first may be cut
        if b'"status"' not in raw:
            continue
        parsed = parse_lines(raw.decode("utf-8", errors="replace"))
        status = parsed[0].event.get("status") if parsed and parsed[0].event else None
        if isinstance(status, str):
            return status
    return None
