"""Fast tests of the mock's slow streams (:mod:`mock_streaming`): ``[[slow_write: NAME S]]``
streams one Write block's input over S seconds, ``[[ping_stall: N]]`` sends only pings
until released (no Claude Code CLI)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import wait_for
from support import mock_streaming
from support.mock_anthropic import MockAnthropic
from support.mock_streaming import (
    DEFAULT_SLOW_SECONDS,
    FRAGMENT_EVERY,
    MAX_SLOW_SECONDS,
    joined_input,
    paced,
    parse_slow_write,
)

CWD = "/tmp/mock-project"
TOOLS = [{"name": name, "input_schema": {}} for name in ("Bash", "Write")]


@pytest.fixture
def mock() -> Iterator[MockAnthropic]:
    server = MockAnthropic().start()
    try:
        yield server
    finally:
        server.stop()


def _request(mock: MockAnthropic, prompt: str) -> Any:
    reminder = f"<system-reminder>\n- Primary working directory: {CWD}\n</system-reminder>"
    message = {"role": "user", "content": [{"type": "text", "text": f"{reminder}\n{prompt}"}]}
    body = {"model": "m", "messages": [message], "stream": True, "tools": TOOLS}
    request = urllib.request.Request(
        f"{mock.base_url}/v1/messages?beta=true",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Claude-Code-Session-Id": "s1"},
        method="POST",
    )
    return urllib.request.urlopen(request, timeout=30)


def _events(response: Any) -> Iterator[tuple[float, str, dict[str, Any]]]:
    """``(arrival on the monotonic clock, name, data)`` per SSE event, as they arrive."""
    name = None
    for raw in response:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: ") and name:
            yield time.monotonic(), name, json.loads(line[len("data: ") :])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ("big.txt 2.5", ("big.txt", 2.5)),
        ("big.txt", ("big.txt", DEFAULT_SLOW_SECONDS)),
        ("big.txt soon", ("big.txt", DEFAULT_SLOW_SECONDS)),
        ("big.txt nan", ("big.txt", DEFAULT_SLOW_SECONDS)),
        ("big.txt -4", ("big.txt", 0.0)),
        ("big.txt 1e12", ("big.txt", MAX_SLOW_SECONDS)),
        ("", ("", DEFAULT_SLOW_SECONDS)),
    ],
)
def test_parse_slow_write(args: str, expected: tuple[str, float]) -> None:
    assert parse_slow_write(args) == expected


def test_paced_fragments_add_up_to_the_whole_input() -> None:
    data = {"file_path": "/x", "content": mock_streaming.slow_content(3.0)}
    delta = {"type": "input_json_delta", "partial_json": json.dumps(data)}
    events = [
        ("message_start", {"type": "message_start"}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("message_stop", {"type": "message_stop"}),
    ]
    pieces = list(paced(events, 3.0))
    sent = [event for _, group in pieces for event in group]
    assert joined_input(sent) == data
    assert sum(delay for delay, _ in pieces) == pytest.approx(3.0)
    assert sum(len(group) for _, group in pieces) == 2 + 3.0 / FRAGMENT_EVERY + 1
    assert sent[0][0] == "message_start" and sent[-1][0] == "message_stop"


def test_slow_write_streams_its_block_over_the_seconds_asked(mock: MockAnthropic) -> None:
    """The Write's input arrives in fragments spread over about S seconds, then the message
    ends; the fragments add up to a Write of NAME with :func:`slow_content`."""
    with _request(mock, "[[slow_write: big.txt 2]]") as response:
        events = list(_events(response))
    deltas = [(at, data) for at, name, data in events if name == "content_block_delta"]
    inputs = [d for at, d in deltas if d["delta"]["type"] == "input_json_delta"]
    assert len(inputs) >= 2 / FRAGMENT_EVERY - 1
    arrivals = [at for at, d in deltas if d["delta"]["type"] == "input_json_delta"]
    assert arrivals[-1] - arrivals[0] >= 1.0  # spread out, not sent at once
    written = joined_input([(name, data) for _, name, data in events])
    assert written == {"file_path": f"{CWD}/big.txt", "content": mock_streaming.slow_content(2)}
    assert events[-1][1] == "message_stop"
    assert [r.reply_kind for r in mock.message_requests()] == ["tool_use"]


def test_ping_stall_sends_only_pings_until_released(mock: MockAnthropic, monkeypatch) -> None:
    monkeypatch.setattr(mock_streaming, "PING_EVERY", 0.2)
    seen: list[str] = []

    def read() -> None:
        with _request(mock, "[[ping_stall: 1]]") as response:
            seen.extend(name for _, name, _ in _events(response))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_for(lambda: seen.count("ping") >= 4, timeout=60)
    assert seen[0] == "message_start" and set(seen[1:]) == {"ping"}, seen
    mock.release_stalls()
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert "content_block_delta" in seen and seen[-1] == "message_stop", seen
    assert [r.reply_kind for r in mock.message_requests()] == ["ping_stalled"]


def test_stop_ends_a_ping_stall(mock: MockAnthropic) -> None:
    response = _request(mock, "[[ping_stall: 1]]")
    mock.stop()
    try:
        assert b"message_stop" not in response.read()
    except OSError:
        pass  # the connection closed mid-body: also a fine end
    finally:
        response.close()
