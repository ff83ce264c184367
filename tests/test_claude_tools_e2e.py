"""Issue 21, Must show: a tool in flight is evidence of work, with the real Claude Code CLI
(pinned 2.1.328) against the mock Messages API (tests/support/mock_anthropic.py).

A Bash call runs longer than ``stale_threshold + grace_period`` while the agent prints
nothing (interactive TUI: its elapsed timer does not count) or only a ``tool_progress``
heartbeat every 30 s (``-p`` mode). ``PreToolUse`` without its ``PostToolUse`` keeps the
task healthy: it ends ``completed``/PASS with ``retry_count`` 0 and no ``hung`` event.

CLI 2.1.328 refuses a standalone ``sleep N`` ("Blocked: standalone sleep N. To wait for a
condition, use Monitor ..."), so the commands sleep in Python. Its Bash tool stops a
command after 2 minutes unless told otherwise: the 200 s case sets
``BASH_DEFAULT_TIMEOUT_MS``.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from support.claude_harness import Harness
from support.claude_support import REPO_ROOT, start_mock, stop_mock

pytestmark = pytest.mark.e2e

#: Stale 15 / grace 5: far below the CLI's 30 s heartbeat (Must show 2).
LOW = {"stale_threshold": 15, "grace_period": 5}


def _sleep(seconds: int) -> str:
    """A Bash command that runs ``seconds`` and that a rule may approve (no chaining)."""
    return f"python3 -c \"__import__('time').sleep({seconds})\""


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    made: list[tuple[Harness, Any]] = []

    def make(**mock_args: Any) -> Harness:
        mock = start_mock(**mock_args)
        made.append((Harness(tmp_path, mock), mock))
        return made[-1][0]

    yield make
    for h, mock in made:
        h.close()
        stop_mock(mock)


def _run_long_tool(
    h: Harness,
    mode: str,
    seconds: int,
    monitor: dict[str, Any],
    timeout: float,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    project = h.project()
    h.write_profile(
        agent={"mode": mode},
        monitor=monitor,
        approval={"rules": [{"tool": "Bash", "match": "^python3 -c", "action": "approve"}]},
    )
    if env:
        profile = tomllib.loads(h.profile.read_text(encoding="utf-8"))
        profile["agent"]["env"].update(env)
        h.profile.write_text(tomli_w.dumps(profile), encoding="utf-8")
    h.submit("slow", f"[[bash: {_sleep(seconds)}]] [[final: slow tool done]] run it", project)
    h.start()
    h.finish(timeout=timeout)
    return h.manifests()["slow"]


def _check(h: Harness, m: dict[str, Any], mode: str, seconds: int) -> list[str]:
    """The Must show outcome; returns the task's event names."""
    info = json.dumps(m, indent=1) + h.diagnostics()
    events = h.events("slow")
    kinds = [e["event"] for e in events]
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), info
    assert "hung" not in kinds and "resumed" not in kinds, kinds
    hooks = {e["hook_event_name"]: e for e in events if e["event"] == "hook"}
    assert "PreToolUse" in hooks and "PostToolUse" in hooks, sorted(hooks)
    ran = _epoch(hooks["PostToolUse"]["ts"]) - _epoch(hooks["PreToolUse"]["ts"])
    assert ran >= seconds, ran
    print(
        f"\nslow: mode={mode} status={m['status']} verdict={m['verdict']} "
        f"retry_count={m['retry_count']} tool={ran:.1f}s stale_events={kinds.count('stale')} "
        f"hung_events={kinds.count('hung')}"
    )
    return kinds


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("mode", ["headless", "interactive"])
def test_a_45_s_tool_with_stale_15_grace_5_completes_without_a_retry(harness, mode: str) -> None:
    h = harness(final_text="slow tool done")
    m = _run_long_tool(h, mode, 45, LOW, timeout=150)
    _check(h, m, mode, 45)


@pytest.mark.skipif(
    os.environ.get("SUPERVISE_LONG_E2E") != "1",
    reason="long real-CLI run; SUPERVISE_LONG_E2E=1 runs it",
)
def test_an_interactive_200_s_bash_completes_with_the_shipped_long_profile(harness) -> None:
    """Must show 1a: the shipped ``profiles/long.toml`` monitor values (stale 90, grace 30,
    base_interval 30) and an interactive Bash call of 200 s."""
    shipped = tomllib.loads((REPO_ROOT / "profiles" / "long.toml").read_text(encoding="utf-8"))
    monitor = {k: v for k, v in shipped["monitor"].items() if k not in ("notifier",)}
    h = harness(final_text="slow tool done")
    env = {"BASH_DEFAULT_TIMEOUT_MS": "300000"}  # the Bash tool's own 2 min default
    m = _run_long_tool(h, "interactive", 200, monitor, timeout=420, env=env)
    _check(h, m, "interactive", 200)


def _past_the_check_the_hook_woke(h: Any) -> None:
    """Return once a check of the engine began after the one that logged the hook's event
    ended: checks of one task never overlap, so that one has written what it had to.

    Order, not a pause (a loaded machine outlasted a 3 s one): ``engine-stats.json``
    (written every few seconds) counts the checks begun; one write after now counts the
    logging check or more, and a later count past that one is a check begun after it."""
    stats = h.state / "engine-stats.json"

    def read() -> dict[str, Any]:
        return json.loads(stats.read_text(encoding="utf-8"))

    before = read()["written_at"]
    written = h.wait_for("a stats write", lambda: (s := read())["written_at"] != before and s)
    h.wait_for("a check begun after it", lambda: read()["checks"] > written["checks"])


def test_an_engine_killed_while_a_tool_runs_keeps_it_in_flight_after_restart(harness) -> None:
    """Attack (SIGKILL halfway): the engine dies seconds into a 45 s tool that needed no
    permission (``bypassPermissions``: no ruling, so nothing else made the check write the
    manifest), after a short tool before it. The manifest it left names the running call,
    not the finished one (a quiet check used to skip the write for up to 60 s), and the
    restarted engine completes the task with ``retry_count`` 0 under stale 15 / grace 5."""
    h = harness(final_text="slow tool done")
    project = h.project()
    h.write_profile(agent={"permission_mode": "bypassPermissions"}, monitor=LOW)
    prompt = f"[[bash: {_sleep(2)}]] [[bash: {_sleep(45)}]] [[final: slow tool done]] go"
    h.submit("slow", prompt, project)
    h.start()

    def second_started() -> str | None:
        if "slow" not in h.manifests():
            return None
        pre = [e for e in h.events("slow") if e.get("hook_event_name") == "PreToolUse"]
        return json.loads(pre[1]["tool_input"])["command"] if len(pre) > 1 else None

    assert "sleep(45)" in h.wait_for("the second tool to start", second_started, timeout=60)
    _past_the_check_the_hook_woke(h)
    assert h.proc is not None
    h.proc.kill()  # SIGKILL: no clean stop, nothing flushed
    h.proc.wait(timeout=30)
    m = h.manifests()["slow"]
    recorded = m["claude"]["tools_in_flight"]
    archived = sorted((Path(m["tmpdir"]) / "hooks").glob("hook-*-PreToolUse.json"))
    running = json.loads(archived[-1].read_text(encoding="utf-8"))["tool_use_id"]
    assert [call["id"] for call in recorded] == [running], (recorded, running)
    post = [e for e in h.events("slow") if e.get("hook_event_name") == "PostToolUse"]
    assert len(post) == 1, post  # the first call ended, the second runs
    h.start()
    h.finish(timeout=150)
    _check(h, h.manifests()["slow"], "headless", 45)


def test_an_interactive_call_denied_by_the_operator_is_not_left_in_flight(harness) -> None:
    """Escalation timing is unchanged and a denial closes the call: the TUI's Bash request
    escalates at the check that reads it (its PreToolUse came first); ``supervise deny``
    answers it; the call is no longer in flight (the CLI sends no PostToolUse for a denied
    call), and the task goes on to complete without a retry."""
    h = harness(final_text="went on without it")
    project = h.project()
    h.write_profile(
        agent={"mode": "interactive"},
        approval={"rules": [{"tool": "Bash", "match": "^rm ", "action": "escalate"}]},
    )
    h.submit("deny", "[[bash: rm -rf build]] [[final: went on without it]] clean", project)
    h.start()
    h.wait_for("the escalation", lambda: h.status("deny") == "escalated", timeout=90)
    m = h.manifests()["deny"]
    assert [c["waiting"] for c in m["claude"]["tools_in_flight"]] == [True], m["claude"]
    done = h.cli("deny", "-c", str(h.profile), m["task_id"])
    assert done.returncode == 0, done.stdout + done.stderr
    h.finish(timeout=120)
    m = h.manifests()["deny"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), info
    assert m["claude"]["tools_in_flight"] == [], info
    events = h.events("deny")
    names = [e["hook_event_name"] for e in events if e["event"] == "hook"]
    escalated = next(i for i, e in enumerate(events) if e["event"] == "escalated")
    pre = next(i for i, e in enumerate(events) if e.get("hook_event_name") == "PreToolUse")
    assert pre < escalated, names
    after = names[names.index("PermissionRequest") + 1 :]
    assert "PostToolUse" not in after, after
    print(f"\ndeny (interactive): hooks after the request: {after}")
