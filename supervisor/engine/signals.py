"""Observing one task: the facts the policy needs, read from the task directory and /proc.

Layer 1 is the done-file; layer 2 is PID liveness through psutil, guarded against PID reuse
by the process's own start time and counting a zombie as dead; layer 3 is the mtime of
``output.log``.

The PID-reuse guard: the wrapper forks the agent and then writes ``pid``, so our agent was
created before that file's mtime. A process with that PID created later is another one that
reused the number after ours ended. The guard depends on nothing the engine changes while
the run goes on (an answered escalation keeps the same run), and survives an engine restart.
"""

from __future__ import annotations

import os
import time

import psutil

from supervisor.diskio import read_regular
from supervisor.policy import Signals
from supervisor.taskdir import layout
from supervisor.taskdir.folder import TaskDir
from supervisor.taskdir.states import FailureReason

#: Slack in seconds when comparing a process's create_time with our launch time (clock
#: granularity of /proc start times is 1/CLK_TCK, usually 10 ms).
CREATE_TIME_SLACK = 1.0


def pid_alive(
    pid: int, written_at: float | None = None, known_starts: dict[int, int] | None = None
) -> bool:
    """True when ``pid`` runs, is not a zombie, and is the process the ``pid`` file named.

    Args:
        pid: the process id.
        written_at: epoch seconds when the wrapper wrote the ``pid`` file. A process
            created after it (plus :data:`CREATE_TIME_SLACK`) reused the PID and counts as
            dead. ``None``: no guard.
        known_starts: PID -> start ticks since boot (``/proc/PID/stat`` field 22) of the
            processes seen alive before (the caller keeps it per task). A known PID is
            ours while its start ticks match: psutil's create_time adds the boot time,
            which a step of the wall clock moves (+1 h made our own agent look created
            after its ``pid`` file), while the ticks never change. A PID seen for the
            first time is guarded by ``written_at`` and then remembered.
    """
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        ticks = start_ticks(pid)
        if known_starts is not None and pid in known_starts:
            return ticks == known_starts[pid]
        ours = written_at is None or process.create_time() <= written_at + CREATE_TIME_SLACK
        if ours and known_starts is not None and ticks is not None:
            known_starts[pid] = ticks
        return ours
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return False


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22),
    which no step of the wall clock changes; ``None`` when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        # The command name (field 2) may hold spaces and ")": fields 3.. follow the last ")".
        return int(data[data.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def observe(
    task: TaskDir,
    now: float | None = None,
    known_starts: dict[int, int] | None = None,
    written_shift: float = 0.0,
) -> Signals:
    """Read the three layers for ``task``.

    Args:
        task: the task directory.
        now: epoch seconds to stamp the observation with: the engine's clock
            (:mod:`supervisor.engine.clock`), which no step of the wall clock moves;
            default: the wall clock (for callers outside the engine).
        known_starts: the task's PIDs seen alive before (:func:`pid_alive`).
        written_shift: seconds to add to the ``pid`` file's mtime: the step of the wall
            clock found when the task was adopted, when forward (its mtime is then behind
            the agent's create_time by the step; see :mod:`supervisor.engine.clock`).
    """
    done = task.done()
    exit_code = task.read_int(layout.EXIT_CODE)
    pid, written_at = _pid_file(task)
    if written_at is not None:
        written_at += written_shift
    # The wrapper exits 127 when the agent's program could not run; only then is there a
    # reason file to look for (no extra stat on every healthy check).
    unlaunched = exit_code == 127 and task.file(layout.LAUNCH_ERROR).exists()
    return Signals(
        now=time.time() if now is None else now,
        done=done,
        exit_code=exit_code,
        agent_alive=None if pid is None else pid_alive(pid, written_at, known_starts),
        output_mtime=task.output_mtime(),
        signal=task.read_int(layout.SIGNAL),
        failure=FailureReason.LAUNCH if unlaunched else None,
        launch_error=_launch_error(task) if unlaunched else None,
    )


#: Characters of the wrapper's ``launch_error`` kept for the decision's reason.
LAUNCH_ERROR_CHARS = 400


def _launch_error(task: TaskDir) -> str | None:
    """The first line of the wrapper's ``launch_error`` (bounded, the ``supervise: ``
    prefix dropped), or ``None`` when it cannot be read."""
    try:  # the agent can write its task folder: no FIFO, no symlink, no huge file
        data = read_regular(task.file(layout.LAUNCH_ERROR), limit=16 * 1024, follow=False)
    except (OSError, ValueError):
        return None
    line = data.decode("utf-8", "replace").strip().splitlines()[:1]
    text = line[0].removeprefix("supervise: ") if line else ""
    return text[:LAUNCH_ERROR_CHARS] or None


def _pid_file(task: TaskDir) -> tuple[int | None, float | None]:
    """The ``pid`` file's PID and mtime (epoch s), from one open: ``(None, None)`` when it
    is missing or not yet a number."""
    try:
        with open(task.file(layout.PID), "rb") as handle:
            return int(handle.read().strip()), os.fstat(handle.fileno()).st_mtime
    except (FileNotFoundError, ValueError):
        return None, None
