"""The official MCP SDK's stdio client against ``supervise mcp -c PROFILE`` (moved from
tests/test_mcp_server.py; used by tests/test_mcp_plans.py too)."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def _session(profile: Path, body: Callable[[ClientSession], Awaitable[None]]) -> None:
    """Start ``supervise mcp -c profile`` as the SDK's stdio client does, run ``body``."""

    async def main() -> None:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "supervisor.cli", "mcp", "-c", str(profile)]
        )
        with anyio.fail_after(120):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                await body(s)

    anyio.run(main)


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def _ok(s: ClientSession, tool: str, **arguments: Any) -> Any:
    result = await s.call_tool(tool, arguments)
    assert not result.is_error, _text(result)
    text = _text(result)
    return text if tool == "tail" else json.loads(text)


async def _refused(s: ClientSession, tool: str, **arguments: Any) -> str:
    result = await s.call_tool(tool, arguments)
    assert result.is_error, _text(result)
    text = _text(result)
    assert "\n" not in text.strip() and "Traceback" not in text, text
    return text
