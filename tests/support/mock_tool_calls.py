"""A step of :mod:`mock_anthropic` that calls any tool with JSON input, fed by the result of
the step before: how a test scripts a turn that uses MCP tools (issue 22).

Directive (read like every other directive of :mod:`mock_anthropic`; may repeat)::

    [[tool: NAME | JSON]]

A step that issues a ``tool_use`` of the offered tool ``NAME`` (e.g.
``mcp__supervise__submit``, as Claude Code 2.1.328 names MCP tools:
``mcp__<server>__<tool>``) with ``JSON`` (an object) as its input. Before ``JSON`` is
parsed, two placeholders are replaced from the latest ``tool_result`` of the conversation:

``{{task_id}}``
    its ``"task_id"`` value (the JSON object the ``submit`` tool returns), else the first
    ``"task_id": "..."`` in its text (``wait``'s manifests), else the first task-id-looking
    word;
``{{last_result}}``
    its whole text, escaped to sit inside a JSON string.

A step whose tool is not offered, or whose ``JSON`` is not an object, is answered with a
``MOCK ERROR`` text (``reply_kind`` "error"), as the other steps are. The directive's
arguments may not contain ``]]`` (write ``] ]`` inside nested arrays).
"""

from __future__ import annotations

import json
import re
from typing import Any

TASK_ID_RE = re.compile(r"\b[a-z0-9][a-z0-9-]*-[0-9a-f]{6}\b")
"""A task id as ``supervise`` makes them (name slug, ``-``, six hex digits)."""
TASK_ID_KEY_RE = re.compile(r'"task_id":\s*"([a-z0-9][a-z0-9-]*)"')
"""The first ``"task_id": "..."`` of a result (``wait``'s manifests name it first)."""


def last_tool_result_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last ``tool_result`` block of the conversation ("" when none); its
    content may be a string or a list of text blocks (the CLI's own reminder block left
    out)."""
    found = ""
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, str):
                    found = inner
                elif isinstance(inner, list):
                    found = "".join(
                        b.get("text", "") for b in inner if isinstance(b, dict) and _ours(b)
                    )
    return found


def _ours(block: dict[str, Any]) -> bool:
    """Whether a tool_result's content block came from the tool: CLI 2.1.328 appends a
    text block of its own to an MCP tool's result (``<system-reminder>`` with the tokens
    left; tests/fixtures/claude/mcp/)."""
    return not str(block.get("text", "")).lstrip().startswith("<system-reminder>")


def task_id_of(text: str) -> str:
    """The ``task_id`` a tool result names ("" when none)."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("task_id"), str):
        return data["task_id"]
    match = TASK_ID_KEY_RE.search(text) or TASK_ID_RE.search(text)
    if match and match.re is TASK_ID_KEY_RE:
        return match.group(1)
    return match.group(0) if match else ""


def parse_step(arg: str) -> tuple[str, str]:
    """``"NAME | JSON"`` → ``(NAME, JSON)`` (``JSON`` ``"{}"`` when left out)."""
    name, _, raw = arg.partition("|")
    return name.strip(), raw.strip() or "{}"


def tool_input(raw: str, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``raw`` with its placeholders replaced and parsed; ``None`` when it is not a JSON
    object."""
    previous = last_tool_result_text(messages)
    text = raw.replace("{{task_id}}", task_id_of(previous))
    text = text.replace("{{last_result}}", json.dumps(previous)[1:-1])
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def tool_use_block(
    arg: str, messages: list[dict[str, Any]], offered: set[str], block_id: str
) -> tuple[dict[str, Any] | None, str]:
    """The ``tool_use`` block of a ``[[tool: ...]]`` step, or ``(None, error text)``."""
    name, raw = parse_step(arg)
    if name not in offered:
        return None, f"MOCK ERROR: tool {name!r} is not offered ({len(offered)} tools are)"
    value = tool_input(raw, messages)
    if value is None:
        return None, f"MOCK ERROR: the input of {name} is not a JSON object: {raw[:200]}"
    return {"type": "tool_use", "id": block_id, "name": name, "input": value}, ""
