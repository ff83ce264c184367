"""A small scripted mock of the Anthropic Messages API, for driving the real Claude Code CLI.

Standard library only. The server binds 127.0.0.1 on an ephemeral port; point the CLI at it with
``ANTHROPIC_BASE_URL=<mock.base_url>``.

Default script (per conversation, so per Claude Code session):

* A request that offers no ``tools`` is a side call (title, summary, ...): it gets a short text.
* A request that offers tools and whose conversation holds no ``tool_result`` yet gets one
  ``tool_use`` block calling ``Write`` to create ``<cwd>/<file_name>`` with ``file_content``;
  ``<cwd>`` is parsed from the "Primary working directory: ..." line (system prompt or, as in
  CLI 2.1.328, a ``<system-reminder>`` block of the first user message).
* Once the conversation holds a ``tool_result`` (normally in the last user message), the answer is
  the final text ``final_text`` with ``stop_reason`` "end_turn". A resumed session (whose history
  already holds the tool_result) therefore ends at once with the final text.

Directives
----------
The prompt can change the script of its own conversation with directives ``[[name: args]]``
(or ``[[name]]`` without args).
They are read from the text of the *first* user turn of the conversation (every user message
before the first assistant message), so they survive ``--resume``, whose history repeats that
turn. Text after a directive is free; unknown names are ignored; ``args`` may not contain ``]]``.

``[[bash: CMD]]`` (may repeat)
    A step that issues a ``Bash`` tool_use with input
    ``{"command": CMD, "description": "Mock step K: run a shell command"}``.
``[[write: NAME]]`` / ``[[write: NAME | TEXT]]`` (may repeat)
    A step that issues a ``Write`` of ``<cwd>/NAME`` with ``file_content`` (or ``TEXT`` and
    a newline).
``[[tool: NAME | JSON]]`` (may repeat)
    A step that calls the offered tool NAME (an MCP tool too) with the JSON object as its
    input, ``{{task_id}}`` / ``{{last_result}}`` taken from the step before: see
    :mod:`mock_tool_calls`.
``[[final: TEXT]]``
    The final text of this conversation (overrides ``final_text``).
``[[ratelimit: N]]`` / ``[[ratelimit: N reset=EPOCH]]`` / ``[[ratelimit: N reset=+S]]``
    The first N main (tools-offering) requests of this session id get HTTP 429
    (``rate_limit_error``) with ``x-should-retry: false``. With ``reset=`` (Unix seconds, or
    ``+S`` = S seconds after the request arrives) they also carry ``retry-after`` and the
    subscription rate-limit headers ``anthropic-ratelimit-unified-status: rejected``,
    ``anthropic-ratelimit-unified-reset: EPOCH`` and, by default,
    ``anthropic-ratelimit-unified-representative-claim: five_hour`` (plus the matching
    ``-5h-status``/``-5h-reset``). Options: ``claim=seven_day`` (weekly limit, ``-7d-*``),
    ``claim=none`` (no claim header). What CLI 2.1.328 prints: with a plain bearer token always
    ``API Error: Request rejected (429) · mock rate limit (1/1)``; with :func:`gateway_token`
    as ``ANTHROPIC_AUTH_TOKEN`` and a claim, ``You've hit your 5-hour limit · resets 4:56am
    (UTC)`` (``weekly limit · resets Nov 25, 2:16pm (UTC)``) and a ``rate_limit_event`` line;
    with the gateway token and ``claim=none``, ``API Error: Server is temporarily limiting
    requests (not your usage limit) · mock rate limit (1/1)``. See ``docs/claude-hooks.md``.
``[[overloaded: N]]``
    The next N main requests (after the rate-limited ones) get HTTP 529 ``overloaded_error``
    (without ``x-should-retry``, so the CLI retries with backoff).
``[[server_error: N]]``
    The next N main requests (after those above) get HTTP 500 ``api_error`` "Internal server
    error" (the CLI retries it; with ``CLAUDE_CODE_MAX_RETRIES=R``, N > R outlasts its retries:
    the run ends ``is_error`` with "API Error: 500 ...", exit 1).
``[[billing: N]]`` / ``[[auth: N]]``
    The next N main requests (N defaults to 1) get the real API's permanent errors: HTTP 400
    ``invalid_request_error`` "Your credit balance is too low to access the Anthropic API. ..."
    (:data:`BILLING_MESSAGE`), or HTTP 401 ``authentication_error`` "invalid x-api-key".
``[[drop: N]]``
    The next N main requests are answered by closing the connection with a TCP reset (no HTTP
    response): the CLI sees a connection reset. For connection *refused*, see
    :meth:`MockAnthropic.go_offline`.
``[[stall_stream: N]]``
    The next N main requests stall mid-turn: the SSE stream starts (``message_start``,
    ``ping``, the first text block's start and delta), then goes silent until
    :meth:`MockAnthropic.release_stalls` (the rest is sent) or :meth:`MockAnthropic.stop`
    (the connection is closed). In ``-p --output-format stream-json`` mode the CLI prints
    nothing meanwhile, as during a real API stall.

The per-session count runs through the directives in the order listed: ``ratelimit``,
``overloaded``, ``server_error``, ``billing``, ``auth``, ``drop``, ``stall_stream``,
``ping_stall``; a
resumed session keeps its count, so its later requests are answered normally.
``[[slow_write: NAME S]]`` / ``[[ping_stall: N]]``
    A Write step whose block streams for S seconds, and a stall that sends only SSE pings:
    see :mod:`mock_streaming`.
``[[stall_final_once: S]]``
    The first time the final-answer turn is requested for this session id, the mock waits S
    seconds (float) before answering, so a test can kill the agent mid-run; later requests
    answer at once. :meth:`MockAnthropic.stop` ends the wait.

Steps: the ``bash`` and ``write`` directives form a list of tool steps in the order written;
with none, the list is the default ``Write(<cwd>/<file_name>)``. Step k (1-based) is issued when
the conversation holds k-1 ``tool_result`` blocks (whatever their outcome, so a denied or failed
tool still advances the script); once every step has a result the answer is the final text.
One tool_use per turn.

Every request is recorded (method, path, lower-cased headers, parsed JSON body, what was answered
as ``reply_kind``: "tool_use", "final", "side", "error", "ratelimit", "overloaded",
"server_error", "billing", "auth", "dropped", "stalled", "ping_stalled" or "other",
and the HTTP ``status``) in :attr:`MockAnthropic.requests`, so tests can assert on session ids
and on resumed histories.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from support import mock_streaming, mock_tool_calls

SESSION_HEADER = "x-claude-code-session-id"
"""Header (lower-cased) in which Claude Code sends its session id."""

_CWD_RE = re.compile(r"Primary working directory:\s*(\S[^\n]*)")
_DIRECTIVE_RE = re.compile(r"\[\[\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?::\s*(.*?))?\s*\]\]", re.S)

_COUNTED = ("server_error", "billing", "auth", "drop", "stall_stream", "ping_stall")
"""Directives that take a count only (``[[name: N]]``, N defaults to 1)."""

BILLING_MESSAGE = (
    "Your credit balance is too low to access the Anthropic API. "
    "Please go to Plans & Billing to upgrade or purchase credits."
)
"""The real API's 400 ``invalid_request_error`` message for an empty credit balance."""

STALL_PREFIX_EVENTS = 4
"""SSE events a stalled stream sends before going silent: message_start, ping, the first
block's content_block_start and its first delta."""

CLAIM_HEADERS = {
    "five_hour": ("5h", "session limit"),
    "seven_day": ("7d", "weekly limit"),
}
"""``claim=`` values of the ratelimit directive: header infix and the CLI's words for them."""


@dataclass
class RecordedRequest:
    """One HTTP request the mock received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    reply_kind: str = ""
    """What the mock answered: "tool_use", "final", "side", "error" (script could not run: no
    cwd or tool not offered), "ratelimit" (429), "overloaded" (529), "server_error" (500),
    "billing" (400), "auth" (401), "dropped" (connection reset), "stalled" (stream started,
    then silent) or "other" (not a ``/v1/messages`` POST)."""
    status: int = 200
    """The HTTP status of the answer."""
    tool_name: str | None = None
    """For ``reply_kind == "tool_use"``: the tool called ("Write" or "Bash")."""
    received_at: float = 0.0
    """``time.time()`` when the request arrived."""

    @property
    def session_id(self) -> str | None:
        """The ``X-Claude-Code-Session-Id`` header, if any."""
        return self.headers.get(SESSION_HEADER)

    @property
    def is_messages(self) -> bool:
        """True for ``POST /v1/messages`` (any query string)."""
        return self.method == "POST" and self.path.split("?", 1)[0] == "/v1/messages"

    @property
    def offers_tools(self) -> bool:
        """True if the body offers tools (i.e. it is a main agent turn, not a side call)."""
        return isinstance(self.body, dict) and bool(self.body.get("tools"))

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The ``messages`` list of the body (empty if none)."""
        if isinstance(self.body, dict) and isinstance(self.body.get("messages"), list):
            return self.body["messages"]
        return []


@dataclass
class Reply:
    """A scripted assistant reply: a list of content blocks plus the stop reason."""

    content: list[dict[str, Any]]
    stop_reason: str
    kind: str
    stream_seconds: float = 0.0
    """Seconds the tool_use block's input streams (``slow_write``; 0: at once)."""


@dataclass
class Directives:
    """The directives of one conversation (see the module docstring)."""

    steps: list[tuple[str, str]] = field(default_factory=list)
    """Tool steps in order: ``("bash", command)`` or ``("write", file name)``."""
    final: str | None = None
    ratelimit: int = 0
    reset: str | None = None
    """Raw ``reset=`` value: ``"EPOCH"`` or ``"+S"``; None for no reset headers."""
    claim: str | None = "five_hour"
    """``anthropic-ratelimit-unified-representative-claim`` sent with a reset (None: none)."""
    overloaded: int = 0
    server_error: int = 0
    billing: int = 0
    auth: int = 0
    drop: int = 0
    stall_stream: int = 0
    ping_stall: int = 0
    stall_final_once: float = 0.0


def parse_directives(text: str) -> Directives:
    """Parse every ``[[name: args]]`` directive of ``text`` (unknown names are ignored)."""
    found = Directives()
    for match in _DIRECTIVE_RE.finditer(text):
        name, args = match.group(1).lower(), (match.group(2) or "").strip()
        if name in ("bash", "write", "slow_write", "tool"):
            found.steps.append((name, args))
        elif name == "final":
            found.final = args
        elif name in ("ratelimit", "overloaded"):
            words = args.split()
            count = int(words[0]) if words and words[0].isdigit() else 1
            if name == "overloaded":
                found.overloaded = count
                continue
            found.ratelimit = count
            for word in words[1:]:
                key, _, value = word.partition("=")
                if key == "reset" and value:
                    found.reset = value
                elif key == "claim":
                    found.claim = None if value in ("", "none") else value
        elif name in _COUNTED:
            words = args.split()
            setattr(found, name, int(words[0]) if words and words[0].isdigit() else 1)
        elif name == "stall_final_once":
            with contextlib.suppress(ValueError):
                found.stall_final_once = float(args)
    return found


def first_user_text(messages: list[dict[str, Any]]) -> str:
    """The text of the first user turn: every user message before the first assistant one."""
    texts = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            break
        if message.get("role") == "user":
            texts.append(message_text(message))
    return "\n".join(texts)


def count_tool_results(messages: list[dict[str, Any]]) -> int:
    """The number of ``tool_result`` blocks in the user messages of the conversation."""
    total = 0
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                total += sum(
                    1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
                )
    return total


def gateway_token(subject: str = "mock-user", ttl: int = 86400) -> str:
    """An unsigned JWT with ``"aud": "claude-gateway"``, to use as ``ANTHROPIC_AUTH_TOKEN``.

    With such a bearer token and a non-Anthropic ``ANTHROPIC_BASE_URL``, CLI 2.1.328 believes it
    is signed in to a gateway (it decodes the payload without checking a signature) and then
    turns a 429 that carries ``anthropic-ratelimit-unified-representative-claim`` into the
    subscriber text ``You've hit your 5-hour limit · resets 4:56am (UTC)`` plus a
    ``rate_limit_event`` stream-json line. With a plain token it prints
    ``API Error: Request rejected (429) · <error.message>`` instead.
    """

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    claims = {"aud": "claude-gateway", "sub": subject, "exp": int(time.time()) + ttl}
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.bW9jaw"


def reset_epoch(raw: str, now: float) -> int:
    """Resolve a ``reset=`` value: ``"+S"`` is ``now + S`` seconds, else Unix seconds."""
    if raw.startswith("+"):
        return int(now + float(raw[1:]))
    return int(float(raw))


@dataclass
class ErrorReply:
    """A scripted HTTP error answer."""

    status: int
    headers: dict[str, str]
    body: dict[str, Any]
    kind: str


def system_text(body: dict[str, Any]) -> str:
    """Return the system prompt of a request body as one string (it may be a list of blocks)."""
    system = body.get("system")
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(b.get("text", "") for b in system if isinstance(b, dict))
    return ""


def message_text(message: dict[str, Any]) -> str:
    """Return the text blocks of one message as one string (content may be a str or blocks)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def working_directory(body: dict[str, Any]) -> str | None:
    """Parse the agent's working directory ("Primary working directory: ..."), or None.

    Older CLI versions put that line in the system prompt; 2.1.328 puts it in a
    ``<system-reminder>`` text block of the first user message, so both places are searched.
    """
    texts = [system_text(body)]
    texts += [
        message_text(m)
        for m in body.get("messages") or []
        if isinstance(m, dict) and m.get("role") == "user"
    ]
    for text in texts:
        match = _CWD_RE.search(text)
        if match:
            return match.group(1).strip()
    return None


def _has_tool_result(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def conversation_has_tool_result(messages: list[dict[str, Any]]) -> bool:
    """True if any user message of the conversation carries a ``tool_result`` block."""
    return any(m.get("role") == "user" and _has_tool_result(m) for m in messages)


def last_user_has_tool_result(messages: list[dict[str, Any]]) -> bool:
    """True if the last user message carries a ``tool_result`` block."""
    users = [m for m in messages if m.get("role") == "user"]
    return bool(users) and _has_tool_result(users[-1])


def sse_events(message_id: str, model: str, reply: Reply, input_tokens: int) -> bytes:
    """Encode ``reply`` as the SSE stream of the real Messages API."""
    return encode_sse(sse_event_list(message_id, model, reply, input_tokens))


def encode_sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    """Encode ``(event name, data)`` pairs as SSE text."""
    return b"".join(
        f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
    )


def sse_event_list(
    message_id: str, model: str, reply: Reply, input_tokens: int
) -> list[tuple[str, dict[str, Any]]]:
    """The SSE events of ``reply`` as ``(event name, data)`` pairs, in order."""
    out: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": input_tokens,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": 0,
                        "output_tokens": 1,
                    },
                },
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    output_tokens = 0
    for index, block in enumerate(reply.content):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
            output_tokens += max(1, len(block["text"]) // 4)
        else:  # tool_use
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            partial = json.dumps(block["input"])
            delta = {"type": "input_json_delta", "partial_json": partial}
            output_tokens += max(1, len(partial) // 4)
        out.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        out.append(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        )
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    out.append(("message_stop", {"type": "message_stop"}))
    return out


def json_message(message_id: str, model: str, reply: Reply, input_tokens: int) -> dict[str, Any]:
    """Encode ``reply`` as a non-streaming Messages API response body."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": reply.content,
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 10,
        },
    }


def later_failure(directives: Directives, number: int) -> ErrorReply | None:
    """The failure for the ``number``-th main request counted after the 429s and 529s: 500s,
    then 400 billing, 401 auth, dropped connections and stalled streams (None: answer)."""
    plan: list[tuple[int, ErrorReply]] = [
        (
            directives.server_error,
            _api_error(500, "api_error", "Internal server error", "server_error"),
        ),
        (directives.billing, _api_error(400, "invalid_request_error", BILLING_MESSAGE, "billing")),
        (directives.auth, _api_error(401, "authentication_error", "invalid x-api-key", "auth")),
        (directives.drop, ErrorReply(0, {}, {}, "dropped")),
        (directives.stall_stream, ErrorReply(200, {}, {}, "stalled")),
        (directives.ping_stall, ErrorReply(200, {}, {}, "ping_stalled")),
    ]
    for count, reply in plan:
        if number <= count:
            return reply
        number -= count
    return None


def _api_error(status: int, error_type: str, message: str, kind: str) -> ErrorReply:
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    return ErrorReply(status, {}, body, kind)


class MockAnthropic:
    """The scripted mock server. Use as a context manager or call :meth:`start`/:meth:`stop`."""

    def __init__(
        self,
        final_text: str = "DONE: wrote hello.txt",
        file_name: str = "hello.txt",
        file_content: str = "hello from mock\n",
        side_text: str = "Mock title",
    ) -> None:
        self.final_text = final_text
        self.file_name = file_name
        self.file_content = file_content
        self.side_text = side_text
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._main_counts: dict[str, int] = {}
        self._stalled: set[str] = set()
        self._stopping = threading.Event()
        self._released = threading.Event()
        self._port = 0

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, port: int = 0) -> MockAnthropic:
        """Bind 127.0.0.1 on ``port`` (0: an ephemeral one) and serve in a daemon thread."""
        mock = self
        self._stopping.clear()

        class Handler(self._handler_base()):  # type: ignore[misc]
            server_mock = mock

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._port = self._server.server_address[1]
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="mock-anthropic",
            daemon=True,
        )
        self._thread.start()
        return self

    def _handler_base(self) -> type[_Handler]:
        """The request handler class to serve with (a subclass of the mock may extend it)."""
        return _Handler

    def stop(self) -> None:
        """Stop serving and close the socket (ends any ``stall_final_once`` wait)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def go_offline(self) -> None:
        """Stop listening but keep the port: connections are refused (ECONNREFUSED) until
        :meth:`go_online`. Ends stalled streams, like :meth:`stop`."""
        self.stop()

    def go_online(self) -> MockAnthropic:
        """Listen again on the port used before :meth:`go_offline` (same ``base_url``)."""
        return self.start(self._port)

    def release_stalls(self) -> None:
        """Let every stream stalled by ``stall_stream`` (now or later) send the rest."""
        self._released.set()

    def wait_released(self, seconds: float | None = None) -> bool | None:
        """Block a stalled stream until :meth:`release_stalls` (True) or :meth:`stop`
        (False); ``None`` once ``seconds`` passed without either (``None``: no limit)."""
        end = None if seconds is None else time.monotonic() + seconds
        while not self._stopping.is_set():
            if self._released.wait(0.1):
                return True
            if end is not None and time.monotonic() >= end:
                return None
        return False

    def wait_stopped(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when the mock stopped meanwhile."""
        return self._stopping.wait(seconds)

    def __enter__(self) -> MockAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (also while offline after :meth:`go_offline`)."""
        assert self._port, "mock never started"
        return self._port

    @property
    def base_url(self) -> str:
        """Value for ``ANTHROPIC_BASE_URL``."""
        return f"http://127.0.0.1:{self.port}"

    # -- queries for tests -----------------------------------------------------------------------

    def snapshot(self) -> list[RecordedRequest]:
        """A copy of the recorded requests (safe while the server still runs)."""
        with self._lock:
            return list(self.requests)

    def message_requests(self, session_id: str | None = None) -> list[RecordedRequest]:
        """Recorded ``POST /v1/messages`` requests, optionally only those of one session."""
        return [
            r
            for r in self.snapshot()
            if r.is_messages and (session_id is None or r.session_id == session_id)
        ]

    def session_ids(self) -> set[str]:
        """Every session id seen in a ``/v1/messages`` request."""
        return {r.session_id for r in self.message_requests() if r.session_id}

    # -- script ----------------------------------------------------------------------------------

    def next_id(self, prefix: str) -> str:
        """A fresh id such as ``msg_mock000001``."""
        with self._lock:
            return f"{prefix}_mock{next(self._ids):06d}"

    def reply_for(self, body: dict[str, Any]) -> Reply:
        """Decide the scripted reply (no HTTP error, no delay) for one Messages request body."""
        if not body.get("tools"):
            return Reply([{"type": "text", "text": self.side_text}], "end_turn", "side")
        messages = body.get("messages") or []
        directives = parse_directives(first_user_text(messages))
        steps = directives.steps or [("write", self.file_name)]
        done = count_tool_results(messages)
        if done >= len(steps):
            final = directives.final if directives.final is not None else self.final_text
            return Reply([{"type": "text", "text": final}], "end_turn", "final")
        kind, arg = steps[done]
        if kind == "tool":  # [[tool: NAME | JSON]] (mock_tool_calls.py)
            offered = {t.get("name") for t in body["tools"] if isinstance(t, dict)}
            block, error = mock_tool_calls.tool_use_block(
                arg, messages, offered, self.next_id("toolu")
            )
            if block is None:
                return Reply([{"type": "text", "text": error}], "end_turn", "error")
            return Reply([block], "tool_use", "tool_use")
        tool = "Bash" if kind == "bash" else "Write"
        seconds = 0.0
        if kind == "slow_write":
            arg, seconds = mock_streaming.parse_slow_write(arg)
        cwd = working_directory(body)
        tool_names = {t.get("name") for t in body["tools"] if isinstance(t, dict)}
        if (kind == "write" and cwd is None) or tool not in tool_names:
            text = f"MOCK ERROR: cwd={cwd!r}, {tool} offered={tool in tool_names}"
            return Reply([{"type": "text", "text": text}], "end_turn", "error")
        if kind == "bash":
            tool_input = {
                "command": arg,
                "description": f"Mock step {done + 1}: run a shell command",
            }
            text = f"I will run: {arg}"
        else:
            assert cwd is not None
            name, _, text = arg.partition(" | ")  # [[write: NAME | TEXT]]: TEXT + newline
            content = f"{text}\n" if text else self.file_content
            content = mock_streaming.slow_content(seconds) if seconds else content
            tool_input = {"file_path": f"{cwd.rstrip('/')}/{name}", "content": content}
            text = f"I will write {arg}."
        tool_use = {
            "type": "tool_use",
            "id": self.next_id("toolu"),
            "name": tool,
            "input": tool_input,
        }
        content_blocks = [{"type": "text", "text": text}, tool_use]
        return Reply(content_blocks, "tool_use", "tool_use", stream_seconds=seconds)

    def error_for(
        self, body: dict[str, Any], session_id: str | None, now: float | None = None
    ) -> ErrorReply | None:
        """The scripted failure for this request, or None for a normal answer.

        Counts the main (tools-offering) requests of ``session_id``; call once per request.
        The kinds ``dropped`` and ``stalled`` are not HTTP errors: the handler resets the
        connection, or starts the stream and stalls it (their ``status`` is 0 and 200).
        """
        if not body.get("tools"):
            return None
        directives = parse_directives(first_user_text(body.get("messages") or []))
        counted = (directives.server_error, directives.billing, directives.auth)
        counted += (directives.drop, directives.stall_stream, directives.ping_stall)
        if not (directives.ratelimit or directives.overloaded or any(counted)):
            return None
        key = session_id or ""
        with self._lock:
            self._main_counts[key] = number = self._main_counts.get(key, 0) + 1
        now = time.time() if now is None else now
        if number <= directives.ratelimit:
            headers = {"x-should-retry": "false"}
            message = f"mock rate limit ({number}/{directives.ratelimit})"
            if directives.reset is not None:
                epoch = reset_epoch(directives.reset, now)
                headers["retry-after"] = str(max(0, int(epoch - now)))
                headers["anthropic-ratelimit-unified-status"] = "rejected"
                headers["anthropic-ratelimit-unified-reset"] = str(epoch)
                if directives.claim:
                    headers["anthropic-ratelimit-unified-representative-claim"] = directives.claim
                    infix = CLAIM_HEADERS.get(directives.claim, (None,))[0]
                    if infix:
                        headers[f"anthropic-ratelimit-unified-{infix}-status"] = "rejected"
                        headers[f"anthropic-ratelimit-unified-{infix}-reset"] = str(epoch)
            body_json = {
                "type": "error",
                "error": {"type": "rate_limit_error", "message": message},
            }
            return ErrorReply(429, headers, body_json, "ratelimit")
        if number <= directives.ratelimit + directives.overloaded:
            body_json = {
                "type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"},
            }
            return ErrorReply(529, {}, body_json, "overloaded")
        return later_failure(directives, number - directives.ratelimit - directives.overloaded)

    def stall_for(self, body: dict[str, Any], reply: Reply, session_id: str | None) -> float:
        """Seconds to wait before sending ``reply`` (``stall_final_once``); marks the stall used."""
        if reply.kind != "final":
            return 0.0
        directives = parse_directives(first_user_text(body.get("messages") or []))
        if directives.stall_final_once <= 0:
            return 0.0
        key = session_id or ""
        with self._lock:
            if key in self._stalled:
                return 0.0
            self._stalled.add(key)
        return directives.stall_final_once

    def wait(self, seconds: float) -> None:
        """Sleep up to ``seconds``; returns early when the mock stops."""
        self._stopping.wait(seconds)

    def record(self, request: RecordedRequest) -> None:
        """Append one request to :attr:`requests`."""
        with self._lock:
            self.requests.append(request)


class _Handler(BaseHTTPRequestHandler):
    """HTTP handler; ``server_mock`` is bound by :meth:`MockAnthropic.start`."""

    server_mock: MockAnthropic
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def handle(self) -> None:
        """Serve the connection; a client that resets an idle keep-alive connection is normal."""
        try:
            super().handle()
        except (ConnectionResetError, BrokenPipeError):
            self.close_connection = True

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _send(
        self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("request-id", self.server_mock.next_id("req"))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The client went away (e.g. a test killed the agent during a stall).
            self.close_connection = True

    def _reset_connection(self) -> None:
        """Close the connection with a TCP reset (SO_LINGER 0), sending no response."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            linger = struct.pack("ii", 1, 0)
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            self.connection.close()

    def _send_pieces(self, pieces: Iterable[tuple[float, list[tuple[str, Any]]]]) -> None:
        """Answer 200 with an SSE body that ends with the connection (no Content-Length),
        sending each ``(delay, events)`` piece after its delay; a stopped mock closes it."""
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.send_header("request-id", self.server_mock.next_id("req"))
            self.end_headers()
            for delay, events in pieces:
                if delay > 0 and self.server_mock.wait_stopped(delay):
                    return
                self.wfile.write(encode_sse(events))
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _handle(self) -> None:
        mock = self.server_mock
        body = self._read_body() if self.command in ("POST", "PUT", "PATCH") else None
        recorded = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            received_at=time.time(),
        )
        route = self.path.split("?", 1)[0]
        if self.command == "POST" and route == "/v1/messages/count_tokens":
            recorded.reply_kind = "other"
            mock.record(recorded)
            self._send(200, json.dumps({"input_tokens": 100}).encode(), "application/json")
            return
        if not (self.command == "POST" and route == "/v1/messages" and isinstance(body, dict)):
            recorded.reply_kind = "other"
            mock.record(recorded)
            self._send(200, b"{}", "application/json")
            return
        error = mock.error_for(body, recorded.session_id, recorded.received_at)
        if error is not None and error.kind == "dropped":
            recorded.reply_kind, recorded.status = error.kind, 0
            mock.record(recorded)
            self._reset_connection()
            return
        stalled = error is not None and error.kind in ("stalled", "ping_stalled")
        if error is not None and not stalled:
            recorded.reply_kind = error.kind
            recorded.status = error.status
            mock.record(recorded)
            self._send(
                error.status, json.dumps(error.body).encode(), "application/json", error.headers
            )
            return
        reply = mock.reply_for(body)
        recorded.reply_kind = error.kind if error is not None and stalled else reply.kind
        if reply.kind == "tool_use":
            recorded.tool_name = next(
                (b["name"] for b in reply.content if b.get("type") == "tool_use"), None
            )
        mock.record(recorded)
        delay = mock.stall_for(body, reply, recorded.session_id)
        if delay > 0:
            mock.wait(delay)
        model = str(body.get("model") or "claude-mock")
        message_id = mock.next_id("msg")
        input_tokens = max(1, len(json.dumps(body.get("messages", []))) // 4)
        events = sse_event_list(message_id, model, reply, input_tokens)
        if stalled and body.get("stream"):
            assert error is not None
            pings = error.kind == "ping_stalled"
            prefix = 1 if pings else STALL_PREFIX_EVENTS
            self._send_pieces(mock_streaming.stalled(mock, events, prefix, pings))
        elif body.get("stream") and reply.stream_seconds > 0:
            self._send_pieces(mock_streaming.paced(events, reply.stream_seconds))
        elif body.get("stream"):
            payload = sse_events(message_id, model, reply, input_tokens)
            self._send(200, payload, "text/event-stream", {"Cache-Control": "no-cache"})
        else:
            payload = json.dumps(json_message(message_id, model, reply, input_tokens)).encode()
            self._send(200, payload, "application/json")

    do_GET = do_POST = do_HEAD = do_PUT = do_PATCH = do_DELETE = _handle


def main() -> None:
    """Run the mock in the foreground (for manual experiments); prints the base URL."""
    import argparse
    import time

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--final-text", default="DONE: wrote hello.txt")
    parser.add_argument("--log", help="append each request as a JSON line to this file")
    args = parser.parse_args()
    mock = MockAnthropic(final_text=args.final_text).start()
    print(mock.base_url, flush=True)
    seen = 0
    try:
        while True:
            time.sleep(0.2)
            reqs = mock.snapshot()
            for r in reqs[seen:]:
                line = json.dumps(
                    {
                        "method": r.method,
                        "path": r.path,
                        "headers": r.headers,
                        "body": r.body,
                        "reply": r.reply_kind,
                        "status": r.status,
                        "time": r.received_at,
                    }
                )
                print(
                    f"{r.method} {r.path} session={r.session_id} reply={r.reply_kind}"
                    f" status={r.status}",
                    flush=True,
                )
                if args.log:
                    with open(args.log, "a", encoding="utf-8") as fh:
                        fh.write(line + "\n")
            seen = len(reqs)
    except KeyboardInterrupt:
        pass
    finally:
        mock.stop()


if __name__ == "__main__":
    main()
