"""The locks of :mod:`supervisor.statelock` with real processes and real folders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import read_line

from supervisor import statelock

HOLD = """
import sys
from pathlib import Path
from supervisor import statelock
fd = statelock.engine_lock(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_the_engine_lock_survives_renames_and_is_released_by_death(tmp_path: Path) -> None:
    """Held on the folder, not on a file in it: a second taker is refused while the holder
    lives, whatever files are deleted; the kernel frees it when the holder is SIGKILLed."""
    state = tmp_path / "state"
    state.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(state)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert read_line(holder.stdout) == "held\n"
        assert statelock.engine_running(state)
        with pytest.raises(statelock.EngineBusy, match="already owns"):
            statelock.engine_lock(state)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert not statelock.engine_running(state)
    os.close(statelock.engine_lock(state))  # free again


def test_a_state_dir_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(statelock.EngineBusy) as caught:
        statelock.engine_lock(tmp_path / "missing")
    assert "cannot open" in str(caught.value) and "\n" not in str(caught.value)
    assert not statelock.engine_running(tmp_path / "missing")
