"""Where a task id is when it has no task folder: archived, in the spool, rejected, or
nowhere, as one line for ``show``, ``tail``, ``attach`` and ``events`` (issue 22).

A task folder moves into a monthly tarball ``state_dir/archive/YYYY-MM.tar.gz``
(:mod:`supervisor.archive`); a task file waits in the spool until the engine claims it and
lands in ``spool/rejected/`` with a ``.error`` beside it when refused
(:func:`supervisor.waiting.locate`). Standard library only.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Protocol

from supervisor.archive import ARCHIVE
from supervisor.taskdir import layout
from supervisor.taskdir.folder import MANIFEST
from supervisor.taskid import is_task_id


class Paths(Protocol):
    """What is needed of a profile: a ``LoadedProfile`` or a ``ProfilePaths``."""

    @property
    def state_dir(self) -> Path: ...
    @property
    def spool_dir(self) -> Path: ...
    @property
    def tasks_dir(self) -> Path: ...


def archived_in(state_dir: Path, task_id: str) -> Path | None:
    """The tarball in ``state_dir/archive`` holding ``task_id``'s manifest (the newest
    month first), or ``None``. An unreadable tarball is skipped. Reads each tarball's
    member list until found (gzip: the whole file)."""
    if not is_task_id(task_id):
        return None
    wanted = f"{task_id}/{MANIFEST}"
    for path in sorted((state_dir / ARCHIVE).glob("*.tar.gz"), reverse=True):
        try:
            with tarfile.open(path, "r:gz") as archive:
                if any(member.name == wanted for member in archive):
                    return path
        except (OSError, tarfile.TarError, EOFError):
            continue
    return None


def archived_file(tarball: Path, task_id: str, name: str, limit: int) -> bytes | None:
    """The bytes of ``task_id/name`` in ``tarball`` (at most ``limit``), or ``None`` when
    it is not there or cannot be read."""
    try:
        with tarfile.open(tarball, "r:gz") as archive:
            member = archive.getmember(f"{task_id}/{name}")
            handle = archive.extractfile(member) if member.isfile() else None
            return None if handle is None else handle.read(limit)
    except (KeyError, OSError, tarfile.TarError, EOFError):
        return None


def missing_line(profile: Paths, task_id: str, config: str) -> str:
    """Why ``task_id`` has no task folder, in one line naming where it is and what to run:
    archived in a tarball, waiting in the spool, rejected (with the first line of its
    ``.error``), or no such task. ``config`` names the profile in the commands suggested."""
    from supervisor.waiting import locate

    where = locate(profile, task_id)  # type: ignore[arg-type]
    if where == "spool":
        return (
            f"task {task_id} waits in the spool ({profile.spool_dir}), not claimed by an "
            f"engine yet; 'supervise wait -c {config} {task_id}' returns when it ends"
        )
    if where == "rejected":
        error = profile.spool_dir / layout.REJECTED / f"{task_id}.toml{layout.ERROR_SUFFIX}"
        try:
            first = error.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            first = []
        why = f": {first[0]}" if first else ""
        return f"task {task_id} was rejected and never ran{why} (see {error})"
    if where == "task":
        return f"task {task_id} is being claimed: its folder has no manifest yet; try again"
    tarball = archived_in(profile.state_dir, task_id)
    if tarball is not None:
        return (
            f"task {task_id} is archived in {tarball}; list archived tasks with "
            f"'supervise status -c {config} --archived'"
        )
    return f"no task {task_id!r} in {profile.tasks_dir}; see 'supervise status -c {config}'"
