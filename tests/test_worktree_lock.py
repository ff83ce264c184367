"""Worktrees made at once in one repository (supervisor/workspace/worktreelock.py): git 2.39's
``git worktree add`` reads the other worktrees' folders while a concurrent one writes its
own, and failed ("failed to read .git/worktrees/.../commondir") for a quarter of twelve
concurrent adds; attempts of one group make their worktrees at the same moment."""

from __future__ import annotations

import threading
from pathlib import Path

from support.repos import make_repo, new_task, sh

from supervisor.config.workspace import WorkspaceSpec
from supervisor.workspace import lifecycle

COUNT = 12


def test_twelve_worktrees_made_at_once_all_succeed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    spec = WorkspaceSpec()
    errors: list[BaseException] = []
    start = threading.Barrier(COUNT)

    def make(k: int) -> None:
        task_id = f"t-{k:06x}"
        task = new_task(tmp_path, task_id)
        report = lifecycle.resolve(task_id, repo, spec, tmp_path / "state")
        start.wait()
        try:
            lifecycle.prepare(task, report, spec, repo)
        except BaseException as exc:  # collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=make, args=(k,)) for k in range(COUNT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    listed = sh(repo, "worktree", "list")
    assert sum(f"supervise/t-{k:06x}" in listed for k in range(COUNT)) == COUNT
