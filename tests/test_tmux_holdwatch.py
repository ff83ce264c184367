"""The control session's pane (:mod:`supervisor.tmux.holdwatch`) ends an orphaned control
client even when the engine holding it was SIGKILLed before the pane's Python started
(seen in CI under load: ``test_sigkill_of_a_busy_holder_never_takes_the_server_down``
found a client left 10 s after its holder died), and ends nothing else."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from conftest import alive, read_line, wait_for

from supervisor.tmux import holdwatch

SLEEPER = "import time; time.sleep(120)"


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait(timeout=10)
    return proc.pid


def _watch(holder: int, session: str) -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-I", "-S", holdwatch.__file__, str(holder), session]
    return subprocess.run(argv, capture_output=True, timeout=30)


def test_a_client_orphaned_before_the_pane_looked_is_killed() -> None:
    session = "sv-ctl-test-orphan-1"
    client = subprocess.Popen([sys.executable, "-c", SLEEPER, "-C", "new-session", "-s", session])
    try:
        assert _watch(_dead_pid(), session).returncode == 0
        assert client.wait(timeout=10) == -9
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(timeout=10)


def test_processes_that_only_name_the_session_live_on() -> None:
    """A command naming the session without ``-C`` (a ``kill-session -t``, the pane's own
    command line) and a control client of another session are no orphans of this one."""
    session = "sv-ctl-test-orphan-2"
    others = [
        subprocess.Popen([sys.executable, "-c", SLEEPER, "kill-session", "-t", session]),
        subprocess.Popen([sys.executable, "-c", SLEEPER, "-C", "new-session", "-s", session + "0"]),
    ]
    try:
        assert _watch(_dead_pid(), session).returncode == 0
        assert all(proc.poll() is None for proc in others)
    finally:
        for proc in others:
            proc.kill()
            proc.wait(timeout=10)


def test_a_live_holders_client_is_found_among_its_children_and_killed_after_it() -> None:
    session = "sv-ctl-test-child-3"
    spawn = (
        "import subprocess, sys, time\n"
        f"c = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}, '-C', '-s', {session!r}])\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", spawn], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    client = int(read_line(holder.stdout))
    found = holdwatch.find_client(holder.pid, session)
    assert found is not None and found[0] == client
    watch = subprocess.Popen(
        [sys.executable, "-I", "-S", holdwatch.__file__, str(holder.pid), session]
    )
    try:
        holder.kill()
        holder.wait(timeout=10)
        assert watch.wait(timeout=30) == 0
        wait_for(lambda: not alive(client))  # the SIGKILL lands a moment after it is sent
    finally:
        for proc in (holder, watch):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        _reap(client)


def _reap(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
