"""The one way ``supervise`` runs git: the ``git`` CLI, bounded by a timeout.

Every call runs with ``LC_ALL=C`` (messages and ``--shortstat`` lines are parsed in
English), ``GIT_TERMINAL_PROMPT=0`` (a remote asking for a password fails instead of
waiting on a terminal), stdin from ``/dev/null`` and in a session of its own (no
controlling terminal: git(1) and ssh cannot prompt), so no call can wait on a person.
It runs through :mod:`supervisor.children`: its process group is ended at the timeout and
at its end (a hook or a shell alias that leaves a background process behind does not hold
the call open), and its stderr is read with a cap.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from supervisor import children
from supervisor.errors import SuperviseError

#: Seconds a git call may take before it is killed (:class:`GitError`).
GIT_TIMEOUT = 30.0
#: Bytes of git's stderr read into memory (its start and end; :func:`why_failed` reads
#: the first ``error:`` line and the last line).
STDERR_BYTES = 64 * 1024
#: ``git diff --shortstat``: " 2 files changed, 3 insertions(+), 1 deletion(-)" (any part
#: may be missing; git(1) diff-options, ``--shortstat``).
_SHORTSTAT = re.compile(r"(\d+) (file|insertion|deletion)")
#: Identity for a commit on a machine with no ``user.name`` / ``user.email`` configured.
FALLBACK_IDENTITY = ("-c", "user.name=supervise", "-c", "user.email=supervise@localhost")


class GitError(SuperviseError, RuntimeError):
    """A git command failed, timed out or could not be started.

    ``str(error)`` is one line: the command and git's last line of stderr (or the reason).
    ``returncode`` is git's exit status (``None``: timed out or not started).
    """

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


#: Variables that would point git at another repository than the one named (a command
#: run from a git hook inherits them).
_GIT_LOCATION_VARS = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR"})


def git_env() -> dict[str, str]:
    """The environment of every git call: ours without ``LANGUAGE`` and the variables that
    name another repository, plus ``LC_ALL=C`` and ``GIT_TERMINAL_PROMPT=0``."""
    env = {k: v for k, v in os.environ.items() if k != "LANGUAGE" and k not in _GIT_LOCATION_VARS}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    return env


def run_git_bytes(
    args: Sequence[str],
    cwd: Path | str,
    timeout: float = GIT_TIMEOUT,
    ok: tuple[int, ...] | None = (0,),
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git ARGS`` in ``cwd``; stdout and stderr stay bytes (file names and diffs need
    not be UTF-8, and a diff written to a file must be git's own bytes).

    Args:
        args: the arguments after ``git``.
        cwd: the folder git runs in.
        timeout: seconds before the call is killed.
        ok: the exit statuses that are not an error; ``None`` accepts any.

    Raises:
        GitError: an exit status outside ``ok`` (the message ends with git's stderr, see
            :func:`why_failed`), the timeout, or git not being runnable.
    """
    shown = "git " + " ".join(args)
    done = children.run(
        ["git", *args],
        timeout=timeout,
        cwd=cwd,
        env=git_env(),
        stdout=children.Capture(None),  # the output is the result (a diff, a listing)
        stderr=children.Capture(STDERR_BYTES),
    )
    if done.timed_out:
        raise GitError(f"{shown}: no answer within {timeout:g} s")
    if done.error is not None or done.returncode is None:
        raise GitError(f"{shown}: cannot run git in {cwd}: {done.error}")
    if ok is not None and done.returncode not in ok:
        why = why_failed(done.stderr.decode(errors="replace"))
        raise GitError(f"{shown}: {why or f'exit {done.returncode}'}", done.returncode)
    return subprocess.CompletedProcess(["git", *args], done.returncode, done.stdout, done.stderr)


def run_git(
    args: Sequence[str], cwd: Path | str, timeout: float = GIT_TIMEOUT, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """:func:`run_git_bytes` with text stdout/stderr (undecodable bytes replaced).

    Args:
        args: the arguments after ``git`` (e.g. ``["rev-parse", "HEAD"]``).
        cwd: the folder git runs in.
        timeout: seconds before the call is killed.
        check: raise on a non-zero exit (else the caller reads ``returncode``).

    Raises:
        GitError: see :func:`run_git_bytes`.
    """
    done = run_git_bytes(args, cwd, timeout, ok=(0,) if check else None)
    return subprocess.CompletedProcess(
        done.args,
        done.returncode,
        done.stdout.decode(errors="replace"),
        done.stderr.decode(errors="replace"),
    )


def why_failed(stderr: str) -> str:
    """One line from git's stderr: its last line (``fatal: ...``), after the first
    ``error: ...`` line when there is one, which often names the cause the last does not
    (a checkout that hit ENOSPC ends ``fatal: Could not reset index file to revision
    'HEAD'.`` after ``error: unable to write file NAME``; git 2.39, measured on a full
    tmpfs)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return ""
    first_error = next((line for line in lines if line.startswith("error:")), lines[-1])
    return lines[-1] if first_error == lines[-1] else f"{first_error}; {lines[-1]}"


def toplevel(folder: Path | str) -> Path | None:
    """The top folder of the work tree ``folder`` belongs to, or ``None`` when it is in no
    git repository (``git rev-parse --show-toplevel``).

    Raises:
        GitError: git timed out or could not run.
    """
    done = run_git(["rev-parse", "--show-toplevel"], folder, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return Path(done.stdout.strip())


def current_branch(repo: Path | str) -> str | None:
    """The branch checked out in ``repo`` (short name), or ``None`` on a detached HEAD
    (``git symbolic-ref --quiet --short HEAD`` exits 1 then).

    Raises:
        GitError: git timed out or could not run.
    """
    done = run_git(["symbolic-ref", "--quiet", "--short", "HEAD"], repo, check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def commit_of(repo: Path | str, ref: str) -> str | None:
    """The 40-hex commit ``ref`` names in ``repo``, or ``None`` when it names none (an
    unborn branch, a missing ref): ``git rev-parse --verify --quiet REF^{commit}``.

    Raises:
        GitError: git timed out or could not run.
    """
    done = run_git(
        ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
        repo,
        check=False,
    )
    value = done.stdout.strip()
    return value if done.returncode == 0 and value else None


def has_path(repo: Path | str, commit: str, path: str) -> bool:
    """Whether ``commit``'s tree holds ``path`` (a file or folder, relative to the top of
    ``repo``, ``/``-separated): ``git cat-file -e COMMIT:PATH``. A worktree checked out at
    ``commit`` has that path exactly when this is true.

    Raises:
        GitError: git timed out or could not run.
    """
    return run_git(["cat-file", "-e", f"{commit}:{path}"], repo, check=False).returncode == 0


def branch_exists(repo: Path | str, branch: str) -> bool:
    """Whether ``refs/heads/BRANCH`` exists in ``repo``.

    Raises:
        GitError: git timed out or could not run.
    """
    done = run_git(["show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], repo, check=False)
    return done.returncode == 0


def valid_branch_name(repo: Path | str, branch: str) -> bool:
    """Whether ``branch`` is a valid branch name (``git check-ref-format --branch``)."""
    return run_git(["check-ref-format", "--branch", branch], repo, check=False).returncode == 0


def worktrees(repo: Path | str) -> dict[Path, str | None]:
    """The worktrees git knows of in ``repo``: path -> branch (``refs/heads/...``), or
    ``None`` for a detached one (``git worktree list --porcelain``, git-worktree(1)).

    Raises:
        GitError: the command failed or timed out.
    """
    found: dict[Path, str | None] = {}
    current: Path | None = None
    for line in run_git(["worktree", "list", "--porcelain"], repo).stdout.splitlines():
        if line.startswith("worktree "):
            current = Path(line.removeprefix("worktree "))
            found[current] = None
        elif line.startswith("branch ") and current is not None:
            found[current] = line.removeprefix("branch ")
    return found


def is_dirty(worktree: Path | str) -> bool:
    """Whether ``worktree`` has uncommitted changes, untracked files included
    (``git status --porcelain`` prints anything).

    Raises:
        GitError: the command failed or timed out.
    """
    return bool(run_git(["status", "--porcelain"], worktree).stdout.strip())


def ignored(folder: Path | str, paths: Sequence[str]) -> set[str]:
    """Which of ``paths`` (relative to ``folder``) git ignores (``git check-ignore``,
    which prints each ignored path as given and exits 1 when none is).

    Raises:
        GitError: git timed out or could not run.
    """
    if not paths:
        return set()
    done = run_git(["check-ignore", "--", *paths], folder, check=False)
    return set(done.stdout.splitlines())


def has_identity(repo: Path | str) -> bool:
    """Whether git has a committer name and email for ``repo`` (config or environment)."""
    env = os.environ
    for key, var in (("user.name", "GIT_COMMITTER_NAME"), ("user.email", "GIT_COMMITTER_EMAIL")):
        if not env.get(var) and run_git(["config", key], repo, check=False).returncode != 0:
            return False
    return True


def parse_shortstat(text: str) -> tuple[int, int, int]:
    """``(files_changed, insertions, deletions)`` from ``git diff --shortstat`` output;
    zeros for an empty diff (git prints nothing then)."""
    counts = {"file": 0, "insertion": 0, "deletion": 0}
    for number, kind in _SHORTSTAT.findall(text):
        counts[kind] = int(number)
    return counts["file"], counts["insertion"], counts["deletion"]
