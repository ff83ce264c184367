"""Issue 22 after the merge: the leftovers its seven parts reported and what attacking the
new commands found (docs/conformance.md "Issue 22: found by attack after the merge"). Each
test failed on main before its fix."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import tomli_w
from conftest import wait_for
from support.claude_harness import harness  # noqa: F401 (fixture)
from support.other_user import base, other_user  # noqa: F401 (fixtures)

from supervisor.cli import app as cli
from supervisor.cli import read as cli_read
from supervisor.taskdir.folder import Manifest, TaskDir, atomic_write, utc_iso

#: Each command taking one id, with the arguments after the id, and its exit for a bad id.
ONE_ID = {
    "show": ((), 1),
    "tail": ((), 1),
    "attach": ((), 1),
    "events": ((), 1),
    "continue": (("go on",), 1),
    "diff": ((), 1),
    "merge": ((), 1),
    "discard": ((), 1),
}


def _profile(tmp_path: Path) -> Path:
    data = {
        "paths": {"spool_dir": "spool", "state_dir": "state"},
        "tmux": {"socket_name": "issue22-unused"},
        "agent": {"command": ["true"]},
    }
    path = tmp_path / "profile.toml"
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    (tmp_path / "state" / "tasks").mkdir(parents=True)
    (tmp_path / "spool").mkdir()
    return path


def _manifest(tmp_path: Path, task_id: str, status: str, **extra: object) -> Path:
    folder = tmp_path / "state" / "tasks" / task_id
    folder.mkdir(parents=True, exist_ok=True)
    data = {"task_id": task_id, "task_name": task_id, "status": status, **extra}
    atomic_write(folder / "manifest.json", json.dumps(data).encode())
    return folder


@pytest.mark.parametrize("length", [250, 300, 100_000])
def test_an_overlong_id_is_one_line_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], length: int
) -> None:
    """An id longer than a file name may be (ENAMETOOLONG from ``Path.exists()``, also for
    ``spool/<id>.toml`` at 251+ characters) is refused in one short line, no traceback."""
    conf = str(_profile(tmp_path))
    task_id = "a" * length
    commands = {**ONE_ID, "stop": ((), 1), "wait": (("--timeout", "1"), 2)}
    for command, (after, code) in commands.items():
        assert cli.main([command, "-c", conf, task_id, *after]) == code, command
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and len(err) < 800, (command, err[:500])
        assert "Traceback" not in err and "no task" in err, (command, err[:500])


def _bounded(call: Callable[[], object], fifos: list[Path]) -> object:
    """``call()`` on a thread; a call still blocked after 20 s fails the test (its FIFOs
    are then opened for writing and closed, so the blocked reader gets EOF and ends)."""
    result: list[object] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # raised again on the test's thread
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(20)
        pytest.fail(f"{call} blocked on a FIFO")
    if failed:
        raise failed[0]
    return result[0]


def test_a_fifo_in_a_task_folder_blocks_no_view(tmp_path: Path) -> None:
    """An agent can write into its task folder: a FIFO put in place of ``manifest.json``,
    ``events.jsonl``, ``spec.json`` or ``output.log`` must not hang ``status``, ``top``,
    the web page or ``tail`` (each reads non-blocking, regular files only); the folder
    shows as ``damaged`` and the good task beside it is listed."""
    from supervisor.views import model, webpage

    conf = _profile(tmp_path)
    _manifest(tmp_path, "good-1", "running")
    hostile = tmp_path / "state" / "tasks" / "fifo-1"
    hostile.mkdir()
    fifos = [hostile / name for name in ("manifest.json", "events.jsonl", "spec.json")]
    events = _manifest(tmp_path, "events-1", "running") / "events.jsonl"
    output = _manifest(tmp_path, "output-1", "running") / "output.log"
    fifos += [events, output]
    for fifo in fifos:
        os.mkfifo(fifo)
    profile = cli.load_profile(str(conf))
    snap = _bounded(lambda: model.snapshot(profile), fifos)
    rows = {task.task_id: task.status for task in snap.tasks}  # type: ignore[attr-defined]
    assert rows == {"good-1": "running", "events-1": "running", "output-1": "running",
                    "fifo-1": "damaged"}  # fmt: skip
    for folder in (hostile, events.parent, output.parent):
        page = _bounded(lambda folder=folder: webpage.task_view(folder), fifos)
        assert isinstance(page, dict)
    assert _bounded(lambda: TaskDir(output.parent).output_tail(), fifos) == ""


def test_a_manifest_nested_too_deep_is_damaged_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[[[[…`` 100,000 deep makes ``json.loads`` raise ``RecursionError`` (not a
    ``ValueError``): ``status``, ``stop``, ``wait`` and ``events`` must treat it as a
    damaged manifest, in one line."""
    conf = str(_profile(tmp_path))
    folder = _manifest(tmp_path, "deep-1", "running")
    atomic_write(folder / "manifest.json", b"[" * 100_000)
    (folder / "events.jsonl").write_text('{"event": "queued"}\n')
    assert cli.main(["status", "-c", conf, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["task_id"], r["status"]) for r in rows] == [("deep-1", "damaged")]
    assert cli.main(["stop", "-c", conf, "deep-1"]) == 1
    assert "nested too deep" in capsys.readouterr().err
    assert cli.main(["wait", "-c", conf, "deep-1", "--timeout", "0.5"]) == 124
    assert cli_read._ended(folder) is False  # events -f: not ended, no traceback
    capsys.readouterr()


# ---------------------------------------------------------------- continue: per-turn facts


def _claude_adapter(folder: Path, manifest: Manifest, max_cost_usd: float | None = None):
    from supervisor.agents import adapter_for
    from supervisor.config import AgentSpec, MonitorPolicy, ResolvedTask, TaskSpec

    spec = TaskSpec(name="t", prompt="go", project_dir=folder.parent)
    policy = MonitorPolicy(deadline=120.0, max_cost_usd=max_cost_usd)
    resolved = ResolvedTask(spec, "go", "claude-sonnet-4-6", policy)
    agent = AgentSpec(kind="claude")  # type: ignore[call-arg]
    return adapter_for(agent, TaskDir(folder), resolved, manifest, "denied", lambda k: None)


def _stream_lines(folder: Path, *objs: dict) -> None:
    with open(folder / "stream.jsonl", "a", encoding="utf-8") as out:
        out.writelines(json.dumps(obj) + "\n" for obj in objs)


def test_a_follow_up_turn_reports_nothing_of_the_turn_before(tmp_path: Path) -> None:
    """Turn 1 answered "TURN ONE" after an API retry, spent the whole ``max_cost_usd``
    and was denied 3 times. Once turn 2 opens, the manifest and the adapter of turn 2 give
    no ``claude.result``, error, denial count or outcome of turn 1 (those stay in
    ``turns[0]``), and the budget counts from the turn's start: turn 2 is not over it.
    Turn 2's own answer then shows, with its own cost beside the task's total."""
    from supervisor import turnlog
    from supervisor.taskdir.folder import TURN_PROMPT

    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "prompt").write_text("go")
    manifest = Manifest(
        task_id="t1", task_name="t", model="m", project_dir=str(tmp_path), session_name="t1",
        session_id="00000000-0000-4000-8000-000000000000", tmpdir=str(folder),
        created_at=utc_iso(),
    )  # fmt: skip
    first = _claude_adapter(folder, manifest, max_cost_usd=0.5)
    _stream_lines(
        folder,
        {"type": "supervise_launch", "at": 1.0},
        {"type": "system", "subtype": "api_retry", "attempt": 1, "error_status": 529},
        {"type": "result", "subtype": "success", "result": "TURN ONE", "is_error": False,
         "num_turns": 2, "total_cost_usd": 0.5, "session_id": manifest.session_id},
    )  # fmt: skip
    assert first.observe(time.time(), "running", None).spent_usd == 0.5
    facts = first.report()
    manifest.claude, manifest.denials = facts["claude"], 3
    manifest.status, manifest.verdict, manifest.summary = "abandoned", "FAIL", "out of budget"
    manifest.abandon_reason = "budget"
    turnlog.open_turn(manifest, 2, TaskDir(folder))
    assert manifest.claude is not None and manifest.claude.get("result") is None
    assert not manifest.claude.get("api_errors") and manifest.denials == 0
    assert (manifest.summary, manifest.abandon_reason, manifest.verdict) == (None, None, None)
    assert manifest.claude["session_id"] == manifest.session_id  # the session goes on
    assert manifest.turns[0].cost_usd == 0.5 and manifest.turns[0].abandon_reason == "budget"
    (folder / TURN_PROMPT).write_text("go on")
    second = _claude_adapter(folder, manifest, max_cost_usd=0.5)
    second.restore(manifest)
    second.follow_up()
    view = second.observe(time.time(), "running", None)
    report = second.report()
    assert view.spent_usd == 0.0, view  # this turn spent nothing yet: not over budget
    assert report["claude"]["result"] is None and report["claude"]["api_errors"] == []
    assert report["denials"] == 0 and report["claude"]["is_error"] is None
    _stream_lines(
        folder,
        {"type": "supervise_launch", "at": 2.0},
        {"type": "result", "subtype": "success", "result": "TURN TWO", "is_error": False,
         "num_turns": 1, "total_cost_usd": 0.2, "session_id": manifest.session_id},
    )  # fmt: skip
    view = second.observe(time.time(), "running", None)
    claude = second.report()["claude"]
    assert claude["result"] == "TURN TWO" and view.spent_usd == pytest.approx(0.2)
    assert claude["total_cost_usd"] == pytest.approx(0.7)
    assert claude["turn_cost_usd"] == pytest.approx(0.2)
    # an engine restarted in turn 2 reads the stream from its start: the same answer
    again = _claude_adapter(folder, manifest, max_cost_usd=0.5)
    again.restore(manifest)
    assert again.observe(time.time(), "running", None).spent_usd == pytest.approx(0.2)
    assert again.report()["claude"]["result"] == "TURN TWO"


def _full_manifest(tmp_path: Path, task_id: str, status: str) -> TaskDir:
    folder = tmp_path / "state" / "tasks" / task_id
    folder.mkdir(parents=True)
    (folder / "prompt").write_text("go")
    manifest = Manifest(
        task_id=task_id, task_name="t", model="m", project_dir=str(tmp_path),
        session_name=task_id, session_id="00000000-0000-4000-8000-000000000000",
        tmpdir=str(folder), created_at=utc_iso(), status=status,
    )  # fmt: skip
    atomic_write(folder / "manifest.json", manifest.model_dump_json().encode())
    return TaskDir(folder)


def test_continue_of_an_escalated_task_waits_for_its_stop_too(tmp_path: Path) -> None:
    """An escalated task is stopped before its follow-up is taken, which takes longer than
    ``--wait`` allows a plain one: ``continue`` waits :data:`followup.STOP_WAIT` s more for
    it, so it reports ``applied`` (exit 0), not "not taken" (exit 4) for a turn that does
    start. (An engine stand-in: holds the engine's lock, opens turn 2 two seconds after the
    request, as a stop followed by the follow-up does.)"""
    from supervisor import followup, statelock, turnlog
    from supervisor.config import load_profile

    conf = _profile(tmp_path)
    data = tomllib.loads(conf.read_text())
    data["agent"]["resume_command"] = ["true"]
    conf.write_text(tomli_w.dumps(data))
    profile = load_profile(conf)
    task = _full_manifest(tmp_path, "esc-1", "escalated")
    lock = statelock.engine_lock(profile.state_dir)
    request = profile.state_dir / "control" / "esc-1.continue"

    def engine() -> None:
        wait_for(request.exists, 60)
        time.sleep(2)  # the stop of the agent, as the engine would take it (not a sync)
        task.update_manifest(lambda m: setattr(m, "status", "abandoned"))
        task.update_manifest(lambda m: turnlog.open_turn(m, 2, task))

    stand_in = threading.Thread(target=engine, daemon=True)
    stand_in.start()
    try:
        done = followup.request_continue(profile, "esc-1", "go on", 0.5)
    finally:
        stand_in.join(30)
        os.close(lock)
    assert (done["result"], done["turn"]) == ("applied", 2), done


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e400", "x"])
def test_hostile_seconds_for_continue_are_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """``continue --wait nan`` took any float: NaN never compares past a deadline, so the
    wait never ended. Now NaN, inf, negatives and words are a usage error (exit 2) naming
    ``--wait``, like the requests' and ``shutdown``'s ``--wait``."""
    conf = str(_profile(tmp_path))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["continue", "-c", conf, "t-1", "go on", "--wait", value])
    assert exit_.value.code == 2 and "--wait" in capsys.readouterr().err


# ---------------------------------------------------------------- events: huge and hostile


def _event(n: int, status: str) -> str:
    return json.dumps({"ts": "2026-11-26T03:00:00.000Z", "event": f"e{n}", "status": status})


def test_events_n_reads_only_the_end_of_a_huge_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``events -n 5`` of a 1 GiB ``events.jsonl`` (a sparse hole, then real lines) reads
    the end only: the last five events, the first of them with its ``from→to`` (the status
    the event before set), and no report of the damaged hole it never read. Main read and
    parsed the whole file (minutes for a real 1 GB log)."""
    conf = str(_profile(tmp_path))
    folder = _manifest(tmp_path, "big-1", "running")
    with open(folder / "events.jsonl", "wb") as out:
        out.truncate(1 << 30)
        out.seek(0, os.SEEK_END)
        out.write(b"\n" + "\n".join(_event(n, f"s{n}") for n in range(10)).encode() + b"\n")
    assert cli.main(["events", "-c", conf, "big-1", "-n", "5"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert [line.split()[1] for line in lines] == ["e5", "e6", "e7", "e8", "e9"], lines
    assert "s4→s5" in lines[0] and captured.err == "", captured.err[:300]
    assert cli.main(["events", "-c", conf, "big-1", "-n", "5", "--json"]) == 0
    assert [json.loads(x)["event"] for x in capsys.readouterr().out.splitlines()] == [
        "e5", "e6", "e7", "e8", "e9"
    ]  # fmt: skip
    assert cli.main(["events", "-c", conf, "big-1", "-n", "0"]) == 0
    assert capsys.readouterr().out == ""


def test_a_hostile_event_line_is_one_damaged_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent can append to its task's ``events.jsonl``: a line nested 100,000 deep made
    ``events`` (``RecursionError``) print a traceback; it is one damaged line now, and the
    status view and the web page pass over it too."""
    from supervisor.views import model, webpage

    conf = str(_profile(tmp_path))
    folder = _manifest(tmp_path, "deep-1", "running")
    deep = "[" * 100_000
    (folder / "events.jsonl").write_text(
        f"{_event(1, 'running')}\n{deep}\n{_event(2, 'running')}\n"
    )
    assert cli.main(["events", "-c", conf, "deep-1"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2 and "damaged line" in captured.err
    assert "Traceback" not in captured.err and len(captured.err.splitlines()) == 1
    assert model.status_since(str(folder / "events.jsonl"), "running") is not None
    assert len(webpage.task_view(folder)["events"]) == 2
    assert TaskDir(folder).events()[-1]["event"] == "e2"


def test_agent_writable_files_never_block_or_break_the_engine(tmp_path: Path) -> None:
    """The engine reads hook files and ``events.jsonl`` an agent can write: a FIFO named as
    a hook signal, a hook file nested too deep, a FIFO in place of ``events.jsonl`` must
    neither block its check worker nor raise; appending an event to a FIFO is an
    ``OSError`` (logged), not a write that blocks once the pipe is full."""
    from supervisor.agents.claude import hooks

    folder = tmp_path / "task"
    folder.mkdir()
    fifo = folder / "hook-00000000000000000001-1-PreToolUse.json"
    os.mkfifo(fifo)
    (folder / "hook-00000000000000000002-1-PreToolUse.json").write_text("[" * 100_000)
    found = _bounded(lambda: hooks.read_hooks(folder), [fifo])
    assert [h.data for h in found] == [{}, {}]  # type: ignore[attr-defined]
    os.mkfifo(folder / "events.jsonl")
    task = TaskDir(folder)
    assert _bounded(task.events, [folder / "events.jsonl"]) == []
    with pytest.raises(OSError):
        for _ in range(2000):  # more than a pipe holds (64 KiB)
            task.append_event("checked", reason="x" * 100)


def test_wait_without_an_inotify_instance_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user whose 128 inotify instances are taken (127 ``wait``s of an orchestrator, or an
    editor's watchers) got a traceback from ``wait``. It polls instead and still returns
    when the task ends. (Faked with ``inotify_init1`` failing EMFILE: really using up the
    user's instances would break the other programs and tests of that user meanwhile.)"""
    import errno

    import inotify_simple

    from supervisor.waiting import wait_tasks

    def exhausted(*_: object, **__: object) -> None:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(inotify_simple, "INotify", exhausted)
    conf = _profile(tmp_path)
    _manifest(tmp_path, "slow-1", "running")
    profile = cli.load_profile(str(conf))

    def end() -> None:
        _manifest(tmp_path, "slow-1", "completed", verdict="PASS")

    ender = threading.Timer(1.0, end)  # it ends while wait polls
    ender.start()
    try:
        outcome = wait_tasks(profile, ["slow-1"], 60)
    finally:
        ender.join(30)
    assert outcome.code == 0 and outcome.shown[0]["status"] == "completed"


def test_another_user_gets_one_line_not_a_traceback(other_user: str, base: Path) -> None:  # noqa: F811
    """Another local user (``runuser``) running the new commands on a profile whose state
    dir is 0700 (as ``supervise`` makes it): they read nothing, as before, and now each
    command says so in one line naming the file and its owner, exit 1, instead of a
    ``PermissionError`` traceback."""
    import site
    import subprocess
    import sys

    system = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2])"],
                            capture_output=True, text=True, check=False)  # fmt: skip
    if system.stdout.strip() != str(sys.version_info[:2]):
        pytest.skip("the system python3 cannot load this venv's packages")
    conf = _profile(base)
    folder = _manifest(base, "t-1", "running")
    (folder / "events.jsonl").write_text(_event(1, "running") + "\n")
    (base / "state" / "engine.log").write_text("started\n")
    os.chmod(base / "state", 0o700)
    os.chmod(conf, 0o644)
    path = os.pathsep.join([str(Path(cli.__file__).parents[2]), *site.getsitepackages()])
    c = str(conf)
    commands = [
        ["status"], ["show", "t-1"], ["tail", "t-1"], ["events", "t-1"], ["logs"],
        ["stop", "t-1"], ["wait", "t-1", "--timeout", "1"], ["continue", "t-1", "x"],
    ]  # fmt: skip
    for name, *rest in commands:
        argv = [name, "-c", c, *rest]
        done = subprocess.run(
            ["runuser", "-u", other_user, "--", "env", f"PYTHONPATH={path}",
             "/usr/bin/python3", "-m", "supervisor.cli", *argv],
            capture_output=True, text=True, timeout=60, check=False, cwd="/",
        )  # fmt: skip
        assert done.returncode == 1, (argv, done.stderr[-1500:])
        assert len(done.stderr.splitlines()) == 1, (argv, done.stderr[-1500:])
        assert "permission denied" in done.stderr and "uid 0" in done.stderr, done.stderr


def test_run_without_an_inotify_instance_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``supervise run`` when the user's inotify instances are used up printed a traceback;
    it cannot start (exit 1) and says why in one line with the fix. (Faked as in
    :func:`test_wait_without_an_inotify_instance_polls`.)"""
    import errno

    from supervisor.engine import watch

    def exhausted(*_: object, **__: object) -> None:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(watch, "INotify", exhausted)
    conf = _profile(tmp_path)
    assert cli.main(["run", str(conf), "--exit-when-idle"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if "supervise run" in line]
    assert len(err) == 1 and "max_user_instances" in err[0], err


def test_a_fifo_as_the_stream_never_blocks_a_follow_up_launch(tmp_path: Path) -> None:
    """The turn's mark goes into ``stream.jsonl``, which the agent can replace: a FIFO
    there (no reader: a plain open for writing would wait forever on the engine's launch)
    or a symlink makes the launch fail with an ``OSError``, at once."""
    from supervisor.agents.claude.stream import mark_turn

    fifo = tmp_path / "stream.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        _bounded(lambda: mark_turn(fifo), [])
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        mark_turn(link)
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.e2e
def test_a_real_follow_up_turn_has_its_own_cost(harness) -> None:  # noqa: F811
    """The real CLI 2.1.328 against the mock: turn 2 of a headless task starts at the
    ``supervise_turn`` line, so its ``claude.turn_cost_usd`` is its own (below the task's
    ``total_cost_usd``, which adds turn 1's) and its result is a fresh one."""
    h = harness(final_text="DONE: turn over")
    project = h.project()
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]})
    h.submit("chat", "Create hello.txt, then say DONE.", project, model="sonnet")
    h.start()
    h.finish()
    first = h.manifests()["chat"]
    assert first["status"] == "completed", h.diagnostics()
    asked = h.cli("continue", "-c", str(h.profile), first["task_id"], "Now say DONE again.")
    assert asked.returncode == 3, asked.stderr
    h.start()
    h.finish()
    second = h.manifests()["chat"]
    info = json.dumps(second, indent=1) + h.diagnostics()
    claude = second["claude"]
    assert (second["status"], second["turn"]) == ("completed", 2), info
    assert claude["result"] and claude["is_error"] is False, info
    total, own = claude["total_cost_usd"], claude["turn_cost_usd"]
    assert own > 0 and total == pytest.approx(own + first["claude"]["total_cost_usd"]), info
    marks = (Path(second["tmpdir"]) / "stream.jsonl").read_text().count('"supervise_turn"')
    assert marks == 1, info
