"""Observing one task: the facts the policy needs, read from the task directory and /proc.

Layer 1 is the done-file; layer 2 is PID liveness through psutil, guarded against PID reuse
(a process created before our launch cannot be our agent) and counting a zombie as dead;
layer 3 is the mtime of ``output.log``.
"""

from __future__ import annotations

import time

import psutil

from supervisor.policy import Signals
from supervisor.taskdir import TaskDir

#: Slack in seconds when comparing a process's create_time with our launch time (clock
#: granularity of /proc start times is 1/CLK_TCK, usually 10 ms).
CREATE_TIME_SLACK = 1.0


def pid_alive(pid: int, not_before: float | None = None) -> bool:
    """True when ``pid`` runs and is not a zombie.

    Args:
        pid: the process id.
        not_before: epoch seconds; a process created earlier than this (minus
            :data:`CREATE_TIME_SLACK`) is a reused PID, not ours, and counts as dead.
    """
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return not (
            not_before is not None and process.create_time() < not_before - CREATE_TIME_SLACK
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return False


def observe(task: TaskDir, launched_at: float | None, now: float | None = None) -> Signals:
    """Read the three layers for ``task``.

    Args:
        task: the task directory.
        launched_at: epoch seconds of the latest launch/resume (PID-reuse guard).
        now: epoch seconds to stamp the observation with (default: the clock).
    """
    done = task.done()
    exit_code = task.read_int("exit_code")
    pid = task.read_int("pid")
    alive = None if pid is None else pid_alive(pid, launched_at)
    return Signals(
        now=time.time() if now is None else now,
        done=done,
        exit_code=exit_code,
        agent_alive=alive,
        output_mtime=task.output_mtime(),
        signal=task.read_int("signal"),
    )
