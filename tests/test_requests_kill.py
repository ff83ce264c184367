"""Operator requests (``control/<id>.<verb>``) across a SIGKILL of the engine, at the two
points a kill can cut taking one in two: after the ``<verb>_requested`` line is logged and
before the file is removed (the request is then in both places), and after the line, before
a queued task's ending (only the log holds it). Real engine, tmux and fake agent; the cut
is left by hand after a real SIGKILL."""

from __future__ import annotations

import os
import time

from conftest import Setup, stop_engine, wait_for
from support.kill_cuts import kill, running_then_waiting

from supervisor.taskdir import control
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TaskDir


def _events(setup: Setup, task_id: str) -> list[str]:
    return [e["event"] for e in setup.events(task_id)]


def _running_and_queued(setup: Setup) -> tuple[str, str]:
    """One slot: ``a`` runs (8 s), ``q`` waits behind it; then the engine is SIGKILLed.
    Returns their task ids."""
    ids = running_then_waiting(setup, {"q": []})
    return ids["a"], ids["q"]


def _logged_stop_ends_it(setup: Setup, name: str, status: str) -> list[str]:
    """The cut: ``stop_requested`` appended to task ``name``'s log (in ``status``), its file
    gone; a restart must end it ``abandoned``/``stopped`` with that one line. Returns the
    task's event names."""
    task_id = setup.manifests()[name]["task_id"]
    TaskDir(setup.state / "tasks" / task_id).append_event(Event.STOP_REQUESTED, status=status)
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()[name]
    assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped"), done.stderr[-2000:]
    names = _events(setup, task_id)
    assert names.count("stop_requested") == 1, names
    return names


def test_an_operator_stop_logged_but_not_carried_out_is_not_lost(setup: Setup) -> None:
    """The same kill after an operator's ``supervise stop`` of a running task was taken
    (its file removed, ``stop_requested`` logged) lost the stop: the restarted engine let
    the task run to its end (found while attacking attempts, stop 34)."""
    setup.write_profile()
    setup.drop("s.toml", setup.task("s", "sleep: 20\nexit: 0"))
    engine = setup.start()
    try:
        wait_for(lambda: setup.manifests().get("s", {}).get("status") == "running", timeout=120)
        kill(engine)
    finally:
        stop_engine(engine)
    _logged_stop_ends_it(setup, "s", "running")


def test_a_queued_task_s_logged_stop_is_not_lost_to_a_kill(setup: Setup) -> None:
    """``stop_requested`` logged for a queued task, its file already gone, then the kill:
    before, the restart queued the task again and launched it to ``completed``."""
    _running_and_queued(setup)
    assert "launched" not in _logged_stop_ends_it(setup, "q", "queued")


def test_a_queued_task_s_logged_stop_holds_with_a_file_in_place_of_control(
    setup: Setup,
) -> None:
    """The same cut with a file in place of ``state_dir/control`` (found by the attack
    helper, by reading): adoption left the logged stop again as a request file, which could
    not be written, so the task launched. It is applied at adoption now, with no file."""
    _running_and_queued(setup)
    control_dir = setup.state / "control"
    if control_dir.is_dir():
        for leftover in control_dir.iterdir():
            leftover.unlink()
        control_dir.rmdir()
    control_dir.write_text("not a folder")
    assert "launched" not in _logged_stop_ends_it(setup, "q", "queued")


def test_a_request_logged_and_still_on_file_is_logged_once(setup: Setup) -> None:
    """The kill came after the line, before the file's removal (the write-ahead order):
    both a queued and a running task end ``stopped`` with one ``stop_requested`` each
    (before, adoption and the intake logged it a second time)."""
    a, q = _running_and_queued(setup)
    for task_id, status in ((a, "running"), (q, "queued")):
        TaskDir(setup.state / "tasks" / task_id).append_event(Event.STOP_REQUESTED, status=status)
        control.request(setup.state, task_id, "stop")
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    for name, task_id in (("a", a), ("q", q)):
        m = setup.manifests()[name]
        assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped"), name
        assert _events(setup, task_id).count("stop_requested") == 1, _events(setup, task_id)
    assert not list((setup.state / "control").iterdir())


def test_a_blocked_task_s_logged_stop_ends_it_once_without_launching(setup: Setup) -> None:
    """The same cut for a task blocked on its predecessor (``after``): it ends
    ``abandoned``/``stopped`` with one ``stop_requested`` line and is never launched."""
    running_then_waiting(setup, {"b": ["a"]})
    assert "launched" not in _logged_stop_ends_it(setup, "b", "blocked")


def test_odd_files_under_request_names_never_stop_the_intake(setup: Setup) -> None:
    """Found by attack: a folder named ``<id>.stop`` in ``control/`` raised
    ``IsADirectoryError`` from the request's removal at every intake run: the engine hung
    and the task dropped meanwhile never launched. A folder or FIFO under a request's name
    is no request (left as it is); a request for a task that does not exist is removed."""
    setup.write_profile()
    folder = setup.state / "control"
    folder.mkdir(parents=True)
    (folder / "zz-folder.stop").mkdir()
    (folder / "zz-folder.stop" / "inside").write_text("x")
    os.mkfifo(folder / "zz-fifo.discard")
    control.request(setup.state, "zz-ghost", "stop")
    setup.drop("a.toml", setup.task("a", "exit: 0"))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert setup.manifests()["a"]["status"] == "completed"
    assert sorted(p.name for p in folder.iterdir()) == ["zz-fifo.discard", "zz-folder.stop"]
    assert "ignored 'stop' for zz-ghost" in done.stderr


def test_twenty_queued_stops_survive_kills_at_many_points(setup: Setup) -> None:
    """Attack: ``stop`` asked of 20 queued tasks while the engine is SIGKILLed again and
    again, at points spread over taking them (and over adoption, on the restarts). Every
    one ends ``abandoned``/``stopped`` with one ``stop_requested`` line and is never
    launched; the running task is not touched (it completes); no request is left."""
    setup.write_profile(max_concurrent=1)
    setup.drop("a.toml", setup.task("a", "sleep: 10\nexit: 0"))
    engine = setup.start()
    names = [f"q{k:02d}" for k in range(20)]
    try:
        wait_for(lambda: setup.manifests().get("a", {}).get("status") == "running", timeout=120)
        for name in names:
            setup.drop(f"{name}.toml", setup.task(name, "exit: 0"))
        queued = lambda: all(setup.manifests().get(n, {}).get("status") == "queued" for n in names)  # noqa: E731
        wait_for(queued, timeout=120)
        ids = {n: setup.manifests()[n]["task_id"] for n in names}
        for name in names:
            control.request(setup.state, ids[name], "stop")
        for delay in (0.0, 0.02, 0.05, 0.1, 0.3, 0.6):  # kill points: an order, no bound
            time.sleep(delay)
            kill(engine)
            engine = setup.start()
        kill(engine)
    finally:
        stop_engine(engine)
    done = setup.run(timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    found = setup.manifests()
    assert found["a"]["status"] == "completed"
    for name in names:
        m = found[name]
        assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped"), name
        events = _events(setup, ids[name])
        assert "launched" not in events and events.count("stop_requested") == 1, (name, events)
    assert not list((setup.state / "control").iterdir())


def _cut_after_the_ending(setup: Setup, name: str, status: str) -> str:
    """The cut found by CI (stop 36): a never-launched task's stop taken and its
    ``abandoned`` line logged, the engine killed before the manifest was written. Returns
    the task id."""
    task_id = setup.manifests()[name]["task_id"]
    task = TaskDir(setup.state / "tasks" / task_id)
    task.append_event(Event.STOP_REQUESTED, status=status)
    task.append_event(
        Event.ABANDONED,
        status="abandoned",
        reason="stopped by the operator before it started",
        retry_count=0,
        exit_code=None,
        abandon_reason="stopped",
        verdict="ABANDONED",
        failure_reason=None,
        summary="",
        accepted=None,
        agent={},
    )
    return task_id


def test_a_queued_task_s_logged_ending_without_its_manifest_is_completed(setup: Setup) -> None:
    """Found by CI (one of 20 stopped tasks, killed at many points): the restart took the
    queued manifest beside a logged ``abandoned`` line for a launch it never recorded,
    failed on the missing ``launch.json`` and left the task ``queued`` for ever (the
    engine even went idle). The logged ending is completed now: never launched, ended once."""
    _running_and_queued(setup)
    task_id = _cut_after_the_ending(setup, "q", "queued")
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cannot adopt" not in done.stderr, done.stderr[-2000:]
    m = setup.manifests()["q"]
    assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped"), done.stderr[-2000:]
    names = _events(setup, task_id)
    assert "launched" not in names and "adopted" not in names, names
    assert names.count("abandoned") == 1 and names.count("stop_requested") == 1, names


def test_a_blocked_task_s_logged_ending_without_its_manifest_is_completed(setup: Setup) -> None:
    """The same cut for a task blocked on its predecessor: completed, never launched,
    ended once, and not counted as a run (no ``adopted`` line with a ``running`` status)."""
    running_then_waiting(setup, {"b": ["a"]})
    task_id = _cut_after_the_ending(setup, "b", "blocked")
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    m = setup.manifests()["b"]
    assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped"), done.stderr[-2000:]
    names = _events(setup, task_id)
    assert "launched" not in names and "adopted" not in names, names
    assert names.count("abandoned") == 1 and names.count("stop_requested") == 1, names


def test_a_request_file_left_after_its_ending_goes_with_an_info_line(setup: Setup) -> None:
    """The kill came after the ending and its manifest, before the request file's removal:
    the next engine removes the file with an info line. Before, it warned that it had
    ignored the request that ended the task. A request the ended task never took (``a``
    completed on its own) is still warned of."""
    a, q = _running_and_queued(setup)
    control.request(setup.state, q, "stop")
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert setup.manifests()["q"]["status"] == "abandoned"
    control.request(setup.state, q, "stop")  # as a kill before its removal leaves it
    control.request(setup.state, a, "stop")
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{q}: its 'stop' request was carried out already" in done.stderr, done.stderr
    assert f"ignored 'stop' for {q}" not in done.stderr, done.stderr
    assert f"ignored 'stop' for {a}" in done.stderr, done.stderr
    assert not list((setup.state / "control").iterdir())
    assert _events(setup, q).count("stop_requested") == 1
