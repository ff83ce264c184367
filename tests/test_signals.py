"""The PID-reuse guard, on real processes: keyed on the process's own start time against
the wrapper's ``pid`` file, never on anything the engine changes while a run goes on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from supervisor.signals import CREATE_TIME_SLACK, observe, pid_alive
from supervisor.taskdir import TaskDir


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait(timeout=10)


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
    deadline = time.monotonic() + 10
    while psutil.Process(process.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        assert pid_alive(process.pid) is False  # not reaped yet: a zombie
    finally:
        process.wait(timeout=10)
    assert pid_alive(process.pid) is False
    assert observe(TaskDir(tmp_path)).agent_alive is None  # no pid file yet
