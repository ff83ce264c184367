"""``supervise validate`` warns when ``stale_threshold + grace_period`` is shorter than the
agent's own heartbeat (issue 21: Claude Code prints ``tool_progress`` every 30 s in ``-p``
mode, tests/fixtures/claude/tools/): one line naming the file, the keys and the fix. Run as
the real command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.agents.claude.tools import HEARTBEAT


def _profile(tmp_path: Path, agent: str, monitor: str) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(
        '[paths]\nspool_dir = "spool"\nstate_dir = "state"\n'
        f"[agent]\n{agent}\n[monitor]\n{monitor}\n",
        encoding="utf-8",
    )
    return path


def _validate(tmp_path: Path, *files: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "validate", *map(str, files)],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


CLAUDE = 'kind = "claude"\nbinary = "/bin/true"'


def _heartbeat_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "heartbeats" in line]


def test_a_headless_claude_profile_below_the_heartbeat_is_warned_in_one_line(
    tmp_path: Path,
) -> None:
    profile = _profile(tmp_path, CLAUDE, "stale_threshold = 15\ngrace_period = 5")
    done = _validate(tmp_path, profile)
    assert done.returncode == 0, done.stderr  # a warning, not an error
    [line] = _heartbeat_lines(done.stderr)
    assert line.startswith(f"warning: {profile}: [monitor] stale_threshold (15 s) + grace_period")
    assert f"the {HEARTBEAT:g} s between the heartbeats" in line
    assert "stale_threshold from profile, grace_period from profile" in line
    assert "Fix: set stale_threshold + grace_period to at least 30" in line


@pytest.mark.parametrize(
    ("agent", "monitor"),
    [
        (CLAUDE, "stale_threshold = 25\ngrace_period = 5"),  # exactly the heartbeat
        (CLAUDE, ""),  # the defaults: 90 + 30
        (CLAUDE + '\nmode = "interactive"', "stale_threshold = 15\ngrace_period = 5"),
        ('command = ["true"]', "stale_threshold = 15\ngrace_period = 5"),  # generic: none known
    ],
)
def test_no_warning_when_the_silence_allowed_covers_it_or_none_is_known(
    tmp_path: Path, agent: str, monitor: str
) -> None:
    done = _validate(tmp_path, _profile(tmp_path, agent, monitor))
    assert done.returncode == 0, done.stderr
    assert _heartbeat_lines(done.stderr) == []


def test_the_environment_can_cause_it_and_is_named(tmp_path: Path) -> None:
    profile = _profile(tmp_path, CLAUDE, "grace_period = 5")
    done = _validate(tmp_path, profile, MONITOR_STALE_THRESHOLD="10")
    [line] = _heartbeat_lines(done.stderr)
    assert "stale_threshold from env, grace_period from profile" in line
    assert "(e.g. MONITOR_STALE_THRESHOLD=25)" in line
    assert done.returncode == 0


def test_a_task_file_that_lowers_them_is_warned_with_its_own_name(tmp_path: Path) -> None:
    profile = _profile(tmp_path, CLAUDE, "")
    (tmp_path / "project").mkdir()
    task = tmp_path / "quick.toml"
    task.write_text(
        'name = "q"\nprompt = "p"\nproject_dir = "project"\n'
        "[monitor]\nstale_threshold = 5\ngrace_period = 0\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "validate", "-c", str(profile), str(task)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")},
    )
    assert done.returncode == 0, done.stderr
    [line] = _heartbeat_lines(done.stderr)
    assert line.startswith(f"warning: {task}: [monitor] stale_threshold (5 s) + grace_period (0 s)")
    assert "stale_threshold from task, grace_period from task" in line
    assert "(e.g. stale_threshold = 30)" in line


def test_run_logs_the_same_warning_for_who_skipped_validate(
    tmp_path: Path, socket_name: str
) -> None:
    """``supervise run`` logs the heartbeat warning at start (found by trying it as a user:
    only ``validate`` said it)."""
    profile = _profile(tmp_path, CLAUDE, "stale_threshold = 15\ngrace_period = 5")
    with profile.open("a", encoding="utf-8") as out:
        out.write(f'[tmux]\nsocket_name = "{socket_name}"\n')
    (tmp_path / "spool").mkdir(mode=0o700)
    done = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "run", str(profile), "--exit-when-idle"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [line] = _heartbeat_lines(done.stderr)
    assert "stale_threshold (15 s) + grace_period (5 s)" in line
