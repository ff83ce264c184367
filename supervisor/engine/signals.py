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
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from supervisor.diskio import read_regular
from supervisor.policy import Signals
from supervisor.taskdir import layout
from supervisor.taskdir.folder import TaskDir
from supervisor.taskdir.states import FailureReason

#: Slack in seconds when comparing a process's create_time with our launch time (clock
#: granularity of /proc start times is 1/CLK_TCK, usually 10 ms).
CREATE_TIME_SLACK = 1.0


@dataclass(frozen=True)
class RunFiles:
    """The wrapper's run files (:data:`supervisor.taskdir.layout.RUN_FILES`) as one read
    found them: whether ``done`` exists, ``exit_code`` and ``signal`` (``None``: missing or
    not yet a number), the ``pid`` file's PID and its mtime (epoch s)."""

    done: bool
    exit_code: int | None
    signal: int | None
    pid: int | None
    pid_written: float | None


def read_run_files(task: TaskDir) -> RunFiles:
    """Read the four run files of ``task`` (one open or stat each)."""
    pid, written = _pid_file(task)
    return RunFiles(
        done=task.done(),
        exit_code=task.read_int(layout.EXIT_CODE),
        signal=task.read_int(layout.SIGNAL),
        pid=pid,
        pid_written=written,
    )


def _stat_fields(pid: int) -> tuple[str, int] | None:
    """``/proc/PID/stat``'s state letter and start ticks since boot (fields 3 and 22,
    proc(5)) from one read, or ``None`` when the process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
        # The command name (field 2) may hold spaces and ")": fields 3.. follow the last ")".
        fields = data[data.rindex(b")") + 2 :].split()
        return fields[0].decode("ascii", "replace"), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22),
    which no step of the wall clock changes; ``None`` when it cannot be read."""
    fields = _stat_fields(pid)
    return None if fields is None else fields[1]


class AgentProcess:
    """One run's agent: the ``psutil.Process`` made when its PID was first seen, and its
    start ticks since boot, which no step of the wall clock changes (psutil's own
    ``create_time`` adds ``/proc/stat``'s btime, which a step moves: +1 h made our agent
    look created after its ``pid`` file).

    Made once per run by :meth:`first_seen`; each check then costs one read of
    ``/proc/PID/stat`` (:meth:`alive`), not a new ``psutil.Process``.
    """

    def __init__(self, process: psutil.Process, ticks: int) -> None:
        self.process = process
        self.pid = process.pid
        self.ticks = ticks

    @classmethod
    def first_seen(cls, pid: int, written_at: float | None) -> AgentProcess | None:
        """The run's agent, or ``None`` when ``pid`` is gone, a zombie, or not ours: created
        after ``written_at`` (epoch s when the wrapper wrote ``pid``; the wrapper forks the
        agent first) plus :data:`CREATE_TIME_SLACK`, which means another process reused
        the number after ours ended. ``written_at`` ``None``: no guard."""
        try:
            process = psutil.Process(pid)
            fields = _stat_fields(pid)
            if fields is None or fields[0] == "Z":
                return None
            if written_at is not None and process.create_time() > written_at + CREATE_TIME_SLACK:
                return None
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            return None
        return cls(process, fields[1])

    def alive(self) -> bool:
        """True while the process runs, is not a zombie, and is still the one first seen
        (same start ticks: a PID reused since is another process)."""
        fields = _stat_fields(self.pid)
        return fields is not None and fields[0] != "Z" and fields[1] == self.ticks


def pid_alive(pid: int, written_at: float | None = None) -> bool:
    """True when ``pid`` runs, is not a zombie, and was created no later than ``written_at``
    (epoch s, see :meth:`AgentProcess.first_seen`): a one-off look, for callers that keep
    no :class:`RunView`."""
    return AgentProcess.first_seen(pid, written_at) is not None


#: Seconds after which a check reads the run files even when no inotify event said they
#: changed: the safety net for an event the kernel dropped (``IN_Q_OVERFLOW``).
RUN_FILES_MAX_AGE = 60.0


@dataclass
class RunView:
    """What the engine holds of a task's current run between checks (one per
    :class:`~supervisor.engine.runtime.Runtime`).

    ``files``: the run files as last read (``None``: never read); ``agent``: the agent of
    the PID ``agent_of`` names (``(pid, pid file mtime)``), ``None`` once it is seen gone
    (a process never comes back); ``changed``: asked at each check whether the run files
    may have changed since they were read (:meth:`supervisor.engine.watch.Watcher.
    run_files_changed`); ``None``: no watcher, read at every check. ``force``: read at the
    next check whatever ``changed`` says (set at adoption and after a restore).
    """

    files: RunFiles | None = None
    agent: AgentProcess | None = None
    agent_of: tuple[int, float | None] | None = None
    changed: Callable[[], bool] | None = None
    force: bool = True
    read_at: float = float("-inf")  # time.monotonic() of the last read

    def run_files(self, task: TaskDir) -> RunFiles:
        """The run files: read again when forced, never read, older than
        :data:`RUN_FILES_MAX_AGE`, or when ``changed`` says so; else the last read."""
        stale = time.monotonic() - self.read_at >= RUN_FILES_MAX_AGE
        # ``changed()`` is asked first and always: it takes the watcher's mark.
        changed = self.changed is None or self.changed()
        if changed or self.force or self.files is None or stale:
            self.force = False
            self.read_at = time.monotonic()
            self.files = read_run_files(task)
        return self.files

    def clear(self, task: TaskDir) -> None:
        """Remove the last run's files before a (re)launch (:meth:`TaskDir.clear_run_files`)
        and forget what was read of them, so the next check reads them again. The watcher
        also marks the removal, but from its own thread and later: a check in between saw
        the old ``done`` and exit code, took a resumed agent for ended, counted a second
        limit wait and killed the new run (seen in CI's real-CLI rate-limit test)."""
        task.clear_run_files()
        self.files = None
        self.force = True

    def agent_alive(self, files: RunFiles, written_shift: float = 0.0) -> bool | None:
        """Whether the agent the ``pid`` file names runs (``None``: no ``pid`` file yet).
        A new ``pid`` file (another PID or mtime: a resume, a respawn) is a new run: its
        agent is looked up once (:meth:`AgentProcess.first_seen`, ``written_shift`` s added
        to the file's mtime), then kept."""
        if files.pid is None:
            return None
        key = (files.pid, files.pid_written)
        if key != self.agent_of:
            written = None if files.pid_written is None else files.pid_written + written_shift
            self.agent_of, self.agent = key, AgentProcess.first_seen(files.pid, written)
        elif self.agent is not None and not self.agent.alive():
            self.agent = None
        return self.agent is not None


def observe(
    task: TaskDir,
    now: float | None = None,
    run: RunView | None = None,
    written_shift: float = 0.0,
) -> Signals:
    """Read the three layers for ``task``.

    Args:
        task: the task directory.
        now: epoch seconds to stamp the observation with: the engine's clock
            (:mod:`supervisor.engine.clock`), which no step of the wall clock moves;
            default: the wall clock (for callers outside the engine).
        run: what the engine keeps of the task's run between checks (:class:`RunView`):
            the run files are read only when it says they may have changed, and the agent's
            process is looked up once per run. ``None``: read everything now.
        written_shift: seconds to add to the ``pid`` file's mtime: the step of the wall
            clock found when the task was adopted, when forward (its mtime is then behind
            the agent's create_time by the step; see :mod:`supervisor.engine.clock`).
    """
    run = RunView() if run is None else run
    files = run.run_files(task)
    exit_code = files.exit_code
    # The wrapper exits 127 when the agent's program could not run; only then is there a
    # reason file to look for (no extra stat on every healthy check).
    unlaunched = exit_code == 127 and task.file(layout.LAUNCH_ERROR).exists()
    return Signals(
        now=time.time() if now is None else now,
        done=files.done,
        exit_code=exit_code,
        agent_alive=run.agent_alive(files, written_shift),
        output_mtime=task.output_mtime(),
        signal=files.signal,
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
