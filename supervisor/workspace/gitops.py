"""Git for reviewing tasks: a bounded runner and the few queries ``diff``, ``merge``,
``discard`` and ``prune`` need (:mod:`supervisor.workspace.review`,
:mod:`supervisor.workspace.prune`).

Every call goes through :func:`supervisor.workspace.git.run_git_bytes` (the git CLI, bounded,
``LC_ALL=C``, no terminal); here its failures become :class:`ReviewError` lines.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from supervisor.errors import SuperviseError
from supervisor.workspace import git

#: Seconds for commands whose cost grows with the change (diff, merge, worktree remove).
LONG_GIT_TIMEOUT = 300.0
#: Committer used only when the repository has no identity of its own (a fresh machine).
FALLBACK_IDENTITY = dict(arg.split("=", 1) for arg in git.FALLBACK_IDENTITY[1::2])


class ReviewError(SuperviseError):
    """An operation refused or failed; ``str(exc)`` is one line for the operator."""


class MergeConflict(ReviewError):
    """The merge would conflict; nothing was changed.

    Attributes:
        files: the conflicting paths, relative to the repository's top folder.
    """

    def __init__(self, message: str, files: list[str]) -> None:
        super().__init__(message)
        self.files = files


def review_git(
    args: list[str], cwd: Path, timeout: float = git.GIT_TIMEOUT, ok: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` in ``cwd`` (:func:`supervisor.workspace.git.run_git_bytes`, whose
    :data:`~supervisor.workspace.git.GIT_TIMEOUT` is the default): bytes out, a failure
    one :class:`ReviewError` line (``git.run_git`` is the text form that raises
    ``GitError``).

    Returns:
        The completed process when its exit status is in ``ok``.

    Raises:
        ReviewError: git missing, timed out, or exited outside ``ok`` (one line).
    """
    try:
        return git.run_git_bytes(args, cwd, timeout, ok=ok)
    except git.GitError as exc:
        raise ReviewError(f"{exc} (in {cwd})") from None


def git_out(args: list[str], cwd: Path, timeout: float = git.GIT_TIMEOUT) -> str:
    """git's stdout, stripped, decoded (for hashes, refs and counts)."""
    return review_git(args, cwd, timeout).stdout.decode(errors="surrogateescape").strip()


def commit_of(repo: Path, ref: str) -> str | None:
    """The commit ``ref`` names in ``repo`` (40 hex), or ``None`` when it names none."""
    proc = review_git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], repo, ok=(0, 1))
    if proc.returncode != 0:
        return None
    return proc.stdout.decode().strip() or None


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    """``git merge-base --is-ancestor OLDER NEWER``: every commit of ``older`` is in ``newer``."""
    done = review_git(["merge-base", "--is-ancestor", older, newer], repo, ok=(0, 1))
    return done.returncode == 0


def count_commits(repo: Path, since: str, ref: str) -> int:
    """Commits reachable from ``ref`` and not from ``since`` (``git rev-list --count``)."""
    return int(git_out(["rev-list", "--count", f"{since}..{ref}"], repo) or 0)


def dirty_paths(checkout: Path) -> list[str]:
    """``git status --porcelain`` lines of a checkout: changed, staged, unmerged or untracked
    (not ignored) paths; empty when it is clean."""
    text = review_git(["status", "--porcelain"], checkout).stdout.decode(errors="surrogateescape")
    return [line for line in text.splitlines() if line]


@dataclass(frozen=True)
class Worktree:
    """One entry of ``git worktree list --porcelain`` (git-worktree(1), "Porcelain Format").

    Attributes:
        path: the checkout's folder.
        branch: the checked-out branch's short name (``refs/heads/`` removed), or ``None``
            (detached HEAD, bare).
        prunable: git reports its folder gone.
    """

    path: Path
    branch: str | None
    prunable: bool = False


def worktrees(repo: Path) -> list[Worktree]:
    """Every worktree of ``repo``'s repository, the main checkout first (``-z``: git >= 2.36,
    so a path with a newline stays one path)."""
    text = review_git(["worktree", "list", "--porcelain", "-z"], repo).stdout
    found: list[Worktree] = []
    for block in text.decode(errors="surrogateescape").split("\0\0"):
        fields = dict([*item.split(" ", 1), ""][:2] for item in block.split("\0") if item)
        if "worktree" not in fields:
            continue
        branch = fields.get("branch", "")
        found.append(  # paths resolved, so a symlinked folder compares equal to a manifest's
            Worktree(
                path=Path(fields["worktree"]).resolve(),
                branch=branch.removeprefix("refs/heads/") if branch else None,
                prunable="prunable" in fields,
            )
        )
    return found


def identity_args(repo: Path) -> list[str]:
    """``-c user.name=… -c user.email=…`` for each identity key ``repo`` has not set, so a
    merge commit can be made on a machine without a git identity; ``[]`` otherwise."""
    args: list[str] = []
    for key, value in FALLBACK_IDENTITY.items():
        if review_git(["config", "--get", key], repo, ok=(0, 1)).returncode != 0:
            args += ["-c", f"{key}={value}"]
    return args
