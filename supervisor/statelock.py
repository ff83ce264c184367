"""Locks held on the folders of a state dir, so no one can delete them from under a holder.

Two owners use them: the engine holds :func:`engine_lock` (the ``state_dir`` folder itself)
while it runs, one engine per ``state_dir``; ``supervise archive`` holds :func:`held` on
``state_dir/archive`` while it writes (:func:`supervisor.archive.locked`), one archive run
per state dir. The views and ``engine_probe`` ask :func:`engine_running`.

Why a folder and not a lock file (issue 20): a lock file such as the former
``state_dir/engine.lock`` can be unlinked while its holder runs; the next opener creates a new
inode, locks that one too, and a second engine ran on the same ``state_dir`` (doubled
``crashed``/``resumed`` events, ``retry_count`` 2 for one crash). A folder full of state
cannot be removed from under its holder, and renaming it moves the whole state along.

How: ``flock(2)`` on an ``O_RDONLY|O_DIRECTORY`` descriptor. The kernel releases it when
the holder dies, SIGKILL included, so it never goes stale; Python opens descriptors
non-inheritable, so the tmux server and the agents the engine starts never hold it. The
``filelock`` library cannot lock a folder (it opens its path ``O_RDWR|O_CREAT``), hence
``fcntl`` here.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from supervisor.errors import SuperviseError
from supervisor.taskdir import layout

#: Seconds an engine start retries a lock held for an instant by a probe (``status``,
#: ``serve``) before it says another engine runs.
PROBE_GRACE = 1.0


class LockBusy(SuperviseError, RuntimeError):
    """Another process holds the lock on this folder."""


class EngineBusy(LockBusy):
    """Another engine holds the state directory's lock (one engine per ``state_dir``), or
    the lock cannot be taken at all (the folder is not this user's to open). One line."""


def acquire(folder: Path, grace: float = 0.0) -> int:
    """Take the exclusive lock on ``folder``; returns its descriptor (close it to release).

    ``grace``: seconds to keep trying while it is held (0: one try).

    Raises:
        LockBusy: another process holds it (after ``grace`` seconds).
        OSError: the folder cannot be opened (missing, not a folder, no permission).
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    give_up = time.monotonic() + grace
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= give_up:
                os.close(fd)
                raise LockBusy(str(folder)) from None
            time.sleep(0.05)
        except BaseException:
            os.close(fd)
            raise


@contextlib.contextmanager
def held(folder: Path, grace: float = 0.0) -> Iterator[None]:
    """:func:`acquire` for the ``with`` block (same errors)."""
    fd = acquire(folder, grace)
    try:
        yield
    finally:
        os.close(fd)


def is_held(folder: Path) -> bool:
    """Whether another process holds the lock on ``folder`` (a non-blocking shared
    ``flock``, released at once: two probes never see each other). A missing folder, or
    one this user cannot open, is not held: a probe cannot tell, and says so by ``False``."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)
    return False


def engine_lock(state_dir: Path) -> int:
    """Take the engine's lock on ``state_dir`` (one engine per state dir); returns the
    descriptor, held until the engine ends. Retries :data:`PROBE_GRACE` seconds.

    Raises:
        EngineBusy: another engine runs on ``state_dir``, or it cannot be opened.
    """
    try:
        return acquire(state_dir, PROBE_GRACE)
    except LockBusy:
        raise EngineBusy(
            f"another 'supervise run' already owns {state_dir} (it holds the lock on that "
            "folder); stop it first"
        ) from None
    except OSError as exc:
        raise EngineBusy(
            f"cannot open {state_dir} to lock it ({exc.strerror or exc}); the state_dir must "
            "be a folder of this user's (mode 0700)"
        ) from None


def engine_running(state_dir: Path) -> bool:
    """Whether an engine holds ``state_dir`` (:func:`is_held`)."""
    return is_held(state_dir)


# ---------------------------------------------------------------- a task's folder

#: The file in a task folder that the engine holds a shared ``flock`` on while work it
#: started for the task still runs after its ending (the notifier, the leftover-process
#: sweep); ``supervise archive`` leaves such a folder where it is (issue 20).
TASK_HOLD = layout.TASK_HOLD
#: Flags that keep opening :data:`TASK_HOLD` from blocking on a FIFO or following a symlink
#: (an agent can write into its own task folder).
_NO_SURPRISES = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def hold_task(task_path: Path) -> int:
    """Take a shared hold on a task folder (:data:`TASK_HOLD`); returns the descriptor,
    held until closed. Several holds of one task coexist. Blocks while ``supervise archive``
    moves the folder away (a rename: an instant).

    Raises:
        OSError: the folder is gone or not writable.
    """
    fd = os.open(task_path / TASK_HOLD, os.O_RDWR | os.O_CREAT | _NO_SURPRISES, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(task_path / TASK_HOLD))
        fcntl.flock(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    return fd


def claim_task(task_path: Path) -> int | None:
    """The exclusive hold on an ended task's folder, for moving it away: the descriptor
    (close it to release), or ``None`` while the engine holds it (:func:`hold_task`). A
    folder without :data:`TASK_HOLD` was never held, nor one where it is not a regular file
    (a FIFO or a symlink an agent left: :func:`hold_task` refuses those too): a descriptor
    on the folder itself then.

    Raises:
        OSError: the folder cannot be opened.
    """
    folder = os.open(task_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = os.open(TASK_HOLD, os.O_RDONLY | _NO_SURPRISES, dir_fd=folder)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO):
            return folder
        os.close(folder)
        raise
    os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return os.open(task_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def task_busy(task_path: Path) -> bool:
    """Whether the engine still holds the task folder (:func:`hold_task`); nothing held after."""
    fd = claim_task(task_path)
    if fd is None:
        return True
    os.close(fd)
    return False


def _try_hold(task_path: Path) -> int | None:
    """:func:`hold_task`, or ``None`` when it cannot be taken (a folder gone, a full disk):
    the engine's work goes on without it rather than fail the task."""
    try:
        return hold_task(task_path)
    except OSError:
        return None


@contextlib.contextmanager
def task_held(task_path: Path, when: bool = True) -> Iterator[None]:
    """Hold the task folder for a ``with`` block when ``when`` (:func:`hold_task`; a hold
    that cannot be taken is skipped)."""
    fd = _try_hold(task_path) if when else None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def held_while(task_path: Path, body: Callable[[], None]) -> Callable[[], None]:
    """``body`` holding the task folder from now (the caller's thread) until it returns on
    whichever thread runs it: for work the engine starts on a task that has ended."""
    fd = _try_hold(task_path)

    def run() -> None:
        try:
            body()
        finally:
            if fd is not None:
                os.close(fd)

    return run
