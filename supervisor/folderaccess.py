"""Whether other users can read a profile's spool or state dir (issue 20).

The engine refuses a spool that others can *write* (:func:`supervisor.spool.sharing_problem`);
one that others can only *read* is a leak rather than a takeover: the task files, prompts
(which can hold secrets), outputs and manifests in it. ``supervise`` makes both folders 0700
itself, but a folder made by hand under ``umask 022`` is 0755, and task files copied in keep
their 0644. So ``supervise run`` (at start, in its log) and ``validate`` name each such
folder in one line with its mode and the fix; the user's modes are never changed.

A folder counts as readable by others when its mode gives read or search to "other", or to
a group that is not the user's private group (:func:`supervisor.spool.is_private_group`,
the same exception the write check makes), or when it belongs to another user.
"""

from __future__ import annotations

import grp
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile


def _private_group(gid: int) -> bool:
    """:func:`supervisor.spool.is_private_group`, imported only for a group-readable folder
    (the spool module loads the manifest model: ``validate`` would pay for it every run)."""
    from supervisor.spoolaccess import is_private_group

    return is_private_group(gid)


def readable_by_others(folder: Path, role: str) -> str | None:
    """One line (without a ``warning:`` prefix) if users other than this one can read or
    enter ``folder``, else ``None`` (also for a folder that does not exist yet or cannot be
    stat'ed: ``supervise`` makes it 0700). Search alone (``o+x``) counts: it opens every
    file whose name is known, and task ids are names.

    Args:
        folder: the folder to look at.
        role: what it is, as the profile names it (``spool_dir``, ``state_dir``).
    """
    try:
        info = os.stat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return None
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.getuid():
        who = f"its owner uid {info.st_uid}"
    elif mode & 0o005:
        who = "every user"
    elif mode & 0o050 and not _private_group(info.st_gid):
        who = f"the members of group {_group_name(info.st_gid)!r}"
    else:
        return None
    return (
        f"{role} {folder} can be read by other users: {who} (mode {oct(mode)}); "
        f"the task files, prompts and outputs in it are theirs to read. Fix: chmod 700 {folder}"
    )


def exposure_warnings(profile: LoadedProfile) -> list[str]:
    """:func:`readable_by_others` for the profile's spool and state dir, in that order (the
    task folders live inside the state dir)."""
    found = (
        readable_by_others(profile.spool_dir, "spool_dir"),
        readable_by_others(profile.state_dir, "state_dir"),
    )
    return [line for line in found if line is not None]


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def denied_line(command: str, exc: PermissionError) -> str:
    """The one line ``supervise COMMAND`` prints for a file this user may not read or
    write (another user's state dir is 0700, as ``supervise`` makes it): the file, and its
    owner when that is another user, found on the nearest folder above it this user can
    stat. Standard library only, for :func:`supervisor.cli.main`'s last resort."""
    from supervisor.spoolaccess import _name_of_user

    path = Path(str(exc.filename)) if exc.filename else None
    line = f"supervise {command}: {path if path else exc.strerror}: permission denied"
    for folder in [path, *path.parents] if path else []:
        try:
            owner = os.stat(folder).st_uid
        except OSError:
            continue
        if owner != os.geteuid():
            line += f"; it belongs to uid {owner} ({_name_of_user(owner)}): run it as that user"
        break
    return line
