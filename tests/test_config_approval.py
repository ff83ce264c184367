"""``supervise config`` shows the approval rules in force (issue 22), in the order they are
tried, each with its source, and what a request no rule fits gets: an orchestrator sees
which commands are allowed, denied and escalated without reading TOML."""

from __future__ import annotations

import json
from pathlib import Path

import tomli_w
from conftest import Setup

PROFILE_RULES = [
    {"tool": "Bash", "match": "^git push", "action": "escalate"},
    {"tool": "Bash", "match": "^rm ", "action": "deny", "message": "no rm \x1b[2J"},
]


def _profile(setup: Setup, kind: str = "claude") -> Path:
    data = {
        "paths": {"spool_dir": "spool", "state_dir": "state"},
        "agent": {"kind": kind} if kind == "claude" else {"command": ["true"]},
        "approval": {"rules": PROFILE_RULES},
        "security": {"task_may_set": ["approval"]},
    }
    setup.profile.write_text(tomli_w.dumps(data), encoding="utf-8")
    return setup.profile


def _task(setup: Setup) -> Path:
    task = setup.root / "task.toml"
    data = setup.task("t", "x")
    data["approval"] = {
        "rules": [{"tool": "Bash", "match": "^pytest", "action": "approve"}],
        "default_message": "ask first",
    }
    task.write_text(tomli_w.dumps(data), encoding="utf-8")
    return task


def test_config_json_lists_the_rules_in_order_with_their_sources(setup: Setup) -> None:
    profile = _profile(setup)
    result = setup.supervise("config", "-c", str(profile), "--task", str(_task(setup)), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["approval.in_force"] == {"value": True, "source": "profile"}
    assert data["approval.rules[1]"] == {
        "value": {"tool": "Bash", "match": "^pytest", "action": "approve"},
        "source": "task",
    }
    assert data["approval.rules[2]"] == {"value": PROFILE_RULES[0], "source": "profile"}
    assert data["approval.rules[3]"] == {"value": PROFILE_RULES[1], "source": "profile"}
    assert "approval.rules[4]" not in data
    assert data["approval.unmatched"] == {
        "value": {"action": "deny", "message": "ask first"},
        "source": "task",
    }
    assert data["max_denials"]["value"] >= 1  # the circuit breaker, with the monitor keys


def test_config_table_shows_the_rules_escaped(setup: Setup) -> None:
    result = setup.supervise("config", "-c", str(_profile(setup)))
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[2:]}
    assert '"^git push"' in rows["approval.rules[1]"] and "escalate" in rows["approval.rules[1]"]
    assert rows["approval.rules[1]"].rstrip().endswith("profile")
    assert '"deny"' in rows["approval.rules[2]"] and "\x1b" not in result.stdout
    assert rows["approval.unmatched"].rstrip().endswith("default")
    assert "approval.rules[3]" not in rows


def test_a_generic_agent_has_no_rules_in_force(setup: Setup) -> None:
    result = setup.supervise("config", "-c", str(_profile(setup, kind="generic")), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["approval.in_force"] == {"value": False, "source": "default"}
