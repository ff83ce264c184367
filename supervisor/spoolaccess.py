"""Who may write the spool: the user private group scheme and the one line naming who else
can write a folder (moved out of :mod:`supervisor.spool`, which re-exports both)."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path


def _name_of_user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "?"


def _name_of_group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return "?"


def is_private_group(gid: int, uid: int | None = None) -> bool:
    """Whether ``gid`` is the user private group of ``uid`` (default: this process's user).

    The user private group scheme (Debian, Ubuntu, Fedora, RHEL; the reason their default
    umask is 002): a group named like the user, that is the user's primary group, and that
    no other user belongs to, neither as a listed member nor by primary gid. Group write
    permission on such a group grants nobody else anything.
    """
    uid = os.getuid() if uid is None else uid
    try:
        user = pwd.getpwuid(uid)
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    if group.gr_name != user.pw_name or user.pw_gid != gid:
        return False
    if set(group.gr_mem) - {user.pw_name}:
        return False
    return not any(other.pw_gid == gid and other.pw_uid != uid for other in pwd.getpwall())


def sharing_problem(folder: Path) -> str | None:
    """Why other users could write task files into ``folder``, or ``None`` if only we can.

    Unsafe: another owner, the world-write bit, or the group-write bit for a group other
    than our user private group (see :func:`is_private_group`), which is what ``umask 002``
    gives in a clone on Ubuntu or Fedora and grants nobody else anything.

    Raises:
        OSError: ``folder`` cannot be stat'ed.
    """
    info = folder.stat()
    uid = os.getuid()
    mode = info.st_mode & 0o7777
    if info.st_uid != uid:
        who = f"its owner uid {info.st_uid} ({_name_of_user(info.st_uid)}), not this user"
    elif mode & 0o002:
        who = "every user (the world-write bit)"
    elif mode & 0o020 and not is_private_group(info.st_gid, uid):
        who = f"the members of group {_name_of_group(info.st_gid)!r}"
    else:
        return None
    return (
        f"spool {folder} is writable by others: {who} (mode {oct(mode)}, owner uid "
        f"{info.st_uid} ({_name_of_user(info.st_uid)}), group gid {info.st_gid} "
        f"({_name_of_group(info.st_gid)}))"
    )
