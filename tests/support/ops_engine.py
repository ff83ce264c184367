"""A running engine as a fixture (moved from tests/test_ops.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from conftest import Setup, wait_for


@contextmanager
def engine(setup: Setup, *extra: str) -> Iterator[subprocess.Popen[str]]:
    """``supervise run PROFILE`` in the background until the block ends (SIGTERM by PID)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: (setup.state / "engine-stats.json").exists(), timeout=60)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
