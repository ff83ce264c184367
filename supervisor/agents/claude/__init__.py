"""``[agent] kind = "claude"``: Claude Code (the adapter, its hook relay, stream, screen,
limit and failure readers). ``Adapter`` is :class:`.adapter.ClaudeAdapter`."""

from supervisor.agents.claude.adapter import ClaudeAdapter as Adapter

__all__ = ["Adapter"]
