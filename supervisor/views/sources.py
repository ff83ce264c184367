"""The files of a state dir other than the task folders, for the status model
(:mod:`.model` re-exports every name here): the engine's lock and heartbeat, the spool.

**Engine state** (:class:`Engine`, :func:`engine_state`). The engine holds an OS lock on
the ``state_dir`` folder itself while it runs (:func:`supervisor.statelock.engine_lock`;
released by the kernel when the process dies) and rewrites its heartbeat
``state_dir/engine-stats.json`` every 5 s (:mod:`supervisor.engine.stats`). ``running``: the
lock is held and the heartbeat is at most :data:`STALE_AFTER` (3 × 5 = 15) seconds old.
``stale``: the lock is held but the heartbeat is older or missing (an engine stuck, or a lock
held by something else), or the lock is free while a fresh heartbeat's pid is alive (an engine
of a state dir that was moved or replaced under it). ``not running``: anything else. Probing
takes a shared lock for an instant (non-blocking) and releases it at once; an engine starting
in that same instant retries for a second (:data:`supervisor.statelock.PROBE_GRACE`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.diskio import iso_epoch as epoch
from supervisor.diskio import read_regular
from supervisor.taskdir import layout
from supervisor.waiting import MANIFEST_MAX

#: Seconds after which a heartbeat is stale: three missed 5 s writes
#: (``supervisor.engine.scheduler.STATS_EVERY``).
STALE_AFTER = 15.0
HEARTBEAT = layout.ENGINE_STATS


@dataclass(slots=True)
class Engine:
    """The engine on a state dir (see the module docstring for the rules).

    ``state``: ``running``, ``not running`` or ``stale``; ``pid``, ``version``, ``profile``
    (the profile file's path) and ``socket`` (tmux ``-L`` name) from the last heartbeat;
    ``uptime_s`` (seconds since it started; ``None`` unless running or stale);
    ``heartbeat_age_s`` (seconds since the heartbeat was written; ``None`` without one);
    ``lock_held`` (whether the engine's lock on ``state_dir`` is held); ``reason``: why
    stale, in a sentence.
    """

    state: str
    pid: int | None = None
    uptime_s: float | None = None
    version: str | None = None
    profile: str | None = None
    socket: str | None = None
    heartbeat_age_s: float | None = None
    lock_held: bool = False
    reason: str | None = None

    def line(self) -> str:
        """One line for a person, e.g. ``engine: running (pid 42, up 3m05s, supervise 0.1.0)``."""
        if self.state == "running":
            parts = [f"pid {self.pid}", f"up {duration(self.uptime_s)}"]
            if self.version:
                parts.append(f"supervise {self.version}")
            return f"engine: running ({', '.join(parts)})"
        if self.state == "stale":
            return f"engine: stale ({self.reason})"
        return "engine: not running"


@dataclass(slots=True)
class SpoolFile:
    """A task file in the spool not claimed yet: ``name`` (file name), ``age_s`` (seconds
    since its mtime)."""

    name: str
    age_s: float


# ---------------------------------------------------------------- engine


def read_json(path: str | Path) -> dict[str, Any] | None:
    """A JSON object from a file, or ``None`` if it is missing, unreadable, not a regular
    file (a FIFO an agent put in its task folder never blocks: opened non-blocking,
    :func:`supervisor.diskio.read_regular`), over ``waiting.MANIFEST_MAX`` bytes, nested
    too deep or not an object."""
    try:
        data = json.loads(read_regular(path, MANIFEST_MAX))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def lock_held(state_dir: Path) -> bool:
    """Whether some process holds the engine's lock on ``state_dir``
    (:func:`supervisor.statelock.engine_running`; never creates anything)."""
    from supervisor.statelock import engine_running

    return engine_running(state_dir)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs (``kill(pid, 0)``; EPERM means it does). A
    zombie does not: an engine that ``shutdown`` stopped stays one until its parent reaps
    it (under ``setsid -f``, whenever init gets to it), and it is not running then."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OSError, OverflowError):
        return False
    try:  # proc(5): "pid (comm) state ..."; comm may hold spaces and ")" (no psutil import)
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return False
    except OSError:  # cannot look (another user's /proc): it exists
        return True
    end = data.rfind(b")")
    return end < 0 or data[end + 2 : end + 3] != b"Z"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def engine_state(state_dir: Path, now: float | None = None) -> Engine:
    """The engine on ``state_dir`` from its lock and heartbeat (rules: module docstring)."""
    now = time.time() if now is None else now
    beat = read_json(state_dir / HEARTBEAT) or {}
    held = lock_held(state_dir)
    written, started = epoch(beat.get("written_at")), epoch(beat.get("started_at"))
    age = None if written is None else round(max(0.0, now - written), 1)
    fresh = age is not None and age <= STALE_AFTER
    pid = beat.get("pid") if isinstance(beat.get("pid"), int) else None
    known = {
        "pid": pid,
        "version": _text(beat.get("version")),
        "profile": _text(beat.get("profile")),
        "socket": _text(beat.get("socket")),
        "heartbeat_age_s": age,
        "lock_held": held,
    }
    uptime = None if started is None else round(max(0.0, now - started), 1)
    if held and fresh:
        return Engine("running", uptime_s=uptime, **known)
    if held:
        why = "no heartbeat" if age is None else f"heartbeat {duration(age)} old"
        reason = f"the engine lock is held but {HEARTBEAT} has {why} (written every 5 s)"
        return Engine("stale", uptime_s=uptime, reason=reason, **known)
    if fresh and pid is not None and pid_alive(pid):
        reason = (
            f"pid {pid} wrote a heartbeat {duration(age)} ago but does not hold the engine lock"
        )
        return Engine("stale", uptime_s=uptime, reason=reason, **known)
    return Engine("not running", **known)


# ---------------------------------------------------------------- spool


def spool_files(spool_dir: Path, now: float) -> list[SpoolFile]:
    """Task files waiting in the spool, oldest first: non-hidden ``*.toml`` entries, as
    ``supervisor.spool.pending`` lists them (settled or not; claims in progress are
    hidden ``.claim.*`` files and not listed)."""
    found = []
    try:
        entries = list(os.scandir(spool_dir))
    except OSError:
        return []
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(".toml"):
            continue
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        found.append((mtime, entry.name))
    return [SpoolFile(name, round(max(0.0, now - mtime), 1)) for mtime, name in sorted(found)]


def duration(seconds: float | None) -> str:
    """A short human duration: ``"45s"``, ``"3m05s"``, ``"2h07m"``, ``"3d04h"``; ``"-"``
    for ``None``."""
    if seconds is None:
        return "-"
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
