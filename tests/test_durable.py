"""Issue 24, item 3: durable writes with a budget.

The event log is the write-ahead record, fsynced at each state change
(:data:`supervisor.taskdir.events.DURABLE`) before the manifest that shows it; manifests the
log restores (:func:`supervisor.taskdir.repair.restorable`) are written atomically without
an fsync; a quiet check writes nothing. The power-cut test is in
``tests/test_power_cut.py``.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import Setup, wait_for
from support.engine_in_process import _run_engine_in_process

from supervisor import spool
from supervisor.engine import launch as engine_launch
from supervisor.engine.actions import Actions
from supervisor.taskdir import folder as taskdir
from supervisor.taskdir import repair
from supervisor.taskdir.events import DURABLE, Event
from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso
from supervisor.taskdir.states import Status


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count ``os.fdatasync`` and ``os.fsync`` calls of this process."""
    counts = {"fdatasync": 0, "fsync": 0}
    lock = threading.Lock()
    for name in counts:
        real = getattr(os, name)

        def counted(fd: int, _real: Any = real, _name: str = name) -> None:
            with lock:
                counts[_name] += 1
            _real(fd)

        monkeypatch.setattr(os, name, counted)
    return counts


def test_a_state_change_is_fsynced_before_append_returns_other_events_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``completed`` (a state change) is fdatasynced; a ``hook`` record is not; the log's
    creation fsyncs the folder once."""
    counts = _counting(monkeypatch)
    task = TaskDir(tmp_path)
    task.append_event(Event.QUEUED, status=Status.QUEUED, session_id="s")
    assert counts == {"fdatasync": 1, "fsync": 1}  # the line, and the folder's new entry
    task.append_event(Event.HOOK, name="PreToolUse")
    task.append_event(Event.ADOPTED, status=Status.RUNNING)
    assert counts == {"fdatasync": 1, "fsync": 1}
    task.append_event(Event.COMPLETED, status=Status.COMPLETED, verdict="PASS")
    task.append_event(Event.STOP_REQUESTED, status=Status.RUNNING)
    assert counts == {"fdatasync": 3, "fsync": 1}
    assert {Event.QUEUED, Event.LAUNCHED, Event.RESUMED, Event.CRASHED} <= DURABLE
    assert [e["event"] for e in task.events()][-1] == Event.STOP_REQUESTED


def test_a_failed_fdatasync_takes_the_line_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack (a full or failing disk): ``fdatasync`` of a state change fails with EIO.
    The line is taken back and ``OSError`` raised, so the decision is held and taken again
    at the next check without a second copy of its event; a record that needs no sync is
    still appended."""
    task = TaskDir(tmp_path)
    task.append_event(Event.QUEUED, status=Status.QUEUED, session_id="s")
    before = task.file("events.jsonl").read_bytes()

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(OSError):
        task.append_event(Event.CRASHED, status=Status.CRASHED)
    assert task.file("events.jsonl").read_bytes() == before
    task.append_event(Event.HOOK, name="Stop")
    assert [e["event"] for e in task.events()] == [Event.QUEUED, Event.HOOK]


def _watch_writes(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record every ``atomic_write`` of the task folders: the file, ``durable``, the
    manifest's status and the status of the last state-change event on disk then."""
    seen: list[dict[str, Any]] = []
    real = taskdir.atomic_write

    def watched(path: Path, data: bytes, durable: bool = True, **kwargs: Any) -> None:
        row: dict[str, Any] = {"name": path.name, "durable": durable, "task": path.parent.name}
        if path.name == "manifest.json":
            row["manifest"] = json.loads(data)
            logged = [e for e in TaskDir(path.parent).events() if e["event"] in DURABLE]
            row["logged"] = logged[-1]["status"] if logged else None
        seen.append(row)
        real(path, data, durable, **kwargs)

    monkeypatch.setattr(taskdir, "atomic_write", watched)
    monkeypatch.setattr(engine_launch, "atomic_write", watched)
    monkeypatch.setattr(spool, "atomic_write", watched)
    return seen


def test_each_state_change_is_logged_and_synced_before_its_unsynced_manifest(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that completes and one that crashes once (resumed, completes): every manifest
    write, from the claim's to the ending's, has no fsync, and the event log on disk already
    holds the state-change event whose status that manifest shows. ``launch.json`` has no
    fsync either; ``spec.json`` and ``prompt`` keep theirs (the log cannot restore them)."""
    setup.write_profile(base_interval=0.2, max_interval=1, max_retries=2)
    ok = setup.task("ok", "print: hi\nsleep: 0.3\nexit: 0", project=setup.root / "p-ok")
    crash = setup.task("crash", "crash_runs: 1\nsleep: 0.3\nexit: 0", project=setup.root / "p-c")
    setup.drop("ok.toml", ok)
    setup.drop("crash.toml", crash)
    seen = _watch_writes(monkeypatch)
    counts = _counting(monkeypatch)
    _run_engine_in_process(setup, lambda engine: None)

    manifests = setup.manifests()
    assert manifests["ok"]["status"] == manifests["crash"]["status"] == "completed"
    assert manifests["crash"]["retry_count"] == 1
    writes = [row for row in seen if row["name"] == "manifest.json"]
    assert len(writes) >= 6
    for row in writes:
        assert row["durable"] is False, row
        assert row["logged"] == row["manifest"]["status"], row  # the log ran ahead
    durable = {row["name"]: row["durable"] for row in seen}
    assert durable["launch.json"] is False
    assert durable["spec.json"] is durable["prompt"] is True
    # The figure: every fsync of the engine for two tasks (claims, launches, ends, stats).
    print(f"fsyncs for 2 tasks: {counts}")


def _running_task(tmp_path: Path, events: list[tuple[str, dict[str, Any]]]) -> TaskDir:
    task = TaskDir(tmp_path / "t-abcdef")
    task.path.mkdir()
    task.append_event(Event.QUEUED, at=1000.0, status=Status.QUEUED, session_id="sess-1")
    for index, (name, fields) in enumerate(events):
        task.append_event(name, at=1001.0 + index, **fields)
    return task


def _rebuild(task: TaskDir) -> Manifest | None:
    return repair.rebuild(task, task.events(), "t", "model-x", "/project")


def test_a_run_in_progress_comes_back_from_the_log(tmp_path: Path) -> None:
    """A run crashed, resumed and crashed again, with a torn last line (a power cut in the
    middle of an append): status, retries, waits and times come back from the last whole
    status event. Before issue 24 a run in progress was left ``damaged``."""
    task = _running_task(
        tmp_path,
        [
            (Event.LAUNCHED, {"status": Status.RUNNING}),
            (Event.CRASHED, {"status": Status.CRASHED, "retry_count": 0, "limit_waits": 1}),
            (Event.RESUMED, {"status": Status.RUNNING, "retry_count": 1, "limit_waits": 1}),
            (Event.HOOK, {"name": "Stop"}),
            (Event.CRASHED, {"status": Status.CRASHED, "retry_count": 1, "transient_waits": 2}),
        ],
    )
    with open(task.file("events.jsonl"), "ab") as handle:
        handle.write(b'{"ts": "2026-11-26T10:00:00.000Z", "event": "resu')
    manifest = _rebuild(task)
    assert manifest is not None
    assert (manifest.status, manifest.retry_count) == (Status.CRASHED, 1)
    assert (manifest.limit_waits, manifest.transient_waits) == (0, 2)
    assert manifest.started_at == utc_iso(1001.0)
    assert manifest.launched_at == utc_iso(1003.0)  # the resume
    assert manifest.session_id == "sess-1"


def test_an_ending_comes_back_with_its_verdict_reason_summary_and_cost(tmp_path: Path) -> None:
    """The terminal event carries what the ending wrote (issue 24): the rebuilt manifest has
    the verdict, failure reason, summary, acceptance and the agent's report (its cost)."""
    agent = {"claude": {"total_cost_usd": 0.42, "num_turns": 3}}
    task = _running_task(
        tmp_path,
        [
            (Event.LAUNCHED, {"status": Status.RUNNING}),
            (Event.RESUMED, {"status": Status.RUNNING, "retry_count": 1}),
            (
                Event.FAILED,
                {
                    "status": Status.FAILED,
                    "retry_count": 1,
                    "exit_code": 3,
                    "verdict": "FAIL",
                    "failure_reason": "exit_code",
                    "summary": "it failed",
                    "accepted": {"passed": False},
                    "agent": agent,
                },
            ),
        ],
    )
    manifest = _rebuild(task)
    assert manifest is not None
    assert (manifest.status, manifest.verdict, manifest.retry_count) == ("failed", "FAIL", 1)
    assert (manifest.exit_code, manifest.failure_reason) == (3, "exit_code")
    assert (manifest.summary, manifest.acceptance) == ("it failed", {"passed": False})
    dumped = manifest.model_dump(mode="json")
    assert dumped["claude"]["total_cost_usd"] == 0.42


def test_an_escalation_is_not_restorable_and_is_written_with_fsync(tmp_path: Path) -> None:
    """The escalation's record lives in the manifest only: rebuild refuses it (the task is
    reported ``damaged``), and its writes keep their fsync (``needs_fsync``)."""
    task = _running_task(
        tmp_path,
        [
            (Event.LAUNCHED, {"status": Status.RUNNING}),
            (Event.ESCALATED, {"status": Status.ESCALATED}),
        ],
    )
    assert _rebuild(task) is None
    manifest = Manifest(
        task_id="t",
        task_name="t",
        model="m",
        project_dir="/p",
        session_name="t",
        session_id="s",
        tmpdir="/t",
        created_at=utc_iso(1.0),
    )
    assert not repair.needs_fsync(manifest)
    for change in ({"status": "escalated"}, {"denials": 1}, {"turn": 2}):
        assert repair.needs_fsync(manifest.model_copy(update=change)), change


def test_a_claim_cut_before_its_queued_event_reached_the_disk_is_finished(
    tmp_path: Path,
) -> None:
    """A power cut during a claim can leave ``events.jsonl`` empty and no manifest: that is
    a claim to finish (``damage`` is None), not a damaged task."""
    task = TaskDir(tmp_path / "t-abcdef")
    task.path.mkdir()
    task.file("events.jsonl").write_bytes(b"")
    assert repair.damage(task) is None
    task.append_event(Event.QUEUED, status=Status.QUEUED, session_id="s")
    assert repair.damage(task) is not None  # now its manifest is missing


def test_quiet_checks_write_nothing(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    """A running agent checked every 0.1 s for 3 s: after the launch and the PID, checks
    that change nothing write no manifest (nor any other file of the task folder)."""
    setup.write_profile(base_interval=0.1, max_interval=0.1)
    setup.drop("quiet.toml", setup.task("quiet", "print: hi\nsleep: 3\nexit: 0"))
    seen = _watch_writes(monkeypatch)
    checks: list[str] = []
    real_apply = Actions.apply

    def counted(self: Actions, runtime: Any, decision: Any, now: float) -> Any:
        checks.append(str(decision.state.status))
        return real_apply(self, runtime, decision, now)

    monkeypatch.setattr(Actions, "apply", counted)
    _run_engine_in_process(setup, lambda engine: None)

    assert setup.manifests()["quiet"]["status"] == "completed"
    assert checks.count("running") >= 10
    writes = [row["manifest"] for row in seen if row["name"] == "manifest.json"]
    for before, after in itertools.pairwise(writes):
        before = {k: v for k, v in before.items() if k != "last_checked_at"}
        after = {k: v for k, v in after.items() if k != "last_checked_at"}
        assert before != after, f"a check rewrote the manifest with nothing new: {before}"
    # claim, launch, the PID, the ending; none of the quiet checks
    assert len(writes) <= 4, [w["status"] for w in writes]
    others = {row["name"] for row in seen} - {"manifest.json", "launch.json", "spec.json"}
    assert others <= {"prompt"}, others


def test_a_queued_manifest_whose_launch_is_logged_is_never_launched_again(
    setup: Setup,
) -> None:
    """A power cut kept the claim's manifest (``queued``) and lost the launch's, written
    without an fsync; the ``launched`` event was fsynced. The agent died with the machine.
    The next engine adopts the run (lost, then resumed), never a second launch."""
    setup.write_profile(base_interval=0.3, max_interval=1, max_retries=3)
    setup.drop("t.toml", setup.task("t", "tick: 0.2\nsleep: 1\nexit: 0"))
    engine = setup.start()
    try:
        wait_for(lambda: setup.manifests().get("t", {}).get("pid"), timeout=30)
    finally:
        engine.kill()
        engine.wait(timeout=30)
    setup.tmux("kill-server")  # the power cut ends the agent too
    folder = next((setup.state / "tasks").iterdir())
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(status="queued", pid=None, started_at=None, launched_at=None)
    (folder / "manifest.json").write_text(json.dumps(manifest))

    assert setup.run(timeout=60).returncode == 0
    final = setup.manifests()["t"]
    names = [e["event"] for e in setup.events(folder.name)]
    assert final["status"] == "completed", names
    assert names.count("launched") == 1, names
    assert names.count("resumed") == final["retry_count"] == 1, names
