"""The record of a merge in progress, so a ``supervise merge`` killed halfway is finished
by the next ``merge``, ``discard`` or ``prune`` of the same repository.

A merge writes :data:`JOURNAL` in the repository's git common dir (beside the lock of
:mod:`supervisor.workspace.repolock`, under which every read and write of it happens) after
it made the merge commit and before it moves anything, and removes it once the ``merged``
event is in the task's ``events.jsonl``. Finding it means a merge was interrupted:

- the target branch contains the recorded commit: the merge happened; the missing
  ``merged`` event is added (prune relies on it for a squash, which leaves no ancestry);
- it does not: nothing was merged; a checkout left half-way (files and index at the new
  commit, branch not moved) is undone (:func:`supervisor.workspace.checkout.undo`) and checked.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from supervisor.diskio import atomic_write
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TaskDir
from supervisor.workspace import checkout as co
from supervisor.workspace.gitops import ReviewError, commit_of, is_ancestor, review_git

#: File name of the journal in the git common dir.
JOURNAL = "supervise-merge.json"
#: The event a merge logs in the task's events.jsonl (prune reads it back).
MERGED = Event.MERGED


@dataclass(frozen=True)
class MergeIntent:
    """One merge about to move a branch.

    Attributes:
        task_dir: the task folder (absolute).
        target: the branch merged into (short name).
        before: the target's commit before.
        commit: the commit the target moves to.
        head: the task commit merged.
        squash: a squash merge.
        checkout: the checkout on ``target`` that is fast-forwarded, or ``None`` (ref only).
    """

    task_dir: str
    target: str
    before: str
    commit: str
    head: str
    squash: bool
    checkout: str | None


def record_merged(intent: MergeIntent) -> None:
    """Append the ``merged`` event for ``intent`` unless one names its commit already."""
    task = TaskDir(Path(intent.task_dir))
    if any(e.get("event") == MERGED and e.get("commit") == intent.commit for e in task.events()):
        return
    task.append_event(
        MERGED,
        into=intent.target,
        commit=intent.commit,
        head=intent.head,
        squash=intent.squash,
        checkout=intent.checkout,
    )


def write(common: Path, intent: MergeIntent) -> None:
    """Record ``intent`` (atomically: a reader sees the whole record or none).

    Raises:
        OSError: the common dir is not writable.
    """
    atomic_write(common / JOURNAL, json.dumps(asdict(intent)).encode())


def clear(common: Path) -> None:
    """Forget the journal (the merge is recorded or undone)."""
    (common / JOURNAL).unlink(missing_ok=True)


def recover(repo: Path, common: Path) -> str | None:
    """Finish what an interrupted merge left (see the module docstring); call under the
    repository lock. Returns a line saying what was done, ``None`` when there was nothing.

    Raises:
        ReviewError: a half-done checkout could not be restored (the journal is kept, so
            the next run tries again), or git failed.
    """
    try:
        intent = MergeIntent(**json.loads((common / JOURNAL).read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        clear(common)  # torn or foreign: nothing can be concluded from it
        return f"note: removed an unreadable {common / JOURNAL} ({exc})"
    now = commit_of(repo, f"refs/heads/{intent.target}")
    if now is not None and is_ancestor(repo, intent.commit, now):
        try:
            record_merged(intent)
        except OSError as exc:
            return (
                f"note: an interrupted merge into {intent.target} had finished; "
                f"its event could not be written to {intent.task_dir} ({exc})"
            )
        clear(common)
        return (
            f"note: recorded the merge into {intent.target} ({intent.commit[:12]}) "
            "that an interrupted 'supervise merge' had made"
        )
    place = Path(intent.checkout) if intent.checkout else None
    if place is not None and place.is_dir() and now == intent.before and _half_done(place, intent):
        left = co.undo(place, intent.target, intent.before, intent.commit)
        if left:
            raise ReviewError(
                f"an interrupted merge left {intent.checkout} changed ({'; '.join(left)}); "
                f"run 'git reset --merge {intent.before}' there once no git runs"
            )
    clear(common)
    return f"note: an interrupted merge into {intent.target} had not merged; nothing of it is left"


def _half_done(place: Path, intent: MergeIntent) -> bool:
    """Whether ``place``'s index is the intended commit's tree while its branch is still at
    ``before``: the state a fast-forward killed between writing the index and moving the
    branch leaves (anything else there is the user's and is left alone)."""
    same = review_git(["diff-index", "--cached", "--quiet", intent.commit, "--"], place, ok=(0, 1))
    return same.returncode == 0 and intent.commit != intent.before
