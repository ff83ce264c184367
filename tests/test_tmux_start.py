"""Starting the tmux server (issue 20): it gets a sane open-file limit whatever the engine
was started with, and a machine without tmux gets one clear line and a non-zero exit from
``supervise run``, and a problem from ``supervise validate``."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import psutil
from conftest import Setup, wait_for

from supervisor.rlimits import NOFILE_CAP
from supervisor.tmux import Tmux


def server_pid(setup: Setup) -> int | None:
    done = setup.tmux("display-message", "-p", "#{pid}")
    text = done.stdout.strip()
    return int(text) if done.returncode == 0 and text.isdigit() else None


def test_tmux_server_gets_the_hard_open_file_limit(setup: Setup) -> None:
    """At ``ulimit -n 128`` with 150 sessions the server spun and stopped answering: the
    engine raises the server's soft RLIMIT_NOFILE to the hard limit."""
    setup.write_profile()
    setup.drop("long.toml", setup.task("long", "print: hi\nsleep: 8\nexit: 0"))
    command = shlex.join(
        [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile), "--exit-when-idle"]
    )
    engine = subprocess.Popen(
        ["sh", "-c", f"ulimit -Sn 128 && exec {command}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        pid = wait_for(lambda: server_pid(setup), 30)
        assert psutil.Process(engine.pid).rlimit(psutil.RLIMIT_NOFILE)[0] == 128
        hard = psutil.Process(pid).rlimit(psutil.RLIMIT_NOFILE)[1]
        want = min(hard, NOFILE_CAP)
        wait_for(lambda: psutil.Process(pid).rlimit(psutil.RLIMIT_NOFILE)[0] == want, 60)
    finally:
        out, _ = engine.communicate(timeout=60)
    assert engine.returncode == 0, out.decode()
    assert setup.manifests()["long"]["status"] == "completed"


def _no_tmux_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Our environment with a PATH that holds no tmux (only a folder with Python)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "python3"
    if not link.exists():
        link.symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k != "SUPERVISE_TMUX"}
    return {**env, "PATH": str(bin_dir), **extra}


def test_run_without_tmux_says_so_in_one_line_and_exits_non_zero(
    setup: Setup, tmp_path: Path
) -> None:
    setup.write_profile()
    setup.drop("t.toml", setup.task("t", "print: hi\nexit: 0"))
    done = setup.supervise(
        "run", str(setup.profile), "--exit-when-idle", timeout=30, env=_no_tmux_env(tmp_path)
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "tmux is not found on PATH" in lines[0] and "SUPERVISE_TMUX" in lines[0]
    assert "Traceback" not in done.stderr


def test_run_with_supervise_tmux_naming_no_program_exits_non_zero(
    setup: Setup, tmp_path: Path
) -> None:
    setup.write_profile()
    env = {**os.environ, "SUPERVISE_TMUX": str(tmp_path / "no-such-tmux")}
    done = setup.supervise("run", str(setup.profile), "--exit-when-idle", timeout=30, env=env)
    assert done.returncode == 1, done.stderr
    assert f"SUPERVISE_TMUX={tmp_path / 'no-such-tmux'}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_validate_reports_a_missing_tmux_for_a_profile(setup: Setup, tmp_path: Path) -> None:
    setup.write_profile()
    done = setup.supervise("validate", str(setup.profile), env=_no_tmux_env(tmp_path))
    assert done.returncode == 1
    assert "tmux is not found on PATH" in done.stderr and str(setup.profile) in done.stderr
    assert "ok:" not in done.stdout
    fine = setup.supervise("validate", str(setup.profile))
    assert fine.returncode == 0 and "ok:" in fine.stdout


def test_a_launch_as_the_last_session_ends_starts_a_new_server(
    socket_name: str, tmp_path: Path
) -> None:
    """With ``exit-empty`` on, a server exits when its last session ends, and a
    ``new-session`` that reaches it in that moment got "server exited unexpectedly" with
    nothing made: one task of CI's 300-task fleet test failed at launch so. ``launch``
    tries again and a new server starts. Each round ends the only session while the next
    one is launched; the race fired in 20 to 29 of 300 rounds with tmux alone."""
    tmux = Tmux(socket_name, owner=str(tmp_path))
    for round_ in range(150):
        tmux.launch("a", tmp_path, tmp_path)  # no launch.json: the wrapper fails, pane stays
        ender = threading.Thread(target=tmux.close, args=("a",))
        ender.start()
        tmux.launch("b", tmp_path, tmp_path)
        ender.join()
        assert tmux.has_session("b"), f"round {round_}: b was not made"
        tmux.close("b")
