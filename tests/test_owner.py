"""Issue 10, ownership and endings: a tmux server shared by two state dirs (each engine
touches only the sessions it marked), a task folder whose manifest is missing or garbage
(never run again, shown as ``damaged``), the exit codes of ``stop|resume|approve|deny``,
and no agent descendant left running when a task ends. Real tmux, real processes."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from conftest import Setup, alive, wait_for
from filelock import FileLock

from supervisor.config import load_profile
from supervisor.taskdir.folder import utc_iso


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
    # A's agent runs until the test releases it: B's whole run (seconds on a loaded
    # machine) must happen while it lives.
    release = tmp_path / "release"
    a.drop("long.toml", a.task("long", f"print: hello\ntick: 0.2\nuntil_file: {release}\n"))
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
        assert alive(agent), "engine B killed engine A's agent"
        assert a.tmux("has-session", "-t", f"={source.name}").returncode == 0
        assert (a.tmux("show-options", "-v", "-t", f"={source.name}:", "@supervise_state_dir")
                .stdout.strip()) == str(a.state)  # fmt: skip

        release.touch()
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
    release = tmp_path / "release"  # A's agent lives until B's run is over
    a.drop("long.toml", a.task("long", f"tick: 0.2\nuntil_file: {release}\n"))
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
        failed = json.loads((copy / "manifest.json").read_text())
        assert failed["status"] == "failed"
        # the refused launch is an ending like any other: a reason and a verdict
        assert (failed["failure_reason"], failed["verdict"]) == ("launch", "FAIL")
        assert alive(agent)
        release.touch()
        engine.wait(timeout=60)
        assert a.manifests()["long"]["status"] == "completed"
    finally:
        _end(engine)


# ---------------------------------------------------------------- request exit codes


def test_requests_exit_non_zero_when_nothing_was_applied(setup: Setup, tmp_path: Path) -> None:
    """``resume`` against a frozen engine: 4 (not applied within --wait); ``stop`` with no
    engine: 3 (queued), applied by the next ``supervise run``; on an ended task: 1."""
    from supervisor.cli.app import EXIT_NOT_APPLIED, EXIT_QUEUED

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


# ---------------------------------------------------------------- damaged manifests


def _status_rows(setup: Setup) -> dict[str, dict]:
    listed = setup.supervise("status", "-c", str(setup.profile), "--json")
    assert listed.returncode == 0, listed.stderr
    return {row["task_id"]: row for row in json.loads(listed.stdout)}


def test_a_deleted_manifest_never_runs_a_finished_task_again(setup: Setup) -> None:
    """Deleted ``manifest.json`` of a completed task: ``status`` shows it ``damaged`` (it
    vanished before), and the next engine rebuilds the manifest from the event log instead
    of claiming ``task.toml`` again (which ran the agent a second time)."""
    setup.write_profile(base_interval=0.3)
    setup.drop("done.toml", setup.task("done", "print: hi\nexit: 0\n"))
    assert setup.run().returncode == 0
    before = setup.manifests()["done"]
    assert before["status"] == "completed"
    folder = setup.state / "tasks" / before["task_id"]
    (folder / "manifest.json").unlink()

    row = _status_rows(setup)[before["task_id"]]
    assert row["status"] == "damaged" and "missing" in row["damaged"]
    assert row["name"] == "done"

    assert setup.run().returncode == 0
    assert (setup.project / "fake_runs").read_text() == "1", "the finished task ran again"
    after = setup.manifests()["done"]
    for key in ("status", "exit_code", "verdict", "retry_count", "session_id", "task_id",
                "model", "project_dir", "started_at", "finished_at"):  # fmt: skip
        assert after[key] == before[key], key
    assert "manifest_repaired" in [e["event"] for e in setup.events(before["task_id"])]
    assert _status_rows(setup)[before["task_id"]]["damaged"] is None


def test_a_garbage_manifest_is_reported_and_never_blocks_or_reruns(setup: Setup) -> None:
    """Two folders with garbage manifests: one whose log ended the task (rebuilt, the garbage
    kept aside) and one whose log shows a run waiting on a human (an escalation's record is
    in the manifest only: left byte for byte, ``damaged``). The engine with
    ``--exit-when-idle`` still exits, and nothing runs again."""
    setup.write_profile(base_interval=0.3)
    setup.drop("done.toml", setup.task("done", "print: hi\nexit: 0\n"))
    assert setup.run().returncode == 0
    ended = setup.manifests()["done"]
    folder = setup.state / "tasks" / ended["task_id"]
    midway = setup.state / "tasks" / "midway-abcdef"
    shutil.copytree(folder, midway)
    lines = (midway / "events.jsonl").read_text().splitlines()
    upto = next(i for i, line in enumerate(lines) if json.loads(line)["event"] == "launched")
    escalated = {"ts": json.loads(lines[upto])["ts"], "event": "escalated", "status": "escalated"}
    kept_lines = [*lines[: upto + 1], json.dumps(escalated)]
    (midway / "events.jsonl").write_text("\n".join(kept_lines) + "\n")
    for path in (folder / "manifest.json", midway / "manifest.json"):
        path.write_bytes(b'{"status": "running", "task_id": ')

    rows = _status_rows(setup)
    assert rows[ended["task_id"]]["status"] == rows["midway-abcdef"]["status"] == "damaged"
    assert "not a valid manifest" in rows["midway-abcdef"]["damaged"]

    result = setup.run(timeout=30)
    assert result.returncode == 0
    assert "midway-abcdef" in result.stderr and "left as it is" in result.stderr
    assert (setup.project / "fake_runs").read_text() == "1"
    assert (midway / "manifest.json").read_bytes() == b'{"status": "running", "task_id": '
    repaired = json.loads((folder / "manifest.json").read_text())
    assert (repaired["status"], repaired["verdict"]) == ("completed", "PASS")
    kept = list(folder.glob("manifest.json.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == b'{"status": "running", "task_id": '
    rows = _status_rows(setup)
    assert rows[ended["task_id"]]["status"] == "completed"
    assert rows["midway-abcdef"]["status"] == "damaged"


def test_a_manifest_garbled_under_a_running_engine_is_rewritten(setup: Setup) -> None:
    """The engine's own copy replaces a manifest garbled while the task runs (each check
    raised before, and the task never ended); the garbage is kept aside."""
    setup.write_profile(base_interval=0.3)
    setup.drop("t.toml", setup.task("t", "tick: 0.2\nsleep: 2\n"))
    engine = _start(setup, setup.root / "engine.log")
    try:
        wait_for(lambda: setup.manifests().get("t", {}).get("status") == "running")
        folder = next((setup.state / "tasks").iterdir())
        # Under the engine's own manifest lock: a read-modify-write the engine has under way
        # would otherwise replace the garbage before any read of it (nothing to keep aside).
        with FileLock(str(folder / ".manifest.lock"), timeout=30):
            (folder / "manifest.json").write_bytes(b"\x00garbage")
        assert engine.wait(timeout=30) == 0
    finally:
        _end(engine)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["status"], manifest["verdict"]) == ("completed", "PASS")
    assert [p.read_bytes() for p in folder.glob("manifest.json.damaged-*")] == [b"\x00garbage"]


# ---------------------------------------------------------------- process cleanup


def _kill_if_ours(pid_file: Path, since: float) -> None:
    """Teardown: end a test orphan by PID (only if that PID is still the one we started)."""
    with contextlib.suppress(OSError, ValueError, psutil.NoSuchProcess):
        process = psutil.Process(int(pid_file.read_text()))
        if process.create_time() >= since - 1:
            process.kill()


def test_no_descendant_of_the_agent_survives_the_task(setup: Setup) -> None:
    """The agent starts three children that ignore SIGHUP and SIGTERM and outlive it: two
    leave its process group (one with an empty environment, found only as a member of the
    pane's session), one leaves the session (``setsid``, found by its inherited
    ``SUPERVISE_TASK_DIR``). After the task ends ``completed``, none runs (all survived
    before)."""
    since = time.time()
    setup.write_profile(base_interval=0.3)
    prompt = (
        "spawn_orphan: 120\nspawn_orphan_noenv: 120\nspawn_orphan_setsid: 120\n"
        "print: started\nexit: 0\n"
    )
    setup.drop("t.toml", setup.task("t", prompt))
    pid_files = [setup.project / f"orphan{kind}_pid" for kind in ("", "_noenv", "_setsid")]
    try:
        assert setup.run(timeout=60).returncode == 0
        manifest = setup.manifests()["t"]
        assert (manifest["status"], manifest["exit_code"]) == ("completed", 0)
        pids = [int(p.read_text()) for p in pid_files]
        assert all(pid > 0 for pid in pids)
        wait_for(lambda: not any(alive(pid) for pid in pids), timeout=60)
        swept = [e for e in setup.events(manifest["task_id"]) if e["event"] == "processes_ended"]
        assert len(swept) == 1 and set(pids) <= set(swept[0]["pids"])
        assert set(pids) <= set(swept[0]["killed"])  # they ignore SIGTERM: SIGKILL ended them
    finally:
        for pid_file in pid_files:
            _kill_if_ours(pid_file, since)
