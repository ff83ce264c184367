"""Everyday operation (issue 14): the engine says where it is (start line, heartbeat,
warnings, log file), ``supervise wait`` and ``--json`` on every verb that prints a result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import Setup, wait_for
from support.ops_engine import engine

from supervisor.taskdir.folder import atomic_write


def _submit(setup: Setup, tmp_path: Path, name: str, prompt: str) -> str:
    task_file = tmp_path / f"{name}.toml"
    task_file.write_text(f'name = "{name}"\nprompt = """{prompt}"""\nproject_dir = "project"\n')
    result = setup.supervise("submit", "-c", str(setup.profile), str(task_file), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["spool_file"] == str(setup.spool / f"{data['task_id']}.toml")
    assert data["name"] == name
    if name == "quiet":  # submitted while a live engine runs: no warning
        assert result.stderr == "", result.stderr
    else:
        assert "warning: no engine runs on" in result.stderr, result.stderr
    return str(data["task_id"])


# ---------------------------------------------------------------- item 3


def test_run_logs_one_start_line_and_rotates_its_log_file(setup: Setup, tmp_path: Path) -> None:
    setup.write_profile()
    for index in range(3):
        setup.drop(f"t{index}.toml", setup.task(f"t{index}", "print: hello\nexit: 0"))
    log = tmp_path / "logs" / "engine.log"
    result = setup.supervise("run", str(setup.profile), "--exit-when-idle", "-v",
                             "--log-file", str(log), "--log-max-bytes", "2000",
                             "--log-backups", "99")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # everything went to the file
    rotated = sorted((p.name for p in log.parent.iterdir()), key=lambda n: (len(n), n))
    assert rotated[:3] == ["engine.log", "engine.log.1", "engine.log.2"], rotated
    text = "".join((log.parent / name).read_text() for name in reversed(rotated))
    starts = [line for line in text.splitlines() if " started: profile " in line]
    assert len(starts) == 1, starts
    from supervisor import __version__

    socket = setup.socket_name
    assert (f"supervise {__version__} started: profile {setup.profile}, state dir "
            f"{setup.state}, tmux socket {socket}, pid ") in starts[0]  # fmt: skip
    assert all(p.stat().st_size <= 2000 for p in log.parent.iterdir() if p != log)
    bad = setup.supervise("run", str(setup.profile), "--log-file", "/proc/no/such.log")
    assert bad.returncode == 1 and "--log-file /proc/no/such.log" in bad.stderr


def test_commands_warn_when_no_live_engine_holds_the_state_dir(
    setup: Setup, tmp_path: Path
) -> None:
    setup.write_profile()
    task_id = _submit(setup, tmp_path, "slow", "tick: 0.5\nsleep: 60")
    _submit(setup, tmp_path, "second", "tick: 0.5\nsleep: 60")
    # status shows the status model's engine line (supervisor.views), on stderr with --json
    listed = setup.supervise("status", "-c", str(setup.profile), "--json")
    assert "engine: not running" in listed.stderr
    with engine(setup):
        for name in ("slow", "second"):
            wait_for(lambda n=name: setup.manifests().get(n, {}).get("status") == "running")
        status = setup.supervise("status", "-c", str(setup.profile), "--json")
        assert status.returncode == 0 and "engine: running" in status.stderr, status.stderr
        _submit(setup, tmp_path, "quiet", "exit: 0")
        # A heartbeat left 60 s behind while the lock is held: a stuck engine is named (the
        # engine rewrites it every 5 s, so look right after faking it).
        beat = setup.state / "engine-stats.json"
        data = json.loads(beat.read_text())
        data["written_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
        atomic_write(beat, json.dumps(data).encode())
        stuck = setup.supervise("wait", "-c", str(setup.profile), task_id, "--timeout", "0")
        assert stuck.returncode == 124
        assert "warning: engine: stale" in stuck.stderr and "stuck" in stuck.stderr, stuck.stderr
        stopped = setup.supervise("stop", "-c", str(setup.profile), task_id, "--json")
        assert stopped.returncode == 0, stopped.stderr
        answer = json.loads(stopped.stdout)
        assert answer == {"task_id": task_id, "verb": "stop", "result": "applied",
                          "status": "abandoned", "retry_count": 0}  # fmt: skip
    # The engine stopped and left "second" running in tmux: a stop request is queued (3).
    second = setup.manifests()["second"]
    assert second["status"] == "running"
    queued = setup.supervise("stop", "-c", str(setup.profile), second["task_id"], "--json")
    assert queued.returncode == 3 and "no engine runs" in queued.stderr
    assert json.loads(queued.stdout) == {"task_id": second["task_id"], "verb": "stop",
                                         "result": "queued", "status": "running",
                                         "retry_count": 0}  # fmt: skip


def test_validate_json_reports_each_file(setup: Setup, tmp_path: Path) -> None:
    setup.write_profile()
    good = tmp_path / "good.toml"
    good.write_text('name = "g"\nprompt = "exit: 0"\nproject_dir = "project"\n')
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "b"\nprompt = "x"\nprojet_dir = "/tmp"\n')
    result = setup.supervise("validate", "-c", str(setup.profile), str(good), str(bad), "--json")
    assert result.returncode == 1
    rows = json.loads(result.stdout)
    assert [(r["file"], r["kind"], r["ok"]) for r in rows] == [
        (str(good), "task", True), (str(bad), "task", False)]  # fmt: skip
    assert any("projet_dir" in line for line in rows[1]["problems"])
    config = setup.supervise("config", "-c", str(setup.profile), "--json")
    assert json.loads(config.stdout)["deadline"]["value"] == 120


# ---------------------------------------------------------------- item 4


def test_wait_returns_1_for_a_failure_and_124_for_a_timeout(setup: Setup, tmp_path: Path) -> None:
    setup.write_profile()
    passed = _submit(setup, tmp_path, "pass", "exit: 0")
    failed = _submit(setup, tmp_path, "fail", "exit: 3")
    slow = _submit(setup, tmp_path, "slow", "tick: 0.5\nsleep: 60")
    setup.drop("typo.toml", 'name = "t"\nprompt = "x"\nprojet_dir = "/tmp"\n')
    (setup.spool / "typo.toml").rename(setup.spool / "typo-abcdef.toml")
    unknown = setup.supervise("wait", "-c", str(setup.profile), "nope-123456")
    assert unknown.returncode == 2 and "no task nope-123456" in unknown.stderr
    with engine(setup):
        both = setup.supervise("wait", "-c", str(setup.profile), passed, failed, "--json",
                               timeout=60)  # fmt: skip
        assert both.returncode == 1, both.stderr
        manifests = json.loads(both.stdout)
        assert [(m["task_id"], m["status"], m["verdict"]) for m in manifests] == [
            (passed, "completed", "PASS"), (failed, "failed", "FAIL")]  # fmt: skip
        assert manifests[1]["exit_code"] == 3
        began = time.monotonic()
        late = setup.supervise("wait", "-c", str(setup.profile), passed, slow,
                               "--timeout", "1.5")  # fmt: skip
        assert late.returncode == 124, late.stderr
        assert time.monotonic() - began > 1.4  # it waited its --timeout out first
        assert f"{slow}: running" in late.stdout and "still running after 1.5 s" in late.stderr
        ok = setup.supervise("wait", "-c", str(setup.profile), passed)
        assert ok.returncode == 0 and ok.stdout.startswith(f"{passed}: completed PASS")
        rejected = setup.supervise("wait", "-c", str(setup.profile), "typo-abcdef", "--json")
        assert rejected.returncode == 1
        assert json.loads(rejected.stdout)[0]["status"] == "rejected"
        assert "projet_dir" in json.loads(rejected.stdout)[0]["error"]
        assert setup.supervise("stop", "-c", str(setup.profile), slow).returncode == 0


def test_wait_is_woken_by_the_manifest_write_not_a_poll(setup: Setup, tmp_path: Path) -> None:
    """A manifest replaced by rename (as the engine does) ends the wait at once; the
    safety poll is 5 s, so an answer within 1 s can only come from the inotify event."""
    setup.write_profile()
    folder = setup.state / "tasks" / "t-abcdef"
    folder.mkdir(parents=True)
    manifest = {"task_id": "t-abcdef", "status": "running", "verdict": None}
    atomic_write(folder / "manifest.json", json.dumps(manifest).encode())
    # a live-looking engine so no warning is printed: the lock held by this test
    from supervisor.statelock import held

    with held(setup.state):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        (setup.state / "engine-stats.json").write_text(json.dumps({"written_at": now}))
        waiter = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "wait", "-c", str(setup.profile),
             "t-abcdef", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            time.sleep(2.5)  # past its start-up and a first safety poll
            assert waiter.poll() is None
            manifest.update(status="completed", verdict="PASS")
            atomic_write(folder / "manifest.json", json.dumps(manifest).encode())
            out, err = waiter.communicate(timeout=60)
        finally:
            if waiter.poll() is None:
                os.kill(waiter.pid, signal.SIGKILL)
                waiter.wait()
    assert waiter.returncode == 0, err
    assert err == ""
    assert json.loads(out) == [manifest]


# ---------------------------------------------------------------- items 6 and 7 (files)


def test_a_bad_budget_is_one_line_naming_the_key(setup: Setup, tmp_path: Path) -> None:
    setup.write_profile()
    task = tmp_path / "t.toml"
    task.write_text('name = "t"\nprompt = "x"\nproject_dir = "project"\n'
                    "[monitor]\nmax_cost_usd = -1\n")  # fmt: skip
    result = setup.supervise("validate", "-c", str(setup.profile), str(task))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "max_cost_usd" in lines[0] and str(task) in lines[0], lines
    assert "Traceback" not in result.stderr


def test_stream_rotation_keeps_backups_and_a_cut_rotation_is_finished(tmp_path: Path) -> None:
    from supervisor import logrotate
    from supervisor.agents.claude.stream import CARRY, StreamState

    path = tmp_path / "stream.jsonl"
    for cost in (0.25, 0.5, 0.125):  # three runs, the file rotated after each
        with open(path, "ab") as handle:
            handle.write(b'{"type": "supervise_launch"}\n')
            handle.write(json.dumps({"type": "result", "total_cost_usd": cost}).encode() + b"\n")
        state = StreamState()  # a reader starting over, as after an engine restart
        for line in path.read_bytes().splitlines():
            state.feed_line(line)
        logrotate.rotate(path, 2, json.dumps(state.carry()).encode() + b"\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "stream.jsonl", "stream.jsonl.1", "stream.jsonl.2"]  # fmt: skip
    first = json.loads(path.read_text().splitlines()[0])
    assert first["type"] == CARRY and first["total_cost_usd"] == 0.875 and first["runs"] == 3
    # A crash between the last two renames: NAME.new is there, NAME is not.
    (tmp_path / "stream.jsonl.new").write_bytes(path.read_bytes())
    path.unlink()
    assert logrotate.finish(path) and path.exists()
    assert not logrotate.finish(path)
