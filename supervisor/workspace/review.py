"""What an operator does with an ended task's result: diff, merge and discard its branch.

Everything here works from the task's ``manifest.json`` (its ``workspace`` report,
:class:`~supervisor.workspace.model.WorkspaceReport`) and from git; nothing talks to the
engine. The functions print nothing: they return results or raise :class:`ReviewError`, one
line for the operator (``supervise diff|merge|discard``, :mod:`supervisor.cli.workspace`,
turn it into exit status 1).

What is written, and why it is safe beside a running engine: an ended task's folder is no
longer written by the engine (a terminal status is final, see ``states.TERMINAL``), so a
``merged`` / ``discarded`` line is appended to its ``events.jsonl`` (whole lines,
:meth:`TaskDir.append_event`) and ``workspace.removed`` is set through the manifest's file
lock (:meth:`TaskDir.update_manifest`), the same lock every engine write takes.

Git rules used (git 2.39 here; ``git merge-tree --write-tree`` needs git >= 2.38):

- A merge is checked for conflicts first with ``git merge-tree --write-tree`` (git-merge-tree(1)),
  which touches no checkout and no ref; a conflicting merge is refused with the files named
  and nothing changed anywhere.
- The merge commit is always made without a checkout: the tree from ``merge-tree``, a
  commit from ``git commit-tree`` (parents: the target and, unless squashed, the task head;
  the user's commit hooks do not run, as for any commit made outside a checkout).
- A target branch checked out in a worktree (``git worktree list --porcelain``) is moved
  there by one fast-forward to that commit (:mod:`supervisor.workspace.checkout`), only when
  ``git status --porcelain`` is empty and no path the merge writes is ignored or untracked
  there; a failed step is undone and the checkout checked to be exactly as it was.
- A target branch checked out nowhere only has its ref moved: ``git update-ref REF NEW OLD``
  (which refuses if the branch moved meanwhile), what ``git fetch`` does to a branch nobody
  has checked out.
- ``merge`` and ``discard`` hold the repository's lock (:mod:`supervisor.workspace.repolock`),
  and a merge keeps a journal (:mod:`supervisor.workspace.journal`) until its event is
  written, so a second copy waits and a killed copy is finished by the next run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import MANIFEST, Manifest, TaskDir
from supervisor.taskdir.states import TERMINAL, FailureReason
from supervisor.terminal import counted
from supervisor.workspace import journal
from supervisor.workspace.checkout import (
    fast_forward,
    interrupts_deferred,
    problems,
    refuse_collisions,
)
from supervisor.workspace.gitops import (
    LONG_GIT_TIMEOUT,
    MergeConflict,
    ReviewError,
    commit_of,
    count_commits,
    dirty_paths,
    git_out,
    identity_args,
    is_ancestor,
    review_git,
    worktrees,
)
from supervisor.workspace.journal import MERGED
from supervisor.workspace.model import WorkspaceReport
from supervisor.workspace.repolock import repo_lock
from supervisor.workspace.worktreelock import worktree_lock

# ---------------------------------------------------------------- the task


@dataclass(frozen=True)
class TaskWorkspace:
    """A task's folder, manifest and worktree report, checked to name a task branch.

    Attributes:
        task: the task folder.
        manifest: its manifest as read.
        report: ``manifest.workspace`` (mode ``worktree``, with repository, branch and
            base_commit set).
    """

    task: TaskDir
    manifest: Manifest
    report: WorkspaceReport

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @property
    def repository(self) -> Path:
        return Path(self.report.repository or "")

    @property
    def branch(self) -> str:
        return self.report.branch or ""

    @property
    def base_commit(self) -> str:
        return self.report.base_commit or ""

    @property
    def ended(self) -> bool:
        return self.manifest.status in TERMINAL

    def require_ended(self, verb: str) -> None:
        """Raises ReviewError unless the task has ended (its agent may still write)."""
        if not self.ended:
            raise ReviewError(
                f"task {self.task_id} is {self.manifest.status}, not ended: its agent may still "
                f"change the branch; {verb} it once it has ended (or 'supervise stop' it first)"
            )


def load_task(tasks_dir: Path, task_id: str) -> TaskWorkspace:
    """The task ``task_id`` of ``tasks_dir`` with its worktree report.

    Raises:
        ReviewError: no such task, an unreadable manifest, no ``workspace`` report, a
            ``shared`` task (its changes are not on a branch), a task whose workspace could
            not be made (``failure_reason = "workspace"``), or no branch made yet.
    """
    folder = tasks_dir / task_id
    if "/" in task_id or task_id.startswith(".") or not (folder / MANIFEST).exists():
        raise ReviewError(f"no task {task_id!r} in {tasks_dir}; see 'supervise status -c ...'")
    task = TaskDir(folder)
    try:
        manifest = task.read_manifest()
    except (OSError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ReviewError(f"{folder / MANIFEST}: cannot read the manifest ({first})") from None
    report = manifest.workspace
    if report is None:
        raise ReviewError(
            f"task {task_id} has no 'workspace' in its manifest (it ran before workspaces or "
            "was never prepared): there is no task branch to review"
        )
    if report.mode == "shared":
        raise ReviewError(
            f"task {task_id} ran in shared mode in {report.path}: its changes are not on a "
            "branch of their own; review them with git in that folder"
        )
    if manifest.failure_reason == FailureReason.WORKSPACE:
        # Its worktree could not be made and what was made was removed: a branch of that
        # name now (e.g. the one that was "already there") is not the task's to touch.
        raise ReviewError(
            f"task {task_id} failed making its workspace (failure_reason workspace): it left "
            f"no worktree; a branch {report.branch} is not the task's"
        )
    if not (report.repository and report.branch and report.base_commit):
        raise ReviewError(
            f"task {task_id} ({manifest.status}) has no task branch: its worktree was never made"
        )
    return TaskWorkspace(task=task, manifest=manifest, report=report)


def task_commit(ws: TaskWorkspace) -> str:
    """The task's result: its branch's commit, or the recorded ``head_commit`` once the
    branch is gone (discarded) while git still has the commit.

    Raises:
        ReviewError: neither exists any more.
    """
    commit = commit_of(ws.repository, f"refs/heads/{ws.branch}")
    if commit is None and ws.report.head_commit:
        commit = commit_of(ws.repository, ws.report.head_commit)
    if commit is None:
        raise ReviewError(
            f"task {ws.task_id}: branch {ws.branch} is gone from {ws.repository} "
            "(discarded or deleted) and its head commit is not in the repository"
        )
    return commit


# ---------------------------------------------------------------- diff


def diff(ws: TaskWorkspace, stat: bool = False) -> bytes:
    """``git diff BASE_COMMIT TASK_COMMIT`` (``--stat`` for the summary), exactly as git
    writes it: no colour, no external diff driver or textconv, so the bytes are a patch
    ``git apply`` takes. What the agent left uncommitted in a live task's worktree is not in it.

    Raises:
        ReviewError: the branch and its head are gone, or git failed.
    """
    head = task_commit(ws)
    args = ["diff", "--no-color", "--no-ext-diff", "--no-textconv"]
    if stat:
        args.append("--stat")
    return review_git([*args, ws.base_commit, head, "--"], ws.repository, LONG_GIT_TIMEOUT).stdout


# ---------------------------------------------------------------- merge


@dataclass(frozen=True)
class MergeResult:
    """What ``merge`` did.

    Attributes:
        target: the branch merged into.
        commit: the target's commit afterwards (unchanged when ``up_to_date``).
        head: the task commit that was merged.
        checkout: the worktree the merge was made in, ``None`` when the branch was
            checked out nowhere and only its ref moved.
        squash: one squashed commit instead of a merge commit.
        up_to_date: the target already contained the task's commits (or a recorded squash
            of them); nothing was done.
        notes: lines about an interrupted earlier merge that was finished first.
    """

    target: str
    commit: str
    head: str
    checkout: Path | None
    squash: bool
    up_to_date: bool = False
    notes: tuple[str, ...] = ()


def target_branch(ws: TaskWorkspace, into: str | None) -> str:
    """The local branch to merge into: ``into``, else the task's ``base``.

    Raises:
        ReviewError: it is not a local branch (a tag or a commit cannot take a merge), or
            it is the task branch itself.
    """
    name = (into or ws.report.base or "").removeprefix("refs/heads/")
    if not name:
        raise ReviewError(f"task {ws.task_id} records no base branch; name one with --into BRANCH")
    if commit_of(ws.repository, f"refs/heads/{name}") is None:
        raise ReviewError(
            f"{name!r} is not a local branch of {ws.repository}; name one with --into BRANCH"
        )
    if name == ws.branch:
        raise ReviewError(f"{name} is the task's own branch; name another with --into BRANCH")
    return name


def merge_tree(repo: Path, target: str, head: str) -> tuple[str, list[str]]:
    """``git merge-tree --write-tree`` of ``target`` and ``head``: the merged tree and the
    conflicting paths (empty when it merges cleanly). Touches no checkout and no ref.

    Raises:
        ReviewError: git failed (or is older than 2.38, which lacks ``--write-tree``).
    """
    args = ["merge-tree", "--write-tree", "-z", "--name-only", "--no-messages", target, head]
    proc = review_git(args, repo, LONG_GIT_TIMEOUT, ok=(0, 1))
    parts = proc.stdout.decode(errors="surrogateescape").split("\0")
    files = [p for p in parts[1:] if p] if proc.returncode == 1 else []
    return parts[0].strip(), sorted(set(files))


def merge(ws: TaskWorkspace, into: str | None = None, squash: bool = False) -> MergeResult:
    """Merge the task's branch into its base branch (or ``into``) and log a ``merged`` event,
    holding the repository's lock (:mod:`supervisor.workspace.repolock`).

    Returns:
        :class:`MergeResult`.

    Raises:
        MergeConflict: the merge would conflict (files named; nothing changed).
        ReviewError: the task has not ended, the target is not a local branch, its checkout
            has uncommitted changes or untracked files, the merge would write a path that is
            ignored or untracked there, another copy holds the lock, or git failed (the
            checkout is then as it was, or the line says what is left).
    """
    ws.require_ended("merge")
    notes: list[str] = []
    with repo_lock(ws.repository, "merge", notes) as common:
        result = _merge_locked(ws, into, squash, common)
    return dataclasses.replace(result, notes=tuple(notes))


def _already_merged(ws: TaskWorkspace, head: str, target_commit: str) -> bool:
    """The target contains ``head``, or a ``merged`` event of ``head`` whose commit it
    contains (a squash leaves no ancestry)."""
    repo = ws.repository
    if is_ancestor(repo, head, target_commit):
        return True
    return any(
        e.get("event") == MERGED
        and e.get("head") == head
        and commit_of(repo, str(e.get("commit"))) is not None
        and is_ancestor(repo, str(e.get("commit")), target_commit)
        for e in ws.task.events()
    )


def _check_clean(repo: Path, target: str, checkout: Path) -> None:
    """Raises ReviewError unless ``checkout`` (where ``target`` is checked out) is there and
    has no changes and no untracked files."""
    if not checkout.is_dir():
        raise ReviewError(
            f"{target} is checked out in {checkout}, which is gone; "
            f"run 'git worktree prune' in {repo}"
        )
    dirty = dirty_paths(checkout)
    if dirty:
        raise ReviewError(
            f"{checkout} (branch {target}) has uncommitted changes or untracked files "
            f"({counted(len(dirty), 'path')}, 'git status' there): left untouched; commit or "
            "clean them, or merge --into another branch"
        )


def _merge_locked(ws: TaskWorkspace, into: str | None, squash: bool, common: Path) -> MergeResult:
    repo = ws.repository
    target = target_branch(ws, into)
    head = task_commit(ws)
    before = commit_of(repo, f"refs/heads/{target}") or ""
    if _already_merged(ws, head, before):
        return MergeResult(target, before, head, None, squash, up_to_date=True)
    tree, conflicts = merge_tree(repo, before, head)
    checkout = next((w.path for w in worktrees(repo) if w.branch == target), None)
    what = f"merging {ws.branch} into {target}"
    if checkout is not None:
        if checkout.is_dir():  # named first: "untracked files" alone would hide which
            refuse_collisions(checkout, what, before, tree)
        _check_clean(repo, target, checkout)
    if conflicts:
        raise MergeConflict(
            f"{what} conflicts in: {', '.join(conflicts)}; nothing was changed", conflicts
        )
    kind = "Squash" if squash else "Merge"
    message = f"{kind} task {ws.task_id} ({ws.manifest.task_name}) from {ws.branch}"
    parents = ["-p", before] + ([] if squash else ["-p", head])
    commit = git_out([*identity_args(repo), "commit-tree", tree, *parents, "-m", message], repo)
    intent = journal.MergeIntent(
        str(ws.task.path.resolve()),
        target,
        before,
        commit,
        head,
        squash,
        str(checkout) if checkout else None,
    )
    _apply(intent, common, message, repo)
    return MergeResult(target, commit, head, checkout, squash)


def _apply(intent: journal.MergeIntent, common: Path, message: str, repo: Path) -> None:
    """Move the target to the merge commit (the checkout's fast-forward, or only the ref)
    and log the event, journalled, with Ctrl-C held until done.

    Raises:
        ReviewError: the step failed; it was undone (journal cleared) or the undo failed
            (journal kept, so the next run finishes it).
    """
    checkout = Path(intent.checkout) if intent.checkout else None
    target, before, commit = intent.target, intent.before, intent.commit
    with interrupts_deferred():
        journal.write(common, intent)
        try:
            if checkout is not None:
                fast_forward(checkout, target, before, commit)
            else:
                ref = f"refs/heads/{target}"
                review_git(["update-ref", "-m", message, ref, commit, before], repo)
        except ReviewError:
            if not (checkout and problems(checkout, target, before)):
                journal.clear(common)  # undone and checked; else the next run finishes the undo
            raise
        journal.record_merged(intent)
        journal.clear(common)


# ---------------------------------------------------------------- discard


@dataclass(frozen=True)
class DiscardPlan:
    """What ``discard`` would remove (for the confirmation prompt).

    Attributes:
        worktree: the worktree folder, ``None`` when it is gone already.
        branch_commit: the branch's commit, ``None`` when the branch is gone.
        unmerged: commits on the branch that are not in its base branch (or beyond
            base_commit when the base branch is gone).
        dirty: uncommitted or untracked paths in the worktree.
    """

    worktree: Path | None
    branch_commit: str | None
    unmerged: int
    dirty: int


def discard_plan(ws: TaskWorkspace) -> DiscardPlan:
    """What :func:`discard` would remove, and what would be lost.

    Raises:
        ReviewError: the task has not ended, the branch is checked out in another folder
            (git would refuse to delete it), or the path is not our worktree.
    """
    ws.require_ended("discard")
    repo = ws.repository
    path = Path(ws.report.path).resolve()
    listed = {w.path: w for w in worktrees(repo)}
    for tree in listed.values():
        if tree.branch == ws.branch and tree.path != path:
            raise ReviewError(
                f"branch {ws.branch} is checked out in {tree.path}, not the task's "
                "worktree: check out another branch there first"
            )
    entry = listed.get(path)
    if entry is not None and entry.branch not in (ws.branch, None):
        raise ReviewError(f"{path} holds branch {entry.branch}, not {ws.branch}: left alone")
    if entry is None and path.exists():
        raise ReviewError(f"{path} is not a worktree of {repo}: left alone, remove it by hand")
    branch_commit = commit_of(repo, f"refs/heads/{ws.branch}")
    unmerged = 0
    if branch_commit is not None:
        base = commit_of(repo, f"refs/heads/{ws.report.base}") if ws.report.base else None
        unmerged = count_commits(repo, base or ws.base_commit, branch_commit)
    present = entry is not None and path.is_dir()
    dirty = len(dirty_paths(path)) if present else 0
    return DiscardPlan(path if present else None, branch_commit, unmerged, dirty)


def remove_worktree(repo: Path, path: Path) -> None:
    """``git worktree remove --force PATH`` (the caller decided what may be lost; --force
    also removes a worktree holding submodules, git-worktree(1)), under the worktree lock."""
    with worktree_lock(repo):
        review_git(["worktree", "remove", "--force", str(path)], repo, LONG_GIT_TIMEOUT)


def mark_removed(task: TaskDir) -> None:
    """Set the manifest's ``workspace.removed`` under the manifest lock."""

    def change(manifest: Manifest) -> None:
        if manifest.workspace is not None:
            manifest.workspace = manifest.workspace.model_copy(update={"removed": True})

    task.update_manifest(change)


def discard(ws: TaskWorkspace, plan: DiscardPlan) -> None:
    """Remove the task's worktree (uncommitted work included) and delete its branch; log a
    ``discarded`` event and set ``workspace.removed``.

    Raises:
        ReviewError: git failed (what was removed before stays removed).
    """
    repo = ws.repository
    if plan.worktree is not None:
        remove_worktree(repo, plan.worktree)
    else:
        review_git(["worktree", "prune"], repo)  # forget a registration whose folder is gone
    if plan.branch_commit is not None:
        review_git(["branch", "-D", ws.branch], repo)
    ws.task.append_event(
        Event.DISCARDED,
        branch=ws.branch,
        commit=plan.branch_commit,
        path=ws.report.path,
        unmerged=plan.unmerged,
        dirty=plan.dirty,
    )
    mark_removed(ws.task)


def discard_confirmed(
    ws: TaskWorkspace, confirmed: DiscardPlan, notes: list[str] | None = None
) -> DiscardPlan | None:
    """:func:`discard` under the repository's lock, from a plan made anew under it (a
    second copy may have removed things meanwhile). Returns the plan carried out, or
    ``None`` when the worktree and the branch were already gone (``workspace.removed`` is
    then set). Lines about an interrupted merge finished first are appended to ``notes``.

    Raises:
        ReviewError: another copy holds the lock; or the branch or worktree changed since
            ``confirmed`` was shown, so that more would be lost (nothing removed); or git
            failed.
    """
    with repo_lock(ws.repository, "discard", notes):
        fresh = load_task(ws.task.path.parent, ws.task_id)
        plan = discard_plan(fresh)
        if plan.worktree is None and plan.branch_commit is None:
            if not fresh.report.removed:
                mark_removed(fresh.task)
            return None
        if (
            plan.branch_commit not in (None, confirmed.branch_commit)
            or plan.dirty > confirmed.dirty
            or (plan.worktree is not None and confirmed.worktree is None)
        ):
            raise ReviewError(
                f"task {ws.task_id}'s branch or worktree changed since the question: nothing "
                "removed; run discard again to see what it holds now"
            )
        discard(fresh, plan)
        return plan
