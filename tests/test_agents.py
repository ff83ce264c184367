"""Tests of the agent-adapter boundary (:mod:`supervisor.agents`): the registry, the generic
argv templates, the Claude Code launch part and its hook command (run as a real process),
and the engine's ignorance of agent kinds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.agent_adapters import _adapter, _agent

from supervisor.agents import AgentAdapter, Keys, kinds
from supervisor.agents.claude import hooks


@pytest.mark.parametrize("kind", kinds.builtin_names())
def test_every_agent_kind_has_an_adapter(tmp_path: Path, kind: str) -> None:
    adapter = _adapter(tmp_path, _agent(kind))
    assert isinstance(adapter, AgentAdapter)
    assert adapter.kind == kind


def test_generic_runs_command_then_resume_command(tmp_path: Path) -> None:
    agent = _agent("generic", resume_command=["agent", "--resume", "{session_id}"])
    adapter = _adapter(tmp_path, agent)
    assert adapter.launch(resume=False).argv == ["agent", "{prompt}"]
    assert adapter.launch(resume=True).argv == ["agent", "--resume", "{session_id}"]
    assert adapter.launch(resume=True).stream is None
    # without resume_command a resume runs command again
    assert _adapter(tmp_path, _agent("generic")).launch(resume=True).argv == ["agent", "{prompt}"]


def test_claude_launch_writes_its_settings_and_resumes_by_session_id(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, _agent("claude"))
    first = adapter.launch(resume=False)
    settings = tmp_path / "task" / hooks.SETTINGS
    assert settings.is_file() and settings.stat().st_mode & 0o777 == 0o600
    assert first.stream == hooks.STREAM
    assert first.argv[first.argv.index("--session-id") + 1] == "{session_id}"
    assert first.argv[first.argv.index("--settings") + 1] == str(settings)
    # headless: the prompt goes on stdin, never in argv (issue 21: E2BIG past 128 KiB)
    assert "{prompt}" not in first.argv and first.stdin == str(tmp_path / "task" / "prompt")
    again = adapter.launch(resume=True)
    assert "--session-id" not in again.argv
    assert again.argv[again.argv.index("--resume") + 1] == "{session_id}"
    assert again.argv[-2:] == ["--", "continue the task"] and again.stdin is None


def test_claude_interactive_ends_its_turn_with_exit_not_more_often_than_every_10_s(
    tmp_path: Path,
) -> None:
    adapter = _adapter(tmp_path, _agent("claude", mode="interactive"))
    assert adapter.launch(resume=False).stream is None
    exit_keys = [Keys(("/exit",), literal=True), Keys(("Enter",))]
    assert adapter.end_turn(100.0) == exit_keys
    assert adapter.end_turn(105.0) == []
    assert adapter.end_turn(110.0) == exit_keys


def test_claude_exit_is_typed_again_after_the_clock_stepped_back(tmp_path: Path) -> None:
    """The engine's clock followed a -1 h step of the wall clock (issue 20, Time): the last
    ``/exit`` now lies in the future; the wait is not an hour, it starts again."""
    adapter = _adapter(tmp_path, _agent("claude", mode="interactive"))
    exit_keys = [Keys(("/exit",), literal=True), Keys(("Enter",))]
    assert adapter.end_turn(4000.0) == exit_keys
    assert adapter.end_turn(4000.0 - 3600 + 1) == exit_keys
    assert adapter.end_turn(4000.0 - 3600 + 2) == []


def test_the_generated_hook_command_runs_the_relay(tmp_path: Path) -> None:
    """The command line in ``--settings`` is what Claude Code runs (through a shell): it must
    find the relay at its path inside the package and record the hook's input."""
    task = tmp_path / "task"
    task.mkdir()
    command = hooks.settings(task, 60)["hooks"]["Stop"][0]["hooks"][0]["command"]
    hook_input = {"session_id": "s", "hook_event_name": "Stop", "transcript_path": "/t"}
    done = subprocess.run(
        ["bash", "-c", command], input=json.dumps(hook_input).encode(), timeout=30, check=False
    )
    assert done.returncode == 0
    [signal] = hooks.read_hooks(task)
    assert signal.event == "Stop"
    assert signal.data == hook_input
