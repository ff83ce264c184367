"""The engine's counters and ``state_dir/engine-stats.json``, for operators and benchmarks.

Counters since the engine started: checks, claims, rejections, launches, resumes, endings,
and APScheduler's missed, skipped (``max_instances``) and failed job runs.

The file is also the engine's **heartbeat** (read by :mod:`supervisor.views.model`): it is
rewritten every ``STATS_EVERY`` (5) seconds while the engine runs, with ``pid``,
``started_at``, ``written_at`` (ISO-8601 UTC), ``version`` (the ``supervise`` package
version), ``profile`` (the profile file's path) and ``socket`` (the tmux ``-L`` socket name).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobEvent,
)

from supervisor.taskdir import layout
from supervisor.taskdir.folder import atomic_write, utc_iso

#: Counter names, in the order ``engine-stats.json`` lists them.
COUNTERS = (
    "checks",
    "claimed",
    "rejected",
    "launched",
    "resumed",
    "finished",
    "jobs_missed",
    "jobs_max_instances",
    "jobs_failed",
    # milliseconds from the engine's start until every task it adopted had its first
    # check (0 until then, and with nothing to adopt): benchmarks/adopt.py reads it
    "adoption_ms",
)
#: The APScheduler events :func:`count_job_event` listens to.
JOB_EVENTS = EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES | EVENT_JOB_ERROR
_JOB_EVENT_KEYS = {
    EVENT_JOB_MISSED: "jobs_missed",
    EVENT_JOB_MAX_INSTANCES: "jobs_max_instances",
    EVENT_JOB_ERROR: "jobs_failed",
}


def new_counters() -> dict[str, int]:
    """Every counter at 0."""
    return dict.fromkeys(COUNTERS, 0)


def count_job_event(counters: dict[str, int], event: JobEvent) -> None:
    """Count one of APScheduler's missed, skipped or failed runs (an event listener)."""
    key = _JOB_EVENT_KEYS.get(event.code)
    if key:
        counters[key] += 1


def version() -> str | None:
    """The installed distribution's version (:data:`supervisor.DISTRIBUTION`; ``None`` when
    not installed)."""
    from importlib import metadata

    from supervisor import DISTRIBUTION

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def write(
    state_dir: Path,
    started: float,
    live: int,
    queued: int,
    counters: dict[str, int],
    identity: dict[str, str | None] | None = None,
) -> None:
    """Replace ``state_dir/engine-stats.json`` (``started`` in epoch s); a failed write is
    ignored (the file is informative, and a full disk must not stop the engine).
    ``identity``: ``version``, ``profile`` and ``socket`` for the heartbeat."""
    data = {
        "pid": os.getpid(),
        "started_at": utc_iso(started),
        "written_at": utc_iso(),
        **(identity or {}),
        "live": live,
        "queued": queued,
        **counters,
    }
    with contextlib.suppress(OSError):
        path = state_dir / layout.ENGINE_STATS
        atomic_write(path, json.dumps(data, indent=1).encode(), durable=False)


def start_line(profile_path: Path | str, state_dir: Path, socket: str, pid: int) -> str:
    """The line ``supervise run`` logs once it holds the lock (issue 14), e.g. ``supervise
    0.1.0 started: profile /p.toml, state dir /s, tmux socket supervise-1a2b3c4d, pid 42``
    (the version: :func:`version`, else ``supervisor.__version__`` in a bare checkout)."""
    from supervisor import __version__

    return (
        f"supervise {version() or __version__} started: profile {profile_path}, "
        f"state dir {state_dir}, tmux socket {socket}, pid {pid}"
    )
