"""The wrapper's copy of a headless agent's stdout (:mod:`supervisor.wrapper`, step 3): to the
stream file and to the pane, whole lines at a time.

Standard library only, and loaded by the wrapper from its own folder (it runs as
``python3 -I -S wrapper.py``, without the package on ``sys.path``).

Claude Code's ``--include-partial-messages`` (CLI 2.1.328) adds one ``stream_event`` line
per SSE event it receives (tests/fixtures/claude/headless/partial-*.jsonl): a long content
block is thousands of ``content_block_delta`` lines where there used to be silence until
its ``assistant`` line. The copy keeps both files useful:

* the pane (and so ``output.log``) never gets a partial-message line: it keeps the lines
  it had before, one per finished message, tool result and ``result``;
* in the stream file the content deltas of at most :data:`FOLD_EVERY` seconds become one
  :data:`FOLD` line (the finished block's ``assistant`` line holds the same content), so
  the file grows by a line a second while a block streams, not by a fragment's 400 bytes
  tens of times a second;
* keep-alives (:data:`KEEPALIVES`: the API's SSE ``ping``, which the CLI passes on at most
  once per 10 s) are dropped and only counted, so the file changes only when the agent
  makes progress (its mtime is the adapter's progress stamp: a stall with pings stays
  stale);
* every other partial-message line (``message_start``, ``content_block_start`` and
  ``_stop``, ``message_delta``, ``message_stop``) goes to the file as it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import BinaryIO

#: ``type`` of the line the wrapper writes to the stream file before each run.
LAUNCH_MARK = "supervise_launch"
#: ``type`` of Claude Code's partial-message lines (``--include-partial-messages``, CLI
#: 2.1.328: one per SSE event, ``"event"`` holding it; tests/fixtures/claude/headless/).
STREAM_EVENT = "stream_event"
#: The partial-message event that carries content (``text_delta``, ``input_json_delta``,
#: ``thinking_delta``, ...): the Messages API's streaming reference.
CONTENT_DELTA = "content_block_delta"
#: Partial-message events that only keep the connection alive: the API's SSE ``ping``,
#: which CLI 2.1.328 passes on at most once per 10 s (partial-ping-stall.jsonl).
KEEPALIVES = frozenset({"ping"})
#: ``type`` of the line standing for folded deltas: ``{"type": FOLD, "events": N,
#: "keepalives": K, "at": epoch s}`` (``K`` keep-alives dropped since the previous one).
FOLD = "supervise_fold"
FOLD_EVERY = 1.0  # seconds: at most one FOLD line per this while deltas stream
#: Bytes of a line without its newline yet after which it is passed on as it comes (a
#: partial-message line is small; nothing is buffered without bound).
LINE_LIMIT = 1 << 20
#: How the CLI starts a partial-message line (``type`` first, unlike its ``result`` line):
#: used only for a line past :data:`LINE_LIMIT`, which cannot be parsed whole.
_EVENT_START = f'{{"type":"{STREAM_EVENT}"'.encode()


def launch_line(path: str, at: float) -> bytes:
    """The line the wrapper writes to the stream file ``path`` before a run (``at``: epoch
    s): ``{"type": LAUNCH_MARK, "at": at}``, after a newline when the file ends inside a
    line (a wrapper killed while it passed a long line on), so the marker is a line of its
    own and the new run's fields start afresh."""
    line = json.dumps({"type": LAUNCH_MARK, "at": at}).encode() + b"\n"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return line
    try:
        size = os.fstat(fd).st_size
        last = os.pread(fd, 1, size - 1) if size else b"\n"
    except OSError:
        last = b"\n"
    finally:
        os.close(fd)
    return line if last == b"\n" else b"\n" + line


def stream_kind(line: bytes) -> str:
    """What step 3 does with one line of the agent's stdout: ``"delta"`` (content: folded),
    ``"keepalive"`` (dropped), ``"event"`` (another partial-message line: the file only) or
    ``"line"`` (the file and the pane; anything not a partial-message line, unparsable
    text included)."""
    if STREAM_EVENT.encode() not in line:  # cheap: most lines are no partial message
        return "line"
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return "line"
    if not isinstance(obj, dict) or obj.get("type") != STREAM_EVENT:
        return "line"
    event = obj.get("event")
    kind = event.get("type") if isinstance(event, dict) else None
    if kind == CONTENT_DELTA:
        return "delta"
    return "keepalive" if kind in KEEPALIVES else "event"


class StreamCopy:
    """Step 3's copy of a headless agent's stdout, whole lines at a time (see the module
    docstring): :meth:`feed` the bytes read, :meth:`idle` when the pipe was quiet,
    :meth:`close` at its end. ``sink``: the stream file (binary, unbuffered); ``pane``: the
    pane's fd. A failed write (full disk, pane gone) never stops the copy."""

    def __init__(self, sink: BinaryIO, pane: int = 1) -> None:
        self.sink, self.pane = sink, pane
        self.partial = b""  # the start of a line whose newline has not come yet
        self.passing: bool | None = None  # in a line past LINE_LIMIT: to the pane too?
        self.deltas = self.keepalives = 0  # not yet written as a FOLD line
        self.folded_at: float | None = None  # monotonic time of the last FOLD line

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the agent's stdout."""
        while data:
            end = data.find(b"\n")
            head, data = (data, b"") if end < 0 else (data[: end + 1], data[end + 1 :])
            if self.passing is not None:  # the rest of a long line, as it comes
                self._out(head, self.passing)
                self.passing = None if end >= 0 else self.passing
            elif end >= 0:
                line, self.partial = self.partial + head, b""
                self._line(line)
            else:
                self.partial += head
                if len(self.partial) > LINE_LIMIT:
                    self.passing = not self.partial.startswith(_EVENT_START)
                    self._out(self.partial, self.passing)
                    self.partial = b""

    def _line(self, line: bytes) -> None:
        kind = stream_kind(line)
        if kind == "keepalive":
            self.keepalives += 1
            return
        if kind == "delta":
            self.deltas += 1
            self.idle()
            return
        self.fold()  # the deltas before this line come first
        self._out(line, kind == "line")

    def fold(self, keepalives_too: bool = False) -> None:
        """Write the deltas not written yet as one :data:`FOLD` line (none: nothing, unless
        ``keepalives_too`` and keep-alives were dropped since the last one)."""
        if not (self.deltas or (keepalives_too and self.keepalives)):
            return
        line = {"type": FOLD, "events": self.deltas, "keepalives": self.keepalives}
        self._out(json.dumps({**line, "at": time.time()}).encode() + b"\n", False)
        self.deltas = self.keepalives = 0
        self.folded_at = time.monotonic()

    def idle(self) -> None:
        """Write the deltas held back once :data:`FOLD_EVERY` passed since the last fold
        line (at once after a quiet spell): a stall's last progress reaches the file at
        most that late, and a slow stream (a delta every 0.25 s) still folds."""
        if self.folded_at is None or time.monotonic() - self.folded_at >= FOLD_EVERY:
            self.fold()

    def close(self) -> None:
        """The stream ended: the folded deltas, the keep-alives dropped (so the file
        says that they came) and a last line without its newline."""
        if self.partial:
            self._line(self.partial)
            self.partial = b""
        self.fold(keepalives_too=True)

    def _out(self, data: bytes, pane: bool) -> None:
        with contextlib.suppress(OSError):
            self.sink.write(data)
        if pane:
            with contextlib.suppress(OSError):
                os.write(self.pane, data)
