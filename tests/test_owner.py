"""Issue 10, ownership and endings: a tmux server shared by two state dirs (each engine
touches only the sessions it marked), a task folder whose manifest is missing or garbage
(never run again, shown as ``damaged``), the exit codes of ``stop|resume|approve|deny``,
and no agent descendant left running when a task ends. Real tmux, real processes."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from conftest import Setup, wait_for

from supervisor.config import load_profile
from supervisor.taskdir import utc_iso


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _start(setup: Setup, log: Path) -> subprocess.Popen:
    with open(log, "wb") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile), "--exit-when-idle"],
            stdout=handle, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _end(engine: subprocess.Popen) -> None:
    if engine.poll() is None:
        engine.kill()
        engine.wait(timeout=10)


# ---------------------------------------------------------------- socket ownership


def test_default_socket_name_is_derived_from_state_dir(tmp_path: Path) -> None:
    """Two profiles without ``[tmux] socket_name`` get two servers; an explicit one wins."""
    from supervisor.config import default_socket_name

    paths = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        path = folder / "p.toml"
        path.write_text('[agent]\ncommand = ["true"]\n', encoding="utf-8")
        paths.append(path)
    first, second = (load_profile(p) for p in paths)
    assert first.socket_name == default_socket_name(tmp_path / "one" / "state")
    assert first.socket_name.startswith("supervise-") and len(first.socket_name) == 18
    assert first.socket_name != second.socket_name
    paths[1].write_text(
        '[tmux]\nsocket_name = "mine"\n[agent]\ncommand = ["true"]\n', encoding="utf-8"
    )
    assert load_profile(paths[1]).socket_name == "mine"


def test_engines_sharing_a_socket_never_kill_each_others_agents(
    tmp_path: Path, socket_name: str
) -> None:
    """Engine A runs a task in session X. Engine B (another state_dir, the SAME socket name)
    holds a copy of that task folder whose deadline has passed, so it abandons its own X and
    cleans up. Without owner marks B killed session X: A's agent. With them, B leaves X
    alone and A's agent runs to its own end, ``completed``."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = Setup(tmp_path / "a", socket_name), Setup(tmp_path / "b", socket_name)
    a.write_profile(base_interval=0.3)
    b.write_profile(base_interval=0.3)
    a.drop("long.toml", a.task("long", "print: hello\ntick: 0.2\nsleep: 6\n"))
    log = tmp_path / "a.log"
    engine = _start(a, log)
    try:
        pid_file = a.project / "agent_pid"
        wait_for(pid_file.exists, timeout=30)
        agent = int(pid_file.read_text())
        source = next((a.state / "tasks").iterdir())
        copy = b.state / "tasks" / source.name
        (b.state / "tasks").mkdir(parents=True)
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns(
            "pid", "exit_code", "signal", "done", "output.log", ".manifest.lock"))  # fmt: skip
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest.update(started_at=utc_iso(time.time() - 3600), tmpdir=str(copy))
        (copy / "manifest.json").write_text(json.dumps(manifest))

        result = b.run(timeout=60)
        assert result.returncode == 0, result.stderr
        ended = json.loads((copy / "manifest.json").read_text())
        assert ended["status"] == "abandoned" and ended["abandon_reason"] == "deadline"
        assert _alive(agent), "engine B killed engine A's agent"
        assert a.tmux("has-session", "-t", f"={source.name}").returncode == 0
        assert (a.tmux("show-options", "-v", "-t", f"={source.name}:", "@supervise_state_dir")
                .stdout.strip()) == str(a.state)  # fmt: skip

        engine.wait(timeout=60)
        assert a.manifests()["long"]["status"] == "completed", log.read_text()
        assert a.manifests()["long"]["retry_count"] == 0
    finally:
        _end(engine)


def test_a_session_another_engine_owns_is_not_adopted(tmp_path: Path, socket_name: str) -> None:
    """B finds a queued copy of A's task: without marks it took A's live session for its own
    launch (and then judged A's agent); now it does not adopt it and its launch fails
    cleanly (the name is taken), while A's agent is untouched."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = Setup(tmp_path / "a", socket_name), Setup(tmp_path / "b", socket_name)
    a.write_profile(base_interval=0.3)
    b.write_profile(base_interval=0.3)
    a.drop("long.toml", a.task("long", "tick: 0.2\nsleep: 5\n"))
    engine = _start(a, tmp_path / "a.log")
    try:
        wait_for((a.project / "agent_pid").exists, timeout=30)
        agent = int((a.project / "agent_pid").read_text())
        source = next((a.state / "tasks").iterdir())
        copy = b.state / "tasks" / source.name
        (b.state / "tasks").mkdir(parents=True)
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns(
            "pid", "exit_code", "signal", "done", "output.log", "events.jsonl",
            ".manifest.lock"))  # fmt: skip
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest.update(status="queued", started_at=None, launched_at=None, tmpdir=str(copy))
        (copy / "manifest.json").write_text(json.dumps(manifest))
        result = b.run(timeout=60)
        assert result.returncode == 0, result.stderr
        events = [e["event"] for e in b.events(source.name)]
        assert "adopted" not in events
        assert json.loads((copy / "manifest.json").read_text())["status"] == "failed"
        assert _alive(agent)
        engine.wait(timeout=60)
        assert a.manifests()["long"]["status"] == "completed"
    finally:
        _end(engine)


# ---------------------------------------------------------------- request exit codes


def test_requests_exit_non_zero_when_nothing_was_applied(setup: Setup, tmp_path: Path) -> None:
    """``resume`` against a frozen engine: 4 (not applied within --wait); ``stop`` with no
    engine: 3 (queued), applied by the next ``supervise run``; on an ended task: 1."""
    from supervisor.cli import EXIT_NOT_APPLIED, EXIT_QUEUED

    assert (EXIT_QUEUED, EXIT_NOT_APPLIED) == (3, 4)
    setup.write_profile(base_interval=0.3)
    setup.drop("long.toml", setup.task("long", "tick: 0.2\nsleep: 60\n"))
    engine = _start(setup, tmp_path / "engine.log")
    try:
        wait_for(lambda: setup.manifests().get("long", {}).get("status") == "running")
        task_id = setup.manifests()["long"]["task_id"]
        conf = str(setup.profile)
        engine.send_signal(signal.SIGSTOP)  # holds its lock, applies nothing
        try:
            late = setup.supervise("resume", "-c", conf, task_id, "--wait", "1")
        finally:
            engine.send_signal(signal.SIGCONT)
        assert late.returncode == 4, late.stdout + late.stderr
        assert "has not applied it within 1 s" in late.stderr
        wait_for(lambda: setup.manifests()["long"]["retry_count"] == 1)  # applied later
        engine.send_signal(signal.SIGTERM)  # the engine ends, the agent runs on in tmux
        assert engine.wait(timeout=30) == 0

        queued = setup.supervise("stop", "-c", conf, task_id)
        assert queued.returncode == 3, queued.stdout + queued.stderr
        assert "no engine runs" in queued.stderr
        assert (setup.state / "control" / f"{task_id}.stop").exists()
        assert setup.run().returncode == 0  # the next engine applies the queued stop
        manifest = setup.manifests()["long"]
        assert (manifest["status"], manifest["abandon_reason"]) == ("abandoned", "stopped")
        ended = setup.supervise("stop", "-c", conf, task_id)
        assert ended.returncode == 1 and "already ended" in ended.stderr
    finally:
        _end(engine)
