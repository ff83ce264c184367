"""``supervise continue`` (issue 22): an ended task's conversation goes on as a new turn,
under supervision, with the fake agent (tests/support/fake_agent.py prints ``resumed session ID``
when resumed and keeps the prompt it got in ``received_prompt.bin``)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Setup, wait_for

from supervisor import engine_probe
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import FOLLOWUP, TaskDir

PATIENCE = 60


def _only_task(setup: Setup) -> tuple[str, dict]:
    (manifest,) = setup.manifests().values()
    return manifest["task_id"], manifest


def _continue(
    setup: Setup, task_id: str, prompt: str, *extra: str, **kw
) -> subprocess.CompletedProcess:
    return setup.supervise("continue", "-c", str(setup.profile), task_id, prompt, *extra, **kw)


def _first_turn(setup: Setup, prompt: str = "print: first turn\n", **monitor) -> tuple[str, dict]:
    setup.write_profile(**monitor)
    setup.drop("t.toml", setup.task("t", prompt))
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    task_id, manifest = _only_task(setup)
    assert manifest["status"] == "completed", manifest
    return task_id, manifest


def test_a_completed_task_continues_as_a_second_turn(setup: Setup) -> None:
    """completed -> continue -> the second turn completes in the same session and folder;
    the manifest keeps the first turn's outcome in ``turns``."""
    task_id, first = _first_turn(setup)
    assert first["turn"] == 1 and first["turns"] == []
    asked = _continue(setup, task_id, "print: second turn\n", "--json")
    assert asked.returncode == 3, asked.stderr  # no engine runs: queued
    assert json.loads(asked.stdout)["result"] == "queued"
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    _, second = _only_task(setup)
    assert second["status"] == "completed" and second["verdict"] == "PASS", second
    assert second["turn"] == 2 and second["retry_count"] == 0
    (earlier,) = second["turns"]
    assert earlier["turn"] == 1 and earlier["status"] == "completed"
    assert earlier["verdict"] == "PASS" and earlier["prompt"] == "print: first turn"
    assert earlier["started_at"] == first["started_at"]
    assert earlier["finished_at"] == first["finished_at"]
    assert second["started_at"] > first["finished_at"]  # a new deadline counts from here
    # the same session, resumed, with the new prompt
    assert (setup.project / "received_prompt.bin").read_bytes() == b"print: second turn\n"
    argv = json.loads((setup.project / "received_argv.json").read_text())
    assert argv[argv.index("--resume") + 1] == first["session_id"]
    assert "second turn" in second["output_tail"]
    names = [e["event"] for e in setup.events(task_id)]
    assert names.count(Event.FOLLOWED_UP) == 1
    assert names.count("completed") == 2 and names.count("launched") == 2
    assert names.index(Event.FOLLOWED_UP) < len(names) - names[::-1].index("launched") - 1


def test_continue_on_a_running_engine_is_applied(setup: Setup) -> None:
    """With a live engine, ``continue`` returns once the new turn is recorded (exit 0)."""
    task_id, _ = _first_turn(setup)
    engine = setup.start()
    try:
        wait_for(lambda: engine_probe.engine(setup.state).lock_held, timeout=PATIENCE)
        asked = _continue(setup, task_id, "print: again\n", "--wait", str(PATIENCE))
        assert asked.returncode == 0, asked.stderr
        assert asked.stdout.startswith(f"{task_id}: turn 2 ")
        wait_for(lambda: _only_task(setup)[1]["status"] == "completed", timeout=PATIENCE)
    finally:
        engine.terminate()
        engine.wait(timeout=PATIENCE)
    assert _only_task(setup)[1]["turn"] == 2


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [("", "prompt is empty"), ("  \n", "prompt is empty")],
)
def test_an_empty_prompt_is_refused(setup: Setup, prompt: str, expected: str) -> None:
    task_id, _ = _first_turn(setup)
    asked = _continue(setup, task_id, prompt)
    assert asked.returncode == 1 and expected in asked.stderr, asked.stderr
    assert len(asked.stderr.strip().splitlines()) == 1
    assert not (setup.state / "tasks" / task_id / FOLLOWUP).exists()


def test_the_prompt_can_come_from_stdin(setup: Setup) -> None:
    task_id, _ = _first_turn(setup)
    asked = _continue(setup, task_id, "-", input="print: from stdin\n")
    assert asked.returncode == 3, asked.stderr
    folder = setup.state / "tasks" / task_id
    assert (folder / FOLLOWUP).read_text() == "print: from stdin\n"


def test_unknown_and_running_tasks_are_refused(setup: Setup) -> None:
    setup.write_profile()
    gone = _continue(setup, "no-such-task", "x")
    assert gone.returncode == 1 and "no task 'no-such-task'" in gone.stderr
    setup.drop("t.toml", setup.task("t", "sleep: 60\n"))
    engine = setup.start()
    try:
        wait_for(lambda: setup.manifests().get("t", {}).get("status") == "running", PATIENCE)
        task_id, _ = _only_task(setup)
        asked = _continue(setup, task_id, "print: more")
        assert asked.returncode == 1, asked.stderr
        assert "still running: wait for it or stop it first" in asked.stderr
        assert not (setup.state / "tasks" / task_id / FOLLOWUP).exists()
    finally:
        engine.terminate()
        engine.wait(timeout=PATIENCE)
        setup.supervise("stop", "-c", str(setup.profile), _only_task(setup)[0], "--wait", "0")


def test_a_generic_agent_without_a_resume_command_cannot_continue(setup: Setup) -> None:
    task_id, _ = _first_turn(setup)
    data = setup.profile.read_text().split("resume_command = [")[0]
    rest = setup.profile.read_text().split("resume_command = [")[1].split("]\n", 1)[1]
    setup.profile.write_text(data + rest)
    asked = _continue(setup, task_id, "print: more")
    assert asked.returncode == 1, asked.stderr
    assert "resume_command is not set" in asked.stderr


def test_two_continues_at_once_start_exactly_one_turn(setup: Setup) -> None:
    """Two ``continue`` at once: one is taken, the other refuses (one line), never two
    turns."""
    task_id, _ = _first_turn(setup)
    argv = [sys.executable, "-m", "supervisor.cli", "continue", "-c", str(setup.profile), task_id]
    procs = [
        subprocess.Popen(
            [*argv, f"print: turn {n}\n"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for n in (1, 2)
    ]
    results = [(p.wait(timeout=PATIENCE), p.stderr.read()) for p in procs if p.stderr]
    codes = sorted(code for code, _ in results)
    assert codes == [1, 3], results
    refused = next(err for code, err in results if code == 1)
    assert "another follow-up waits" in refused, refused
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    _, manifest = _only_task(setup)
    assert manifest["turn"] == 2 and len(manifest["turns"]) == 1
    names = [e["event"] for e in setup.events(task_id)]
    assert names.count(Event.FOLLOWED_UP) == 1


def test_an_engine_killed_after_the_turn_event_neither_loses_nor_doubles_it(
    setup: Setup,
) -> None:
    """SIGKILL between the write-ahead event and the manifest: the next engine finishes
    the same turn (one event, turn 2), never a third."""
    task_id, _ = _first_turn(setup)
    folder = setup.state / "tasks" / task_id
    prompt = b"print: after a crash\n"
    (folder / FOLLOWUP).write_bytes(prompt)
    TaskDir(folder).append_event(
        Event.FOLLOWED_UP,
        status="queued",
        turn=2,
        prompt="print: after a crash",
        prompt_sha256=hashlib.sha256(prompt).hexdigest(),
    )
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    _, manifest = _only_task(setup)
    assert manifest["turn"] == 2 and manifest["status"] == "completed", manifest
    assert [e["event"] for e in setup.events(task_id)].count(Event.FOLLOWED_UP) == 1
    assert (setup.project / "received_prompt.bin").read_bytes() == prompt


def test_an_archived_task_says_where_it_is(setup: Setup, tmp_path: Path) -> None:
    task_id, _ = _first_turn(setup)
    archived = setup.supervise("archive", "-c", str(setup.profile), "--older-than", "0s")
    assert archived.returncode == 0, archived.stderr
    asked = _continue(setup, task_id, "print: more")
    assert asked.returncode == 1, asked.stderr
    assert "is archived in" in asked.stderr and ".tar.gz" in asked.stderr


# ---------------------------------------------------------------- Claude's follow-up launch


def test_claude_follow_up_resumes_the_session_with_the_turn_prompt(tmp_path: Path) -> None:
    """Headless: ``--resume`` with the turn's prompt on stdin (no prompt in argv, never the
    profile's resume_prompt); the TUI: ``--resume`` with the prompt as its argument, or
    pasted when too long for argv."""
    from support.prompt_claude import _claude

    from supervisor.agents.claude import delivery
    from supervisor.config.argsize import ARGV_PROMPT_MAX
    from supervisor.taskdir.folder import TURN_PROMPT

    headless = _claude(tmp_path, "the follow-up").follow_up()
    assert "--resume" in headless.argv and "--session-id" not in headless.argv
    assert "--" not in headless.argv and "continue the task" not in headless.argv
    assert headless.stdin == str(tmp_path / "task" / TURN_PROMPT)
    tui = _claude(tmp_path, "the follow-up", mode="interactive").follow_up()
    assert "--resume" in tui.argv and tui.argv[-2:] == ["--", "{prompt}"] and tui.stdin is None
    long = _claude(tmp_path, "x" * (ARGV_PROMPT_MAX + 1), mode="interactive").follow_up()
    assert "--resume" in long.argv and "{prompt}" not in long.argv
    assert long.paste is not None and long.paste["path"].endswith(delivery.PASTE_FILE)


# ---------------------------------------------------------------- attacks


def test_a_fifo_in_place_of_the_follow_up_is_refused_without_a_hang(setup: Setup) -> None:
    """A FIFO where the prompt should be (odd file type): the engine never blocks on it;
    the follow-up is refused with an event and the task stays at turn 1."""
    import os

    from supervisor.taskdir import control

    task_id, _ = _first_turn(setup)
    os.mkfifo(setup.state / "tasks" / task_id / FOLLOWUP)
    control.request(setup.state, task_id, control.CONTINUE)
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    _, manifest = _only_task(setup)
    assert manifest["turn"] == 1 and manifest["status"] == "completed"
    refused = [e for e in setup.events(task_id) if e["event"] == Event.CONTINUE_REFUSED]
    assert refused and "cannot read its follow-up" in refused[0]["reason"]
    assert not (setup.state / "tasks" / task_id / FOLLOWUP).exists()


def test_an_engine_killed_before_the_prompt_was_moved_runs_the_turn_once(setup: Setup) -> None:
    """SIGKILL after the manifest opened turn 2 and before the prompt file was renamed:
    the next engine runs turn 2 with that prompt, once."""
    from supervisor import turnlog

    task_id, _ = _first_turn(setup)
    folder = TaskDir(setup.state / "tasks" / task_id)
    prompt = b"print: cut short\n"
    folder.file(FOLLOWUP).write_bytes(prompt)
    folder.append_event(
        Event.FOLLOWED_UP, status="queued", turn=2, prompt_sha256=hashlib.sha256(prompt).hexdigest()
    )
    folder.update_manifest(lambda m: turnlog.open_turn(m, 2, folder))
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    _, manifest = _only_task(setup)
    assert (manifest["turn"], manifest["status"], len(manifest["turns"])) == (2, "completed", 1)
    assert (setup.project / "received_prompt.bin").read_bytes() == prompt
    assert not folder.file(FOLLOWUP).exists()
    assert [e["event"] for e in setup.events(task_id)].count("launched") == 2


def test_a_prompt_over_the_limit_on_stdin_is_refused_in_one_line(setup: Setup) -> None:
    from supervisor.config import MAX_PROMPT_BYTES

    task_id, _ = _first_turn(setup)
    asked = _continue(setup, task_id, "-", input="x" * (MAX_PROMPT_BYTES + 1))
    assert asked.returncode == 1 and f"over {MAX_PROMPT_BYTES} bytes" in asked.stderr
    assert len(asked.stderr.strip().splitlines()) == 1


def test_a_hostile_task_id_is_refused_in_one_line(setup: Setup) -> None:
    setup.write_profile()
    for task_id in ("../x", "a\x1b[2Jb", "-rf"):
        asked = _continue(setup, task_id, "print: x")
        assert asked.returncode in (1, 2), asked.stderr
        assert "Traceback" not in asked.stderr and "\x1b" not in asked.stderr


def test_a_worktree_task_continues_in_its_worktree_until_discarded(setup: Setup) -> None:
    """The second turn runs in the same worktree (no second ``git worktree add``); once the
    worktree is discarded, ``continue`` refuses in one line."""

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(setup.project), *args], check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    (setup.project / "README").write_text("x\n")
    git("add", "README")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    setup.write_profile(extra={"workspace": {"mode": "worktree"}})
    setup.drop("t.toml", setup.task("t", "print: first\n"))
    assert setup.run(timeout=PATIENCE).returncode == 0
    task_id, first = _only_task(setup)
    worktree = Path(first["workspace"]["path"])
    assert _continue(setup, task_id, "print: second\n").returncode == 3
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    _, second = _only_task(setup)
    assert (second["turn"], second["status"]) == (2, "completed"), second
    assert second["workspace"]["path"] == str(worktree)
    assert (worktree / "fake_runs").read_text() == "2"
    assert (worktree / "received_prompt.bin").read_bytes() == b"print: second\n"
    names = [e["event"] for e in setup.events(task_id)]
    assert names.count("workspace_preparing") == 1
    discarded = setup.supervise("discard", "-c", str(setup.profile), task_id, "--yes")
    assert discarded.returncode == 0, discarded.stderr
    asked = _continue(setup, task_id, "print: third\n")
    assert asked.returncode == 1 and "worktree was discarded" in asked.stderr, asked.stderr


def test_a_damaged_manifest_of_a_later_turn_is_never_rebuilt_as_the_first(setup: Setup) -> None:
    """Attack (damaged state): turn 2 ran when its manifest was destroyed. The log's last
    ending is turn 1's, which says nothing of turn 2: the manifest is not rebuilt from it
    (the task is left ``damaged``, reported), never marked ended by turn 1's outcome."""
    task_id, _ = _first_turn(setup)
    folder = TaskDir(setup.state / "tasks" / task_id)
    folder.append_event(Event.FOLLOWED_UP, status="queued", turn=2, prompt_sha256="0" * 64)
    folder.append_event("launched", status="running", session_name=task_id)
    folder.file("manifest.json").write_text("{not json")
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    assert folder.file("manifest.json").read_text() == "{not json"
    status = setup.supervise("status", "-c", str(setup.profile), "--json")
    assert "damaged" in status.stdout, status.stdout


def _engine(setup: Setup) -> subprocess.Popen:
    engine = setup.start()
    wait_for(lambda: engine_probe.engine(setup.state).lock_held, timeout=PATIENCE)
    return engine


def test_a_follow_up_whose_caller_was_killed_is_taken_at_the_next_ask(setup: Setup) -> None:
    """Attack (SIGKILL halfway): a ``continue`` killed after leaving its prompt and before
    waking the engine. The next ``continue`` refuses (one waits already) and wakes the
    engine, which runs the waiting one: no follow-up stuck until a restart."""
    task_id, _ = _first_turn(setup)
    engine = _engine(setup)  # up first: its start would take the orphan by itself
    try:
        # The lock is held before the start-up (which takes orphans) ends; intake starts
        # after it, so a rejected spool file says the start-up is over.
        setup.drop("bad.toml", "not = [toml")
        wait_for((setup.spool / "rejected" / "bad.toml").exists, timeout=PATIENCE)
        (setup.state / "tasks" / task_id / FOLLOWUP).write_bytes(b"print: orphan\n")
        asked = _continue(setup, task_id, "print: mine\n")
        assert asked.returncode == 1 and "another follow-up waits" in asked.stderr
        wait_for(lambda: _only_task(setup)[1]["turn"] == 2, timeout=PATIENCE)
        wait_for(lambda: _only_task(setup)[1]["status"] == "completed", timeout=PATIENCE)
    finally:
        engine.terminate()
        engine.wait(timeout=PATIENCE)
    assert (setup.project / "received_prompt.bin").read_bytes() == b"print: orphan\n"


def test_two_continues_at_once_on_a_live_engine_start_one_turn(setup: Setup) -> None:
    task_id, _ = _first_turn(setup, "print: first\nsleep: 0\n")
    engine = _engine(setup)
    try:
        argv = [sys.executable, "-m", "supervisor.cli", "continue", "-c", str(setup.profile)]
        # The turn lasts until both have answered: on a loaded machine the second CLI can
        # start seconds after the first, when a 2 s turn would be over (then it is a second
        # turn of its own, rightly).
        release = setup.root / "release"
        turn = f"until_file: {release}\n"
        procs = [
            subprocess.Popen(
                [*argv, task_id, f"print: turn {n}\n{turn}", "--wait", str(PATIENCE)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in (1, 2)
        ]
        results = [(p.wait(timeout=PATIENCE), p.communicate()[1]) for p in procs]
        assert sorted(code for code, _ in results) == [0, 1], results
        release.touch()
        wait_for(lambda: _only_task(setup)[1]["status"] == "completed", timeout=PATIENCE)
    finally:
        engine.terminate()
        engine.wait(timeout=PATIENCE)
    _, manifest = _only_task(setup)
    assert manifest["turn"] == 2 and len(manifest["turns"]) == 1
    assert [e["event"] for e in setup.events(task_id)].count(Event.FOLLOWED_UP) == 1


def test_a_claude_task_without_a_session_and_a_fleet_profile_are_refused(setup: Setup) -> None:
    """Where the agent cannot resume (Claude Code never started a session: no session id in
    the manifest's ``claude``) and where the fleet cannot do it (a ``[cluster]`` profile),
    one line each says so."""
    import tomli_w

    task_id, _ = _first_turn(setup)
    claude = {**_profile_data(setup), "agent": {"kind": "claude", "binary": sys.executable}}
    setup.profile.write_text(tomli_w.dumps(claude))
    asked = _continue(setup, task_id, "print: more")
    assert asked.returncode == 1 and "never started a session" in asked.stderr, asked.stderr
    fleet = {**_profile_data(setup), "cluster": {"dsn": "postgresql://nowhere/x"}}
    setup.profile.write_text(tomli_w.dumps(fleet))
    asked = _continue(setup, task_id, "print: more")
    assert asked.returncode == 1 and "[cluster] profile" in asked.stderr, asked.stderr
    assert len(asked.stderr.strip().splitlines()) == 1


def _profile_data(setup: Setup) -> dict:
    import tomllib

    return tomllib.loads(setup.profile.read_text())
