"""Defects found by trying the merged issue-20 product as an adversary (issue 20, branch
attack). Each test failed on main before its fix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import Setup, wait_for

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
