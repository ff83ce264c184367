"""Adoption of a never-launched (``queued`` or ``blocked``) task after a SIGKILL of the
engine between its terminal line and its manifest, for each ending such a task can have:
an attempt's ``discard`` (reason ``discarded``), a fleet ``supersede`` (``superseded``), a
dependency's abandon (reason ``dependency``); a torn terminal line; and the notification
of the completed ending. Real engine, tmux and fake agent; the cut is written by hand after
a real SIGKILL (as in ``tests/test_requests_kill.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import Setup, stop_engine, wait_for
from support.kill_cuts import kill, running_then_waiting

from supervisor.taskdir import control
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TaskDir


def _folder(setup: Setup, name: str) -> TaskDir:
    return TaskDir(setup.state / "tasks" / setup.manifests()[name]["task_id"])


def _names(task: TaskDir) -> list[str]:
    """The task's event names (a torn fragment skipped, as the engine reads it)."""
    return [str(e.get("event")) for e in task.events()]


def _ending(task: TaskDir, event: str, status: str, why: str, **fields: Any) -> None:
    """The terminal line as ``Actions._record_events`` writes it for a never-launched task."""
    record = {"retry_count": 0, "exit_code": None, "abandon_reason": None, "agent": {}}
    task.append_event(
        event, status=status, reason=why, verdict="ABANDONED", summary="", **(record | fields)
    )


def _run(setup: Setup) -> subprocess.CompletedProcess[str]:
    done = setup.run(timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cannot adopt" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "ignored '" not in done.stderr, done.stderr[-3000:]  # a request carried out
    return done


def test_a_queued_loser_s_discard_logged_without_its_manifest_closes_the_group(
    setup: Setup,
) -> None:
    """An attempt waiting for the one slot is discarded (its ``discard_requested`` and
    ``abandoned``/``discarded`` lines logged), the engine killed before its manifest. The
    restart completes the discard as logged (never launched, ended once), and the group,
    reading the loser ended, closes with its winner."""
    from support.attempt_groups import ACCEPT, claimed_group, group, manifest, status
    from support.repos import make_repo

    make_repo(setup.project)
    setup.write_profile(max_concurrent=1)
    prompt = "as_model: model-b sleep: 8\nas_model: model-c sleep: 120\nexit: 0"
    accept = {"command": [sys.executable, "-c", ACCEPT]}
    task = setup.task("k", prompt, attempts=2, models=["model-b", "model-c"], acceptance=accept)
    setup.drop("k.toml", task)
    engine = setup.start()
    try:
        b, c = (row["task_id"] for row in claimed_group(setup)["attempts"])
        wait_for(lambda: status(setup, b) == "running", timeout=120)
        wait_for(lambda: status(setup, c) == "queued", timeout=60)
        kill(engine)
    finally:
        stop_engine(engine)
    loser = TaskDir(setup.state / "tasks" / c)
    loser.append_event(Event.DISCARD_REQUESTED, status="queued")
    why = "discarded: another attempt of its group passed first (pick = 'first-pass')"
    _ending(loser, Event.ABANDONED, "abandoned", why, abandon_reason="discarded")
    control.request(setup.state, c, "discard")  # removed after the ending: still there
    done = _run(setup)
    assert not list((setup.state / "control").iterdir())
    mc = manifest(setup, c)
    assert (mc["status"], mc["abandon_reason"]) == ("abandoned", "discarded"), done.stderr[-3000:]
    names = _names(loser)
    assert "launched" not in names and "adopted" not in names, names
    assert names.count("abandoned") == 1 and names.count("discard_requested") == 1, names
    record = group(setup)
    assert (record["winner"], record["outcome"], record["closed"]) == (b, "passed", True)
    assert manifest(setup, b)["status"] == "completed"


def test_a_queued_copy_s_supersede_logged_without_its_manifest_is_completed(
    setup: Setup,
) -> None:
    """A queued task superseded (``supersede_requested``, then ``superseded``), the engine
    killed before its manifest: it ends ``superseded`` as logged, never launched, once."""
    running_then_waiting(setup, {"q": []})
    task = _folder(setup, "q")
    task.append_event(Event.SUPERSEDE_REQUESTED, status="queued")
    _ending(task, Event.SUPERSEDED, "superseded", "superseded: the fleet gave it elsewhere")
    control.request(setup.state, task.task_id, "supersede")  # removed after the ending
    done = _run(setup)
    assert not list((setup.state / "control").iterdir())
    m = setup.manifests()["q"]
    assert (m["status"], m["verdict"]) == ("superseded", "ABANDONED"), done.stderr[-3000:]
    names = _names(task)
    assert "launched" not in names and "adopted" not in names, names
    assert names.count("superseded") == 1 and names.count("supersede_requested") == 1, names


def test_a_dependency_abandon_logged_without_its_manifest_fails_its_successor(
    setup: Setup,
) -> None:
    """``b`` (after ``a``) abandoned for its dependency, logged; the engine killed before
    its manifest. The restart ends ``b`` as logged, and ``c`` (after ``b``), reading ``b``
    abandoned, is abandoned for its dependency too: neither ever launched, each ended once."""
    running_then_waiting(setup, {"b": ["a"], "c": ["b"]})
    b, c = _folder(setup, "b"), _folder(setup, "c")
    why = "dependency: predecessor a ended failed; requires = 'pass'"
    _ending(b, Event.ABANDONED, "abandoned", why, abandon_reason="dependency")
    done = _run(setup)
    m = setup.manifests()
    assert (m["b"]["status"], m["b"]["abandon_reason"]) == ("abandoned", "dependency"), done.stderr
    assert (m["c"]["status"], m["c"]["abandon_reason"]) == ("abandoned", "dependency"), done.stderr
    for task in (b, c):
        names = _names(task)
        assert "launched" not in names and "adopted" not in names, names
        assert names.count("abandoned") == 1, names
    assert m["a"]["status"] == "completed"


TORN = b'{"ts": "2026-11-27T12:00:00.000000+00:00", "event": "abandoned", "status": "aband'


def test_a_torn_terminal_line_is_no_ending(setup: Setup) -> None:
    """The kill tore the terminal line (half a JSON line, no newline, at the log's end):
    the task is taken as never ended. ``q1`` (no request logged) launches and completes;
    ``q2`` (its ``stop_requested`` whole) ends ``stopped`` once, never launched. The
    fragment stays a line of its own: every other line of each log reads."""
    running_then_waiting(setup, {"q1": [], "q2": []})
    q1, q2 = _folder(setup, "q1"), _folder(setup, "q2")
    q2.append_event(Event.STOP_REQUESTED, status="queued")
    for task in (q1, q2):
        with open(task.file("events.jsonl"), "ab") as log:
            log.write(TORN)
    done = _run(setup)
    m = setup.manifests()
    assert m["q1"]["status"] == "completed", done.stderr[-3000:]
    assert (m["q2"]["status"], m["q2"]["abandon_reason"]) == ("abandoned", "stopped")
    assert _names(q1).count("launched") == 1 and "abandoned" not in _names(q1)
    names = _names(q2)
    assert "launched" not in names and names.count("abandoned") == 1, names
    for task in (q1, q2):
        lines = task.file("events.jsonl").read_bytes().split(b"\n")
        assert lines.count(TORN) == 1, lines
        for line in lines:
            if line and line != TORN:
                json.loads(line)


def test_a_completed_unlaunched_ending_notifies_once(setup: Setup, tmp_path: Path) -> None:
    """``notify_on`` holds ``abandoned``: ``n1`` cut after its ``abandoned`` line, ``n2``
    after its ``notifying`` too (announced before the manifest). Each is notified exactly
    once across the kill: one notifier run, one ``notifying``, one ``notified``."""
    seen = tmp_path / "seen.jsonl"
    notifier = [
        sys.executable,
        "-c",
        f"import sys; open({str(seen)!r}, 'a').write(sys.stdin.read().strip() + '\\n')",
    ]
    running_then_waiting(setup, {"n1": [], "n2": []}, notifier=notifier, notify_on=["abandoned"])
    n1, n2 = _folder(setup, "n1"), _folder(setup, "n2")
    why = "stopped by the operator before it started"
    for task in (n1, n2):
        task.append_event(Event.STOP_REQUESTED, status="queued")
        _ending(task, Event.ABANDONED, "abandoned", why, abandon_reason="stopped")
    n2.append_event(Event.NOTIFYING, status="abandoned", notified_event="abandoned", reason=why)
    control.request(setup.state, n1.task_id, "stop")  # removed after the ending: still there
    done = _run(setup)
    sent = [json.loads(line) for line in seen.read_text().splitlines()]
    assert sorted(s["task_name"] for s in sent) == ["n1", "n2"], (sent, done.stderr[-3000:])
    for task in (n1, n2):
        names = _names(task)
        assert names.count("notifying") == 1 and names.count("notified") == 1, names
        assert "launched" not in names and names.count("abandoned") == 1, names


def test_a_blocked_manifest_unblocked_then_ended_in_its_log_and_a_stale_launch_file(
    setup: Setup,
) -> None:
    """Two other cuts adoption meets: ``b``'s manifest says ``blocked`` while its log says
    ``unblocked``, then a stop and ``abandoned`` (killed before both manifests): it ends as
    logged, never launched. ``q``'s manifest says ``queued`` beside a ``launch.json`` with
    no session and no ``launched`` line (killed after the file, before tmux): launched
    once, and completes."""
    running_then_waiting(setup, {"b": ["a"], "q": []})
    b, q = _folder(setup, "b"), _folder(setup, "q")
    b.append_event(Event.UNBLOCKED, status="queued", reason="its predecessors ended")
    b.append_event(Event.STOP_REQUESTED, status="queued")
    why = "stopped by the operator before it started"
    _ending(b, Event.ABANDONED, "abandoned", why, abandon_reason="stopped")
    q.file("launch.json").write_text('{"stale": true}')
    done = _run(setup)
    m = setup.manifests()
    assert (m["b"]["status"], m["b"]["abandon_reason"]) == ("abandoned", "stopped"), done.stderr
    names = _names(b)
    assert "launched" not in names and names.count("abandoned") == 1, names
    assert m["q"]["status"] == "completed", done.stderr[-3000:]
    assert _names(q).count("launched") == 1, _names(q)


def test_an_announced_ending_whose_manifest_a_power_cut_emptied_is_notified(
    setup: Setup, tmp_path: Path
) -> None:
    """A power cut after ``n``'s ``abandoned`` and ``notifying`` lines (both fsynced) left
    its manifest empty (written without an fsync: the log restores it). Adoption rebuilds
    the manifest ``abandoned`` from the log; the notification it announced is still sent,
    once."""
    seen = tmp_path / "seen.jsonl"
    notifier = [
        sys.executable,
        "-c",
        f"import sys; open({str(seen)!r}, 'a').write(sys.stdin.read().strip() + '\\n')",
    ]
    running_then_waiting(setup, {"n": []}, notifier=notifier, notify_on=["abandoned"])
    n = _folder(setup, "n")
    why = "stopped by the operator before it started"
    n.append_event(Event.STOP_REQUESTED, status="queued")
    _ending(n, Event.ABANDONED, "abandoned", why, abandon_reason="stopped")
    n.append_event(Event.NOTIFYING, status="abandoned", notified_event="abandoned", reason=why)
    n.file("manifest.json").write_bytes(b"")
    done = _run(setup)
    m = setup.manifests()["n"]
    assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped"), done.stderr[-3000:]
    sent = [json.loads(line) for line in seen.read_text().splitlines()] if seen.exists() else []
    assert [s["task_name"] for s in sent] == ["n"], (sent, done.stderr[-3000:])
    names = _names(n)
    assert names.count("notifying") == 1 and names.count("notified") == 1, names


def test_a_blocked_copy_s_supersede_left_before_adoption_ends_it_unlaunched(
    setup: Setup,
) -> None:
    """The fleet gave a blocked task to a newer generation while no engine ran: the
    cluster intake leaves its ``supersede`` request before adoption. Found by attack: the
    intake ignored it (``no such live task``: only a stop or discard of a blocked task was
    taken), and the task launched once its predecessor ended. It ends ``superseded`` now,
    never launched, once."""
    running_then_waiting(setup, {"b": ["a"]})
    b = _folder(setup, "b")
    control.request(setup.state, b.task_id, "supersede")
    done = _run(setup)
    m = setup.manifests()["b"]
    assert (m["status"], m["verdict"]) == ("superseded", "ABANDONED"), done.stderr[-3000:]
    names = _names(b)
    assert "launched" not in names and names.count("superseded") == 1, names
    assert names.count("supersede_requested") == 1, names
