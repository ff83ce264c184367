"""One ``git worktree add`` or ``remove`` at a time per repository.

git 2.39 races with itself here: ``git worktree add`` reads every other linked worktree's
administrative folder while a concurrent ``add`` is still writing its own. Measured on
this project's machine: twelve concurrent ``git worktree add -b`` in one repository, four
failed with ``fatal: failed to read .git/worktrees/w5/commondir: Success``; the engine,
which makes worktrees off its worker (one thread per task), failed attempts of one group
the same way (``failed``, reason ``workspace``) when the machine was loaded.

The lock is :data:`LOCK_NAME` in the repository's git common dir (the same folder from
every checkout of it, so two engines with two state dirs share it). It is an ``flock``
(filelock's ``UnixFileLock``): the kernel releases it when its holder dies, and two
descriptors of one process exclude each other, so it serializes threads and processes
alike. It is held only around the git command, never across a task's ``setup``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from supervisor.workspace.repolock import acquire, common_dir

#: File name of the lock in the git common dir.
LOCK_NAME = "supervise-worktrees.lock"
#: Seconds a task waits for another task's ``git worktree add`` (each takes well under a
#: second on a local disk; the wait is for a repository on a slow or stalled filesystem).
LOCK_WAIT = 120.0


@contextmanager
def worktree_lock(repo: Path) -> Iterator[None]:
    """Hold ``repo``'s worktree lock for the body.

    Raises:
        ReviewError: ``repo`` is not in a git repository, the lock file cannot be made, or
            another holder kept it for :data:`LOCK_WAIT` seconds (one line naming it).
    """
    common = common_dir(repo)
    busy = f"another 'git worktree add' held {common / LOCK_NAME} for {LOCK_WAIT:g} s"
    lock = acquire(common / LOCK_NAME, LOCK_WAIT, busy)
    try:
        yield
    finally:
        lock.release()
