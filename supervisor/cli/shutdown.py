"""``supervise shutdown -c PROFILE [--wait S] [--json]``: stop the engine, leave the agents.

It does what SIGTERM to ``supervise run`` does (:mod:`supervisor.engine.shutdown`): the work
in progress finishes within the stop bound, the engine exits, and every agent runs on in its
tmux session; the next ``supervise run`` of the profile adopts them. The engine is found by
the lock it holds on its ``state_dir`` (:func:`supervisor.engine_probe.engine_pid`) and
signalled through a pidfd taken before its holder is asked again, so a pid reused in
between is never signalled. The command returns once the lock is released (the engine has
exited), or after ``--wait`` seconds.

Two shutdowns at once: a second SIGTERM would cut the engine's stop short (its second-signal
rule), so the copies take turns on :data:`TURN_FILE`; the later one finds the engine gone
and says so, exit 0.

A cluster engine (``[cluster]``) stops the same way: it records its host ``stopped`` (never
``dead``, so the sweeper restarts none of its tasks elsewhere) and releases its lease, so
the wrappers of its fleet tasks let the agents run on until the engine comes back.

Exit codes (README "Exit codes"): 0 the engine stopped (or another shutdown stopped it);
1 no engine runs on the state dir, or it cannot be signalled (another user's); 4 it still
runs after ``--wait`` seconds (a stuck engine: SIGKILL of its pid is safe, as a crash is);
2 usage.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor.cli.common import EXIT_NOT_STOPPED, load_profile, seconds
from supervisor.taskdir import layout
from supervisor.terminal import escape_controls

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: The file in ``state_dir`` that concurrent ``shutdown`` commands take turns on.
TURN_FILE = layout.SHUTDOWN_LOCK
#: Default ``--wait``: the engine's stop bound (30 s) and its start-up margin.
WAIT_S = 60.0
#: Seconds between looks at the lock while the engine stops.
POLL = 0.1


@dataclass(frozen=True)
class Stopped:
    """What ``shutdown`` found and did: ``result`` ``stopped``, ``not_running``,
    ``refused`` (cannot signal) or ``still_running``; ``pid`` of the engine (``None`` when
    none ran); ``line`` to show; ``code`` the exit status."""

    result: str
    pid: int | None
    line: str
    code: int


def shutdown_engine(profile: LoadedProfile, wait_s: float) -> Stopped:
    """SIGTERM the engine holding ``profile``'s state dir and wait up to ``wait_s`` seconds
    for it to exit (module docstring). Never raises for a missing or gone engine."""
    from filelock import FileLock, Timeout

    state_dir = profile.state_dir
    if not state_dir.is_dir():  # no engine ever ran; FileLock would create the folder
        return Stopped("not_running", None, _none(state_dir, "no such folder"), 1)
    deadline = time.monotonic() + wait_s
    turn = FileLock(str(state_dir / TURN_FILE))
    try:
        turn.acquire(timeout=0)
        waited = False
    except Timeout:
        try:
            turn.acquire(timeout=wait_s)  # another shutdown signalled it: wait for its end
        except Timeout:
            return _still(profile, None, wait_s)
        waited = True
    except OSError as exc:  # not this user's folder
        return Stopped("not_running", None, _none(state_dir, exc.strerror or str(exc)), 1)
    try:
        return _stop(profile, deadline, wait_s, waited)
    finally:
        turn.release()


def _stop(profile: LoadedProfile, deadline: float, wait_s: float, waited: bool) -> Stopped:
    """Find the lock holder, SIGTERM it through a pidfd, wait for the lock to be free."""
    from supervisor.engine_probe import engine_pid

    state_dir = profile.state_dir
    pid = engine_pid(state_dir)
    if pid is None and waited:
        return Stopped("stopped", None, "engine stopped by another 'supervise shutdown'", 0)
    if pid is None:
        return Stopped("not_running", None, _none(state_dir, "its lock is free"), 1)
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return _gone(pid)  # it ended between the two looks
    try:
        if engine_pid(state_dir) != pid:  # after the pidfd: a dead pid holds no lock
            return _gone(pid)
        signal.pidfd_send_signal(handle, signal.SIGTERM)
        _exited(handle, deadline)
    except ProcessLookupError:
        return _gone(pid)
    except PermissionError:
        why = f"cannot signal engine pid {pid} on {state_dir}: it is another user's"
        return Stopped("refused", pid, why, 1)
    finally:
        os.close(handle)
    if _lock_free(state_dir, deadline):
        return _gone(pid, profile)
    return _still(profile, pid, wait_s)


def _exited(handle: int, deadline: float) -> None:
    """Block until the process behind the pidfd ``handle`` exits (it becomes readable,
    pidfd_open(2)) or ``deadline`` (monotonic) passes."""
    poller = select.poll()
    poller.register(handle, select.POLLIN)
    poller.poll(max(0, int((deadline - time.monotonic()) * 1000)))


def _lock_free(state_dir: Path, deadline: float) -> bool:
    """Whether the engine's lock is free by ``deadline`` (the exit closes it at once)."""
    from supervisor.statelock import engine_running

    while engine_running(state_dir):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)
    return True


def _gone(pid: int, profile: LoadedProfile | None = None) -> Stopped:
    line = f"engine pid {pid} stopped"
    if profile is not None:
        until = f"'supervise run {profile.path}' adopts them"
        line += f"; its agents run on in tmux (socket {profile.socket_name}) until {until}"
    return Stopped("stopped", pid, line, 0)


def _still(profile: LoadedProfile, pid: int | None, wait_s: float) -> Stopped:
    who = f"engine pid {pid}" if pid is not None else "the engine"
    line = (
        f"{who} on {profile.state_dir} still runs after {wait_s:g} s; if it is stuck, "
        "SIGKILL is safe (its agents live on and the next run adopts them)"
    )
    return Stopped("still_running", pid, line, EXIT_NOT_STOPPED)


def _none(state_dir: Path, why: str) -> str:
    return f"no engine runs on {state_dir} ({why}); nothing to shut down"


def cmd_shutdown(args: argparse.Namespace) -> int:
    """``supervise shutdown``: :func:`shutdown_engine`, printed (``--json``: one object
    ``{"result", "pid", "state_dir"}``)."""
    profile = load_profile(args.config)
    done = shutdown_engine(profile, args.wait)
    if args.json:
        row = {"result": done.result, "pid": done.pid, "state_dir": str(profile.state_dir)}
        print(json.dumps(row))
    stream = sys.stdout if done.code == 0 and not args.json else sys.stderr
    print(escape_controls(f"supervise shutdown: {done.line}"), file=stream)
    return done.code


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``shutdown`` to the ``supervise`` parser."""
    parser = sub.add_parser(
        "shutdown", help="stop the engine and leave the agents running in tmux (as SIGTERM)"
    )
    parser.add_argument("-c", "--config", required=True, help="profile TOML file")
    parser.add_argument(
        "--wait", type=seconds, default=WAIT_S, help=f"seconds to wait for it to exit ({WAIT_S:g})"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=cmd_shutdown)
