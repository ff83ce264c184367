"""The Claude Code adapter's turn facts (issue 21, :mod:`supervisor.agents.claude.turns`):
``StopFailure`` in the TUI ends the run, work after it means the CLI went on by itself,
``PermissionDenied`` is audited (``by`` = ``classifier``) and counted by the circuit
breaker; and the audit's ``by`` names who ruled (:mod:`supervisor.audit`).

Hooks are fired through the real relay command of the generated ``--settings`` (a real
process reading the hook input on stdin, as Claude Code runs it). The hook inputs follow
the Claude Code hooks reference and what CLI 2.1.328 sent (tests/fixtures/claude/).
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.agent_adapters import _adapter, _agent

from supervisor.agents.claude import hooks
from supervisor.audit import By, ended_by
from supervisor.config import ApprovalRule
from supervisor.policy import approval
from supervisor.taskdir.folder import TaskDir

HEADLESS = Path(__file__).parent / "fixtures" / "claude" / "headless"

SESSION = "00000000-0000-4000-8000-000000000000"
HOOKS = Path(__file__).parent / "fixtures" / "claude" / "hooks"


def measured(name: str) -> dict[str, Any]:
    """A hook input the real CLI sent (tests/fixtures/claude/hooks/README.md)."""
    data: dict[str, Any] = json.loads((HOOKS / name).read_text(encoding="utf-8"))
    data.pop("hook_event_name", None)
    return data


def fire(task: Path, event: str, **data: Any) -> None:
    """Run the relay command the settings register for ``event`` with ``data`` as input."""
    entry = hooks.settings(task, 60)["hooks"][event][0]
    command = entry["hooks"][0]["command"]
    hook_input = {"session_id": SESSION, "hook_event_name": event, **data}
    done = subprocess.run(
        ["bash", "-c", command], input=json.dumps(hook_input).encode(), timeout=30, check=False
    )
    assert done.returncode == 0


def permissions(task: Path) -> list[dict[str, Any]]:
    return [e for e in TaskDir(task).events() if e["event"] == "permission"]


def test_new_hooks_are_registered_with_a_tool_matcher_where_they_take_one(tmp_path: Path) -> None:
    registered = hooks.settings(tmp_path, 60)["hooks"]
    assert registered["PermissionDenied"][0]["matcher"] == "*"
    assert "matcher" not in registered["UserPromptSubmit"][0]


def test_stop_failure_in_the_tui_reports_the_failed_turn(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, _agent("claude", mode="interactive"))
    adapter.launch(resume=False)
    task = tmp_path / "task"
    fire(task, "StopFailure", **measured("stopfailure-authentication_failed.json"))
    view = adapter.observe(100.0, "running", None)
    assert (view.turn_failure, view.failure) == ("authentication_failed", "auth")
    # the fact holds until a new run or new work: the next check still sees it
    assert adapter.observe(101.0, "running", None).turn_failure == "authentication_failed"
    adapter.launch(resume=True)
    assert adapter.observe(102.0, "running", None).turn_failure is None


def test_work_after_a_limited_turn_means_the_cli_went_on_by_itself(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, _agent("claude", mode="interactive"))
    adapter.launch(resume=False)
    task = tmp_path / "task"
    fire(task, "StopFailure", error="rate_limit", last_assistant_message="limit · resets 4am")
    view = adapter.observe(100.0, "running", None)
    assert view.limit and view.turn_failure == "rate_limit" and not view.agent_working
    fire(task, "UserPromptSubmit", **measured("userpromptsubmit.json"))
    view = adapter.observe(200.0, "waiting", None)
    assert view.agent_working and not view.limit
    assert view.turn_failure is None and view.failure is None
    assert not adapter.observe(201.0, "running", None).agent_working  # counted per check


def test_a_server_error_turn_is_transient(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, _agent("claude", mode="interactive"))
    adapter.launch(resume=False)
    fire(tmp_path / "task", "StopFailure", **measured("stopfailure-server_error.json"))
    view = adapter.observe(100.0, "running", None)
    assert (view.turn_failure, view.failure, view.limit) == ("server_error", "transient", False)


@pytest.mark.parametrize(
    "error",
    ["x" * 1_000_000, "auth\nfailed\u202e\x00", {"nested": ["not", "a string"]}, ""],
    ids=["1MB", "controls", "object", "empty"],
)
def test_a_hostile_stop_failure_error_is_kept_short_and_plain(tmp_path: Path, error: Any) -> None:
    """The hook's ``error`` ends up in reason lines, the summary and the notifier: a huge,
    multi-line, bidi or non-string value is cut to a plain identifier."""
    adapter = _adapter(tmp_path, _agent("claude", mode="interactive"))
    adapter.launch(resume=False)
    fire(tmp_path / "task", "StopFailure", error=error, last_assistant_message="boom")
    failure = adapter.observe(100.0, "running", None).turn_failure
    assert failure is not None and 0 < len(failure) <= 64
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", failure), failure


def test_headless_stop_failure_is_left_to_the_stream(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, _agent("claude"))
    adapter.launch(resume=False)
    fire(tmp_path / "task", "StopFailure", error="authentication_failed")
    view = adapter.observe(100.0, "running", None)
    assert view.turn_failure is None and view.failure is None


def test_permission_denied_is_audited_by_the_classifier_and_trips_the_breaker(
    tmp_path: Path,
) -> None:
    adapter = _adapter(tmp_path, _agent("claude"))  # max_denials defaults to 3
    adapter.launch(resume=False)
    task = tmp_path / "task"
    for n in range(3):
        fire(
            task,
            "PermissionDenied",
            tool_name="Bash",
            tool_input={"command": f"rm -rf /tmp/x{n}"},
            reason="auto mode: destructive command",
        )
    view = adapter.observe(100.0, "running", None)
    audited = permissions(task)
    assert [(p["decision"], p["by"], p["tool"]) for p in audited] == [
        ("deny", "classifier", "Bash")
    ] * 3
    assert audited[0]["subject"] == "rm -rf /tmp/x0"
    assert audited[0]["detail"] == "auto mode: destructive command"
    assert view.escalate is not None and "circuit breaker" in view.escalate
    assert view.escalate_pause is True


@pytest.mark.parametrize(
    ("rules", "tool_input", "who"),
    [
        ([ApprovalRule(tool="Bash", match="^ls", action="approve")], "ls", By.RULE),
        ([], "ls", By.DEFAULT),
    ],
)
def test_a_ruling_names_who_ruled(rules: list[ApprovalRule], tool_input: str, who: By) -> None:
    ruling = approval.decide(rules, "Bash", {"command": tool_input}, 0, 3, "no")
    assert ruling.who is who


def test_the_circuit_breaker_rules_as_the_breaker() -> None:
    rules = [ApprovalRule(tool="Bash", match="^ls", action="approve")]
    ruling = approval.decide(rules, "Bash", {"command": "ls"}, 3, 3, "no")
    assert (ruling.action, ruling.who) == ("escalate", By.BREAKER)


@pytest.mark.parametrize(
    ("status", "reason", "by"),
    [
        ("abandoned", "deadline", By.DEADLINE),
        ("abandoned", "stopped", By.STOP),
        ("abandoned", "denied", By.OPERATOR),
        ("abandoned", "budget", By.BUDGET),
        ("superseded", None, By.SUPERSEDED),
        ("abandoned", "max_retries", By.ENGINE),
        ("failed", None, By.ENGINE),
    ],
)
def test_an_ending_names_its_cause_never_the_operator_unasked(
    status: str, reason: str | None, by: By
) -> None:
    assert ended_by(status, reason) is by


def test_a_deadline_frees_the_waiting_hook_in_the_deadlines_name(tmp_path: Path) -> None:
    """The adapter's answer to a waiting request at the task's end: the answer file denies
    it, and the audit line says ``deadline`` (before issue 21 it said ``operator``)."""
    rules = [ApprovalRule(tool="Bash", match="^echo", action="escalate")]
    adapter = _adapter(tmp_path, _agent("claude"))
    adapter.resolved = dataclasses.replace(adapter.resolved, rules=tuple(rules))
    adapter.launch(resume=False)
    task = tmp_path / "task"
    signal = hooks.HookSignal(task / f"hook-{'1' * 20}-1-PermissionRequest.json", "", 0.0, {})
    signal.path.write_text(
        json.dumps({"tool_name": "Bash", "tool_input": {"command": "echo hi"}}), encoding="utf-8"
    )
    view = adapter.observe(100.0, "running", None)
    assert view.escalate is not None
    adapter.rule(100.0)
    adapter.answer(approve=False, by=By.DEADLINE)
    ruled = [(p["decision"], p["by"]) for p in permissions(task)]
    assert ruled == [("escalate", "rule"), ("deny", "deadline")]
    answer = json.loads(signal.answer_path.read_text(encoding="utf-8"))
    assert answer["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    assert "deadline" in answer["hookSpecificOutput"]["decision"]["message"]


@pytest.mark.parametrize("read_before_resume", [True, False], ids=["read", "unread"])
def test_a_resume_is_not_limited_by_the_last_runs_lines(
    tmp_path: Path, read_before_resume: bool
) -> None:
    """A check between a limit wait's resume and the new run's first line (its
    ``supervise_launch`` mark) took the old run's 429 result for the new run's: a second
    wait, whose stop killed the resumed agent (CI, real-CLI rate-limit test, 74 ms after
    the resume). Measured lines of a real 429 run, read before the resume or only after."""
    adapter = _adapter(tmp_path, _agent("claude", mode="headless"))
    adapter.launch(resume=False)
    stream = tmp_path / "task" / hooks.STREAM
    limited = (HEADLESS / "ratelimit-429-gateway.jsonl").read_bytes()
    with stream.open("ab") as out:
        out.write(json.dumps({"type": "supervise_launch", "at": 99.0}).encode() + b"\n")
        out.write(limited)
    if read_before_resume:
        assert adapter.observe(100.0, "running", None).limit
    adapter.launch(resume=True)
    view = adapter.observe(101.0, "waiting", None)
    assert (view.limit, view.failure, view.limit_reason) == (False, None, "")
    assert adapter.observe(102.0, "running", None).limit is False  # and it stays so
    with stream.open("ab") as out:  # the new run's lines
        out.write(json.dumps({"type": "supervise_launch", "at": 103.0}).encode() + b"\n")
        out.write(limited)
    assert adapter.observe(104.0, "running", None).limit  # a new limit still counts
