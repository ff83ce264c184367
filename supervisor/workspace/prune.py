"""``supervise prune``: remove the worktrees of ended tasks whose work is safe elsewhere.

A worktree goes when its task has ended (``states.TERMINAL``) and its branch is merged into
its base branch (``git merge-base --is-ancestor BRANCH BASE``), was merged by ``supervise
merge`` (a ``merged`` event for the branch's current commit: a squash leaves no ancestry),
or has no commits beyond ``base_commit``; its branch is deleted with it. A worktree with
uncommitted changes or untracked files, or an unmerged branch, is kept unless ``force``:
then the worktree is removed (its uncommitted work with it) and an unmerged branch is kept,
so its commits stay reachable (``supervise discard`` deletes it). Tasks that have not ended,
shared tasks, tasks whose worktree is already removed and tasks that failed making it
(``failure_reason = "workspace"``: a branch of that name is not theirs) are not looked at.

Orphans are worktrees no task folder accounts for: a ``git worktree list`` entry of a known
repository on a branch under the branch template's prefix (``supervise/``) whose task folder
is gone, or a linked worktree (a folder with a ``.git`` file) in the worktree root that no
manifest names. They are reported; with ``force`` they are removed with ``git worktree remove``
(their branch kept); a folder that is not a git worktree is never looked at or removed.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from supervisor.config.workspace import TASK_ID_FIELD
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import MANIFEST, TaskDir, parse_iso
from supervisor.taskdir.states import TERMINAL, FailureReason
from supervisor.terminal import counted
from supervisor.workspace.gitops import (
    ReviewError,
    Worktree,
    commit_of,
    count_commits,
    dirty_paths,
    is_ancestor,
    review_git,
    worktrees,
)
from supervisor.workspace.journal import MERGED
from supervisor.workspace.review import mark_removed, remove_worktree

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``7d``, ``12h``, ``30m``, ``45s``, ``2w`` or ``90``
    (plain seconds).

    Raises:
        ValueError: anything else (the message gives the accepted forms).
    """
    match = _DURATION_RE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration: use e.g. 7d, 12h, 30m, 45s or seconds")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


@dataclass
class PruneItem:
    """One line of ``prune``'s table.

    Attributes:
        task_id: the task, or the id the orphan's branch names.
        action: ``remove`` (worktree and, when ``delete_branch``, branch), ``keep`` or
            ``orphan`` (reported only).
        reason: why, for a person.
        path: the worktree folder.
        branch: the task branch, if any.
        repository: the repository's top folder (``None`` for a folder git does not know).
        delete_branch: delete the branch too (merged or empty).
        result: after :func:`apply`: ``removed``, ``error: ...``, or ``""`` (not acted on).
    """

    task_id: str
    action: str
    reason: str
    path: str
    branch: str | None = None
    repository: str | None = None
    delete_branch: bool = False
    result: str = ""


def _age_s(task: TaskDir, finished_at: str | None, now: float) -> float:
    """Seconds since the task ended (``finished_at``, else the manifest's mtime)."""
    ended = parse_iso(finished_at)
    if ended is None:
        ended = task.file(MANIFEST).stat().st_mtime
    return now - ended


def _merged_reason(
    task: TaskDir, repo: Path, branch: str, base: str | None, head: str, base_commit: str
) -> str | None:
    """Why the branch's work is safe without it, or ``None`` when it is not."""
    if count_commits(repo, base_commit, head) == 0:
        return "no commits beyond its base commit"
    base_head = commit_of(repo, f"refs/heads/{base}") if base else None
    if base_head is not None and is_ancestor(repo, head, base_head):
        return f"merged into {base}"
    for event in reversed(task.events()):
        if event.get("event") == MERGED and event.get("head") == head:
            return f"merged into {event.get('into')} by 'supervise merge'"
    return None


def _judge(task: TaskDir, force: bool, older_than: float | None, now: float) -> PruneItem | None:
    """The row for one task folder, ``None`` when prune has nothing to say about it."""
    try:
        manifest = task.read_manifest()
    except (OSError, ValueError):
        return None
    ws = manifest.workspace
    if (
        manifest.status not in TERMINAL
        or ws is None
        or ws.mode != "worktree"
        or ws.removed
        or not (ws.repository and ws.branch and ws.base_commit)
    ):
        return None
    if manifest.failure_reason == FailureReason.WORKSPACE:
        return None  # no worktree was made (or it was removed): a same-named branch is not ours
    repo, path = Path(ws.repository), Path(ws.path)
    item = PruneItem(task.task_id, "keep", "", str(path), ws.branch, str(repo))
    age = _age_s(task, manifest.finished_at, now)
    if older_than is not None and age < older_than:
        item.reason = f"ended {age / 3600:.1f} h ago, within --older-than"
        return item
    if not repo.is_dir():
        item.reason = f"repository {repo} is gone"
        return item
    head = commit_of(repo, f"refs/heads/{ws.branch}")
    dirty = dirty_paths(path) if path.is_dir() else []
    merged = (
        _merged_reason(task, repo, ws.branch, ws.base, head, ws.base_commit)
        if head
        else ("branch already deleted")
    )
    if dirty and not force:
        item.reason = f"uncommitted changes ({len(dirty)} paths); --force removes them"
    elif merged is None and not force:
        unmerged = count_commits(repo, ws.base_commit, head or ws.base_commit)
        item.reason = (
            f"unmerged: {counted(unmerged, 'commit')} not in {ws.base}; merge, discard or --force"
        )
    else:
        item.action = "remove"
        item.delete_branch = merged is not None and head is not None
        notes = [merged or "unmerged, --force: branch kept"]
        if dirty:
            notes.append(f"{len(dirty)} uncommitted paths lost (--force)")
        item.reason = "; ".join(notes)
    return item


def _orphans(
    tasks_dir: Path, root: Path, prefix: str, known: set[Path], repos: set[Path]
) -> list[PruneItem]:
    """Worktrees no task folder accounts for (see the module docstring)."""
    found: list[PruneItem] = []
    seen: set[Path] = set()
    for repo in sorted(repos):
        try:
            listed: list[Worktree] = worktrees(repo) if repo.is_dir() else []
        except ReviewError:
            continue
        for tree in listed[1:]:  # the first is the main checkout
            if tree.branch is None or not tree.branch.startswith(prefix) or tree.path in known:
                continue
            task_id = tree.branch[len(prefix) :]
            if (tasks_dir / task_id).exists():
                continue  # its task folder is there (a worktree still being prepared)
            seen.add(tree.path)
            gone = "; its folder is gone too" if tree.prunable else ""
            found.append(
                PruneItem(
                    task_id,
                    "orphan",
                    f"task folder gone{gone}",
                    str(tree.path),
                    tree.branch,
                    str(repo),
                )
            )
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        entries = []
    for entry in entries:
        path = Path(entry.path).resolve()
        if path in known or path in seen or (tasks_dir / entry.name).exists():
            continue
        repository = _repository_of(path)
        if repository is not None:  # only linked worktrees: the root may hold other folders
            found.append(
                PruneItem(
                    entry.name, "orphan", "no task folder names it", str(path), None, repository
                )
            )
    return found


def _repository_of(path: Path) -> str | None:
    """The main checkout of the repository ``path`` is a linked worktree of, else ``None``."""
    if not (path / ".git").is_file():  # a linked worktree has a .git file, not a folder
        return None
    try:
        common = review_git(["rev-parse", "--path-format=absolute", "--git-common-dir"], path)
    except ReviewError:
        return None
    return str(Path(common.stdout.decode(errors="surrogateescape").strip()).parent)


def repositories(tasks_dir: Path) -> set[Path]:
    """The repositories the worktree tasks of ``tasks_dir`` name (to lock before
    :func:`plan`, :mod:`supervisor.workspace.repolock`); unreadable manifests are skipped."""
    found: set[Path] = set()
    try:
        folders = [p for p in tasks_dir.iterdir() if p.is_dir()]
    except FileNotFoundError:
        return found
    for folder in folders:
        try:
            ws = TaskDir(folder).read_manifest().workspace
        except (OSError, ValueError):
            continue
        if ws is not None and ws.mode == "worktree" and ws.repository:
            found.add(Path(ws.repository))
    return found


def plan(
    tasks_dir: Path,
    root: Path,
    branch_template: str,
    older_than: float | None = None,
    force: bool = False,
    now: float | None = None,
) -> list[PruneItem]:
    """What ``prune`` would do, task by task, then the orphans. Reads only.

    Args:
        tasks_dir: ``state_dir/tasks``.
        root: the worktree root (``[workspace] root`` or ``state_dir/worktrees``).
        branch_template: ``[workspace] branch``; the part before ``{task_id}`` tells task
            branches from others (``supervise/`` when the template has no prefix).
        older_than: seconds; tasks that ended more recently are kept.
        force: allow removing dirty worktrees and unmerged tasks' worktrees.
        now: epoch seconds (default: the clock).

    A task whose repository git cannot read gets a ``keep`` row saying why.
    """
    now = time.time() if now is None else now
    items: list[PruneItem] = []
    known: set[Path] = set()
    repos: set[Path] = set()
    try:
        folders = sorted(p for p in tasks_dir.iterdir() if p.is_dir())
    except FileNotFoundError:
        folders = []
    for folder in folders:
        task = TaskDir(folder)
        try:
            ws = task.read_manifest().workspace
        except (OSError, ValueError):
            ws = None
        if ws is not None and ws.mode == "worktree":
            known.add(Path(ws.path).resolve())
            if ws.repository:
                repos.add(Path(ws.repository))
        try:
            item = _judge(task, force, older_than, now)
        except (ReviewError, OSError) as exc:  # one repository's trouble stops no other row
            item = PruneItem(task.task_id, "keep", f"cannot judge: {exc}", str(ws and ws.path))
        if item is not None:
            items.append(item)
    prefix = branch_template.split(TASK_ID_FIELD)[0] or "supervise/"
    return items + _orphans(tasks_dir, root, prefix, known, repos)


def apply(items: list[PruneItem], tasks_dir: Path, force: bool = False) -> bool:
    """Carry out ``items``: remove each ``remove`` row's worktree (and branch), and, with
    ``force``, each registered orphan's worktree. Logs a ``pruned`` event and sets
    ``workspace.removed`` for each task. Sets each row's ``result``.

    Returns:
        Whether every removal succeeded (a failure is in its row's ``result``; the rest go on).
    """
    ok = True
    for item in items:
        if item.action == "remove" or (force and item.action == "orphan" and item.repository):
            try:
                _remove(item, tasks_dir)
                item.result = "removed"
            except (ReviewError, OSError) as exc:
                item.result = f"error: {exc}"
                ok = False
    return ok


def _remove(item: PruneItem, tasks_dir: Path) -> None:
    repo = Path(item.repository or "")
    path = Path(item.path)
    if path.is_dir():
        remove_worktree(repo, path)
    else:
        review_git(["worktree", "prune"], repo)
    if item.action == "orphan":
        return
    if item.delete_branch and item.branch:
        review_git(["branch", "-D", item.branch], repo)
    task = TaskDir(tasks_dir / item.task_id)
    task.append_event(
        Event.PRUNED,
        path=item.path,
        branch=item.branch,
        branch_deleted=item.delete_branch,
        reason=item.reason,
    )
    mark_removed(task)
