"""A slowly streamed answer for :mod:`mock_anthropic`: the ``[[drip: SECONDS]]`` directive.

:class:`DripMock` is a :class:`~mock_anthropic.MockAnthropic` whose scripted reply can be sent
as the real API sends a long answer: the SSE stream starts at once, then each content block's
text (or tool input JSON) arrives in small deltas spread over ``SECONDS``, with a ``ping``
every :data:`PING_EVERY` seconds as the real API sends them. Every other directive works as
in the base mock.

``[[drip: SECONDS]]``
    The first main (tools-offering) reply of each session id is dripped over SECONDS.
``[[drip: SECONDS final]]``
    The final-text reply is dripped instead (the tool steps before it answer at once).

A resumed session (the same session id) answers at once after its first drip. Used to
measure what Claude Code's TUI shows while a long answer streams (tests/fixtures/claude/
screens/README.md, "Evidence of work") and by the interactive liveness tests.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

from support.mock_anthropic import (
    MockAnthropic,
    RecordedRequest,
    Reply,
    _Handler,
    encode_sse,
    first_user_text,
    parse_directives,
    sse_event_list,
)

PING_EVERY = 5.0
"""Seconds between the ``ping`` events of a dripped stream (the real API pings while busy)."""

PIECES_PER_SECOND = 4
"""Deltas sent per second of a drip (each carries an equal share of the block's text)."""

_DRIP_RE = re.compile(r"\[\[\s*drip\s*:\s*([0-9.]+)\s*(final)?\s*\]\]", re.I)


def parse_drip(text: str) -> tuple[float, bool] | None:
    """``(seconds, final_only)`` from the first ``[[drip: ...]]`` of ``text``, or None."""
    match = _DRIP_RE.search(text)
    if match is None:
        return None
    try:
        seconds = float(match.group(1))
    except ValueError:
        return None
    return (seconds, match.group(2) is not None) if seconds > 0 else None


def split_delta(delta: dict[str, Any], pieces: int) -> list[dict[str, Any]]:
    """One ``text_delta`` / ``input_json_delta`` cut into up to ``pieces`` consecutive ones."""
    key = "text" if delta["type"] == "text_delta" else "partial_json"
    whole = str(delta[key])
    size = max(1, -(-len(whole) // max(1, pieces)))
    return [{**delta, key: whole[i : i + size]} for i in range(0, len(whole), size)] or [delta]


def scripts_failures(body: dict[str, Any]) -> bool:
    """Whether the conversation's directives script an HTTP failure or a stall."""
    found = parse_directives(first_user_text(body.get("messages") or []))
    counted = (found.server_error, found.billing, found.auth, found.drop, found.stall_stream)
    return bool(found.ratelimit or found.overloaded or any(counted))


class DripMock(MockAnthropic):
    """:class:`MockAnthropic` plus ``[[drip: SECONDS]]`` (see the module docstring)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._dripped: set[str] = set()
        self._drip_lock = threading.Lock()

    def _handler_base(self) -> type[_Handler]:
        """Serve with :class:`_DripHandler` (the base mock's lifecycle)."""
        return _DripHandler

    def drip_for(self, body: dict[str, Any], reply: Reply, session_id: str | None) -> float:
        """Seconds over which to stream ``reply`` (0: at once); marks the drip used."""
        if not body.get("tools") or not body.get("stream") or reply.kind == "side":
            return 0.0
        drip = parse_drip(first_user_text(body.get("messages") or []))
        if drip is None or (drip[1] and reply.kind != "final"):
            return 0.0
        with self._drip_lock:
            if (session_id or "") in self._dripped:
                return 0.0
            self._dripped.add(session_id or "")
        return drip[0]


class _DripHandler(_Handler):
    server_mock: DripMock
    _cached: tuple[Any] | None = None
    """The body read ahead by :meth:`_handle`, handed to the base handler's next read."""

    def _read_body(self) -> Any:
        if self._cached is not None:
            (body,), self._cached = self._cached, None
            return body
        return super()._read_body()

    def _handle(self) -> None:
        route = self.path.split("?", 1)[0]
        if self.command != "POST" or route != "/v1/messages":
            super()._handle()
            return
        body = self._read_body()
        mock = self.server_mock
        reply = None
        if isinstance(body, dict) and not scripts_failures(body):
            reply = mock.reply_for(body)  # failures are the base mock's: never dripped
        session = self.headers.get("x-claude-code-session-id")
        seconds = mock.drip_for(body, reply, session) if reply is not None else 0.0
        if reply is None or seconds <= 0:
            self._cached = (body,)
            super()._handle()
            return
        self._record_drip(body, reply)
        self._send_dripped(body, reply, seconds)

    def _record_drip(self, body: dict[str, Any], reply: Reply) -> None:
        recorded = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            received_at=time.time(),
        )
        recorded.reply_kind = reply.kind
        recorded.status = 200
        self.server_mock.record(recorded)

    def _send_dripped(self, body: dict[str, Any], reply: Reply, seconds: float) -> None:
        mock = self.server_mock
        model = str(body.get("model") or "claude-mock")
        tokens = max(1, len(json.dumps(body.get("messages", []))) // 4)
        events = sse_event_list(mock.next_id("msg"), model, reply, tokens)
        deltas = sum(1 for name, _ in events if name == "content_block_delta")
        pieces = max(1, int(seconds * PIECES_PER_SECOND) // max(1, deltas))
        pause = seconds / max(1, pieces * deltas)
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.send_header("request-id", mock.next_id("req"))
            self.end_headers()
            last_ping = time.monotonic()
            for name, data in events:
                if name != "content_block_delta":
                    self.wfile.write(encode_sse([(name, data)]))
                    self.wfile.flush()
                    continue
                for part in split_delta(data["delta"], pieces):
                    if mock._stopping.wait(pause):
                        return
                    out = [(name, {**data, "delta": part})]
                    if time.monotonic() - last_ping >= PING_EVERY:
                        out.insert(0, ("ping", {"type": "ping"}))
                        last_ping = time.monotonic()
                    self.wfile.write(encode_sse(out))
                    self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = do_POST = do_HEAD = do_PUT = do_PATCH = do_DELETE = _handle
