"""Issue 22, the Brain's loop tried from SKILL.md alone: what the trial found, kept.

- ``status`` right after ``shutdown`` said ``engine: stale`` while the stopped engine was a
  zombie (ended, not yet reaped by its parent): it has stopped, so ``not running``.
"""

from __future__ import annotations

import signal
import subprocess

import psutil
from conftest import Setup, wait_for


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_status_after_shutdown_says_not_running_while_the_engine_is_unreaped(
    setup: Setup,
) -> None:
    setup.write_profile()
    engine = setup.start()  # our child: after its exit it stays a zombie until we wait()
    try:
        wait_for(
            lambda: setup.supervise("status", "-c", str(setup.profile)).stdout.startswith(
                "engine: running"
            ),
            timeout=60,
        )
        done = setup.supervise("shutdown", "-c", str(setup.profile))
        assert done.returncode == 0, done.stderr
        # not reaped (poll() would reap it): a zombie, as under a parent that reaps late
        assert psutil.Process(engine.pid).status() == psutil.STATUS_ZOMBIE
        status = setup.supervise("status", "-c", str(setup.profile))
        assert status.stdout.splitlines()[0] == "engine: not running", status.stdout
    finally:
        _end(engine)
