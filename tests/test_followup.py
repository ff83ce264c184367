"""``supervise continue`` (issue 22): an ended task's conversation goes on as a new turn,
under supervision, with the fake agent (tests/fake_agent.py prints ``resumed session ID``
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
from supervisor.taskdir import FOLLOWED_UP, FOLLOWUP, TaskDir

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
    assert names.count(FOLLOWED_UP) == 1
    assert names.count("completed") == 2 and names.count("launched") == 2
    assert names.index(FOLLOWED_UP) < len(names) - names[::-1].index("launched") - 1


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
    assert names.count(FOLLOWED_UP) == 1


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
        FOLLOWED_UP,
        status="queued",
        turn=2,
        prompt="print: after a crash",
        prompt_sha256=hashlib.sha256(prompt).hexdigest(),
    )
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    _, manifest = _only_task(setup)
    assert manifest["turn"] == 2 and manifest["status"] == "completed", manifest
    assert [e["event"] for e in setup.events(task_id)].count(FOLLOWED_UP) == 1
    assert (setup.project / "received_prompt.bin").read_bytes() == prompt


def test_an_archived_task_says_where_it_is(setup: Setup, tmp_path: Path) -> None:
    task_id, _ = _first_turn(setup)
    archived = setup.supervise("archive", "-c", str(setup.profile), "--older-than", "0s")
    assert archived.returncode == 0, archived.stderr
    asked = _continue(setup, task_id, "print: more")
    assert asked.returncode == 1, asked.stderr
    assert "is archived in" in asked.stderr and ".tar.gz" in asked.stderr
