"""Issue 22 item 8: a task on a freshly ``git init``-ed repository (no commit yet, a common
way to start a new project) runs in place with one warning event, instead of ending
``failed`` with ``failure_reason`` ``workspace``.

Why in place and not an orphan branch: a worktree on an orphan branch starts empty, so the
agent would not see the project's files (in a repository without a commit every file is
untracked), and ``git worktree add --orphan`` needs git 2.42 (Debian 12 ships 2.39)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import Setup

from supervisor.config.workspace import WorkspaceSpec
from supervisor.workspace import lifecycle


def _unborn(folder: Path) -> Path:
    """A repository with files but no commit (``git init`` and nothing else)."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(folder)], check=True,
                   capture_output=True)  # fmt: skip
    (folder / "notes.txt").write_text("the user's first file\n")
    return folder


@pytest.mark.parametrize("mode", [None, "worktree"])
def test_resolve_runs_a_repository_without_a_commit_in_place(tmp_path: Path, mode: str) -> None:
    repo = _unborn(tmp_path / "repo")
    report = lifecycle.resolve("t-1", repo, WorkspaceSpec(mode=mode), tmp_path / "state")
    assert (report.mode, report.path) == ("shared", str(repo))
    assert report.repository == str(repo.resolve())
    assert report.warning is not None and "\n" not in report.warning
    assert "no commit yet" in report.warning and "in place" in report.warning


def test_a_named_base_in_a_repository_without_a_commit_still_fails(tmp_path: Path) -> None:
    """A ``base`` the user names must exist: running elsewhere would hide their mistake."""
    repo = _unborn(tmp_path / "repo")
    spec = WorkspaceSpec(base="main")
    report = lifecycle.resolve("t-1", repo, spec, tmp_path / "state")
    assert report.mode == "worktree" and report.warning is None


@pytest.mark.parametrize("mode", [None, "worktree", "shared"])
def test_a_task_on_a_fresh_repository_completes_in_place(setup: Setup, mode: str | None) -> None:
    project = _unborn(setup.project)
    setup.write_profile(extra={"workspace": {"mode": mode}} if mode else None)
    setup.drop("fresh.toml", setup.task("fresh", "print: hi\nexit: 0"))
    assert setup.run().returncode == 0
    m = setup.manifests()["fresh"]
    assert (m["status"], m["verdict"], m["failure_reason"]) == ("completed", "PASS", None), m
    assert m["workspace"]["mode"] == "shared" and m["workspace"]["path"] == str(project)
    assert (project / "received_prompt.bin").exists()  # the agent worked in the project
    warned = [e for e in setup.events(m["task_id"]) if e["event"] == "workspace_in_place"]
    if mode == "shared":  # asked for: nothing to warn about
        assert warned == [] and m["workspace"].get("warning") is None
        return
    assert len(warned) == 1 and warned[0]["status"] == "queued"
    assert warned[0]["message"] == m["workspace"]["warning"]
    assert "no commit yet" in warned[0]["message"]
