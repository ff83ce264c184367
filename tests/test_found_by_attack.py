"""Defects found by trying the merged issue-20 product as an adversary (issue 20, branch
attack). Each test failed on main before its fix."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import Setup, wait_for

from supervisor import childledger, children

#: The notifier (argv[1]: a log file, argv[2]: a flag file): logs the task id from its stdin
#: payload; while the flag file exists it then sleeps a minute (a slow webhook).
SLOW_NOTIFIER = """
import json, os, pathlib, sys, time
event = json.loads(sys.stdin.read())
with open(sys.argv[1], "a") as out:
    out.write(event["task_id"] + "\\n")
if os.path.exists(sys.argv[2]):
    time.sleep(60)
"""


def test_a_notification_queued_behind_busy_notifiers_is_sent_after_a_kill(
    setup: Setup, tmp_path: Path
) -> None:
    """Five tasks end while four slow notifiers fill the notify pool: the fifth waits in
    the queue. The engine is SIGKILLed; the next engine must send all five (at least once),
    the queued one included."""
    log, slow = tmp_path / "notified.log", tmp_path / "slow"
    slow.touch()
    notifier = [sys.executable, "-c", SLOW_NOTIFIER, str(log), str(slow)]
    setup.write_profile(
        max_concurrent=5, notifier=notifier, notify_on=["completed"], notifier_timeout=120
    )
    for n in range(5):
        setup.drop(f"t{n}.toml", setup.task(f"t{n}", "exit: 0"))
    engine = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def all_ended() -> bool:
            found = setup.manifests()
            return len(found) == 5 and all(m["status"] == "completed" for m in found.values())

        wait_for(all_ended, 90)
        wait_for(lambda: log.exists() and len(log.read_text().split()) == 4, 60)
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait(30)
        slow.unlink()
        done = setup.run(timeout=120)
        assert done.returncode == 0, done.stderr
        wanted = {m["task_id"] for m in setup.manifests().values()}
        assert set(log.read_text().split()) == wanted
    finally:
        if engine.poll() is None:
            os.kill(engine.pid, signal.SIGKILL)
            engine.wait(30)


def _shift_boot_time(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Make psutil see the wall clock stepped by ``seconds``: the kernel's ``btime`` (the
    wall time of boot, which ``create_time`` adds to a process's ticks since boot) moves
    with every step of the wall clock; a process's ticks since boot do not."""
    real = psutil._pslinux.boot_time  # type: ignore[attr-defined]
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: real() + seconds)  # type: ignore[attr-defined]
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real() + seconds)  # type: ignore[attr-defined]


def test_a_recorded_group_is_ended_after_a_wall_clock_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine records a notifier's group and is SIGKILLed; NTP then steps the clock an
    hour forward before the next engine starts. The group is still the recorded one and
    must be ended, not taken for a reused PID and left to run beside a second run."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        childledger.Ledger(tmp_path, "notify").record(proc.pid, ["sleep", "60"], None, "t0")
        _shift_boot_time(monkeypatch, 3600.0)
        assert children.end_recorded(tmp_path) == 1
        proc.wait(10)
        assert list((tmp_path / childledger.FOLDER).iterdir()) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_record_from_another_boot_is_only_removed(tmp_path: Path) -> None:
    """A record written before a reboot names a PID that a new process may hold now at the
    same ticks since boot: it is removed, and the process is left alone."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        ledger = childledger.Ledger(tmp_path, "notify")
        ledger.record(proc.pid, ["sleep", "60"], None, "t0")
        path = tmp_path / childledger.FOLDER / str(proc.pid)
        data = json.loads(path.read_text())
        data["boot_id"] = "another-boot"
        data["start"] -= 86400.0  # that boot was a day ago
        path.write_text(json.dumps(data))
        assert children.end_recorded(tmp_path) == 0
        assert proc.poll() is None
        assert not path.exists()
    finally:
        proc.kill()
        proc.wait()


#: Runs ``supervise`` (argv[1:]) with the process SIGKILLed right after a manifest saying
#: ``completed`` is written: the moment between an ending and its notification.
KILLED_AFTER_ENDING = """
import os, signal, sys
from supervisor.taskdir.folder import TaskDir
original = TaskDir.update_manifest
def update_manifest(self, *args, **kwargs):
    manifest = original(self, *args, **kwargs)
    if manifest.status == "completed":
        os.kill(os.getpid(), signal.SIGKILL)
    return manifest
TaskDir.update_manifest = update_manifest
from supervisor.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_notification_is_sent_when_the_engine_dies_right_after_the_ending(
    setup: Setup, tmp_path: Path
) -> None:
    """The engine is SIGKILLed after the manifest says ``completed`` and before the
    notification is queued: the next engine must send it (the ending was durable, the
    notification had left no trace, and adoption skips an ended task)."""
    log = tmp_path / "notified.log"
    notifier = [sys.executable, "-c", SLOW_NOTIFIER, str(log), str(tmp_path / "never")]
    setup.write_profile(notifier=notifier, notify_on=["completed"], notifier_timeout=60)
    setup.drop("t.toml", setup.task("t", "exit: 0"))
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_ENDING, "run", str(setup.profile), "--exit-when-idle"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL
    assert [m["status"] for m in setup.manifests().values()] == ["completed"]
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    wanted = {m["task_id"] for m in setup.manifests().values()}
    assert log.exists() and set(log.read_text().split()) == wanted
