"""Issue 24, item 4 (cheap checks): one ``psutil.Process`` per run, kept in the runtime's
:class:`~supervisor.engine.signals.RunView`, and the run files read only when the watcher
(inotify) says they changed, or when it cannot say (not watched, events lost)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from conftest import Setup, stop_engine, wait_for
from inotify_simple import flags as F

from supervisor.engine import signals
from supervisor.engine.signals import RunView, observe
from supervisor.engine.watch import Watcher
from supervisor.taskdir.folder import TaskDir


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The PIDs of every ``psutil.Process`` the signals module builds."""
    pids: list[int] = []
    real = psutil.Process

    def counting(pid: int) -> psutil.Process:
        pids.append(pid)
        return real(pid)

    monkeypatch.setattr(signals.psutil, "Process", counting)
    return pids


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The task folders whose run files were read."""
    seen: list[str] = []
    real = signals.read_run_files

    def counting(task: TaskDir) -> signals.RunFiles:
        seen.append(task.task_id)
        return real(task)

    monkeypatch.setattr(signals, "read_run_files", counting)
    return seen


class Events:
    """A started :class:`Watcher` whose task callbacks are recorded."""

    def __init__(self) -> None:
        self.names: list[tuple[str, str]] = []
        self.arrived = threading.Condition()
        self.watcher = Watcher(lambda _name: None, self._on_task, lambda _task: None)

    def _on_task(self, task_id: str, name: str) -> None:
        with self.arrived:
            self.names.append((task_id, name))
            self.arrived.notify_all()

    def wait(self, task_id: str, name: str) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: (task_id, name) in self.names, timeout=60)


@pytest.fixture
def events() -> Iterator[Events]:
    found = Events()
    found.watcher.start()
    try:
        yield found
    finally:
        found.watcher.stop()


def _write(task: TaskDir, name: str, text: str) -> None:
    """As the wrapper writes a run file: a temp file, then a rename."""
    tmp = task.file(f".{name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, task.file(name))


def _watched(events: Events, task: TaskDir) -> RunView:
    assert events.watcher.watch_task(task.task_id, task.path)
    return RunView(changed=functools.partial(events.watcher.run_files_changed, task.task_id))


def test_many_checks_build_one_process_per_run(sleeper, tmp_path: Path, built: list[int]) -> None:
    task = TaskDir(tmp_path)
    task.file("pid").write_text(f"{sleeper.pid}\n")
    run = RunView()
    for _ in range(20):
        assert observe(task, run=run).agent_alive is True
    assert built == [sleeper.pid]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:  # a resume: a new pid file is a new run, with a Process of its own
        _write(task, "pid", f"{other.pid}\n")
        for _ in range(5):
            assert observe(task, run=run).agent_alive is True
        assert built == [sleeper.pid, other.pid]
    finally:
        other.kill()
        other.wait(timeout=10)
    assert observe(task, run=run).agent_alive is False
    assert observe(task, run=run).agent_alive is False  # gone stays gone, without a lookup
    assert built == [sleeper.pid, other.pid]


def test_a_reused_pid_is_not_taken_for_the_agent(sleeper, tmp_path: Path) -> None:
    """The kept process is known by its start ticks: another process under the same PID
    (here: the kept ticks of a process that ended, against the live one's) is not ours."""
    task = TaskDir(tmp_path)
    task.file("pid").write_text(f"{sleeper.pid}\n")
    run = RunView()
    assert observe(task, run=run).agent_alive is True
    assert run.agent is not None
    run.agent.ticks -= 1  # the agent we saw started a tick earlier: this one reused its PID
    assert observe(task, run=run).agent_alive is False
    assert run.agent is None


def test_a_quiet_check_reads_no_run_file(
    events: Events, tmp_path: Path, reads: list[str], sleeper
) -> None:
    task = TaskDir(tmp_path / "t1")
    task.path.mkdir()
    _write(task, "pid", f"{sleeper.pid}\n")
    run = _watched(events, task)
    assert observe(task, run=run).agent_alive is True  # the first check reads them
    for _ in range(10):
        assert observe(task, run=run).done is False
    assert reads == ["t1"]
    _write(task, "done", "")  # the wrapper's last word
    events.wait("t1", "done")
    assert observe(task, run=run).done is True  # seen by the very next check
    assert reads == ["t1", "t1"]


def test_removed_run_files_are_seen_after_a_respawn(events: Events, tmp_path: Path) -> None:
    """A resume removes the last run's files (no check is woken by that): the next check
    must not see the old ``done``."""
    task = TaskDir(tmp_path / "t2")
    task.path.mkdir()
    _write(task, "done", "")
    run = _watched(events, task)
    assert observe(task, run=run).done is True
    task.clear_run_files()
    wait_for(lambda: observe(task, run=run).done is False)
    assert ("t2", "done") not in events.names  # a removal wakes no check


def test_a_check_right_after_a_respawn_never_sees_the_last_runs_end(tmp_path: Path) -> None:
    """The watcher marks a removal from its own thread, later; a check between the respawn
    and that mark saw the old ``done`` and exit code 1, counted a second limit wait and
    killed the resumed agent (CI, real-CLI rate-limit test). Here the watcher has seen
    nothing yet (``changed`` says no change) when the check runs."""
    task = TaskDir(tmp_path / "t5")
    task.path.mkdir()
    _write(task, "exit_code", "1")
    _write(task, "done", "")
    run = RunView(changed=lambda: False)
    assert observe(task, run=run).done is True
    task.clear_run_files()  # the files alone: the view still holds the old run
    assert observe(task, run=run).done is True
    _write(task, "done", "")
    run.clear(task)  # what a launch and a respawn do
    seen = observe(task, run=run)
    assert (seen.done, seen.exit_code) == (False, None)


def test_an_unwatched_folder_is_read_at_every_check(
    events: Events, tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    task = TaskDir(tmp_path / "t3")
    task.path.mkdir()

    def refuse(*_args: object) -> int:
        raise OSError(28, "No space left on device")  # fs.inotify.max_user_watches reached

    monkeypatch.setattr(events.watcher._inotify, "add_watch", refuse)
    assert events.watcher.watch_task("t3", task.path) is False
    run = RunView(changed=functools.partial(events.watcher.run_files_changed, "t3"))
    for _ in range(3):
        observe(task, run=run)
    assert reads == ["t3"] * 3


def test_a_moved_folder_falls_back_to_reading(
    events: Events, tmp_path: Path, reads: list[str]
) -> None:
    task = TaskDir(tmp_path / "t4")
    task.path.mkdir()
    run = _watched(events, task)
    observe(task, run=run)
    task.path.rename(tmp_path / "elsewhere")
    task.path.mkdir()
    wait_for(lambda: events.watcher.counts()[0] == 0)  # IN_MOVE_SELF: no longer watched
    _write(task, "done", "")  # no event comes from the new folder
    assert observe(task, run=run).done is True
    assert observe(task, run=run).done is True
    assert reads == ["t4"] * 3


def test_lost_events_mark_every_watched_folder(
    events: Events, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watcher = events.watcher
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        assert watcher.watch_task(name, tmp_path / name)
        assert watcher.run_files_changed(name)  # written before the watch: read once
        assert not watcher.run_files_changed(name)
    overflow = SimpleNamespace(wd=-1, mask=F.Q_OVERFLOW, cookie=0, name="")
    monkeypatch.setattr(watcher._inotify, "read", lambda timeout=0: [overflow])
    watcher._drain_inotify()
    monkeypatch.undo()
    assert watcher.run_files_changed("a") and watcher.run_files_changed("b")


def test_a_restored_run_file_is_read_in_the_same_check(
    events: Events, tmp_path: Path, reads: list[str]
) -> None:
    """A full disk sent ``done`` to tmux; the check writes it back and reads it at once,
    whether or not the watcher's event for that rename has arrived yet."""
    task = TaskDir(tmp_path / "t5")
    task.path.mkdir()
    run = _watched(events, task)
    assert observe(task, run=run).done is False
    _write(task, "done", "")  # as statefs.restore_run_files does
    run.force = True  # what Observer does after a restore
    assert observe(task, run=run).done is True


def test_adoption_reads_each_manifest_once(
    tmp_path: Path, socket_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adoption validated every manifest twice (``repair.damage``, then ``read_manifest``):
    now once, and ``repair.damage`` only for one that does not validate. 12 folders, 13
    validations (23 before); the damaged one is still found damaged."""
    from support import views_fixture

    from supervisor.config import load_profile
    from supervisor.engine import recovery
    from supervisor.taskdir.folder import Manifest
    from supervisor.tmux import Tmux

    fixture = views_fixture.build(tmp_path)
    views_fixture.write_profile(tmp_path, socket_name)
    profile = load_profile(fixture.profile)
    broken = profile.tasks_dir / "broken-000000"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    (broken / "events.jsonl").write_text("")
    validated: list[int] = []
    real = Manifest.model_validate_json

    def counting(data: bytes | str) -> Manifest:
        validated.append(1)
        return real(data)

    monkeypatch.setattr(Manifest, "model_validate_json", counting)
    damaged: list[str] = []
    monkeypatch.setattr(
        recovery, "_adopt_damaged", lambda _p, task, _why: damaged.append(task.task_id)
    )
    list(recovery.adopt(profile, Tmux(socket_name, owner=str(profile.state_dir))))
    folders = len(list(profile.tasks_dir.iterdir()))
    assert damaged == ["broken-000000"]
    assert len(validated) == folders + 1  # the broken one: once here, once in repair.damage


def test_a_live_agents_checks_make_no_tmux_call(setup: Setup, tmp_path: Path) -> None:
    """While its agent lives, a check asks tmux nothing: no ``list-panes`` snapshot, no
    look at its pane (the policy reads ``session_alive`` only once the agent is gone). Every
    tmux call goes through a logging ``$SUPERVISE_TMUX`` (client processes: control mode off)."""
    calls = tmp_path / "tmux-calls.log"
    shim = tmp_path / "tmux-shim"
    real = shutil.which("tmux")
    shim.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {real} "$@"\n')
    shim.chmod(0o755)
    setup.write_profile(base_interval=0.2, max_interval=0.2)
    setup.drop("t.toml", setup.task("t", "sleep: 60"))
    env = {**os.environ, "SUPERVISE_TMUX": str(shim), "SUPERVISE_TMUX_CONTROL": "0"}
    engine = setup.start(env=env)
    try:
        wait_for(lambda: setup.manifests().get("t", {}).get("status") == "running", 30)
        stats = setup.state / "engine-stats.json"
        wait_for(lambda: stats.exists() and json.loads(stats.read_text())["checks"] >= 20, 30)
    finally:
        stop_engine(engine)
        setup.tmux("kill-server")
    lines = calls.read_text().splitlines()
    launched = next(
        i for i, line in enumerate(lines) if line.startswith("-L") and "new-session" in line
    )
    after = [line for line in lines[launched + 1 :] if "wait-for" not in line]
    # what the stop and the end of the test sent is not a check's
    looks = [line for line in after if "list-panes" in line or "display-message" in line]
    assert looks == [], looks[:5]
