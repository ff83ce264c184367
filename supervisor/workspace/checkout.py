"""Merging into a user's checkout: what may be written there, one git step, and its undo.

The merge commit is made beforehand without any checkout (``git commit-tree``, see
:mod:`supervisor.workspace.review`), so what happens in the checkout is one fast-forward
(``git merge --ff-only --no-overwrite-ignore COMMIT``): git writes the files and the index,
then moves the branch. It never leaves ``MERGE_HEAD`` or a squash message behind, and a
failure at any point is undone with ``git reset --merge BEFORE`` (git-reset(1): resets the
index and the files the merge changed, and the branch), then checked, because git's own exit
status does not tell whether the undo worked (a held ``refs/heads/B.lock`` fails the reset's
ref update after its index reset has succeeded; git 2.39, measured).

Two things git does not protect are checked before that step (:func:`refuse_collisions`):
git overwrites an *ignored* file at a path the merge writes (``--no-overwrite-ignore``
stops that only for the same path) and writes into an ignored directory without a word
(notes/real-world-facts.md, "git").
"""

from __future__ import annotations

import os
import signal
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from supervisor.terminal import counted
from supervisor.workspace.gitops import (
    LONG_GIT_TIMEOUT,
    ReviewError,
    commit_of,
    dirty_paths,
    git_out,
    review_git,
)

#: Seconds the undo of a failed merge keeps trying while another git holds the index
#: lock (an editor's background ``git status`` holds it for milliseconds; a crashed git
#: forever, which is then reported).
UNDO_WAIT = 30.0
#: Resets tried while no lock is held (another git may take it between check and reset).
UNDO_TRIES = 3
#: Seconds to wait, before the merge, for an ``index.lock`` another git holds to go.
SETTLE_WAIT = 5.0
#: At most this many colliding paths are named in the refusal (then "and N more").
SHOWN_PATHS = 10


def _z_list(args: list[str], cwd: Path) -> list[str]:
    out = review_git(args, cwd, LONG_GIT_TIMEOUT).stdout.decode(errors="surrogateescape")
    return [p for p in out.split("\0") if p]


def _prefixes(path: str) -> list[str]:
    """``a``, ``a/b``, ``a/b/c`` for ``a/b/c``."""
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def collisions(checkout: Path, before: str, tree: str) -> list[str]:
    """The user's ignored or untracked paths in ``checkout`` that moving it from commit
    ``before`` to ``tree`` would write, replace or write into: each as
    ``PATH (ignored)`` / ``PATH (untracked)``, a directory with a trailing ``/``.

    An entry collides when it is a written path, a folder above one (``build/`` for
    ``build/x``; an ignored *file* ``a`` for ``a/b``), or lies inside one (a written file
    ``x`` where ``x/`` holds the user's files). Lists come from ``git ls-files -o
    --directory`` (a wholly ignored folder is one entry, so ``node_modules/`` costs one
    line) with and without ``-i --exclude-standard``.

    Raises:
        ReviewError: git failed.
    """
    written = set(_z_list(["diff-tree", "-r", "-z", "--name-only", before, tree], checkout))
    around = {prefix for path in written for prefix in _prefixes(path)}
    base = ["ls-files", "-z", "-o", "--directory", "--exclude-standard"]
    found: list[str] = []
    named: set[str] = set()
    for kind, args in (("ignored", [*base, "-i"]), ("untracked", base)):
        for entry in _z_list(args, checkout):
            path = entry.rstrip("/")
            if path in around or any(p in written for p in _prefixes(path)):
                found.append(f"{entry} ({kind})")
                named.add(path)
    return found + _unlisted(checkout, before, tree, written, named)


def _unlisted(
    checkout: Path, before: str, tree: str, written: set[str], named: set[str]
) -> list[str]:
    """What git does not list at all but is there: a FIFO, socket or device at a path the
    merge adds (``ls-files`` and ``status`` skip them), or any non-folder where an added
    path needs a folder. Looked up with ``lstat`` only: nothing is opened."""
    args = ["diff-tree", "-r", "-z", "--name-only", "--diff-filter=A", before, tree]
    found: list[str] = []
    for added in _z_list(args, checkout):
        for prefix in _prefixes(added):
            if prefix in named or (prefix != added and prefix in written):
                continue  # reported already, or a tracked file the merge replaces
            try:
                mode = os.lstat(checkout / prefix).st_mode
            except (FileNotFoundError, NotADirectoryError):
                break
            if prefix == added or not stat.S_ISDIR(mode):
                found.append(f"{prefix} (untracked {_kind(mode)})")
                named.add(prefix)
                break
    return found


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISDIR, "folder"),
    ):
        if test(mode):
            return name
    return "file" if stat.S_ISREG(mode) else "device"


def refuse_collisions(checkout: Path, what: str, before: str, tree: str) -> None:
    """Raise unless :func:`collisions` is empty; ``what`` says what merges (for the line).

    Raises:
        ReviewError: one line naming the paths and the fix; nothing was changed.
    """
    found = collisions(checkout, before, tree)
    if not found:
        return
    shown = ", ".join(found[:SHOWN_PATHS])
    more = f" and {len(found) - SHOWN_PATHS} more" if len(found) > SHOWN_PATHS else ""
    raise ReviewError(
        f"{what} would overwrite {counted(len(found), 'path')} of yours in {checkout}: "
        f"{shown}{more}; nothing was changed: move them out of {checkout} (or commit them) and "
        "merge again"
    )


def index_lock(checkout: Path) -> Path:
    """The ``index.lock`` git takes for ``checkout`` (``git rev-parse --git-path index``:
    a linked worktree has its own index)."""
    out = git_out(["rev-parse", "--path-format=absolute", "--git-path", "index"], checkout)
    return Path(out + ".lock")


def _wait_gone(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while os.path.lexists(path):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def problems(checkout: Path, target: str, before: str) -> list[str]:
    """How ``checkout`` differs from "on ``target`` at ``before``, clean, no merge in
    progress"; empty when it is exactly that (untracked files count: it was clean).

    Raises:
        ReviewError: git failed.
    """
    found: list[str] = []
    on = review_git(["symbolic-ref", "-q", "HEAD"], checkout, ok=(0, 1)).stdout.decode().strip()
    if on != f"refs/heads/{target}":
        found.append(f"HEAD is {on or 'detached'}, not {target}")
    head = commit_of(checkout, "HEAD")
    if head != before:
        found.append(f"HEAD is {(head or 'none')[:12]}, was {before[:12]}")
    if commit_of(checkout, "MERGE_HEAD") is not None:
        found.append("MERGE_HEAD is set")
    dirty = dirty_paths(checkout)
    if dirty:
        found.append(f"{counted(len(dirty), 'path')} changed or staged")
    return found


def undo(checkout: Path, target: str, before: str, ours: str) -> list[str]:
    """Bring ``checkout`` back to ``before`` after a failed step; what is still wrong
    (empty: it is exactly as it was). Keeps trying for :data:`UNDO_WAIT` seconds while
    another git holds its ``index.lock``. Leaves HEAD alone when it is at a commit that is
    neither ``before`` nor ``ours`` (someone else moved it).

    Raises:
        ReviewError: git failed to run at all.
    """
    lock = index_lock(checkout)
    deadline = time.monotonic() + UNDO_WAIT
    resets = 0
    while True:
        left = problems(checkout, target, before)
        if not left:
            return []
        if commit_of(checkout, "HEAD") not in (before, ours):
            return [*left, "HEAD was moved by someone else: left alone"]
        if os.path.lexists(lock):
            if time.monotonic() >= deadline:
                return [*left, f"{lock} is held by another git"]
            time.sleep(0.1)
        elif resets >= UNDO_TRIES:
            return left  # what a reset cannot change (a file the user added meanwhile)
        else:
            # exit status not trusted: the next check decides (see the module docstring)
            review_git(["reset", "-q", "--merge", before], checkout, LONG_GIT_TIMEOUT, ok=None)
            resets += 1


def fast_forward(checkout: Path, target: str, before: str, commit: str) -> None:
    """Move ``checkout`` (on ``target`` at ``before``) to ``commit``, a descendant of
    ``before``, in one git step; on failure undo it and check.

    Raises:
        ReviewError: the branch moved since the checks (nothing done), or the step failed:
            the line ends with "the merge was undone" or says what the undo left and how
            to finish it by hand.
    """
    lock = index_lock(checkout)
    _wait_gone(lock, SETTLE_WAIT)
    if commit_of(checkout, "HEAD") != before:
        raise ReviewError(
            f"{target} moved in {checkout} since the checks: nothing was changed; merge again"
        )
    args = ["merge", "-q", "--ff-only", "--no-overwrite-ignore", commit]
    try:
        done = review_git(args, checkout, LONG_GIT_TIMEOUT, ok=None)
        if done.returncode == 0:
            return
        failed = f"git merge --ff-only in {checkout}: {_cause(done.stderr)}"
    except ReviewError as exc:  # timed out or not runnable: it may have changed things anyway
        failed = str(exc)
    left = undo(checkout, target, before, commit)
    if not left:
        raise ReviewError(f"{failed}; the merge was undone: {checkout} is as it was")
    raise ReviewError(
        f"{failed}; the undo failed ({'; '.join(left)}): once no other git runs there, "
        f"run 'git reset --merge {before}' in {checkout}"
    )


def _cause(stderr: bytes) -> str:
    """git's first ``fatal:``/``error:`` line with the paths listed under it (a lock
    failure's last line is only "remove the file manually to continue."), else its last
    line."""
    raw = [x for x in stderr.decode(errors="replace").splitlines() if x.strip()]
    at = next((i for i, x in enumerate(raw) if x.startswith(("fatal:", "error:"))), None)
    if at is None:
        return raw[-1].strip() if raw else "failed"
    # the paths git lists under its line are tab-indented ("would be overwritten by merge:")
    listed = [x.strip() for x in raw[at + 1 :] if x.startswith("\t")]
    return raw[at].strip() + (" " + ", ".join(listed) if listed else "")


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) until the block has ended, then raise KeyboardInterrupt.

    Why: on KeyboardInterrupt, :func:`subprocess.run` kills its child, and a git killed
    while it writes a checkout leaves half-written files and a stale ``index.lock``; the
    block (the git step, its undo and the event) is short and bounded by git's timeout.
    Only in the main thread (where Python runs signal handlers), and not when SIGINT is
    ignored already.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    if caught:
        raise KeyboardInterrupt
