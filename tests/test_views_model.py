"""The status model (supervisor/views/model.py) on fixture state dirs: every group, time in
state, spool files, pending requests, damaged folders, and the engine's state with a real
process holding the engine lock on the state dir."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Setup, read_line, wait_for
from support import views_fixture as vf

from supervisor.taskdir import control
from supervisor.taskdir.folder import utc_iso
from supervisor.views import model, taskfilter

HOLDER = """
import sys
from pathlib import Path
from supervisor.statelock import engine_lock
held = engine_lock(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def fixture(tmp_path: Path) -> vf.Fixture:
    return vf.build(tmp_path)


def _snap(fixture: vf.Fixture, now: float = vf.NOW) -> model.Snapshot:
    return model.Reader(fixture.state_dir, fixture.spool_dir).snapshot(now)


def test_every_group_holds_its_tasks(fixture: vf.Fixture) -> None:
    snap = _snap(fixture)
    assert set(fixture.ids) == set(model.GROUPS)
    for group, ids in fixture.ids.items():
        assert [t.task_id for t in snap.group(group)] == sorted(ids), group
    assert snap.totals == {"needs_you": 1, "waiting": 1, "running": 2, "recovering": 2,
                           "failed": 2, "queued": 1, "done": 2, "tasks": 11,
                           "cost_usd": 1.6713, "tokens": None}  # fmt: skip


def test_time_in_state_from_manifest_fields_and_event_tail(fixture: vf.Fixture) -> None:
    snap = _snap(fixture, vf.NOW + 10)
    expected = {row[0]: row[3] + 10 for row in vf.TASKS}
    assert {t.task_id: t.state_s for t in snap.tasks} == expected
    waiting = snap.task("limit-hit-d4e5f6")
    assert waiting is not None and waiting.resume_in_s == 1790.0
    crashed = snap.task("flaky-net-6a7b8c")
    assert crashed is not None and crashed.retries == 2 and crashed.resume_in_s == 8.0


def test_task_fields(fixture: vf.Fixture) -> None:
    snap = _snap(fixture)
    running = snap.task("refactor-0a1b2c")
    assert running is not None
    assert (running.cost_usd, running.branch, running.diffstat()) == (
        0.4213,
        "supervise/refactor-0a1b2c",
        "3 files +41 -7",
    )
    assert running.last_line == "Editing src/parser.py"
    asking = snap.task("ask-perm-a1b2c3")
    assert asking is not None
    assert asking.escalation == {"reason": "rule", "tool": "Bash", "subject": "rm -rf build/"}
    failed = snap.task("bad-auth-2a3b4c")
    assert failed is not None and (failed.reason, failed.verdict) == ("auth", "FAIL")
    evil = snap.task("evil-name-1d2e3f")
    assert evil is not None and evil.name == "evil\x1b[31mname"  # exact; views escape it
    assert evil.last_line == "\\x1b]0;pwned\\x07<script>alert(1)</script>"
    # the historical `status --json` keys come first, in their order
    assert list(running.row())[:11] == ["task_id", "name", "status", "model", "retries",
        "exit_code", "verdict", "reason", "age_s", "since_output_s", "damaged"]  # fmt: skip


def test_spool_files_waiting(fixture: vf.Fixture) -> None:
    snap = _snap(fixture)
    assert [(f.name, f.age_s) for f in snap.spool] == [
        ("incoming-a.toml", 40.0), ("incoming-b.toml", 5.0)]  # fmt: skip
    (fixture.spool_dir / ".claim.x.incoming-c.toml").write_text("")
    (fixture.spool_dir / "notes.txt").write_text("")
    assert len(_snap(fixture).spool) == 2


def test_stop_request_pending_moves_a_live_task_to_recovering(fixture: vf.Fixture) -> None:
    control.request(fixture.state_dir, "refactor-0a1b2c", "stop")
    control.request(fixture.state_dir, "ask-perm-a1b2c3", "approve")
    snap = _snap(fixture)
    stopping = snap.task("refactor-0a1b2c")
    assert stopping is not None and (stopping.group, stopping.requests) == ("recovering", ["stop"])
    asking = snap.task("ask-perm-a1b2c3")
    assert asking is not None and (asking.group, asking.requests) == ("needs_you", ["approve"])


def test_reader_rereads_a_changed_manifest_and_forgets_removed_tasks(fixture: vf.Fixture) -> None:
    reader = model.Reader(fixture.state_dir, fixture.spool_dir)
    assert reader.snapshot(vf.NOW).task("later-4a5b6c").group == "queued"  # type: ignore[union-attr]
    path = fixture.state_dir / "tasks" / "later-4a5b6c" / "manifest.json"
    data = json.loads(path.read_text())
    data.update(status="running", launched_at=utc_iso(vf.NOW - 3))
    path.write_text(json.dumps(data))
    task = reader.snapshot(vf.NOW).task("later-4a5b6c")
    assert task is not None and (task.group, task.state_s) == ("running", 3.0)
    os.rename(fixture.state_dir / "tasks" / "docs-8a9b0c", fixture.root / "gone")
    assert reader.snapshot(vf.NOW).task("docs-8a9b0c") is None


def test_damaged_folder_counts_as_failed(fixture: vf.Fixture) -> None:
    folder = fixture.state_dir / "tasks" / "broken-7f7f7f"
    folder.mkdir()
    (folder / "manifest.json").write_text("{not json")
    task = _snap(fixture).task("broken-7f7f7f")
    assert task is not None and (task.status, task.group) == ("damaged", "failed")
    assert task.damaged


def test_sort_keys(fixture: vf.Fixture) -> None:
    tasks = _snap(fixture).tasks
    assert taskfilter.sort_tasks(tasks, "cost")[0].task_id == "docs-8a9b0c"
    assert taskfilter.sort_tasks(tasks, "age")[0].task_id == "gave-up-5d6e7f"
    assert taskfilter.sort_tasks(tasks, "group")[0].group == "needs_you"
    assert [t.name for t in taskfilter.sort_tasks(tasks, "name")][:2] == ["ask-perm", "bad-auth"]
    with pytest.raises(ValueError, match="unknown sort"):
        taskfilter.sort_tasks(tasks, "colour")


# ---------------------------------------------------------------- engine state


@pytest.fixture
def holder(fixture: vf.Fixture) -> Iterator[subprocess.Popen[str]]:
    """A real process holding the engine's lock (as ``Engine.run`` does), ended by pid."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(fixture.state_dir)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert read_line(proc.stdout) == "held\n"
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def _heartbeat(state_dir: Path, pid: int, written: float, started: float) -> None:
    (state_dir / "engine-stats.json").write_text(json.dumps({
        "pid": pid, "started_at": utc_iso(started), "written_at": utc_iso(written),
        "version": "0.1.0", "profile": "/p.toml", "socket": "sv-x"}))  # fmt: skip


def test_engine_not_running_without_lock_or_heartbeat(fixture: vf.Fixture) -> None:
    before = sorted(fixture.state_dir.iterdir())
    engine = model.engine_state(fixture.state_dir)
    assert (engine.state, engine.lock_held) == ("not running", False)
    assert sorted(fixture.state_dir.iterdir()) == before  # probing never creates anything
    assert engine.line() == "engine: not running"


def test_engine_running_while_lock_held_and_heartbeat_fresh(
    fixture: vf.Fixture, holder: subprocess.Popen[str]
) -> None:
    now = time.time()
    _heartbeat(fixture.state_dir, holder.pid, now - 2, now - 125)
    engine = model.engine_state(fixture.state_dir, now)
    assert (engine.state, engine.pid, engine.version, engine.socket) == (
        "running", holder.pid, "0.1.0", "sv-x")  # fmt: skip
    assert engine.uptime_s == 125.0 and engine.lock_held
    assert engine.line() == f"engine: running (pid {holder.pid}, up 2m05s, supervise 0.1.0)"
    # the probe released the lock at once: the holder still has it, nothing else does
    assert model.engine_state(fixture.state_dir, now).lock_held


def test_engine_stale_when_lock_held_but_heartbeat_old(
    fixture: vf.Fixture, holder: subprocess.Popen[str]
) -> None:
    now = time.time()
    _heartbeat(fixture.state_dir, holder.pid, now - 40, now - 400)
    engine = model.engine_state(fixture.state_dir, now)
    assert engine.state == "stale" and "heartbeat 40s old" in (engine.reason or "")
    os.remove(fixture.state_dir / "engine-stats.json")
    assert model.engine_state(fixture.state_dir, now).state == "stale"


def test_engine_stale_when_heartbeat_pid_alive_without_lock(fixture: vf.Fixture) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)  # fmt: skip
    try:
        now = time.time()
        _heartbeat(fixture.state_dir, proc.pid, now - 1, now - 60)
        engine = model.engine_state(fixture.state_dir, now)
        assert engine.state == "stale" and "does not hold the engine lock" in (engine.reason or "")
    finally:
        proc.kill()
        proc.wait(timeout=10)
    # the same heartbeat once its pid is gone: an engine that died
    assert model.engine_state(fixture.state_dir, now).state == "not running"


def test_engine_lock_released_when_holder_dies(
    fixture: vf.Fixture, holder: subprocess.Popen[str]
) -> None:
    now = time.time()
    _heartbeat(fixture.state_dir, holder.pid, now, now)
    assert model.engine_state(fixture.state_dir, now).state == "running"
    holder.kill()
    holder.wait(timeout=10)
    engine = model.engine_state(fixture.state_dir, now)
    assert (engine.state, engine.lock_held) == ("not running", False)


def test_real_engine_heartbeat_reads_running_then_not_running(setup: Setup) -> None:
    """A real ``supervise run``: its heartbeat names it (pid, version, profile, socket) and
    the model sees it running; after SIGTERM, not running."""
    profile = setup.write_profile()
    proc = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "run", str(profile)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        engine = wait_for(lambda: (e := model.engine_state(setup.state)).state == "running" and e)
        assert (engine.pid, engine.profile, engine.socket) == (
            proc.pid, str(profile), setup.socket_name)  # fmt: skip
        assert engine.version == importlib.metadata.version("supervise-agents")
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert model.engine_state(setup.state).state == "not running"


@pytest.mark.parametrize(
    "cost, retries, expected",
    [
        (float("nan"), 10**400, (None, 0)),  # NaN; past 64 bits
        (-5, True, (0.0, 0)),  # a negative total reads as nothing spent, as `cost` reads it
        (10**400, 2**63, (None, 0)),  # an int past the float range once raised OverflowError
        (1e308, 3, (None, 3)),  # past costs.MAX_USD: not believed
        (2.5, 7, (2.5, 7)),
    ],
)
def test_hand_edited_numbers_never_break_or_widen_the_table(
    tmp_path: Path, cost: object, retries: object, expected: tuple[object, int]
) -> None:
    """A manifest edited by hand: the task still shows, with the numbers the views can
    believe (``status`` once printed ``$nan`` and a 400-digit retries column)."""
    folder = tmp_path / "tasks" / "edited-0a1b2c"
    folder.mkdir(parents=True)
    manifest = {
        "task_id": "edited-0a1b2c",
        "task_name": "edited",
        "status": "completed",
        "claude": {"total_cost_usd": cost},
        "retry_count": retries,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    task = model.task_from_manifest(manifest, str(folder), has_output=False)
    assert (task.cost_usd, task.retries) == expected
