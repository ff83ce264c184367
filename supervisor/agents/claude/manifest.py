"""The ``manifest.json`` key ``kind = "claude"`` adds (:class:`ClaudeManifest`, registered
by :mod:`.kind`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ClaudeManifest(BaseModel):
    """The manifest key of Claude Code tasks: ``claude`` (session id, final result text,
    is_error, num_turns, total_cost_usd, usage, api_retries, api_errors, transcript_path),
    written by the adapter's ``report``."""

    claude: dict[str, Any] | None = None
