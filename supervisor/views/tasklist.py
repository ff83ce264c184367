"""The task table that ``supervise status`` prints: one row per task folder in the state dir.

Plain ``os`` calls and ``json`` (no pydantic): this runs over thousands of folders, and
``status`` must stay fast (``benchmarks/``). A row's keys: ``task_id``, ``name``, ``status``,
``model``, ``retries``, ``exit_code``, ``verdict``, ``reason`` (``failure_reason`` of a failed
task, ``abandon_reason`` of an abandoned one), ``branch`` (the task branch in worktree
mode, else ``None``), ``age_s`` and ``since_output_s`` (seconds),
``damaged`` (why the manifest cannot be read, see :mod:`supervisor.taskdir.repair`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from supervisor.taskdir import layout
from supervisor.waiting import load_manifest


def read_manifests(tasks_dir: Path) -> list[dict[str, Any]]:
    """Every task folder's manifest as a plain dict, sorted by task id, with
    ``_output_mtime`` (epoch s, or ``None``) added; a folder whose manifest is missing or
    unreadable gives a ``damaged`` row (:func:`damaged_row`)."""
    out = []
    try:
        entries = sorted(os.scandir(tasks_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    for entry in entries:  # plain strings and os calls: this loop runs 1,000s of times
        try:
            manifest = load_manifest(Path(entry.path, layout.MANIFEST))  # never blocks
        except (OSError, ValueError):
            manifest = damaged_row(entry)
            if manifest is None:
                continue
        try:
            manifest["_output_mtime"] = os.stat(os.path.join(entry.path, layout.OUTPUT)).st_mtime
        except OSError:
            manifest["_output_mtime"] = None
        out.append(manifest)
    return out


def damaged_row(entry: os.DirEntry[str]) -> dict[str, Any] | None:
    """A ``damaged`` status row for a task folder whose manifest is missing or unreadable
    (``None`` for anything else: not a folder, or a claim still to finish)."""
    from supervisor.taskdir import repair
    from supervisor.taskdir.folder import TaskDir

    if not entry.is_dir():
        return None
    task = TaskDir(Path(entry.path))
    reason = repair.damage(task)
    if reason is None:
        return None
    return {
        "task_id": entry.name,
        "task_name": repair.spec_name(task),
        "status": repair.DAMAGED,
        "damaged": reason,
    }


def age(iso: str | None, now: float) -> float | None:
    """Seconds from an ISO-8601 UTC time (``...Z``, as the manifest writes it) to ``now``."""
    if not iso:
        return None
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return round(now - moment, 1)


def status_rows(tasks_dir: Path, now: float) -> list[dict[str, Any]]:
    """The rows of ``supervise status`` (see the module docstring); ``now`` in epoch s."""
    rows = []
    for m in read_manifests(tasks_dir):
        mtime = m.pop("_output_mtime")
        rows.append(
            {
                "task_id": m.get("task_id"),
                "name": m.get("task_name"),
                "status": m.get("status"),
                "model": m.get("model"),
                "retries": m.get("retry_count", 0),
                "exit_code": m.get("exit_code"),
                "verdict": m.get("verdict"),
                "reason": m.get("failure_reason") or m.get("abandon_reason"),
                "branch": (m.get("workspace") or {}).get("branch"),  # worktree mode only
                "age_s": age(m.get("started_at") or m.get("created_at"), now),
                "since_output_s": None if mtime is None else round(now - mtime, 1),
                "damaged": m.get("damaged"),
            }
        )
    return rows
