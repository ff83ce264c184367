"""Claude Code's tool calls in flight: the evidence that a silent agent is working.

Pure bookkeeping (no I/O, no clock: every time is the check's ``now``, epoch seconds of the
engine's clock). :class:`ToolsInFlight` is fed by the adapter from two sources, which
name a call by the same ``tool_use_id`` (the API's ``toolu_…`` id):

* **hooks** (both modes, ``hooks = true``): ``PreToolUse`` opens a call;
  ``PostToolUse`` / ``PostToolUseFailure`` close it; ``PostToolBatch`` closes the calls it
  lists; ``Stop``, ``StopFailure`` and ``SessionEnd`` close every call of the run;
* **the headless stream** (``stream.jsonl``, also with ``hooks = false``): an
  ``assistant`` line's ``tool_use`` block opens a call, the ``user`` line's
  ``tool_result`` with its ``tool_use_id`` closes it, the run's ``result`` line and the
  next run's ``supervise_launch`` marker close every call.

Measured with CLI 2.1.328 (tests/fixtures/claude/tools/, tests/fixtures/claude/headless/):

* ``PreToolUse`` carries ``tool_use_id`` and fires *before* ``PermissionRequest`` (which has
  no ``tool_use_id``). A call waiting for a ruling is not in flight: it is an escalation or
  a request the rules answer at once. :meth:`ToolsInFlight.asked` parks the latest open call
  of that tool; an approval starts its clock (:meth:`ToolsInFlight.ruled`), a denial closes
  it. A denied call gets neither ``PostToolUse`` nor ``PostToolUseFailure`` nor
  ``PermissionDenied``; only ``PostToolBatch`` names it.
* While a tool runs, ``-p`` mode prints ``{"type": "tool_progress", "tool_name": …,
  "parent_tool_use_id": ID, "elapsed_time_seconds": N, "heartbeat": true}`` every
  :data:`HEARTBEAT` seconds and nothing else.

A call closed by its own result is remembered (the latest :data:`MAX_CLOSED`), so a stream
line read after the call's ``PostToolUse`` never opens it again. Every change of the open calls sets
:attr:`ToolsInFlight.changed`, so the check writes the manifest (a restarted engine reads
the calls back from it, :meth:`ToolsInFlight.restore`).
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

#: Seconds between the ``tool_progress`` heartbeats Claude Code (2.1.328, ``-p`` mode)
#: prints while a tool runs (measured: at 30 s and 60 s of a 70 s Bash call).
HEARTBEAT = 30.0
#: Most calls tracked at once; more (a runaway or hostile stream) are ignored: the oldest
#: open call is the one that counts.
MAX_OPEN = 256
#: Closed ids remembered so a late line cannot reopen them.
MAX_CLOSED = 1024
#: Longest ``tool_use_id`` and tool name kept, in characters.
MAX_ID = 200
#: Hook events that end every call of the run.
_RUN_ENDS = frozenset({"Stop", "StopFailure", "SessionEnd"})


@dataclass
class ToolCall:
    """One tool call the agent made and has not finished.

    Attributes:
        name: the tool (``Bash``, ``Write``, …), clipped to :data:`MAX_ID` characters,
            printable ones only (no control or bidi characters).
        since: when it started running (epoch s), ``None`` while it waits for a ruling
            (``waiting``) or until the next check stamps it (an approval).
        waiting: a permission request for it waits for a ruling.
        subject: its input as compact JSON, to match its ``PermissionRequest``.
    """

    name: str
    since: float | None
    waiting: bool = False
    subject: str = ""


class ToolsInFlight:
    """The open tool calls of a task's current run, keyed by ``tool_use_id``."""

    def __init__(self) -> None:
        self.calls: OrderedDict[str, ToolCall] = OrderedDict()
        self.closed: OrderedDict[str, None] = OrderedDict()
        #: The open calls changed since :meth:`take_changed` was last called.
        self.changed = False

    def take_changed(self) -> bool:
        """Whether the open calls changed since the last call (then clears it)."""
        changed, self.changed = self.changed, False
        return changed

    # ---------------------------------------------------------------- opening, closing
    def open(self, key: Any, name: Any, tool_input: Any, now: float) -> None:
        """A call started (``PreToolUse``, a stream ``tool_use`` block) at ``now``.
        Ignored when ``key`` is not a non-empty string, is open or was closed already, or
        :data:`MAX_OPEN` calls are open."""
        if not _is_key(key) or key in self.calls or key in self.closed:
            return
        if len(self.calls) >= MAX_OPEN:
            return
        # printable only: the name reaches the decision's reason line and the log
        label = (
            "".join(c for c in name[:MAX_ID] if c.isprintable()) if isinstance(name, str) else ""
        )
        self.calls[key] = ToolCall(label, now, subject=_subject(tool_input))
        self.changed = True

    def close(self, key: Any) -> None:
        """The call ``key`` ended (its result, a denial); unknown keys are remembered too."""
        if not _is_key(key):
            return
        if self.calls.pop(key, None) is not None:
            self.changed = True
        self.closed[key] = None
        self.closed.move_to_end(key)
        while len(self.closed) > MAX_CLOSED:
            self.closed.popitem(last=False)

    def close_all(self) -> None:
        """The run's turn or the run itself ended: no call is in flight any more. The ids
        are not remembered as closed: a restarted engine reads ``stream.jsonl`` again from
        its start, and the ``tool_use`` line after the run's ``supervise_launch`` marker
        must open the call that still runs."""
        if self.calls:
            self.calls.clear()
            self.changed = True

    # ---------------------------------------------------------------- permission
    def asked(self, name: Any, tool_input: Any) -> None:
        """A ``PermissionRequest`` for ``name`` arrived: the latest open call of that tool
        (the same input when one matches) waits for a ruling, so it is not in flight."""
        if tool_input is not None and any(
            c.waiting and c.name == name and c.subject == _subject(tool_input)
            for c in self.calls.values()
        ):
            return  # the same request read again (it was not ruled on at the last check)
        call = self._latest(name, tool_input, waiting=False)
        if call is not None:
            call.waiting, call.since, self.changed = True, None, True

    def ruled(self, approved: bool, name: Any = None, tool_input: Any = None) -> None:
        """A ruling on a waiting call (the oldest waiting one of ``name``, or of any tool
        when ``name`` is ``None``): approved, its clock starts at the next check; denied,
        it is closed (the CLI sends no hook that would)."""
        call = self._latest(name, tool_input, waiting=True, oldest=True)
        if call is None:
            return
        if approved:
            call.waiting = False  # since stays None: stamped by the next oldest()
            self.changed = True
            return
        for key, value in list(self.calls.items()):
            if value is call:
                self.close(key)

    # ---------------------------------------------------------------- sources
    def feed_hook(self, event: str, data: dict[str, Any], now: float) -> None:
        """Take one hook input into account (see the module docstring)."""
        if event == "PreToolUse":
            self.open(data.get("tool_use_id"), data.get("tool_name"), data.get("tool_input"), now)
        elif event in ("PostToolUse", "PostToolUseFailure", "PermissionDenied"):
            self.close(data.get("tool_use_id"))
        elif event == "PostToolBatch":
            calls = data.get("tool_calls")
            for call in calls if isinstance(calls, list) else []:
                if isinstance(call, dict):
                    self.close(call.get("tool_use_id"))
        elif event in _RUN_ENDS:
            self.close_all()

    def feed_stream(self, obj: dict[str, Any], now: float) -> None:
        """Take one ``stream.jsonl`` object into account (see the module docstring)."""
        kind = obj.get("type")
        if kind in ("result", "supervise_launch"):
            self.close_all()
        elif kind == "assistant":
            for block in _content(obj):
                if block.get("type") == "tool_use":
                    self.open(block.get("id"), block.get("name"), block.get("input"), now)
        elif kind == "user":
            for block in _content(obj):
                if block.get("type") == "tool_result":
                    self.close(block.get("tool_use_id"))

    # ---------------------------------------------------------------- the fact
    def oldest(self, now: float) -> tuple[float, str] | None:
        """``(since, name)`` of the call that has run longest, ``None`` when none runs.

        Calls approved since the last check start at ``now``; a start after ``now`` (a
        restored record from before a clock step) is moved back to ``now``, so no call
        can stay young for ever.
        """
        found: tuple[float, str] | None = None
        for call in self.calls.values():
            if call.waiting:
                continue
            if call.since is None or call.since > now or not math.isfinite(call.since):
                call.since = now
            if found is None or call.since < found[0]:
                found = (call.since, call.name)
        return found

    # ---------------------------------------------------------------- the manifest
    def report(self) -> list[dict[str, Any]]:
        """The open calls for the manifest's ``claude.tools_in_flight`` (so an engine
        restart keeps them): ``[{"id", "name", "since", "waiting"}]``."""
        return [
            {"id": key, "name": call.name, "since": call.since, "waiting": call.waiting}
            for key, call in self.calls.items()
        ]

    def restore(self, saved: Any) -> None:
        """Take back :meth:`report`'s list (malformed entries are skipped). Each call
        counts from the first check after the restart: its recorded start is on the
        previous engine's clock, which a wall-clock step while no engine ran may have
        moved by hours (the budget would run out at once, or never)."""
        for item in saved if isinstance(saved, list) else []:
            if not isinstance(item, dict) or not _is_key(item.get("id")):
                continue
            self.open(item["id"], item.get("name"), None, 0.0)
            call = self.calls.get(item["id"])
            if call is not None:
                call.since = None
                call.waiting = item.get("waiting") is True
        self.changed = False

    def _latest(
        self, name: Any, tool_input: Any, waiting: bool, oldest: bool = False
    ) -> ToolCall | None:
        """The latest (or ``oldest``) open call of ``name`` (any tool when ``None``) in the
        ``waiting`` state, preferring one whose input matches ``tool_input``."""
        subject = _subject(tool_input) if tool_input is not None else None
        found = [c for c in self.calls.values() if c.waiting == waiting]
        if name is not None:
            found = [c for c in found if c.name == name]
        if oldest:
            found.reverse()
        same = [c for c in found if subject is not None and c.subject == subject]
        pick = same or found
        return pick[-1] if pick else None


def _is_key(key: Any) -> bool:
    return isinstance(key, str) and 0 < len(key) <= MAX_ID


def _subject(tool_input: Any) -> str:
    """A tool input as compact JSON, clipped (only compared, never shown)."""
    try:
        return json.dumps(tool_input, sort_keys=True, separators=(",", ":"))[:4096]
    except (TypeError, ValueError, RecursionError):
        return ""


def _content(obj: dict[str, Any]) -> list[dict[str, Any]]:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
