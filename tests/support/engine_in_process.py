"""An engine run inside the test process (moved from tests/test_faults.py), for fault injection:
start, end, the event kinds, failing manifest writes."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Setup

from supervisor.config import load_profile
from supervisor.engine.scheduler import Engine
from supervisor.taskdir import folder as taskdir
from supervisor.wrapper import END_MARK

END_LINE = f"{END_MARK} agent exited with code 0"


def kinds(setup: Setup, task_id: str) -> list[str]:
    return [e["event"] for e in setup.events(task_id)]


#: ``supervise`` run through its CLI entry point, with faulthandler on SIGUSR1 so a hung
#: engine can be made to print every thread's stack into its log before it is killed.
ENGINE_CODE = (
    "import faulthandler, signal, sys; "
    "faulthandler.register(signal.SIGUSR1, all_threads=True); "
    "from supervisor.cli import main; sys.exit(main(sys.argv[1:]))"
)


def start_engine(setup: Setup, log: Path, *extra: str) -> subprocess.Popen:
    """``supervise run PROFILE`` as a real process; its log goes to ``log``."""
    with open(log, "wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-c", ENGINE_CODE, "run", str(setup.profile), *extra],
            stdout=handle, stderr=subprocess.STDOUT,
        )  # fmt: skip


def end_engine(engine: subprocess.Popen, log: Path) -> None:
    """Kill (by PID) an engine a failed test left running, after it printed its threads'
    stacks (shown with the failure)."""
    if engine.poll() is None:
        engine.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        engine.kill()
        engine.wait(timeout=10)
        print(f"engine still running; its log ends with:\n{_text(log)[-6000:]}")


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


# --------------------------------------------------------------------------- failed writes


def _failing_manifest_writes(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list]:
    """Make ``TaskDir``'s manifest writes fail with ENOSPC while the returned event is set
    (only for a manifest that exists already: the disk fills up after the claim)."""
    failing = threading.Event()
    attempts: list[float] = []
    real = taskdir.atomic_write

    def atomic_write_or_enospc(path: Path, data: bytes, *args: Any, **kwargs: Any) -> None:
        if failing.is_set() and path.name == "manifest.json" and path.exists():
            attempts.append(time.time())
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data, *args, **kwargs)

    monkeypatch.setattr(taskdir, "atomic_write", atomic_write_or_enospc)
    return failing, attempts


def _run_engine_in_process(setup: Setup, helper: Any, limit: float = 40) -> None:
    """Run an :class:`Engine` (exit_when_idle) in this thread while ``helper(engine)`` runs
    in another; a watchdog stops the engine after ``limit`` seconds."""
    engine = Engine(load_profile(setup.profile), exit_when_idle=True)
    errors: list[BaseException] = []

    def guarded() -> None:
        try:
            helper(engine)
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)

    fired = threading.Event()

    def stop() -> None:
        fired.set()
        engine.stopping.set()

    thread = threading.Thread(target=guarded, daemon=True)
    watchdog = threading.Timer(limit, stop)
    thread.start()
    watchdog.start()
    try:
        assert engine.run() == 0
    finally:
        watchdog.cancel()
        thread.join(timeout=10)
    if errors:
        raise errors[0]
    assert not fired.is_set(), f"the engine was not idle after {limit} s: {list(engine.live)}"
