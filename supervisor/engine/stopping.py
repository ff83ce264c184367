"""Stopping an agent as a state with a deadline, never a sleep on the engine's worker.

supervisord's STOPPING state (supervisord docs, "Process States"): the stop signal goes
out at once, the process is looked at again until it has exited, and once ``stopwaitsecs``
passes without that, it gets SIGKILL. Here:

1. :func:`begin` sends SIGTERM (and SIGCONT, so a paused agent sees it) to the agent's
   process group and returns a :class:`StopInProgress` naming the group's members;
2. the engine keeps it on the task's runtime and calls :meth:`StopInProgress.advance` on
   short re-checks (:data:`STOP_POLL`) and on the pidfd exit event the watcher delivers;
   the rest of the decision (resume, finish, cleanup) waits in ``then``;
3. when :data:`STOP_TIMEOUT` passes with members still running, SIGKILL goes to the group
   and a second deadline of the same length starts; when that passes too the stop is over
   anyway (a process in uninterruptible sleep cannot be waited for for ever).

The other tasks' checks run on the same worker meanwhile, so a stubborn agent delays them
by one ``advance`` (a few ``/proc`` reads), not by seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

#: Seconds between SIGTERM and SIGKILL, and again between SIGKILL and giving up the wait
#: (supervisord's ``stopwaitsecs`` defaults to 10; a real agent CLI traps SIGTERM
#: and exits 143 by itself, see /work/shared/notes/real-world-facts.md).
STOP_TIMEOUT = 5.0
#: Seconds between looks at a process group that is being stopped.
STOP_POLL = 0.05


def group_of(pid: int) -> int | None:
    """The process group id of ``pid``, or ``None`` when it is gone or not ours to see."""
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def group_members(pgid: int) -> list[psutil.Process]:
    """Every process whose process group is ``pgid`` (one pass over ``/proc``)."""
    return [p for p in psutil.process_iter() if group_of(p.pid) == pgid]


def still_running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` that still run.

    A zombie counts as gone: an exited wrapper is tmux's child, not ours, and tmux may reap
    it seconds later (seen with tmux 3.3a). ``psutil.Process`` keeps each one's create
    time, so a PID reused by a new process reads as gone too.
    """
    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


@dataclass
class StopInProgress:
    """An agent's process group between SIGTERM and its end.

    Attributes:
        pid: the agent's PID (from the ``pid`` file), for the ``agent_stopped`` event.
        pgid: its process group, the target of the signals.
        members: the group's processes when SIGTERM went out; those seen gone are dropped.
        deadline: ``time.monotonic()`` seconds when the next step is due (SIGKILL, then
            giving up the wait).
        then: the rest of the decision, run by the engine once :meth:`advance` is true.
        timeout: seconds of each of the two waits (:data:`STOP_TIMEOUT`).
        killed: SIGKILL was sent.
    """

    pid: int
    pgid: int
    members: list[psutil.Process]
    deadline: float
    then: Callable[[], None] = field(repr=False)
    timeout: float = STOP_TIMEOUT
    killed: bool = False

    def advance(self, now: float | None = None) -> bool:
        """Look at the group once; True when the stop is over (nothing of it runs, or the
        wait after SIGKILL ran out). Sends SIGKILL when the first deadline has passed.

        Args:
            now: ``time.monotonic()`` seconds (default: the clock).
        """
        now = time.monotonic() if now is None else now
        self.members = still_running(self.members)
        if not self.members:
            return True
        if now < self.deadline:
            return False
        if self.killed:
            return True
        _killpg(self.pgid, signal.SIGKILL)
        self.killed = True
        self.deadline = now + self.timeout
        return False

    def next_look(self, now: float | None = None) -> float:
        """Seconds until the group should be looked at again (at most :data:`STOP_POLL`)."""
        now = time.monotonic() if now is None else now
        return max(0.0, min(STOP_POLL, self.deadline - now))


def begin(
    pid: int | None, then: Callable[[], None], timeout: float = STOP_TIMEOUT
) -> StopInProgress | None:
    """Send SIGTERM and SIGCONT to the process group of ``pid`` and return the stop.

    Returns ``None`` when there is nothing to stop (no PID, or its process is gone).

    Args:
        pid: the agent's PID (the wrapper's ``pid`` file), or ``None``.
        then: what to do once the group is gone (kept on the returned stop).
        timeout: seconds before SIGKILL (:data:`STOP_TIMEOUT`).
    """
    if pid is None:
        return None
    pgid = group_of(pid)
    if pgid is None:
        return None
    members = group_members(pgid)
    _killpg(pgid, signal.SIGTERM)
    _killpg(pgid, signal.SIGCONT)  # a paused (SIGSTOPped) agent must see it
    return StopInProgress(pid, pgid, members, time.monotonic() + timeout, then, timeout)
