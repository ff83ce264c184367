"""Every tmux call is bounded: a tmux client that does not answer is killed after its timeout
and raises :class:`TmuxTimeout`; the engine logs it as a fault and goes on. The hung tmux
is a real executable on ``SUPERVISE_TMUX`` (a shell script that stops answering), in front
of the real tmux."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import Setup, wait_for

from supervisor.tmux import CONTROL_ENV, TMUX_TIMEOUT, Tmux, TmuxTimeout

REAL_TMUX = shutil.which("tmux") or "/usr/bin/tmux"


def _fake_tmux(folder: Path, body: str) -> Path:
    """An executable ``folder/bin/tmux`` running the shell script ``body``."""
    (folder / "bin").mkdir(exist_ok=True)
    path = folder / "bin" / "tmux"
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def test_a_hung_tmux_raises_within_the_timeout(
    socket_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "client.pid"
    fake = _fake_tmux(tmp_path, f"echo $$ > {pid_file}\nexec sleep 60")
    monkeypatch.setenv("SUPERVISE_TMUX", str(fake))
    tmux = Tmux(socket_name, owner=str(tmp_path), timeout=0.5)
    for call in (tmux.panes, lambda: tmux.owns("x"), lambda: tmux.capture("x")):
        began = time.monotonic()
        with pytest.raises(TmuxTimeout, match=r"did not answer within 0\.5 s"):
            call()
        took = time.monotonic() - began
        assert took >= 0.5, f"returned after {took:.2f} s"
        # the client was killed, not left behind
        assert not psutil.pid_exists(int(pid_file.read_text())), "hung client left running"


def test_the_real_tmux_answers_through_the_same_path(socket_name: str, tmp_path: Path) -> None:
    tmux = Tmux(socket_name, owner=str(tmp_path))
    assert tmux.binary == REAL_TMUX and tmux.timeout == TMUX_TIMEOUT
    assert tmux.panes() == {} and not tmux.has_session("x")
    tmux.launch("x", tmp_path, tmp_path)  # no launch.json: the wrapper fails, the pane stays
    assert wait_for(lambda: tmux.panes().get("x")).owner == str(tmp_path)
    assert tmux.owns("x") and tmux.has_session("x")
    tmux.close("x")
    assert not tmux.has_session("x")


def test_engine_logs_a_hung_tmux_and_goes_on(setup: Setup, tmp_path: Path) -> None:
    """tmux stops answering for longer than TMUX_TIMEOUT while tasks run: the engine logs
    the fault, keeps checking, and records the tasks' completion once tmux answers. The
    hung tmux comes first on PATH, as any tmux the engine finds would."""
    hang = tmp_path / "hang"
    fake = _fake_tmux(tmp_path, f'while [ -e {hang} ]; do sleep 0.05; done\nexec {REAL_TMUX} "$@"')
    setup.write_profile(base_interval=0.3)
    setup.drop("a.toml", setup.task("a", "tick: 0.2\nsleep: 9\nexit: 0"))
    setup.drop("b.toml", setup.task("b", "tick: 0.2\nsleep: 1\nexit: 0", tmp_path / "b"))
    log = tmp_path / "engine.log"
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("SUPERVISE_TMUX", None)
    # The fake hangs client processes; a hung control client: tests/test_tmux_control.py.
    env[CONTROL_ENV] = "0"
    with open(log, "wb") as handle:
        engine = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile),
             "--exit-when-idle"],
            stdout=handle, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        wait_for(lambda: (setup.manifests().get("a") or {}).get("pid"), timeout=60)
        hang.touch()
        wait_for(lambda: "did not answer" in log.read_text(errors="replace"),
                 timeout=TMUX_TIMEOUT + 5)  # fmt: skip
        # It goes on checking through the hang: a second timeout is logged, engine alive.
        wait_for(lambda: log.read_text(errors="replace").count("did not answer") >= 2,
                 timeout=TMUX_TIMEOUT * 2 + 10)  # fmt: skip
        assert engine.poll() is None, "the engine died"
        hang.unlink()
        assert engine.wait(timeout=60) == 0
    finally:
        hang.unlink(missing_ok=True)
        if engine.poll() is None:
            engine.kill()
            engine.wait(timeout=10)
            print(log.read_text(errors="replace")[-6000:])
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "raised an exception" not in text, text[-4000:]
    m = setup.manifests()
    assert m["a"]["status"] == "completed" and m["b"]["status"] == "completed", m
    sessions = setup.tmux("list-sessions")
    assert sessions.returncode != 0 or not sessions.stdout.strip(), sessions.stdout


def test_cleanup_waits_for_tmux_and_the_ending_is_recorded_once(
    setup: Setup, tmp_path: Path
) -> None:
    """tmux hangs on the cleanup's query (``display-message`` of the owner mark) after a
    task ended: the ending's event is written once, the rest of the decision (cleanup,
    manifest) is tried again at later checks, and carried out once tmux answers; no new
    decision meanwhile. (The check's own look at the pane, ``Tmux.pane``, asks for
    ``pane_dead``: it answers.)"""
    hang = tmp_path / "hang"
    fake = _fake_tmux(
        tmp_path,
        f'if [ -e {hang} ] && [ "$3" = display-message ]; then\n'
        f'  case "$7" in *pane_dead*) ;; *) exec sleep 60 ;; esac\nfi\n'
        f'exec {REAL_TMUX} "$@"',
    )
    setup.write_profile(base_interval=0.3)
    setup.drop("a.toml", setup.task("a", "tick: 0.2\nsleep: 0.5\nexit: 0"))
    log = tmp_path / "engine.log"
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("SUPERVISE_TMUX", None)
    # The fake hangs client processes; a hung control client: tests/test_tmux_control.py.
    env[CONTROL_ENV] = "0"
    hang.touch()
    with open(log, "wb") as handle:
        engine = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile),
             "--exit-when-idle"],
            stdout=handle, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        wait_for(lambda: log.read_text(errors="replace").count("did not answer") >= 2,
                 timeout=3 * TMUX_TIMEOUT + 10)  # fmt: skip
        m = setup.manifests()["a"]
        assert m["status"] == "running", m  # the manifest waits for the cleanup
        assert [e["event"] for e in setup.events(m["task_id"])].count("completed") == 1
        hang.unlink()
        assert engine.wait(timeout=60) == 0
    finally:
        hang.unlink(missing_ok=True)
        if engine.poll() is None:
            engine.kill()
            engine.wait(timeout=10)
            print(log.read_text(errors="replace")[-6000:])
    m = setup.manifests()["a"]
    assert (m["status"], m["exit_code"]) == ("completed", 0), m
    assert [e["event"] for e in setup.events(m["task_id"])].count("completed") == 1
    assert setup.tmux("has-session", "-t", f"={m['task_id']}").returncode != 0
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "raised an exception" not in text, text[-4000:]


def test_adoption_waits_for_a_hung_tmux_and_never_starts_a_task_twice(
    setup: Setup, tmp_path: Path
) -> None:
    """``supervise run`` restarts while tmux does not answer: adoption cannot see the
    sessions, so nothing is launched or judged; it is tried again, and once tmux answers
    the running task is adopted (not started a second time) and completes."""
    hang = tmp_path / "hang"
    fake = _fake_tmux(tmp_path, f'while [ -e {hang} ]; do sleep 0.05; done\nexec {REAL_TMUX} "$@"')
    setup.write_profile(base_interval=0.3)
    project = tmp_path / "p"
    setup.drop("a.toml", setup.task("a", "tick: 0.2\nsleep: 12\nexit: 0", project))
    log = tmp_path / "engine.log"
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("SUPERVISE_TMUX", None)
    command = [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile)]
    with open(log, "ab") as handle:
        first = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(lambda: (setup.manifests().get("a") or {}).get("pid"), timeout=60)
    finally:
        first.terminate()
        first.wait(timeout=30)
    hang.touch()
    with open(log, "ab") as handle:
        second = subprocess.Popen([*command, "--exit-when-idle"], stdout=handle,
                                  stderr=subprocess.STDOUT, env=env)  # fmt: skip
    try:
        wait_for(lambda: "while adopting" in log.read_text(errors="replace"),
                 timeout=TMUX_TIMEOUT + 15)  # fmt: skip
        assert second.poll() is None, "the engine died"
        hang.unlink()
        assert second.wait(timeout=60) == 0
    finally:
        hang.unlink(missing_ok=True)
        if second.poll() is None:
            second.kill()
            second.wait(timeout=10)
            print(log.read_text(errors="replace")[-6000:])
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-4000:]
    m = setup.manifests()["a"]
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), text[-3000:]
    assert (project / "fake_runs").read_text().strip() == "1"
