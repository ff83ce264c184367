"""A state dir holding every group of the status model, for the views' tests and screenshots.

``build(root)`` writes ``root/profile.toml``, ``root/spool`` (two waiting task files) and
``root/state/tasks/<id>/`` with a manifest (validated by the real :class:`Manifest` model),
``events.jsonl`` and ``output.log`` per task, all timed from the fixed clock :data:`NOW`
(file mtimes included), so a view rendered at ``NOW`` is the same on every run. Reused by
``tests/test_views_model.py``, ``tests/test_tui.py``, the web view's tests and
``benchmarks/views.py`` (``many(root, n)`` makes an n-task state dir).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso

#: The fixed clock every fixture time is measured from (2026-11-23T12:00:00Z).
NOW = 1795435200.0


@dataclass(frozen=True)
class Fixture:
    """What :func:`build` made: the profile file, the state dir, the spool dir, and the
    task ids by group (keys of ``supervisor.views.model.GROUPS``)."""

    root: Path
    profile: Path
    state_dir: Path
    spool_dir: Path
    ids: dict[str, list[str]]


#: One row per fixture task: (id, name, status, seconds in state, extra manifest fields,
#: last output line). The ids are fixed; names hold no control characters except
#: ``evil-name``'s (a view must show it escaped).
TASKS: list[tuple[str, str, str, float, dict[str, Any], str]] = [
    ("ask-perm-a1b2c3", "ask-perm", "escalated", 95,
     {"escalation": {"reason": "rule", "tool": "Bash", "subject": "rm -rf build/",
                     "answer": "/dev/null"}},
     "Waiting for permission to run Bash"),
    ("limit-hit-d4e5f6", "limit-hit", "waiting", 600,
     {"resume_at": 1800, "limit_waits": 1}, "Claude usage limit reached · resets 1pm"),
    ("refactor-0a1b2c", "refactor-parser", "running", 420,
     {"claude": {"total_cost_usd": 0.4213}, "workspace": {
         "mode": "worktree", "path": "/tmp/w", "branch": "supervise/refactor-0a1b2c",
         "files_changed": 3, "insertions": 41, "deletions": 7}},
     "Editing src/parser.py"),
    ("check-tests-3d4e5f", "check-tests", "verifying", 30, {}, "All 212 tests passed"),
    ("flaky-net-6a7b8c", "flaky-net", "crashed", 12, {"retry_count": 2, "resume_at": 18},
     "Error: socket hang up"),
    ("stuck-loop-9d0e1f", "stuck-loop", "hung", 300, {"retry_count": 1, "resume_at": 30},
     "Thinking…"),
    ("bad-auth-2a3b4c", "bad-auth", "failed", 3600,
     {"failure_reason": "auth", "verdict": "FAIL", "exit_code": 1},
     "Invalid API key · Please run /login"),
    ("gave-up-5d6e7f", "gave-up", "abandoned", 7200,
     {"abandon_reason": "retries exhausted", "verdict": "ABANDONED", "retry_count": 3},
     "Error: socket hang up"),
    ("docs-8a9b0c", "write-docs", "completed", 5400,
     {"verdict": "PASS", "exit_code": 0, "claude": {"total_cost_usd": 1.25}},
     "Done: README updated"),
    ("evil-name-1d2e3f", "evil\x1b[31mname", "completed", 60,
     {"verdict": "PASS", "exit_code": 0}, "\x1b]0;pwned\x07<script>alert(1)</script>"),
    ("later-4a5b6c", "later", "queued", 5, {}, ""),
]  # fmt: skip


def _write_task(state_dir: Path, row: tuple[Any, ...], now: float) -> None:
    task_id, name, status, in_state, extra, line = row
    folder = state_dir / "tasks" / task_id
    folder.mkdir(parents=True)
    since = now - in_state
    created = since if status == "queued" else since - 60
    fields: dict[str, Any] = {
        "task_id": task_id, "task_name": name, "status": status, "model": "claude-sonnet-4-6",
        "project_dir": "/tmp/project", "session_name": task_id,
        "session_id": "00000000-0000-4000-8000-000000000000", "tmpdir": str(folder),
        "created_at": utc_iso(created),
    }  # fmt: skip
    if status != "queued":
        fields["started_at"] = fields["launched_at"] = utc_iso(created + 1)
    if status == "running":
        fields["launched_at"] = utc_iso(since)
    if status in ("completed", "failed", "abandoned"):
        fields["finished_at"] = utc_iso(since)
    extra = dict(extra)
    if "resume_at" in extra:
        extra["resume_at"] = utc_iso(now + extra["resume_at"])
    if "escalation" in extra:
        extra["escalation"] = {**extra["escalation"], "since": utc_iso(since)}
    manifest = Manifest.model_validate({**fields, **extra})
    TaskDir(folder).write_manifest(manifest)
    events = [{"ts": utc_iso(created), "event": "queued", "status": "queued"}]
    if status != "queued":
        events.append({"ts": utc_iso(created + 1), "event": "launched", "status": "running"})
        events.append({"ts": utc_iso(since), "event": status, "status": status})
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    if line:
        (folder / "output.log").write_text(f"starting\n{line}\n")
    for path in folder.iterdir():
        os.utime(path, (now - 1, now - 1))


def write_profile(root: Path, socket_name: str = "sv-views-fixture") -> Path:
    """``root/profile.toml`` with spool ``root/spool`` and state ``root/state``."""
    profile = root / "profile.toml"
    profile.write_text(
        f'[paths]\nspool_dir = "{root / "spool"}"\nstate_dir = "{root / "state"}"\n'
        f'[tmux]\nsocket_name = "{socket_name}"\n'
        '[agent]\ncommand = ["true"]\n'
    )
    return profile


def build(root: Path, now: float = NOW) -> Fixture:
    """A state dir under ``root`` with every group (see :data:`TASKS`) and two spool files
    (``incoming-a.toml`` 40 s old, ``incoming-b.toml`` 5 s old)."""
    from supervisor.views.model import GROUP_OF

    profile = write_profile(root)
    state_dir, spool_dir = root / "state", root / "spool"
    (state_dir / "tasks").mkdir(parents=True)
    spool_dir.mkdir()
    ids: dict[str, list[str]] = {}
    for row in TASKS:
        _write_task(state_dir, row, now)
        ids.setdefault(GROUP_OF[row[2]], []).append(row[0])
    for name, age in (("incoming-a.toml", 40), ("incoming-b.toml", 5)):
        path = spool_dir / name
        path.write_text('prompt = "later"\n')
        os.utime(path, (now - age, now - age))
    return Fixture(root, profile, state_dir, spool_dir, ids)


def many(root: Path, n: int, now: float = NOW) -> Fixture:
    """A state dir of ``n`` tasks cycling through :data:`TASKS`' statuses (ids
    ``t-00000-<status>``...), for benchmarks; plus the two spool files of :func:`build`."""
    fixture = build(root, now)
    for i in range(n - len(TASKS)):
        _, name, status, in_state, extra, line = TASKS[i % len(TASKS)]
        row = (f"t-{i:05d}-{status}", f"{name}-{i}", status, in_state + i, extra, line)
        _write_task(fixture.state_dir, row, now)
    return fixture
