"""The engine's background work runs on one pool per kind (issue 20): slow acceptance
checks that fill their pool do not delay another task's workspace preparation, its finish
or its notification (they shared one pool of 4: four 40 s checks delayed two new tasks by
35 s with slots free)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import Setup, wait_for
from support.repos import make_repo

from supervisor.engine.pools import POOL_SIZE

#: The acceptance command: writes its PID into the folder argv[1], then sleeps a minute.
SLOW_CHECK = (
    "import os, pathlib, sys, time; "
    "pathlib.Path(sys.argv[1], str(os.getpid())).touch(); time.sleep(60)"
)
NOTIFIER = "import pathlib, sys; pathlib.Path(sys.argv[1], sys.argv[2]).touch()"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_slow_acceptance_checks_do_not_delay_preparation_or_notifications(
    setup: Setup, tmp_path: Path
) -> None:
    checks, notified = tmp_path / "checks", tmp_path / "notified"
    checks.mkdir()
    notified.mkdir()
    setup.write_profile(
        max_concurrent=POOL_SIZE + 2,
        notifier=[sys.executable, "-c", NOTIFIER, str(notified), "{task_name}"],
        notify_on=["completed", "failed"],
    )
    slow = {"command": [sys.executable, "-c", SLOW_CHECK, str(checks)], "timeout": 120}
    for n in range(POOL_SIZE):
        setup.drop(f"slow{n}.toml", setup.task(f"slow{n}", "exit: 0", acceptance=slow))
    engine = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile), "--exit-when-idle"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    sleepers: list[int] = []
    try:
        wait_for(lambda: len(list(checks.iterdir())) == POOL_SIZE, 60)
        sleepers = [int(p.name) for p in checks.iterdir()]
        repo = make_repo(tmp_path / "repo")  # a repository: the task gets a worktree
        setup.drop("new.toml", setup.task("new", "print: hi\nexit: 0", project=repo))
        # the new task is prepared, runs, is finished and notified while the checks sleep
        wait_for(lambda: (notified / "new").exists(), 30)
        assert all(_alive(pid) for pid in sleepers)
        m = setup.manifests()["new"]
        assert m["status"] == "completed" and m["workspace"]["head_commit"]
        names = [e["event"] for e in setup.events(m["task_id"])]
        assert names.index("workspace_ready") < names.index("launched")
        # the engine logs `notified` once the notifier has exited, just after its file
        wait_for(lambda: "notified" in [e["event"] for e in setup.events(m["task_id"])], 30)
        assert all(_alive(pid) for pid in sleepers)  # still while the checks sleep
    finally:
        for pid in sleepers:  # the checks fail at once; the engine then goes idle
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        _, err = engine.communicate(timeout=60)
    assert engine.returncode == 0, err.decode()[-2000:]
