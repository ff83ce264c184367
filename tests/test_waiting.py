"""Issue 22 item 2: ``supervise wait`` returns when a task needs a person (exit 10, with what
it needs), ``--terminal-only`` waits through it, and ``needs-you`` wins over endings.

``wait`` reads only the task folders, so these tests write the manifests the engine writes
(atomically, by rename) and drive the real ``supervise wait`` process; the escalation that a
real agent raises and ``approve`` answers is tests/test_waiting_e2e.py's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Setup, wait_for
from support.waiting_tasks import PERMISSION, _task, _wait

from supervisor.waiting import EXIT_NEEDS_YOU, UnknownTasks, needs_of, wait_tasks

BREAKER = {
    "reason": "circuit breaker: 3 consecutive denials or failed tool calls",
    "since": "2026-11-26T03:00:00Z",
    "paused": True,
}


def _background(setup: Setup, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "wait", "-c", str(setup.profile), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode, out, err


def test_an_escalated_task_returns_at_once_with_exit_10_and_what_it_needs(setup: Setup) -> None:
    setup.write_profile()
    _task(setup, "t-esc", "escalated", escalation=PERMISSION)
    _task(setup, "t-brk", "escalated", escalation=BREAKER)
    # no --timeout: only "needs you" can end this wait (the test's own timeout is the net)
    done = _wait(setup, "t-esc", "--json")
    assert done.returncode == EXIT_NEEDS_YOU == 10, done.stderr
    [entry] = json.loads(done.stdout)
    assert entry == {
        "task_id": "t-esc",
        "status": "escalated",
        "verdict": None,
        "needs": {
            "kind": "permission",
            "reason": "Bash 'rm -rf x' waits for approve or deny: rule 2 (Bash ~ /^rm/)",
            "tool": "Bash",
            "subject": "rm -rf x",
            "rule": 2,
            "detail": PERMISSION["reason"],
            "since": PERMISSION["since"],
            "source": "hook",
        },
    }
    assert "need you" in done.stderr and "approve" in done.stderr
    text = _wait(setup, "t-esc", "t-brk")
    assert text.returncode == 10, text.stderr
    assert text.stdout.splitlines() == [
        "t-esc: escalated needs-you Bash(rm -rf x) rule 2 (Bash ~ /^rm/)",
        f"t-brk: escalated needs-you {BREAKER['reason']}",
    ]
    breaker = json.loads(_wait(setup, "t-brk", "--json").stdout)[0]["needs"]
    assert (breaker["kind"], breaker["tool"], breaker["rule"]) == ("circuit_breaker", None, None)


def test_needs_you_wins_over_endings_and_terminal_only_waits_through_it(setup: Setup) -> None:
    setup.write_profile()
    _task(setup, "t-ok", "completed", verdict="PASS")
    _task(setup, "t-bad", "failed", verdict="FAIL", failure_reason="exit")
    _task(setup, "t-esc", "escalated", escalation=PERMISSION)
    mixed = _wait(setup, "t-ok", "t-bad", "t-esc", "--json")
    assert mixed.returncode == EXIT_NEEDS_YOU, mixed.stderr
    shown = json.loads(mixed.stdout)
    assert [(m["task_id"], m["status"]) for m in shown] == [
        ("t-ok", "completed"),
        ("t-bad", "failed"),
        ("t-esc", "escalated"),
    ]
    assert "needs" not in shown[0] and shown[2]["needs"]["kind"] == "permission"
    # --terminal-only: the old behaviour, the escalation is waited through until the timeout
    held = _wait(setup, "t-ok", "t-esc", "--terminal-only", "--timeout", "1")
    assert held.returncode == 124, held.stderr
    assert "t-esc: escalated -" in held.stdout and "needs-you" not in held.stdout
    # ... and until the task ends: answered, then completed
    waiter = _background(setup, "t-esc", "--terminal-only", "--json")
    wait_for(lambda: waiter.poll() is None and (setup.state / "tasks").is_dir(), timeout=60)
    _task(setup, "t-esc", "running")
    _task(setup, "t-esc", "completed", verdict="PASS")
    code, out, err = _finish(waiter)
    assert code == 0, err
    assert json.loads(out)[0]["status"] == "completed"


def test_a_running_task_that_escalates_wakes_the_wait_and_an_answer_lets_it_end(
    setup: Setup,
) -> None:
    """Escalated while ``wait`` blocks: woken by the manifest's rename (inotify). Answered
    and ended (what ``approve`` leads to): the next ``wait`` exits 0."""
    setup.write_profile()
    _task(setup, "t-run", "running")
    waiter = _background(setup, "t-run", "--json")
    # it blocks on a running task (stderr: the no-engine warning, printed before blocking)
    assert wait_for(lambda: waiter.poll() is None and (setup.state / "tasks" / "t-run").is_dir())
    _task(setup, "t-run", "escalated", escalation=BREAKER)
    code, out, err = _finish(waiter)
    assert code == EXIT_NEEDS_YOU, err
    assert json.loads(out)[0]["needs"]["kind"] == "circuit_breaker"
    _task(setup, "t-run", "running")  # approved
    waiter = _background(setup, "t-run")
    _task(setup, "t-run", "completed", verdict="PASS")
    code, out, err = _finish(waiter)
    assert (code, out) == (0, "t-run: completed PASS\n"), err


def test_hostile_escalation_values_stay_one_escaped_line(setup: Setup) -> None:
    """The subject and rule come from the agent's tool input and the task's rules: newlines,
    escape sequences and bidi controls are shown escaped, one line per task; odd types in
    the record are treated as absent."""
    setup.write_profile()
    hostile = {
        "reason": "rule 1\x1b[2J",
        "tool": "Bash",
        "subject": "rm -rf /\nt-fake: completed PASS\u202e" + "x" * 20_000,
    }
    _task(setup, "t-evil", "escalated", escalation=hostile)
    _task(setup, "t-odd", "escalated", escalation={"tool": 7, "subject": ["x"], "paused": "yes"})
    _task(setup, "t-none", "escalated", escalation="not a record")
    done = _wait(setup, "t-evil", "t-odd", "t-none")
    assert done.returncode == EXIT_NEEDS_YOU, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith("t-evil: escalated needs-you Bash(rm -rf /")
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout
    assert lines[1] == "t-odd: escalated needs-you ?()"
    assert lines[2] == "t-none: escalated needs-you escalation"
    raw = json.loads(_wait(setup, "t-odd", "--json").stdout)[0]["needs"]
    assert raw["tool"] is None and raw["subject"] is None and raw["kind"] == "permission"


def test_wait_tasks_is_the_callable_the_cli_uses(setup: Setup) -> None:
    """The interface other parts call (MCP, ``submit --wait``)."""
    from supervisor.config import load_profile

    setup.write_profile()
    _task(setup, "t-esc", "escalated", escalation=PERMISSION)
    profile = load_profile(setup.profile)
    outcome = wait_tasks(profile, ["t-esc", "t-esc"], timeout=None)
    assert (outcome.code, outcome.needs_you, outcome.pending) == (10, ("t-esc",), ())
    held = wait_tasks(profile, ["t-esc"], timeout=0.2, terminal_only=True)
    assert (held.code, held.pending) == (124, ("t-esc",))
    with pytest.raises(UnknownTasks) as caught:
        wait_tasks(profile, ["nope-1", "../x"], timeout=None)
    assert caught.value.ids == ["nope-1", "../x"] and "\n" not in str(caught.value)
    assert needs_of({"status": "running", "escalation": PERMISSION}) is None


def test_unknown_ids_are_usage_errors_before_any_wait(setup: Setup, tmp_path: Path) -> None:
    setup.write_profile()
    _task(setup, "t-esc", "escalated", escalation=PERMISSION)
    done = _wait(setup, "t-esc", "nope-123456")
    assert done.returncode == 2 and "no task nope-123456" in done.stderr
    assert done.stdout == ""
