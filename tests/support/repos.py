"""Throwaway git repositories and tasks that work in them (moved from tests/test_workspace.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from supervisor.taskdir.folder import TaskDir
from support.small_fs import small_fs  # noqa: F401  (a real small tmpfs, root only)


def sh(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def make_repo(folder: Path, files: dict[str, str] | None = None) -> Path:
    """A repository on branch ``main`` with one commit of ``files``."""
    folder.mkdir(parents=True, exist_ok=True)
    sh(folder, "init", "-q", "-b", "main")
    for name, text in (files or {"README": "hello\n"}).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    sh(folder, "add", "-A")
    sh(folder, "commit", "-q", "-m", "first")
    return folder


def new_task(root: Path, task_id: str = "t-abc123") -> TaskDir:
    folder = root / "state" / "tasks" / task_id
    folder.mkdir(parents=True)
    return TaskDir(folder)
