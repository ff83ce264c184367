"""The fake agent's signal behaviour matches the real Claude Code CLI (2.1.328, measured in
``/work/shared/notes/real-world-facts.md``): SIGTERM → exit 143 and SIGHUP → exit 129, both as
normal exits; ``die_on_signal`` keeps the old death by signal; ``ignore_term`` ignores SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAKE_AGENT, read_line


def _start(tmp_path: Path, prompt: str) -> subprocess.Popen[bytes]:
    agent = subprocess.Popen(
        [sys.executable, str(FAKE_AGENT), "-p", f"{prompt}\ntick: 0.1\nsleep: 60"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    # The handlers are set before the start line is printed.
    assert agent.stdout is not None
    assert read_line(agent.stdout).startswith(b"fake-agent start")
    return agent


@pytest.mark.parametrize(
    ("cue", "signum", "expected"),
    [
        ("", signal.SIGTERM, 143),
        ("", signal.SIGHUP, 129),
        ("die_on_signal", signal.SIGTERM, -signal.SIGTERM),
        ("die_on_signal", signal.SIGHUP, -signal.SIGHUP),
        ("ignore_term", signal.SIGHUP, 129),
    ],
)
def test_signal_ends_the_agent_as_the_real_cli_does(
    tmp_path: Path, cue: str, signum: int, expected: int
) -> None:
    agent = _start(tmp_path, cue)
    try:
        agent.send_signal(signum)
        assert agent.wait(timeout=10) == expected
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_ignore_term_survives_sigterm(tmp_path: Path) -> None:
    agent = _start(tmp_path, "ignore_term")
    try:
        agent.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            agent.wait(timeout=1.0)
    finally:
        agent.kill()
        assert agent.wait(timeout=10) == -signal.SIGKILL
