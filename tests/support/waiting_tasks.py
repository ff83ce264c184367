"""Tasks that wait on the operator, and the ``wait`` verb, for the waiting tests (moved from
tests/test_waiting.py)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from conftest import Setup

from supervisor.taskdir.folder import atomic_write

PERMISSION = {
    "reason": "rule 2 (Bash ~ /^rm/)",
    "tool": "Bash",
    "subject": "rm -rf x",
    "since": "2026-11-26T03:00:00Z",
    "answer": "/state/tasks/t-esc/hooks/req.answer",
}


def _task(setup: Setup, task_id: str, status: str, **fields: Any) -> dict[str, Any]:
    """Write ``task_id``'s manifest as the engine does (replaced by rename)."""
    folder = setup.state / "tasks" / task_id
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {
        "task_id": task_id,
        "task_name": task_id,
        "status": status,
        "verdict": None,
        "retry_count": 0,
        **fields,
    }
    atomic_write(folder / "manifest.json", json.dumps(manifest).encode())
    return manifest


def _wait(setup: Setup, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return setup.supervise("wait", "-c", str(setup.profile), *args, timeout=timeout)
