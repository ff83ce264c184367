"""Issue 22, polish found by the Brain's trial (/work/notes/brain-trial.md): a turn's start
marked in the rendered output, the ``init --claude`` next steps, one prefix for every
refusal of the operator verbs, ``wait --json --brief``, and ``needs.rule`` apart from
``needs.reason``. The fake agent (tests/support/fake_agent.py) stands in for the agent's brain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Setup
from support.waiting_tasks import PERMISSION, _task, _wait

from supervisor.agents.readable import Follower, readable_tail

PATIENCE = 90


def _only(setup: Setup) -> dict:
    (manifest,) = setup.manifests().values()
    return manifest


def _first_turn(setup: Setup, prompt: str = "print: first turn\n") -> str:
    setup.write_profile()
    setup.drop("t.toml", setup.task("t", prompt))
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = _only(setup)
    assert manifest["status"] == "completed", manifest
    return manifest["task_id"]


def _second_turn(setup: Setup, task_id: str, prompt: str) -> None:
    asked = setup.supervise("continue", "-c", str(setup.profile), task_id, prompt)
    assert asked.returncode == 3, asked.stderr  # queued: the next engine takes it
    done = setup.run(timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (_only(setup)["status"], _only(setup)["turn"]) == ("completed", 2)


# ------------------------------------------------------------------ 1. turn marks


def test_tail_after_continue_shows_where_the_second_turn_starts_and_its_prompt(
    setup: Setup,
) -> None:
    task_id = _first_turn(setup)
    _second_turn(setup, task_id, "print: second turn\nmore lines of the prompt\n")
    tail = setup.supervise("tail", "-c", str(setup.profile), task_id, "-n", "50")
    assert tail.returncode == 0, tail.stderr
    lines = tail.stdout.splitlines()
    mark = "--- turn 2: print: second turn ---"
    assert lines.count(mark) == 1, lines
    at = lines.index(mark)
    assert any("first turn" in line for line in lines[:at]), lines
    assert any("second turn" in line for line in lines[at + 1 :]), lines
    assert "more lines" not in tail.stdout  # only the prompt's first line
    folder = setup.state / "tasks" / task_id
    assert mark in readable_tail(folder, 50).splitlines()  # the web box reads it
    follower = Follower(folder, "generic", start=0)  # as tail -f and the top tail screen
    try:
        assert mark in follower.read().splitlines()
    finally:
        follower.close()


def test_a_hostile_follow_up_prompt_is_one_escaped_cut_mark(setup: Setup) -> None:
    task_id = _first_turn(setup)
    hostile = "print: x \x1b[2J\u202e" + "y" * 5000 + "\n"
    _second_turn(setup, task_id, hostile)
    from supervisor.engine.turnmark import MARK_CHARS

    folder = setup.state / "tasks" / task_id
    raw = (folder / "output.log").read_text(encoding="utf-8", errors="replace")
    marks = [line for line in raw.splitlines() if line.startswith("--- turn 2: ")]
    assert len(marks) == 1, marks
    assert "\x1b" not in marks[0] and "\u202e" not in marks[0]
    assert "\\x1b" in marks[0] and len(marks[0]) <= MARK_CHARS + 20
    assert marks[0].endswith("… ---")


def test_turn_line_is_pure_and_bounded() -> None:
    from supervisor.engine.turnmark import turn_line

    assert turn_line(3, "Now write NOTES.md.\nsecond line") == "--- turn 3: Now write NOTES.md. ---"
    assert turn_line(2, "  \n") == "--- turn 2 ---"
    assert "\n" not in turn_line(2, "a\rb\x00c")


def test_marking_twice_writes_once_and_odd_files_are_refused(tmp_path: Path) -> None:
    """A launch tried again (an engine killed between the mark and the launch) marks once;
    a symlink or a FIFO in place of output.log is refused without following or blocking."""
    from supervisor.engine.turnmark import mark_turn

    folder = tmp_path / "task"
    folder.mkdir()
    (folder / "output.log").write_text("turn one's last words")  # no newline yet
    assert mark_turn(folder, 2, "again") and not mark_turn(folder, 2, "again")
    text = (folder / "output.log").read_text()
    assert text == "turn one's last words\n--- turn 2: again ---\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("")
    for odd in ("link", "fifo"):
        other = tmp_path / odd
        other.mkdir()
        if odd == "link":
            (other / "output.log").symlink_to(elsewhere)
        else:
            os.mkfifo(other / "output.log")
        with pytest.raises(OSError):
            mark_turn(other, 2, "x")
    assert elsewhere.read_text() == ""


# ------------------------------------------------------------------ 2. init --claude


def test_init_claude_next_lines_show_inline_submit_and_wait(tmp_path: Path) -> None:
    folder = tmp_path / "sup"
    done = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "init", "--claude", str(folder)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    profile = folder / "profile.toml"
    assert (
        f"supervise submit -c {profile} --prompt 'Say hello.' --project {folder / 'project'}"
        in done.stdout
    ), done.stdout
    assert f"supervise wait -c {profile} ID --json --brief" in done.stdout, done.stdout
    header = profile.read_text()
    assert f"--prompt 'Say hello.' --project {folder / 'project'}" in header
    assert "[agent.env] adds environment" in header and "ANTHROPIC_BASE_URL" in header
    assert profile.stat().st_mode & 0o077 == 0  # what the header says of it


# ------------------------------------------------------------------ 3. one refusal style


def test_every_verb_refusing_an_ended_task_names_itself(setup: Setup) -> None:
    setup.write_profile()
    _task(setup, "t-done", "completed", verdict="PASS")
    for verb in ("approve", "deny", "stop", "resume"):
        done = setup.supervise(verb, "-c", str(setup.profile), "t-done")
        assert done.returncode == 1 and done.stdout == "", done.stdout
        assert done.stderr == f"supervise {verb}: task t-done already ended: completed\n"
    _task(setup, "t-run", "running")
    done = setup.supervise("approve", "-c", str(setup.profile), "t-run", "nope-123456")
    assert done.returncode == 1
    for line in done.stderr.splitlines():
        assert line.startswith("supervise approve: "), done.stderr


def test_continue_refusals_name_the_command(setup: Setup) -> None:
    setup.write_profile()
    _task(setup, "t-run", "running")
    done = setup.supervise("continue", "-c", str(setup.profile), "t-run", "more")
    assert done.returncode == 1
    assert done.stderr.startswith("supervise continue: "), done.stderr
    assert len(done.stderr.splitlines()) == 1


# ------------------------------------------------------------------ 4. wait --brief


def test_wait_json_brief_leaves_out_the_raw_output(setup: Setup) -> None:
    setup.write_profile()
    claude = {"result": "DONE: curl works", "total_cost_usd": 0.05, "session_id": "s-1"}
    _task(setup, "t-done", "completed", verdict="PASS", turn=2, summary="Agent: DONE",
          output_tail='{"type":"system"}' * 2000, claude=claude)  # fmt: skip
    full = json.loads(_wait(setup, "t-done", "--json").stdout)[0]
    assert "output_tail" in full  # the documented default: the whole manifest
    done = _wait(setup, "t-done", "--json", "--brief")
    assert done.returncode == 0, done.stderr
    [entry] = json.loads(done.stdout)
    assert entry == {
        "task_id": "t-done",
        "task_name": "t-done",
        "status": "completed",
        "verdict": "PASS",
        "turn": 2,
        "failure_reason": None,
        "abandon_reason": None,
        "summary": "Agent: DONE",
        "result": "DONE: curl works",
        "cost_usd": 0.05,
    }
    _task(setup, "t-esc", "escalated", escalation=PERMISSION)
    needs = json.loads(_wait(setup, "t-esc", "--json", "--brief").stdout)[0]
    assert needs["needs"]["tool"] == "Bash"  # what a task needs is already small
    alone = _wait(setup, "t-done", "--brief")  # --brief is JSON by itself
    assert alone.returncode == 0 and json.loads(alone.stdout) == [entry], alone.stderr
    odd = {"result": {"x": 1}, "total_cost_usd": True}
    _task(setup, "t-odd", "failed", verdict="FAIL", claude=odd, output_tail="\x1b[2J")
    [strange] = json.loads(_wait(setup, "t-odd", "--brief").stdout)
    assert (strange["result"], strange["cost_usd"]) == (None, None)
    assert "output_tail" not in strange


# ------------------------------------------------------------------ 5. needs.rule


def test_needs_rule_is_the_rule_index_and_reason_a_sentence(setup: Setup) -> None:
    setup.write_profile()
    _task(setup, "t-esc", "escalated", escalation={**PERMISSION, "rule": 2})
    _task(setup, "t-old", "escalated", escalation=PERMISSION)  # written before "rule" was kept
    _task(setup, "t-def", "escalated", escalation={**PERMISSION, "reason": "default"})
    shown = json.loads(_wait(setup, "t-esc", "t-old", "t-def", "--json").stdout)
    esc, old, default = (entry["needs"] for entry in shown)
    assert (esc["rule"], old["rule"], default["rule"]) == (2, 2, None)
    assert esc["detail"] == "rule 2 (Bash ~ /^rm/)"
    assert esc["reason"] == "Bash 'rm -rf x' waits for approve or deny: rule 2 (Bash ~ /^rm/)"
    assert esc["reason"] != esc["rule"]
    text = _wait(setup, "t-esc")
    assert text.stdout == "t-esc: escalated needs-you Bash(rm -rf x) rule 2 (Bash ~ /^rm/)\n"
