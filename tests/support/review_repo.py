"""A git repository for the workspace review tests (moved from tests/test_workspace_review.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from supervisor.cli import main
from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso
from supervisor.taskdir.states import Status
from supervisor.workspace.model import WorkspaceReport


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30,
                          check=True, env={**os.environ, "LC_ALL": "C"})  # fmt: skip
    return proc.stdout.strip()


class Repo:
    """A repository with ``main`` checked out, a profile, and tasks ended in worktrees."""

    def __init__(self, root: Path, identity: bool = True) -> None:
        self.root = root
        self.repo = root / "repo"
        self.repo.mkdir()
        git(self.repo, "init", "-q", "-b", "main")
        if identity:
            git(self.repo, "config", "user.name", "Test Operator")
            git(self.repo, "config", "user.email", "operator@example.test")
        (self.repo / "shared.txt").write_text("one\ntwo\nthree\n")
        (self.repo / "README").write_text("a repository\n")
        git(self.repo, "add", ".")
        ident = [] if identity else ["-c", "user.name=x", "-c", "user.email=x@x"]
        git(self.repo, *ident, "commit", "-q", "-m", "base")
        self.state = root / "state"
        self.tasks = self.state / "tasks"
        self.worktrees = self.state / "worktrees"
        self.profile = root / "profile.toml"
        agent = {"kind": "generic", "command": [sys.executable, "-c", "pass"]}
        data = {"paths": {"spool_dir": "spool", "state_dir": "state"}, "agent": agent}
        self.profile.write_text(tomli_w.dumps(data))

    def head(self, ref: str = "HEAD") -> str:
        return git(self.repo, "rev-parse", ref)

    def task(
        self,
        task_id: str,
        edits: dict[str, str] | None = None,
        dirty: dict[str, str] | None = None,
        status: Status = Status.COMPLETED,
        finished_at: float | None = None,
    ) -> Path:
        """A task ended in its own worktree: ``edits`` committed on ``supervise/ID``,
        ``dirty`` left uncommitted; returns the worktree."""
        base_commit = self.head("main")
        branch = f"supervise/{task_id}"
        path = self.worktrees / task_id
        self.worktrees.mkdir(parents=True, exist_ok=True)
        git(self.repo, "worktree", "add", "-q", "-b", branch, str(path), base_commit)
        for name, text in (edits or {}).items():
            (path / name).write_text(text)
        if edits:
            git(path, "add", "-A")
            git(path, "commit", "-q", "-m", f"task {task_id}")
        for name, text in (dirty or {}).items():
            (path / name).write_text(text)
        folder = self.tasks / task_id
        folder.mkdir(parents=True, mode=0o700)
        ended = status in (Status.COMPLETED, Status.FAILED, Status.ABANDONED)
        manifest = Manifest(
            task_id=task_id, task_name=f"edit {task_id}", model="m", status=status,
            project_dir=str(self.repo), session_name=task_id, session_id="s-" + task_id,
            tmpdir=str(folder), created_at=utc_iso(),
            finished_at=utc_iso(finished_at) if ended else None,
            workspace=WorkspaceReport(
                mode="worktree", path=str(path), repository=str(self.repo), branch=branch,
                base="main", base_commit=base_commit, head_commit=git(path, "rev-parse", "HEAD"),
                uncommitted=bool(dirty),
            ),
        )  # fmt: skip
        TaskDir(folder).write_manifest(manifest)
        return path

    def cli(self, *args: str) -> int:
        return main([args[0], "-c", str(self.profile), *args[1:]])

    def proc(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
        argv = [sys.executable, "-m", "supervisor.cli", args[0], "-c", str(self.profile), *args[1:]]
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.run(argv, timeout=60, check=False, **kw)

    def manifest(self, task_id: str) -> dict[str, Any]:
        return json.loads((self.tasks / task_id / "manifest.json").read_text())

    def events(self, task_id: str, name: str) -> list[dict[str, Any]]:
        lines = (self.tasks / task_id / "events.jsonl").read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["event"] == name]

    def branches(self) -> set[str]:
        return set(git(self.repo, "branch", "--format=%(refname:short)").split())

    def worktree_paths(self) -> set[Path]:
        text = git(self.repo, "worktree", "list", "--porcelain")
        return {Path(line[9:]) for line in text.splitlines() if line.startswith("worktree ")}


def _no_git_identity(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No global or system git config: the identity is the repository's own (or none)."""
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(key, raising=False)
