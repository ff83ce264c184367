"""The PID-reuse guard, on real processes: keyed on the process's own start time against
the wrapper's ``pid`` file, never on anything the engine changes while a run goes on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import wait_for

from supervisor.engine.signals import CREATE_TIME_SLACK, RunView, observe, pid_alive
from supervisor.taskdir.folder import TaskDir


def test_our_agent_stays_alive_however_long_ago_its_pid_was_written(sleeper, tmp_path: Path):
    # An escalation answered minutes after the launch must not make the agent look reused.
    task = TaskDir(tmp_path)
    (tmp_path / "pid").write_text(f"{sleeper.pid}\n")
    assert observe(task).agent_alive is True
    hours_later = time.time() + 3 * 3600
    assert observe(task, now=hours_later).agent_alive is True
    assert pid_alive(sleeper.pid, os.stat(tmp_path / "pid").st_mtime)


def test_a_process_started_after_the_pid_file_reused_the_number(sleeper, tmp_path: Path):
    started = psutil.Process(sleeper.pid).create_time()
    pid_file = tmp_path / "pid"
    pid_file.write_text(f"{sleeper.pid}\n")
    # The file was written well before this process existed: an older run's PID, reused.
    written = started - CREATE_TIME_SLACK - 5
    os.utime(pid_file, (written, written))
    assert pid_alive(sleeper.pid, written) is False
    assert observe(TaskDir(tmp_path)).agent_alive is False


def test_zombies_and_missing_processes_are_dead(tmp_path: Path):
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: psutil.Process(process.pid).status() == psutil.STATUS_ZOMBIE, timeout=60)
    try:
        assert pid_alive(process.pid) is False  # not reaped yet: a zombie
    finally:
        process.wait(timeout=10)
    assert pid_alive(process.pid) is False
    assert observe(TaskDir(tmp_path)).agent_alive is None  # no pid file yet


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_a_clock_step_does_not_make_our_agent_a_reused_pid(
    sleeper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: float
) -> None:
    """psutil's create_time is boot time (/proc/stat btime, which a step of the wall clock
    moves) plus the start ticks: +1 h after the ``pid`` file was written made our own agent
    look created after it (a reused PID: dead, a crash). Once seen, a process is known by
    its start ticks since boot, which no step changes."""
    task = TaskDir(tmp_path)
    (tmp_path / "pid").write_text(f"{sleeper.pid}\n")
    run = RunView()
    assert observe(task, run=run).agent_alive is True
    real = psutil._pslinux.boot_time  # what psutil.Process.create_time adds
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: real() + step)
    assert observe(task, run=run).agent_alive is True
    monkeypatch.undo()  # a new run's agent is first judged by the wall clock, unstepped
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "pid").write_text(f"{other.pid}\n")
        run.force = True
        assert observe(task, run=run).agent_alive is True  # a new pid file: a new run
        assert run.agent is not None
        run.agent.ticks = 1  # the PID was first seen on another process: reused
        assert observe(task, run=run).agent_alive is False
    finally:
        other.kill()
        other.wait(timeout=10)


def test_the_restart_step_moves_the_pid_files_time(sleeper, tmp_path: Path) -> None:
    """After +1 h while no engine ran, the ``pid`` file's mtime is an hour behind the
    agent's create_time on the new scale: ``written_shift`` moves it back in line."""
    task = TaskDir(tmp_path)
    (tmp_path / "pid").write_text(f"{sleeper.pid}\n")
    written = os.stat(tmp_path / "pid").st_mtime - 3600
    os.utime(tmp_path / "pid", (written, written))
    assert observe(task).agent_alive is False
    assert observe(task, run=RunView(), written_shift=3600.0).agent_alive is True
