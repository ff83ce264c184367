"""``[agent] kind = "claude"``: Claude Code (the adapter, its hook relay, stream, screen,
limit and failure readers). ``Adapter`` is :class:`.adapter.ClaudeAdapter`, imported on
first use: the kind's registration (:mod:`.kind`) is read while the profile models load."""

from __future__ import annotations

from typing import Any

__all__ = ["Adapter"]


def __getattr__(name: str) -> Any:
    if name == "Adapter":
        from supervisor.agents.claude.adapter import ClaudeAdapter

        return ClaudeAdapter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
