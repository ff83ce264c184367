"""What every benchmark report adds (issue 24, item 5): the machine's cores, the 1-minute
load average at start and end, and the engine's own CPU per task.

The engine's CPU is read from outside, through ``psutil`` on its PID (user + system seconds
of the engine process itself; ``children_*`` excluded: the agents, wrappers and tmux
clients it started are not the engine). So it works on any engine version: nothing here
imports ``supervisor``.
"""

from __future__ import annotations

import os
from typing import Any

import psutil


def loadavg() -> list[float]:
    """The 1, 5 and 15-minute load averages (``os.getloadavg``), rounded to 0.01."""
    return [round(x, 2) for x in os.getloadavg()]


def host() -> dict[str, Any]:
    """``cores`` (``os.cpu_count()``) and ``load_1m_start`` (now): the start of a report."""
    return {"cores": os.cpu_count(), "load_1m_start": loadavg()[0]}


def host_end(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with ``load_1m_end`` (now) added: the end of a report."""
    return info | {"load_1m_end": loadavg()[0]}


def own_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` itself (children excluded); None when
    it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return times.user + times.system


class EngineCpu:
    """The engine's own CPU seconds over one or more measured stretches (an engine can be
    restarted: each run is one stretch), and the tasks they served.

    ``begin(pid)`` when the engine is up (after its start-up: imports are not per-task
    cost), ``end(tasks)`` before it is stopped; :meth:`report` sums the stretches.
    """

    def __init__(self) -> None:
        self.pid: int | None = None
        self.start_s: float | None = None
        self.cpu_s = 0.0
        self.tasks = 0
        self.stretches = 0

    def begin(self, pid: int) -> None:
        """Start a stretch on engine ``pid``."""
        self.pid, self.start_s = pid, own_cpu_s(pid)

    def end(self, tasks: int) -> None:
        """Close the stretch; ``tasks``: task folders the engine held by then (a restarted
        engine's count replaces the earlier one: the same tasks, adopted)."""
        if self.pid is None or self.start_s is None:
            return
        now = own_cpu_s(self.pid)
        if now is not None:
            self.cpu_s += now - self.start_s
            self.tasks = max(self.tasks, tasks)
            self.stretches += 1
        self.pid = self.start_s = None

    def report(self) -> dict[str, Any]:
        """``cpu_s`` (s), ``tasks``, ``ms_per_task`` (None without tasks), ``stretches``."""
        per = round(1000 * self.cpu_s / self.tasks, 2) if self.tasks else None
        return {
            "cpu_s": round(self.cpu_s, 3),
            "tasks": self.tasks,
            "ms_per_task": per,
            "stretches": self.stretches,
            "what": "engine's own user+system CPU, children excluded, from its first "
            "heartbeat to SIGTERM, divided by its task folders",
        }
