"""Is a live engine holding a state dir? The warning of the commands that need one.

The rule is the status model's (:func:`supervisor.views.model.engine_state`): ``running``
when the engine's lock on the ``state_dir`` folder (:mod:`supervisor.statelock`) is held and
the heartbeat ``engine-stats.json`` is at most 15 s old; ``stale`` when the lock is held
without a fresh heartbeat (a stuck engine) or a fresh heartbeat's writer does not hold the
lock; ``not running`` otherwise.
:func:`warning` turns the last two into the one stderr line that ``submit``, ``wait``,
``stop``, ``resume``, ``approve`` and ``deny`` print (issue 14: a request must not sit
silently in a queue nobody reads); ``status`` shows the same engine line itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from supervisor.views.model import HEARTBEAT, Engine, engine_state, lock_held, read_json

#: The kernel's table of file locks (proc(5)): ``N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE ..``.
PROC_LOCKS = "/proc/locks"


def engine(state_dir: Path) -> Engine:
    """The engine on ``state_dir`` (:func:`supervisor.views.model.engine_state`)."""
    return engine_state(state_dir)


def warning(state_dir: Path, profile_path: Path | str, what: str) -> str | None:
    """One stderr line when no live engine holds ``state_dir``, else ``None``.

    ``what`` says what waits for the engine, e.g. ``"the task waits in the spool"``.
    """
    found = engine(state_dir)
    if found.state == "running":
        return None
    if found.state == "stale":
        return f"warning: {found.line()}; it may be stuck: {what}"
    return (
        f"warning: no engine runs on {state_dir}; {what} until "
        f"'supervise run {profile_path}' starts"
    )


def engine_pid(state_dir: Path) -> int | None:
    """The pid of the process holding the engine's lock on ``state_dir``
    (:func:`supervisor.statelock.engine_lock`), or ``None`` when no one holds it.

    The kernel's lock table (:data:`PROC_LOCKS`) names the holder of the exclusive
    ``flock`` on the folder's inode; where it cannot be read or does not say (another pid
    namespace), the heartbeat's ``pid`` counts only if that process has the folder open.
    A pid may be reused once its process ends: signal it through a pidfd taken before
    asking again (``supervise shutdown`` does).
    """
    if not lock_held(state_dir):
        return None
    try:
        info = os.stat(state_dir)
    except OSError:
        return None
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open(PROC_LOCKS, encoding="ascii", errors="replace") as table:
            for line in table:
                parts = line.split()
                # "1: FLOCK ADVISORY WRITE 4977 fe:00:2164490 0 EOF"; "1: -> ..." waits
                if parts[1:4] == ["FLOCK", "ADVISORY", "WRITE"] and parts[5:6] == [where]:
                    pid = int(parts[4])
                    return pid if pid > 0 else None
    except (OSError, ValueError, IndexError):
        pass
    beat = read_json(state_dir / HEARTBEAT) or {}
    pid = beat.get("pid")
    return pid if isinstance(pid, int) and _has_open(pid, info) else None


def _has_open(pid: int, folder: os.stat_result) -> bool:
    """Whether process ``pid`` has a descriptor open on the folder ``folder`` stats."""
    fds = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fds)
    except OSError:
        return False
    for name in names:
        try:
            found = os.stat(os.path.join(fds, name))
        except OSError:
            continue
        if (found.st_dev, found.st_ino) == (folder.st_dev, folder.st_ino):
            return True
    return False
