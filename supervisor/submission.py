"""Placing the task file ``supervise submit`` writes into the spool (issue 20).

The file is named after the task id the command prints (``<id>.toml``; the claim keeps that
id, :func:`supervisor.spool.claim`). The id is random (:func:`supervisor.spool.new_task_id`,
6 hex digits), so it can meet a name already in use; ``rename(2)`` would then silently
replace a waiting task file, and an id already given to a task folder would be printed for a
task that gets another one. So an id is used only when no task folder, no claim in progress
and no spool file holds it, and the file goes in with ``link(2)``, which refuses an existing
name (two submits drawing one id at once: one of them draws again).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from supervisor import spool
from supervisor.diskio import fsync_dir
from supervisor.errors import ConfigError

#: Ids drawn before giving up (each taken one costs a draw; with 16.7 million ids a second
#: draw is already rare).
ATTEMPTS = 100
#: ``link(2)`` errors of a filesystem without hard links: the file is then created with
#: ``O_EXCL`` and written in place.
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK}


class SpoolUnwritable(ConfigError):
    """The spool folder cannot take the file: one line naming it, why and the fix."""


class NoFreeId(ConfigError):
    """Every id drawn was taken: one line naming the spool (printed by the CLI as a
    :class:`ConfigError` is)."""


def place(spool_dir: Path, tasks_dir: Path, name: str, body: bytes) -> str:
    """Write ``body`` to ``spool_dir/<id>.toml`` under a task id no file or task holds;
    returns the id. Nothing existing is replaced.

    Args:
        spool_dir: the spool folder (made, mode 0700, when missing).
        tasks_dir: the state dir's task folders (ids in use there are skipped).
        name: the task's name (the id's readable part).
        body: the whole task file.

    Raises:
        NoFreeId: :data:`ATTEMPTS` ids in a row were taken.
        SpoolUnwritable: the spool cannot be made or written (a full disk, a file in its
            place, no permission).
    """
    try:
        return _place(spool_dir, tasks_dir, name, body)
    except OSError as exc:
        raise SpoolUnwritable(
            [
                f"{spool_dir}: cannot write the task file there ({exc.strerror or exc}); "
                "fix: make the profile's spool_dir a writable folder with free space"
            ]
        ) from None


def _place(spool_dir: Path, tasks_dir: Path, name: str, body: bytes) -> str:
    spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    # A unique hidden name first: the engine never sees a half-written file, and two
    # submits never write into one staging file.
    fd, staging = tempfile.mkstemp(prefix=".submit-", suffix=".tmp", dir=spool_dir)
    try:
        with open(fd, "wb") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        for _ in range(ATTEMPTS):
            task_id = spool.new_task_id(name)
            if _taken(spool_dir, tasks_dir, task_id):
                continue
            if _put(Path(staging), spool_dir / f"{task_id}.toml", body):
                fsync_dir(spool_dir)
                return task_id
    finally:
        with contextlib.suppress(OSError):
            os.unlink(staging)
    raise NoFreeId([f"{spool_dir}: no free task id for {name!r} in {ATTEMPTS} draws; try again"])


def _taken(spool_dir: Path, tasks_dir: Path, task_id: str) -> bool:
    """Whether a task folder or a claim in progress (``.claim.<id>.*``) holds ``task_id``."""
    if os.path.lexists(tasks_dir / task_id):
        return True
    prefix = f"{spool.CLAIM_PREFIX}{task_id}."
    try:
        return any(entry.name.startswith(prefix) for entry in os.scandir(spool_dir))
    except FileNotFoundError:
        return False


def _put(staging: Path, target: Path, body: bytes) -> bool:
    """Give ``staging``'s file the name ``target`` unless that name exists; returns whether
    it did."""
    try:
        os.link(staging, target)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    with open(fd, "wb") as handle:
        handle.write(body)
        os.fsync(handle.fileno())
    return True
