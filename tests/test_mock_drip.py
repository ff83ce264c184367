"""The ``[[drip: SECONDS]]`` mock (tests/support/mock_drip.py): a reply streamed
in many small deltas."""

from __future__ import annotations

import json
import urllib.request

from support.mock_drip import DripMock, parse_drip, split_delta


def _post(mock: DripMock, prompt: str, session: str) -> list[dict]:
    body = {
        "model": "m",
        "stream": True,
        "tools": [{"name": "Bash"}, {"name": "Write"}],
        "messages": [{"role": "user", "content": prompt}],
    }
    request = urllib.request.Request(
        f"{mock.base_url}/v1/messages",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-claude-code-session-id": session},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        text = reply.read().decode()
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def test_parse_and_split() -> None:
    assert parse_drip("[[drip: 2.5]] go") == (2.5, False)
    assert parse_drip("[[drip: 3 final]]") == (3.0, True)
    assert parse_drip("[[drip: 0]]") is None and parse_drip("no drip") is None
    parts = split_delta({"type": "text_delta", "text": "abcdefg"}, 3)
    assert "".join(p["text"] for p in parts) == "abcdefg" and len(parts) == 3


def test_the_first_reply_of_a_session_is_dripped_then_answers_at_once() -> None:
    with DripMock(final_text="fin") as mock:
        prompt = "[[drip: 1]] [[bash: echo hi]] go"
        first = _post(mock, prompt, "s1")
        deltas = [e for e in first if e["type"] == "content_block_delta"]
        assert len(deltas) > 2
        tool = "".join(e["delta"].get("partial_json", "") for e in deltas)
        assert json.loads(tool)["command"] == "echo hi"
        again = _post(mock, prompt, "s1")
        assert len([e for e in again if e["type"] == "content_block_delta"]) == 2
        assert [r.reply_kind for r in mock.message_requests()] == ["tool_use", "tool_use"]
