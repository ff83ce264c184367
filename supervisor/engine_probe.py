"""Is a live engine holding a state dir? For the commands that need one to act.

``supervise run`` holds an OS lock on ``state_dir/engine.lock`` while it runs (the kernel
releases it when the process dies, so it never goes stale) and rewrites its heartbeat
``state_dir/engine-stats.json`` at start and every 5 s (:mod:`supervisor.engine.stats`).
An engine is **live** when the lock is held and the heartbeat's ``written_at`` is at most
:data:`STALE_AFTER` seconds old.

:func:`probe` returns the two facts; :func:`warning` the one stderr line that ``submit``,
``status``, ``stop``, ``resume``, ``approve``, ``deny`` and ``wait`` print when no live
engine holds the state dir (issue 14: a request must not sit silently in a queue nobody
reads). Plain ``os``/``json`` and ``filelock``: the status model
(``supervisor.views.model.engine_state``) can build on the same two facts.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

#: Seconds after which a heartbeat is stale: three missed 5 s writes.
STALE_AFTER = 15.0
HEARTBEAT = "engine-stats.json"
LOCK = "engine.lock"


@dataclass(frozen=True)
class Probe:
    """``lock_held``: ``engine.lock`` is held by some process; ``heartbeat_age``: seconds
    since the heartbeat was written (``None``: none, or unreadable); ``pid``: the
    heartbeat's writer."""

    lock_held: bool
    heartbeat_age: float | None
    pid: int | None = None

    @property
    def live(self) -> bool:
        """The lock is held and the heartbeat is fresh."""
        return (
            self.lock_held and self.heartbeat_age is not None and self.heartbeat_age <= STALE_AFTER
        )


def lock_held(state_dir: Path) -> bool:
    """Whether ``state_dir/engine.lock`` is held: taken for an instant (non-blocking) and
    released at once when it is free. A missing ``state_dir`` holds no lock (nothing is
    created)."""
    from filelock import FileLock, Timeout

    path = state_dir / LOCK
    if not path.exists():
        return False
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return True
    except OSError:  # not readable by us: not ours to judge; say held, no warning
        return True
    lock.release()
    return False


def _epoch(iso: object) -> float | None:
    if not isinstance(iso, str) or not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def probe(state_dir: Path, now: float | None = None) -> Probe:
    """The lock and the heartbeat of ``state_dir`` (``now`` in epoch s, default the clock)."""
    now = time.time() if now is None else now
    beat: object = None
    try:
        with open(os.path.join(state_dir, HEARTBEAT), "rb") as handle:
            beat = json.loads(handle.read())
    except (OSError, ValueError):
        beat = None
    data = beat if isinstance(beat, dict) else {}
    written = _epoch(data.get("written_at"))
    age = None if written is None else max(0.0, now - written)
    pid = data.get("pid") if isinstance(data.get("pid"), int) else None
    return Probe(lock_held(state_dir), age, pid)


def warning(state_dir: Path, profile_path: Path | str, what: str) -> str | None:
    """One stderr line when no live engine holds ``state_dir``, else ``None``.

    ``what`` says what waits for the engine, e.g. ``"the task waits in the spool"``.
    """
    found = probe(state_dir)
    if found.live:
        return None
    if found.lock_held:
        age = "no heartbeat" if found.heartbeat_age is None else (
            f"a heartbeat {found.heartbeat_age:.0f} s old")  # fmt: skip
        return (f"warning: the engine holding {state_dir} has {age} (written every 5 s): "
                f"it may be stuck; {what}")  # fmt: skip
    return (f"warning: no engine runs on {state_dir}; {what} until "
            f"'supervise run {profile_path}' starts")  # fmt: skip


def version() -> str:
    """This package's version (``supervisor.__version__``)."""
    from supervisor import __version__

    return __version__


def start_line(profile_path: Path | str, state_dir: Path, socket: str, pid: int) -> str:
    """The line ``supervise run`` logs once it holds the lock, e.g. ``supervise 0.1.0
    started: profile /p.toml, state dir /s, tmux socket supervise-1a2b3c4d, pid 42``."""
    return (f"supervise {version()} started: profile {profile_path}, state dir {state_dir}, "
            f"tmux socket {socket}, pid {pid}")  # fmt: skip
