"""One ``supervise merge``, ``discard`` or ``prune`` at a time per repository.

The lock is :data:`LOCK_NAME` in the repository's git common dir (``git rev-parse
--git-common-dir``: the same folder from the main checkout and from every linked
worktree), not in a state dir: what these commands change is the repository (its
branches, worktrees and checkouts), and two profiles with two state dirs may name the same
repository. It is an ``flock`` (filelock's ``UnixFileLock``), which the kernel releases
when its holder dies, SIGKILL included, so no stale lock is ever left; git's children do
not inherit it (``subprocess`` closes other descriptors). A second copy waits up to
:data:`LOCK_WAIT` seconds, then refuses in one line.

On taking the lock, what an interrupted merge left is finished first
(:func:`supervisor.workspace.journal.recover`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from supervisor.workspace import journal
from supervisor.workspace.gitops import ReviewError, git_out

#: File name of the lock in the git common dir.
LOCK_NAME = "supervise.lock"
#: Seconds a second copy waits for the first before it refuses.
LOCK_WAIT = 60.0


def common_dir(repo: Path) -> Path:
    """The git common dir of the repository ``repo`` is a checkout of.

    Raises:
        ReviewError: ``repo`` is not in a git repository, or git failed.
    """
    return Path(git_out(["rev-parse", "--path-format=absolute", "--git-common-dir"], repo))


def acquire(path: Path, wait: float, busy: str) -> FileLock:
    """Take the flock ``path`` (made if missing), waiting at most ``wait`` seconds; the
    caller releases it.

    Raises:
        ReviewError: ``busy`` when another holder kept it for ``wait`` seconds, or one line
            when the lock file cannot be made.
    """
    lock = FileLock(str(path), timeout=wait)
    try:
        lock.acquire()
    except Timeout:
        raise ReviewError(busy) from None
    except OSError as exc:
        raise ReviewError(f"cannot lock {path}: {exc.strerror or exc}") from None
    return lock


@contextmanager
def repo_lock(repo: Path, verb: str, notes: list[str] | None = None) -> Iterator[Path]:
    """Hold ``repo``'s lock; yields its git common dir. Lines about an interrupted merge
    that was finished on the way in are appended to ``notes``.

    Raises:
        ReviewError: another copy held the lock for :data:`LOCK_WAIT` seconds (one line
            naming the lock file), the lock file cannot be made, or the recovery failed.
    """
    common = common_dir(repo)
    busy = (
        f"another supervise merge, discard or prune is working on {repo} (it holds "
        f"{common / LOCK_NAME}; waited {LOCK_WAIT:g} s): {verb} again when it has ended"
    )
    lock = acquire(common / LOCK_NAME, LOCK_WAIT, busy)
    try:
        note = journal.recover(repo, common)
        if note and notes is not None:
            notes.append(note)
        yield common
    finally:
        lock.release()


@contextmanager
def repo_locks(repos: Iterable[Path], verb: str, notes: list[str] | None = None) -> Iterator[None]:
    """Hold the locks of every repository in ``repos`` that still exists, each once, taken
    in the order of their common dirs (one order for every caller, so none can deadlock).

    Raises:
        ReviewError: see :func:`repo_lock`.
    """
    by_common: dict[Path, Path] = {}
    for repo in set(repos):
        if not repo.is_dir():
            continue  # a removed repository: prune reports it, nothing to lock
        try:
            by_common.setdefault(common_dir(repo), repo)
        except ReviewError:
            continue  # not a repository any more: likewise
    with ExitStack() as stack:
        for common in sorted(by_common):
            stack.enter_context(repo_lock(by_common[common], verb, notes))
        yield
