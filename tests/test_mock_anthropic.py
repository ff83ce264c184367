"""Fast unit tests of :mod:`mock_anthropic`'s script and directives (no Claude Code CLI).

Requests are POSTed with ``urllib`` in the shape CLI 2.1.328 sends: ``POST /v1/messages?beta=true``,
``stream: true``, an ``x-claude-code-session-id`` header, and the working directory in a
``<system-reminder>`` block of the first user message.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import wait_for

# tests/ is on sys.path (pytest's rootdir-relative import mode, like conftest).
from support.mock_anthropic import MockAnthropic, first_user_text, gateway_token, parse_directives

CWD = "/tmp/mock-project"
TOOLS = [{"name": name, "input_schema": {}} for name in ("Bash", "Write", "Read")]


@pytest.fixture
def mock() -> Iterator[MockAnthropic]:
    server = MockAnthropic(final_text="DONE default").start()
    try:
        yield server
    finally:
        server.stop()


def first_user(prompt: str) -> dict[str, Any]:
    reminder = f"<system-reminder>\n- Primary working directory: {CWD}\n</system-reminder>"
    return {
        "role": "user",
        "content": [{"type": "text", "text": reminder}, {"type": "text", "text": prompt}],
    }


def tool_result(tool_use_id: str, text: str = "ok", is_error: bool = False) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": text}
    if is_error:
        block["is_error"] = True
    return {"role": "user", "content": [block]}


def post(
    mock: MockAnthropic,
    messages: list[dict[str, Any]],
    session: str = "sess-1",
    tools: list[dict[str, Any]] | None = TOOLS,
    stream: bool = True,
) -> tuple[int, dict[str, str], bytes]:
    body: dict[str, Any] = {"model": "claude-sonnet-4-6", "messages": messages, "stream": stream}
    if tools:
        body["tools"] = tools
    request = urllib.request.Request(
        f"{mock.base_url}/v1/messages?beta=true",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Claude-Code-Session-Id": session},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return (
                response.status,
                {k.lower(): v for k, v in response.headers.items()},
                (response.read()),
            )
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def sse_message(payload: bytes) -> dict[str, Any]:
    """Rebuild the assistant message (content blocks + stop_reason) from an SSE stream."""
    events = []
    for chunk in payload.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    blocks: list[dict[str, Any]] = []
    stop_reason = None
    for name, data in events:
        if name == "content_block_start":
            blocks.append(dict(data["content_block"]))
        elif name == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                blocks[data["index"]]["text"] += delta["text"]
            else:
                blocks[data["index"]]["input"] = json.loads(delta["partial_json"])
        elif name == "message_delta":
            stop_reason = data["delta"]["stop_reason"]
    return {"content": blocks, "stop_reason": stop_reason}


def turn(
    mock: MockAnthropic, messages: list[dict[str, Any]], session: str = "sess-1"
) -> dict[str, Any]:
    status, headers, payload = post(mock, messages, session)
    assert status == 200, payload
    assert headers["content-type"] == "text/event-stream"
    return sse_message(payload)


def tool_use_of(message: dict[str, Any]) -> dict[str, Any]:
    (block,) = [b for b in message["content"] if b["type"] == "tool_use"]
    return block


def final_text(message: dict[str, Any]) -> str:
    assert message["stop_reason"] == "end_turn"
    return "".join(b["text"] for b in message["content"] if b["type"] == "text")


def test_default_script_write_then_final(mock: MockAnthropic) -> None:
    history = [first_user("please work")]
    first = turn(mock, history)
    assert first["stop_reason"] == "tool_use"
    use = tool_use_of(first)
    assert use["name"] == "Write"
    assert use["input"] == {"file_path": f"{CWD}/hello.txt", "content": "hello from mock\n"}
    history += [{"role": "assistant", "content": first["content"]}, tool_result(use["id"])]
    assert final_text(turn(mock, history)) == "DONE default"
    kinds = [(r.reply_kind, r.tool_name, r.status) for r in mock.message_requests("sess-1")]
    assert kinds == [("tool_use", "Write", 200), ("final", None, 200)]


def test_side_call_without_tools(mock: MockAnthropic) -> None:
    status, _, payload = post(mock, [first_user("[[ratelimit: 5]]")], tools=None)
    assert status == 200
    assert final_text(sse_message(payload)) == "Mock title"
    assert mock.message_requests()[0].reply_kind == "side"


def test_bash_steps_in_order_then_final(mock: MockAnthropic) -> None:
    prompt = "do it [[bash: echo one > a.txt]] then [[bash: ls -la]] [[final: ALL DONE]]"
    history = [first_user(prompt)]
    commands = []
    for _ in range(2):
        reply = turn(mock, history)
        use = tool_use_of(reply)
        assert use["name"] == "Bash"
        assert set(use["input"]) == {"command", "description"}
        commands.append(use["input"]["command"])
        history += [{"role": "assistant", "content": reply["content"]}, tool_result(use["id"])]
    assert commands == ["echo one > a.txt", "ls -la"]
    assert final_text(turn(mock, history)) == "ALL DONE"
    assert [r.tool_name for r in mock.message_requests()] == ["Bash", "Bash", None]


def test_denied_tool_result_still_advances(mock: MockAnthropic) -> None:
    history = [first_user("[[bash: rm -rf /nope]]")]
    reply = turn(mock, history)
    use = tool_use_of(reply)
    history += [
        {"role": "assistant", "content": reply["content"]},
        tool_result(use["id"], "denied", is_error=True),
    ]
    assert final_text(turn(mock, history)) == "DONE default"


def test_write_directive_and_mixed_order(mock: MockAnthropic) -> None:
    history = [first_user("[[write: notes/out.md]] [[bash: cat notes/out.md]]")]
    reply = turn(mock, history)
    use = tool_use_of(reply)
    assert use["name"] == "Write"
    assert use["input"]["file_path"] == f"{CWD}/notes/out.md"
    history += [{"role": "assistant", "content": reply["content"]}, tool_result(use["id"])]
    assert tool_use_of(turn(mock, history))["input"]["command"] == "cat notes/out.md"


def test_directives_only_from_first_user_turn(mock: MockAnthropic) -> None:
    # A resumed history: first turn done, then a new user message with a directive: ignored.
    history = [first_user("[[final: FROM FIRST]]")]
    reply = turn(mock, history)
    use = tool_use_of(reply)
    history += [
        {"role": "assistant", "content": reply["content"]},
        tool_result(use["id"]),
        {"role": "assistant", "content": [{"type": "text", "text": "FROM FIRST"}]},
        {"role": "user", "content": [{"type": "text", "text": "continue [[bash: echo no]]"}]},
    ]
    assert final_text(turn(mock, history)) == "FROM FIRST"


def test_parse_directives() -> None:
    found = parse_directives(
        "x [[bash: a && [ -f b ] ]] [[write:  f.txt ]] [[final: multi word text]] "
        "[[ratelimit: 2 reset=+90 claim=seven_day]] [[overloaded: 1]] "
        "[[stall_final_once: 2.5]] [[unknown: 1]] [[server_error: 3]] [[billing]] "
        "[[stall_stream: 2]]"
    )
    assert found.steps == [("bash", "a && [ -f b ]"), ("write", "f.txt")]
    assert found.final == "multi word text"
    assert (found.ratelimit, found.reset, found.claim) == (2, "+90", "seven_day")
    assert found.overloaded == 1
    assert found.stall_final_once == 2.5
    assert (found.server_error, found.billing, found.auth) == (3, 1, 0)
    assert (found.drop, found.stall_stream) == (0, 2)
    assert parse_directives("[[ratelimit: 1 reset=5 claim=none]]").claim is None
    assert parse_directives("nothing here").steps == []


def test_first_user_text_spans_user_messages_before_assistant() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "c"},
        {"role": "user", "content": "d"},
    ]
    assert first_user_text(messages) == "a\nb"


def test_ratelimit_plain_then_success(mock: MockAnthropic) -> None:
    history = [first_user("[[ratelimit: 2]]")]
    for _ in range(2):
        status, headers, payload = post(mock, history)
        assert status == 429
        assert headers["x-should-retry"] == "false"
        assert "anthropic-ratelimit-unified-status" not in headers
        assert "retry-after" not in headers
        assert json.loads(payload)["error"]["type"] == "rate_limit_error"
    # Another session is counted on its own.
    assert post(mock, history, session="sess-2")[0] == 429
    assert tool_use_of(turn(mock, history))["name"] == "Write"
    kinds = [r.reply_kind for r in mock.message_requests("sess-1")]
    assert kinds == ["ratelimit", "ratelimit", "tool_use"]
    assert [r.status for r in mock.message_requests("sess-1")] == [429, 429, 200]


def test_ratelimit_reset_headers(mock: MockAnthropic) -> None:
    before = int(time.time())
    status, headers, _ = post(mock, [first_user("[[ratelimit: 1 reset=+120]]")])
    assert status == 429
    epoch = int(headers["anthropic-ratelimit-unified-reset"])
    assert before + 119 <= epoch <= int(time.time()) + 120
    assert headers["anthropic-ratelimit-unified-status"] == "rejected"
    assert headers["anthropic-ratelimit-unified-representative-claim"] == "five_hour"
    assert headers["anthropic-ratelimit-unified-5h-status"] == "rejected"
    assert headers["anthropic-ratelimit-unified-5h-reset"] == str(epoch)
    assert 118 <= int(headers["retry-after"]) <= 120
    assert headers["x-should-retry"] == "false"

    status, headers, _ = post(
        mock, [first_user("[[ratelimit: 1 reset=1900000000 claim=none]]")], session="s2"
    )
    assert status == 429
    assert headers["anthropic-ratelimit-unified-reset"] == "1900000000"
    assert "anthropic-ratelimit-unified-representative-claim" not in headers


def test_overloaded_after_ratelimit(mock: MockAnthropic) -> None:
    history = [first_user("[[ratelimit: 1]] [[overloaded: 1]]")]
    assert post(mock, history)[0] == 429
    status, headers, payload = post(mock, history)
    assert status == 529
    assert "x-should-retry" not in headers
    assert json.loads(payload)["error"]["type"] == "overloaded_error"
    assert post(mock, history)[0] == 200
    assert [r.reply_kind for r in mock.message_requests()] == [
        "ratelimit",
        "overloaded",
        "tool_use",
    ]


def _turn_quietly(mock: MockAnthropic, messages: list[dict[str, Any]], session: str) -> None:
    """One turn whose end (the mock stopping mid-stall) is no concern of the test."""
    with contextlib.suppress(Exception):
        post(mock, messages, session)


def test_stall_final_once(mock: MockAnthropic) -> None:
    history = [first_user("[[stall_final_once: 0.8]]")]
    reply = turn(mock, history)  # the tool_use turn is not stalled
    use = tool_use_of(reply)
    history += [{"role": "assistant", "content": reply["content"]}, tool_result(use["id"])]
    start = time.monotonic()
    assert final_text(turn(mock, history)) == "DONE default"
    assert time.monotonic() - start >= 0.75
    # Once per session, shown by order, not speed: while a third session's first final turn
    # stalls (60 s, or until the mock stops), this session's next one comes back.
    long = [first_user("[[stall_final_once: 60]]"), *history[1:]]
    stalled = threading.Thread(target=_turn_quietly, args=(mock, long, "sess-third"), daemon=True)
    stalled.start()
    wait_for(lambda: len(mock.message_requests("sess-third")) == 1)
    assert final_text(turn(mock, history)) == "DONE default"
    assert stalled.is_alive(), "the third session's stall ended first"
    # Another session stalls on its own.
    start = time.monotonic()
    turn(mock, history, session="sess-other")
    assert time.monotonic() - start >= 0.75


def test_stop_ends_a_stall() -> None:
    server = MockAnthropic().start()
    history = [
        first_user("[[stall_final_once: 60]]"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Write"}]},
        tool_result("t1"),
    ]
    done = threading.Event()

    def call() -> None:
        with contextlib.suppress(OSError):
            post(server, history)
        done.set()

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.message_requests() and time.monotonic() < deadline:
        time.sleep(0.02)
    server.stop()
    assert done.wait(10)


def test_server_error_billing_auth_in_order_then_success(mock: MockAnthropic) -> None:
    history = [first_user("[[overloaded: 1]] [[server_error: 2]] [[billing]] [[auth: 1]]")]
    answers = [post(mock, history) for _ in range(5)]
    assert [a[0] for a in answers] == [529, 500, 500, 400, 401]
    errors = [json.loads(a[2])["error"] for a in answers]
    assert errors[1] == {"type": "api_error", "message": "Internal server error"}
    assert errors[3]["type"] == "invalid_request_error"
    assert errors[3]["message"].startswith("Your credit balance is too low")
    assert errors[4] == {"type": "authentication_error", "message": "invalid x-api-key"}
    assert all("x-should-retry" not in a[1] for a in answers)
    assert tool_use_of(turn(mock, history))["name"] == "Write"
    assert [r.reply_kind for r in mock.message_requests()] == [
        "overloaded",
        "server_error",
        "server_error",
        "billing",
        "auth",
        "tool_use",
    ]
    # A side call (no tools) is never counted or failed.
    assert post(mock, history, session="sess-2", tools=None)[0] == 200
    assert post(mock, history, session="sess-2")[0] == 529


def test_drop_resets_the_connection(mock: MockAnthropic) -> None:
    history = [first_user("[[drop: 1]]")]
    with pytest.raises((ConnectionResetError, urllib.error.URLError, OSError)) as caught:
        post(mock, history)
    assert not isinstance(caught.value, urllib.error.HTTPError)
    assert tool_use_of(turn(mock, history))["name"] == "Write"
    assert [(r.reply_kind, r.status) for r in mock.message_requests()] == [
        ("dropped", 0),
        ("tool_use", 200),
    ]


def _stream_request(mock: MockAnthropic, history: list[dict[str, Any]]) -> Any:
    body = {"model": "m", "messages": history, "stream": True, "tools": TOOLS}
    request = urllib.request.Request(
        f"{mock.base_url}/v1/messages",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Claude-Code-Session-Id": "sess-1"},
        method="POST",
    )
    return urllib.request.urlopen(request, timeout=30)


def test_stall_stream_starts_then_goes_silent_until_released(mock: MockAnthropic) -> None:
    history = [first_user("[[stall_stream: 1]]")]
    with _stream_request(mock, history) as response:
        assert response.status == 200
        head = b""
        while head.count(b"\n\n") < 4:
            head += response.read1(65536)
        assert head.startswith(b"event: message_start") and b"content_block_delta" in head
        # Silent now: the rest arrives only once the stall is released.
        rest: list[bytes] = []
        reader = threading.Thread(target=lambda: rest.append(response.read()), daemon=True)
        reader.start()
        reader.join(timeout=0.8)
        assert reader.is_alive() and not rest
        mock.release_stalls()
        reader.join(timeout=10)
        assert rest, "the stream did not end after release_stalls()"
    message = sse_message(head + rest[0])
    assert tool_use_of(message)["name"] == "Write"
    # The next request of the session is answered at once.
    assert tool_use_of(turn(mock, history))["name"] == "Write"
    assert [r.reply_kind for r in mock.message_requests()] == ["stalled", "tool_use"]


def test_stop_ends_a_stalled_stream() -> None:
    server = MockAnthropic().start()
    response = _stream_request(server, [first_user("[[stall_stream: 1]]")])
    server.stop()
    try:
        assert b"message_stop" not in response.read()
    except OSError:
        pass  # the connection closed mid-body: also a fine end
    finally:
        response.close()


def test_offline_refuses_connections_then_online_on_the_same_port(mock: MockAnthropic) -> None:
    url, port = mock.base_url, mock.port
    mock.go_offline()
    assert mock.base_url == url
    with pytest.raises(urllib.error.URLError) as caught:
        post(mock, [first_user("hi")])
    assert isinstance(caught.value.reason, ConnectionRefusedError)
    mock.go_online()
    assert mock.port == port
    assert tool_use_of(turn(mock, [first_user("hi")]))["name"] == "Write"


def test_non_streaming_reply(mock: MockAnthropic) -> None:
    status, headers, payload = post(mock, [first_user("[[bash: true]]")], stream=False)
    assert status == 200
    assert headers["content-type"] == "application/json"
    body = json.loads(payload)
    assert body["stop_reason"] == "tool_use"
    assert body["content"][1]["input"]["command"] == "true"


def test_gateway_token_is_a_jwt_for_the_gateway_audience() -> None:
    header, payload, signature = gateway_token().split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["aud"] == "claude-gateway"
    assert claims["exp"] > time.time()
    assert header and signature
