"""``supervise diff|merge|discard|prune``: review an ended task's result and clean up.

Commands::

    supervise diff -c PROFILE ID [--stat]                 the task's changes against its base
    supervise merge -c PROFILE ID [--into REF] [--squash] merge its branch into its base (or REF)
    supervise discard -c PROFILE ID [--yes]               remove its worktree and branch
    supervise prune -c PROFILE [--older-than D] [--dry-run] [--force]
                                                          remove worktrees whose work is safe

Exit codes (as :mod:`supervisor.cli`): 0 done (also: nothing to do, such as a merge that is
already contained in its target), 1 refused or failed (unknown task, a task without a worktree
or not ended, a dirty target checkout, a path the merge would write that is ignored or
untracked there, a conflict, a failed merge (undone), discard without confirmation, another
copy holding the repository's lock for 60 s, a prune removal that failed), 2 usage error
(argparse, e.g. a bad ``--older-than``). A refusal is one line on stderr.

``diff`` writes git's bytes unchanged when stdout is not a terminal (a file or a pipe gets a
patch ``git apply`` takes); on a terminal, control characters in it (the agent wrote those
files) are shown as visible escapes (:func:`supervisor.terminal.escape_controls`), keeping
newlines and tabs.

``merge``, ``discard`` and ``prune`` hold a lock per repository
(:mod:`supervisor.workspace.repolock`); a line starting ``note:`` on stdout says what an
interrupted earlier merge had left and how it was finished.

The git work is in :mod:`supervisor.workspace.review` and :mod:`supervisor.workspace.prune`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor.cli.common import err, load_profile
from supervisor.terminal import counted, escape_controls

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile
    from supervisor.workspace.review import DiscardPlan, TaskWorkspace


def _say(message: str) -> None:
    print(escape_controls(message))


def _load(args: argparse.Namespace) -> tuple[LoadedProfile, TaskWorkspace]:
    from supervisor.workspace.review import load_task

    profile = load_profile(args.config)
    return profile, load_task(profile.tasks_dir, args.task_id)


def cmd_diff(args: argparse.Namespace) -> int:
    from supervisor.workspace import review

    _, ws = _load(args)
    if not ws.ended:
        err(f"note: task {ws.task_id} is {ws.manifest.status}: its committed changes only")
    data = review.diff(ws, stat=args.stat)
    if sys.stdout.isatty():
        text = data.decode("utf-8", errors="surrogateescape")
        sys.stdout.write(escape_controls(text, keep="\n\t"))
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from supervisor import attempts
    from supervisor.workspace import review

    profile, ws = _load(args)
    for note in attempts.merge_notes(profile, ws.task_id):  # an attempt not chosen (issue 26)
        _say(note)
    result = review.merge(ws, into=args.into, squash=args.squash)
    for note in result.notes:
        _say(note)
    if result.up_to_date:
        _say(f"{ws.task_id}: {result.target} already contains {ws.branch} ({result.head[:12]})")
        return 0
    where = f"in {result.checkout}" if result.checkout else "(checked out nowhere: ref updated)"
    how = "squashed" if result.squash else "merged"
    _say(f"{ws.task_id}: {how} {ws.branch} into {result.target} {where}: {result.commit}")
    return 0


def _confirm(question: str) -> bool:
    """A yes/no question on the terminal; ``False`` unless the answer starts with y."""
    try:
        answer = input(escape_controls(question) + " [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower().startswith("y")


def _removal(ws: TaskWorkspace, plan: DiscardPlan) -> list[str]:
    """What ``plan`` removes, for the question and the answer."""
    parts = [f"worktree {plan.worktree}"] if plan.worktree else []
    if plan.branch_commit:
        parts.append(
            f"branch {ws.branch} ({counted(plan.unmerged, 'commit')} not in {ws.report.base})"
        )
    return parts


def cmd_discard(args: argparse.Namespace) -> int:
    from supervisor.workspace import review

    _, ws = _load(args)
    plan = review.discard_plan(ws)
    if plan.worktree is None and plan.branch_commit is None:
        _say(f"{ws.task_id}: worktree and branch {ws.branch} are already gone")
        if not ws.report.removed:
            review.mark_removed(ws.task)
        return 0
    loss = f", and {plan.dirty} uncommitted paths" if plan.dirty else ""
    question = f"remove {' and '.join(_removal(ws, plan))}{loss} of task {ws.task_id}?"
    if not args.yes:
        if not sys.stdin.isatty():
            err(f"supervise discard: not confirmed (no terminal; pass --yes): {question}")
            return 1
        if not _confirm(question):
            err("nothing removed")
            return 1
    notes: list[str] = []
    done = review.discard_confirmed(ws, plan, notes)
    for note in notes:
        _say(note)
    if done is None:
        _say(f"{ws.task_id}: worktree and branch {ws.branch} are already gone")
    else:
        _say(f"{ws.task_id}: removed {' and '.join(_removal(ws, done))}")
    return 0


def worktree_root(profile: LoadedProfile) -> Path:
    """``[workspace] root`` (relative to the profile's folder), or ``state_dir/worktrees``."""
    root = profile.spec.workspace.root
    if root is None:
        return profile.state_dir / "worktrees"
    path = Path(root).expanduser()
    return path if path.is_absolute() else profile.path.parent / path


def cmd_prune(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from supervisor.workspace import prune
    from supervisor.workspace.repolock import repo_locks

    profile = load_profile(args.config)
    notes: list[str] = []
    with repo_locks(prune.repositories(profile.tasks_dir), "prune", notes):
        for note in notes:
            _say(note)
        items = prune.plan(
            profile.tasks_dir,
            worktree_root(profile),
            profile.spec.workspace.branch,
            older_than=args.older_than,
            force=args.force,
        )
        ok = True if args.dry_run else prune.apply(items, profile.tasks_dir, force=args.force)
    if not items:
        _say(f"nothing to prune in {profile.tasks_dir}")
        return 0
    rows = []
    for item in items:
        action = item.action
        if args.dry_run and action == "remove":
            action = "would remove"
        elif item.result:
            action = item.result
        deleted = " (to delete)" if args.dry_run else " (deleted)"
        branch = (item.branch or "-") + (deleted if item.delete_branch else "")
        rows.append([item.task_id, action, item.reason, branch, item.path])
    safe = [[escape_controls(str(cell)) for cell in row] for row in rows]
    print(tabulate(safe, headers=["task_id", "action", "why", "branch", "worktree"]))
    return 0 if ok else 1


def _duration(text: str) -> float:
    from supervisor.workspace.prune import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run(func: object) -> object:
    """Wrap a command so a refusal (or an unreadable file) is one line on stderr and exit 1."""

    def runner(args: argparse.Namespace) -> int:
        from supervisor.workspace.review import ReviewError

        try:
            return int(func(args))  # type: ignore[operator]
        except (ReviewError, OSError) as exc:
            err(f"supervise {args.command}: {exc}")
            return 1

    return runner


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``diff``, ``merge``, ``discard`` and ``prune`` to ``supervise``'s subcommands."""
    diff = sub.add_parser("diff", help="a task's changes against its base commit")
    diff.add_argument("-c", "--config", required=True, help="profile TOML file")
    diff.add_argument("task_id")
    diff.add_argument("--stat", action="store_true", help="a diffstat instead of the patch")
    diff.set_defaults(func=_run(cmd_diff))

    merge = sub.add_parser("merge", help="merge an ended task's branch into its base")
    merge.add_argument("-c", "--config", required=True, help="profile TOML file")
    merge.add_argument("task_id")
    merge.add_argument("--into", metavar="REF", help="the local branch to merge into (its base)")
    merge.add_argument("--squash", action="store_true", help="one commit instead of a merge")
    merge.set_defaults(func=_run(cmd_merge))

    discard = sub.add_parser("discard", help="remove an ended task's worktree and branch")
    discard.add_argument("-c", "--config", required=True, help="profile TOML file")
    discard.add_argument("task_id")
    discard.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    discard.set_defaults(func=_run(cmd_discard))

    prune = sub.add_parser("prune", help="remove worktrees of ended tasks merged or empty")
    prune.add_argument("-c", "--config", required=True, help="profile TOML file")
    prune.add_argument(
        "--older-than",
        type=_duration,
        metavar="DURATION",
        help="only tasks that ended longer ago (7d, 12h, 30m, 45s)",
    )
    prune.add_argument("--dry-run", action="store_true", help="list what would go and why")
    prune.add_argument(
        "--force",
        action="store_true",
        help="also remove dirty worktrees, unmerged tasks' worktrees "
        "(their branch is kept) and orphaned worktrees",
    )
    prune.set_defaults(func=_run(cmd_prune))
