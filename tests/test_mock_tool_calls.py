"""The ``[[tool: NAME | JSON]]`` directive of the mock Messages API
(tests/support/mock_tool_calls.py): any offered tool, JSON input, and
``{{task_id}}`` / ``{{last_result}}`` from the step before."""

from __future__ import annotations

from typing import Any

from support.mock_anthropic import MockAnthropic

SUBMIT = "mcp__supervise__submit"
WAIT = "mcp__supervise__wait"
TOOLS = [{"name": name, "input_schema": {}} for name in ("Bash", SUBMIT, WAIT)]
PROMPT = (
    f'[[tool: {SUBMIT} | {{"name": "child", "prompt": "a \\"quoted\\" ask"}}]]\n'
    f'[[tool: {WAIT} | {{"task_ids": ["{{{{task_id}}}}"], "note": "{{{{last_result}}}}"}}]]\n'
    "[[final: delegated]]"
)


def _body(*results: Any) -> dict[str, Any]:
    """A main request whose history holds one tool_result per item of ``results`` (a str,
    or a list of content blocks, both as the CLI sends them)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    for number, content in enumerate(results):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{number}", "name": "x", "input": {}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{number}", "content": content}
                ],
            }
        )
    return {"tools": TOOLS, "messages": messages}


def test_tool_steps_call_any_tool_and_feed_the_last_result_forward() -> None:
    mock = MockAnthropic()
    first = mock.reply_for(_body())
    assert first.kind == "tool_use"
    assert first.content[0]["name"] == SUBMIT
    assert first.content[0]["input"] == {"name": "child", "prompt": 'a "quoted" ask'}
    result = '{\n "task_id": "child-0a1b2c",\n "name": "child"\n}'
    second = mock.reply_for(_body([{"type": "text", "text": result}]))
    assert second.content[0]["name"] == WAIT
    assert second.content[0]["input"] == {"task_ids": ["child-0a1b2c"], "note": result}
    plain = mock.reply_for(_body("submitted as child-99ffee (queued)"))
    assert plain.content[0]["input"]["task_ids"] == ["child-99ffee"]
    nested = '{"tasks": [{"session_id": "aaaaaaaa-bbbb", "task_id": "child-0a1b2c"}]}'
    assert mock.reply_for(_body(nested)).content[0]["input"]["task_ids"] == ["child-0a1b2c"]
    done = mock.reply_for(_body(result, "{}"))
    assert (done.kind, done.content[0]["text"]) == ("final", "delegated")


def test_a_tool_not_offered_or_bad_json_is_a_mock_error() -> None:
    mock = MockAnthropic()
    body = _body()
    body["tools"] = [{"name": "Bash"}]
    missing = mock.reply_for(body)
    assert missing.kind == "error" and SUBMIT in missing.content[0]["text"]
    body = {"tools": TOOLS, "messages": [{"role": "user", "content": f"[[tool: {WAIT} | [1]]"}]}
    assert mock.reply_for(body).kind == "error"
