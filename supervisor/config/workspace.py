"""``[workspace]``: what a task works in (the report of what it did is
:class:`supervisor.workspace.model.WorkspaceReport`).

A task runs either in a git worktree of its own (``mode = "worktree"``: ``git worktree add
-b BRANCH PATH BASE``, git-worktree(1)) or directly in ``project_dir`` (``mode =
"shared"``). Every tmux agent manager that runs several agents on one repository
(claude-squad, ccmanager, agent-deck, Crystal) gives each agent a worktree; their trackers
list what goes wrong (worktrees left behind, submodules checked out empty, ignored files
such as ``.env`` missing), which the keys below answer.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

from supervisor.config.monitor import MAX_LIST_ITEMS, ArgText, ChildSeconds

#: The branch template's only placeholder: the task's id.
TASK_ID_FIELD = "{task_id}"
#: The default task branch.
DEFAULT_BRANCH = f"supervise/{TASK_ID_FIELD}"


class WorkspaceSpec(BaseModel):
    """``[workspace]`` in a profile, or in a task file when ``task_may_set`` has
    ``workspace``. Every key is optional; a task's table is laid over the profile's key by key.

    Attributes:
        mode: ``worktree`` or ``shared``; ``None`` means ``worktree`` when ``project_dir``
            is inside a git repository and ``shared`` otherwise.
        base: the ref the task branch starts from; ``None`` means the branch checked out in
            ``project_dir`` when the task is claimed (its commit is recorded then).
        branch: the task branch's name template (``{task_id}``).
        root: where worktrees live; ``None`` means ``state_dir/worktrees``.
        setup: an argv run in the new worktree before the agent starts (e.g. ``["npm",
            "ci"]``), at most ``setup_timeout`` seconds; its output goes to the task's
            ``output.log``. A non-zero exit fails the task (``failure_reason = "workspace"``).
        setup_timeout: seconds.
        copy: paths relative to ``project_dir`` (usually gitignored, such as ``.env``)
            copied into the worktree before ``setup``.
        submodules: run ``git submodule update --init --recursive`` in the worktree.
        commit: when the task ends, commit what the agent left uncommitted to the task
            branch (the message names the task and its session id).
    """

    model_config = ConfigDict(extra="forbid")
    mode: Literal["worktree", "shared"] | None = None
    base: str | None = Field(default=None, min_length=1, max_length=1024)
    branch: str = Field(default=DEFAULT_BRANCH, min_length=1, max_length=1024)
    root: str | None = Field(default=None, min_length=1, max_length=4096)
    setup: list[ArgText] | None = Field(default=None, min_length=1, max_length=MAX_LIST_ITEMS)
    setup_timeout: ChildSeconds = 600.0
    copy_paths: list[ArgText] = Field(default_factory=list, alias="copy", max_length=MAX_LIST_ITEMS)
    submodules: Annotated[bool, Strict()] = True
    commit: Annotated[bool, Strict()] = True


def effective_workspace(profile: WorkspaceSpec, task: WorkspaceSpec | None) -> WorkspaceSpec:
    """The task's ``[workspace]`` laid over the profile's, key by key: only the keys the
    task file wrote (pydantic's ``model_fields_set``) replace the profile's values. A task
    may carry a table only when the profile's ``task_may_set`` has ``workspace``
    (:func:`supervisor.config.loading.load_task` refuses it otherwise)."""
    if task is None:
        return profile.model_copy(deep=True)
    merged = profile.model_dump()
    merged.update({key: getattr(task, key) for key in task.model_fields_set})
    return WorkspaceSpec.model_validate(
        {("copy" if k == "copy_paths" else k): v for k, v in merged.items()}
    )


def workspace_rows(
    profile: WorkspaceSpec, task: WorkspaceSpec | None = None
) -> list[tuple[str, object, str]]:
    """``(key, value, source)`` for each key of the effective ``[workspace]``
    (``supervise config``): ``source`` is ``task``, ``profile`` or ``default``, as
    :func:`effective_workspace` lays them."""
    merged = effective_workspace(profile, task)
    rows = []
    for name, field in WorkspaceSpec.model_fields.items():
        source = "default"
        if name in profile.model_fields_set:
            source = "profile"
        if task is not None and name in task.model_fields_set:
            source = "task"
        rows.append((f"workspace.{field.alias or name}", getattr(merged, name), source))
    return rows
