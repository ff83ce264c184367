"""A task folder with a reported cost, as the daily budget's tests need one: a manifest
written straight to disk (no engine), its spend dated ``at`` (epoch s)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from supervisor.taskdir import layout
from supervisor.taskdir.folder import TaskDir, utc_iso


def task_with_cost(
    tasks: Path, task_id: str, status: str, cost: float | None, at: float
) -> TaskDir:
    """``tasks/<task_id>`` with a manifest of ``status``; ``cost`` (USD) as Claude Code's
    ``total_cost_usd`` and ``finished_at`` = ``at`` when given, else no cost reported."""
    folder = tasks / task_id
    folder.mkdir(parents=True)
    manifest: dict[str, Any] = dict.fromkeys(("task_id", "task_name", "session_name"), task_id)
    manifest.update(status=status, model="m", project_dir="/tmp", session_id="s")
    manifest.update(tmpdir=str(folder), created_at=utc_iso(at), last_checked_at=utc_iso(at))
    if cost is not None:
        manifest["claude"] = {"total_cost_usd": cost}
        manifest["finished_at"] = utc_iso(at)
    (folder / layout.MANIFEST).write_text(json.dumps(manifest))
    return TaskDir(folder)
