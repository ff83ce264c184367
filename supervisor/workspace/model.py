"""The manifest's ``workspace`` report: where a task worked and what it changed (the
``[workspace]`` table that asks for it is :class:`supervisor.config.workspace.WorkspaceSpec`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class WorkspaceReport(BaseModel):
    """The manifest's ``workspace`` object: where the task worked and what it changed.

    Attributes:
        mode: ``worktree`` or ``shared``.
        path: the agent's working directory (the worktree, or ``project_dir`` when shared).
        repository: the top folder of the repository ``project_dir`` belongs to (``git
            rev-parse --show-toplevel``); ``None`` when it is not a repository.
        branch: the task branch (worktree mode), else ``None``.
        base: the ref the branch started from, as given or as resolved at claim time.
        base_commit: the commit ``base`` pointed to when the worktree was made (40 hex).
        head_commit: the task branch's commit when the task ended (after the final commit).
        files_changed, insertions, deletions: ``git diff --shortstat base_commit
            head_commit`` at the end.
        uncommitted: whether uncommitted changes remained in the worktree at the end
            (``commit = false``, or the commit failed).
        removed: the worktree has been removed (``supervise discard`` or ``prune``).
        shared_with: task ids of other live tasks in the same folder (shared mode).
        warning: why the task runs somewhere other than its ``[workspace]`` asked, in one
            line (a repository without a commit yet runs in place: ``lifecycle.resolve``);
            also the ``workspace_in_place`` event's ``message``.
    """

    model_config = ConfigDict(extra="allow")
    mode: Literal["worktree", "shared"]
    path: str
    repository: str | None = None
    branch: str | None = None
    base: str | None = None
    base_commit: str | None = None
    head_commit: str | None = None
    files_changed: int | None = None
    insertions: int | None = None
    deletions: int | None = None
    uncommitted: bool | None = None
    removed: bool = False
    shared_with: list[str] = Field(default_factory=list)
    warning: str | None = None
