"""Issue 4 end to end: the ``claude`` adapter drives the real Claude Code CLI (pinned, see
docs/claude-code-e2e.md) in tmux against the mock Messages API (tests/support/mock_anthropic.py).

Each test runs ``supervise run PROFILE --exit-when-idle`` in the background with a profile of
``[agent] kind = "claude"``; the mock's prompt directives (``[[bash: ...]]``,
``[[ratelimit: ...]]``, ``[[stall_final_once: ...]]``) script the model. Only the model is
fake: the CLI, its hooks, tmux, the processes and the files are real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import claude_harness
from support.claude_harness import Harness
from support.claude_support import (
    claude_version,
)
from support.mock_anthropic import gateway_token

harness = claude_harness.harness  # pytest fixtures, found by name in this module

pytestmark = pytest.mark.e2e


def tool_results(request: Any) -> list[dict[str, Any]]:
    """Every tool_result block in a recorded request's conversation."""
    out = []
    for message in request.body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            out += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return out


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content)


# ---------------------------------------------------------------------------- tests


def test_headless_task_completes_with_hooks_and_stream_facts(harness) -> None:
    """Completes and writes a file: verdict PASS, the stream's facts and the hooks recorded."""
    h = harness(final_text="DONE: hello.txt written")
    project = h.project()
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]})
    h.submit("hello", "Create hello.txt, then say DONE.", project, model="sonnet")
    h.start()
    h.finish()
    m = h.manifests()["hello"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), info
    assert (project / "hello.txt").read_text(encoding="utf-8") == h.mock.file_content
    claude = m["claude"]
    assert claude["session_id"] == m["session_id"], info
    assert claude["result"] == "DONE: hello.txt written", info
    assert claude["is_error"] is False and claude["num_turns"] >= 2, info
    assert isinstance(claude["total_cost_usd"], float), info
    assert claude["transcript_path"].endswith(f"{m['session_id']}.jsonl"), info
    assert "DONE: hello.txt written" in m["summary"], info
    events = h.events("hello")
    hooks = [e for e in events if e["event"] == "hook"]
    names = [e["hook_event_name"] for e in hooks]
    for expected in ("SessionStart", "PermissionRequest", "PostToolUse", "Stop", "SessionEnd"):
        assert expected in names, names
    assert all(e["session_id"] == m["session_id"] for e in hooks), info
    assert all(e["transcript_path"] == claude["transcript_path"] for e in hooks), info
    permissions = [e for e in events if e["event"] == "permission"]
    assert [(p["tool"], p["decision"], p["rule"]) for p in permissions] == [
        ("Write", "approve", 1)
    ], info
    print(f"\n[{claude_version(h.claude)}] hello: status={m['status']} verdict={m['verdict']} "
          f"retry_count={m['retry_count']} session_id={m['session_id']}")  # fmt: skip


def test_two_tasks_in_one_project_each_resume_their_own_session(harness) -> None:
    """Killed mid-run, each of two tasks sharing a project folder resumes its own session by
    id: the resumed request carries that task's earlier messages, never the other's."""
    h = harness()
    project = h.project()
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]})
    for name in ("alpha", "beta"):
        h.submit(
            name,
            f"[[write: {name}.txt]] [[final: {name} done]] [[stall_final_once: 60]] task {name}",
            project,
        )
    h.start()

    def stalled() -> dict[str, str] | None:
        manifests = h.manifests()
        ids = {n: manifests.get(n, {}).get("session_id") for n in ("alpha", "beta")}
        if not all(ids.values()) or not all((project / f"{n}.txt").exists() for n in ids):
            return None
        return ids if _final_requested(h, ids) else None  # type: ignore[arg-type]

    ids = h.wait_for("both agents to stall in their final turn", stalled, timeout=90)
    before = {n: len(h.mock.message_requests(i)) for n, i in ids.items()}
    for name in ("alpha", "beta"):
        pid = h.manifests()[name]["pid"]
        assert pid, h.diagnostics()
        os.kill(pid, signal.SIGKILL)
    h.finish()
    manifests = h.manifests()
    for name, session_id in ids.items():
        m = manifests[name]
        info = json.dumps(m, indent=1)
        assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 1), info
        assert m["session_id"] == session_id and m["claude"]["result"] == f"{name} done", info
        resumed = h.mock.message_requests(session_id)[before[name] :]
        assert resumed, h.diagnostics()
        first = resumed[0]
        history = json.dumps(first.body.get("messages"))
        assert f"{name}.txt" in history and f"task {name}" in history, history[:2000]
        other = "beta" if name == "alpha" else "alpha"
        assert f"task {other}" not in history, history[:2000]
        # The other task's file may be named in the git status Claude Code attaches to its
        # context (both share one folder; it depends on which agent started first), never
        # in this session's own tool calls.
        calls = json.dumps(
            [block.get("input") for msg in first.body.get("messages") or []
             for block in (msg.get("content") if isinstance(msg.get("content"), list) else [])
             if isinstance(block, dict) and block.get("type") == "tool_use"]
        )  # fmt: skip
        assert f"{name}.txt" in calls and f"{other}.txt" not in calls, calls
        assert "continue the task" in history
        print(f"\n{name}: status={m['status']} verdict={m['verdict']} "
              f"retry_count={m['retry_count']} session_id={m['session_id']}")  # fmt: skip


def test_two_tasks_on_one_repository_each_edit_the_same_file_on_their_own_branch(
    harness,
) -> None:
    """Issue 12, Must show: two real-CLI tasks on one repository, started together, each
    write the same file. Each works in its own worktree on its own branch, so both end
    completed/PASS with an acceptance check that sees only its own change, and the
    project's checkout is untouched."""
    h = harness()
    project = h.project()
    (project / "shared.txt").write_text("base\n", encoding="utf-8")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["add", "-A"], [*ident, "commit", "-q", "-m", "base"]):
        subprocess.run(["git", *args], cwd=project, check=True, capture_output=True)
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]}, workspace={})
    for name in ("alpha", "beta"):
        own = f"import sys; sys.exit(open('shared.txt').read() != '{name}\\n')"
        h.submit(
            name,
            f"[[write: shared.txt | {name}]] [[final: {name} done]] task {name}",
            project,
            acceptance={"command": [sys.executable, "-c", own]},
        )
    h.start()
    h.finish()
    manifests = h.manifests()
    branches = set()
    for name in ("alpha", "beta"):
        m = manifests[name]
        info = json.dumps(m, indent=1) + h.diagnostics()
        assert (m["status"], m["verdict"]) == ("completed", "PASS"), info
        assert m["acceptance"]["passed"] is True, info
        ws = m["workspace"]
        assert ws["mode"] == "worktree" and ws["base"] in ("master", "main"), info
        assert (Path(ws["path"]) / "shared.txt").read_text(encoding="utf-8") == f"{name}\n"
        shown = subprocess.run(
            ["git", "show", f"{ws['branch']}:shared.txt"],
            cwd=project, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert shown == f"{name}\n", info
        assert (ws["files_changed"], ws["uncommitted"]) == (1, False), info
        branches.add(ws["branch"])
        print(f"\n{name}: status={m['status']} verdict={m['verdict']} branch={ws['branch']} "
              f"head={ws['head_commit'][:10]} +{ws['insertions']} -{ws['deletions']}")  # fmt: skip
    assert len(branches) == 2
    assert (project / "shared.txt").read_text(encoding="utf-8") == "base\n"


def _final_requested(h: Harness, ids: dict[str, str]) -> bool:
    """Each session has asked for its final turn (the one the mock stalls)."""
    for session_id in ids.values():
        requests = h.mock.message_requests(session_id)
        if not any(len(tool_results(r)) >= 1 for r in requests if r.offers_tools):
            return False
    return True


def test_bash_approved_by_rule_denied_by_default_escalated_then_approved(harness) -> None:
    """Three Bash requests: one approved by a rule, one denied by default (the agent is told
    why), one escalated to a human and approved with ``supervise approve``."""
    h = harness(final_text="all three steps handled")
    project = h.project()
    h.write_profile(
        approval={
            "rules": [
                {"tool": "Bash", "match": "^echo approved", "action": "approve"},
                {"tool": "Bash", "match": "^echo escalated", "action": "escalate"},
            ]
        }
    )
    prompt = (
        "[[bash: echo approved > approved.txt]] [[bash: curl -s http://example.invalid]] "
        "[[bash: echo escalated > escalated.txt]] do the three steps"
    )
    h.submit("perm", prompt, project)
    h.start()
    h.wait_for("the escalation", lambda: h.status("perm") == "escalated", timeout=90)
    m = h.manifests()["perm"]
    assert m["escalation"]["tool"] == "Bash", m
    assert m["escalation"]["subject"] == "echo escalated > escalated.txt", m
    assert not (project / "escalated.txt").exists()
    done = h.cli("approve", "-c", str(h.profile), m["task_id"])
    assert done.returncode == 0, done.stdout + done.stderr
    h.finish()
    m = h.manifests()["perm"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), info
    assert (project / "approved.txt").exists() and (project / "escalated.txt").exists()
    permissions = [e for e in h.events("perm") if e["event"] == "permission"]
    decided = [(p["subject"].split()[0:2], p["decision"], p["by"]) for p in permissions]
    assert [d[1] for d in decided] == ["approve", "deny", "escalate", "approve"], decided
    assert permissions[0]["rule"] == 1 and permissions[1]["by"] == "default", decided
    assert permissions[2]["rule"] == 2 and permissions[3]["by"] == "operator", decided
    # The agent was told why the second call was refused.
    requests = h.mock.message_requests(m["session_id"])
    denial = [result_text(b) for r in requests for b in tool_results(r) if b.get("is_error")]
    assert any("not allowed by the task's approval rules" in t for t in denial), denial
    statuses = [e["event"] for e in h.events("perm") if e["event"] in ("escalated", "approved")]
    assert statuses == ["escalated", "approved"], statuses
    notified = [json.loads(x) for x in h.notified.read_text(encoding="utf-8").splitlines()]
    assert [n["event"] for n in notified] == ["escalated", "completed"], notified
    print(f"\nperm: status={m['status']} verdict={m['verdict']} "
          f"retry_count={m['retry_count']} session_id={m['session_id']}")  # fmt: skip


def test_rate_limit_with_reset_time_waits_and_resumes_without_a_retry(harness) -> None:
    """A 429 whose reset time the CLI reports → ``waiting`` until then → resumed by itself,
    ``retry_count`` unchanged; the notifier hears ``waiting``."""
    h = harness(token=gateway_token(), final_text="finished after the limit")
    project = h.project()
    waiting_too = ["escalated", "failed", "abandoned", "completed", "waiting"]  # opt-in
    h.write_profile(
        approval={"rules": [{"tool": "Write", "action": "approve"}]},
        monitor={"notify_on": waiting_too},
    )
    h.submit("limited", "[[ratelimit: 1 reset=+4]] write hello.txt", project)
    h.start()
    h.wait_for("the limit", lambda: h.status("limited") == "waiting", timeout=90)
    waiting = h.manifests()["limited"]
    h.finish()
    m = h.manifests()["limited"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), info
    assert m["limit_waits"] == 1, info
    events = h.events("limited")
    wait = next(e for e in events if e["event"] == "waiting")
    resumed = next(e for e in events if e["event"] == "resumed")
    limit = next(r for r in h.mock.snapshot() if r.reply_kind == "ratelimit")
    assert "resets" in wait["reason"], wait
    # resume_at is the reset the API announced (whole seconds), not a backoff guess.
    assert waiting["resume_at"] is not None, waiting
    reset_at = _epoch(waiting["resume_at"])
    assert abs(reset_at - (limit.received_at + 4)) <= 1.5, (reset_at, limit.received_at)
    assert _epoch(resumed["ts"]) >= reset_at - 0.05, (resumed, waiting)
    notified = [json.loads(x)["event"] for x in h.notified.read_text().splitlines()]
    assert notified == ["waiting", "completed"], notified
    print(f"\nlimited: status={m['status']} verdict={m['verdict']} "
          f"retry_count={m['retry_count']} session_id={m['session_id']}")  # fmt: skip


def _epoch(iso: str) -> float:
    from supervisor.taskdir.folder import parse_iso

    value = parse_iso(iso)
    assert value is not None
    return value


def test_failed_acceptance_gives_verdict_fail(harness) -> None:
    """The agent exits 0 but the acceptance command fails: completed, verdict FAIL, and the
    summary holds the agent's final text and the check's output."""
    h = harness(final_text="I am sure it works")
    project = h.project()
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]})
    check = [sys.executable, "-c", "print('3 tests failed'); raise SystemExit(3)"]
    h.submit("judged", "write hello.txt", project,
             acceptance={"command": check, "artifacts": ["hello.txt"]})  # fmt: skip
    h.start()
    h.finish()
    m = h.manifests()["judged"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "FAIL", 0), info
    assert m["acceptance"]["exit_code"] == 3 and m["acceptance"]["missing"] == [], info
    assert "I am sure it works" in m["summary"] and "3 tests failed" in m["summary"], info
    assert [e["event"] for e in h.events("judged") if e["event"] in ("verifying", "completed")] == [
        "verifying",
        "completed",
    ]
    print(f"\njudged: status={m['status']} verdict={m['verdict']} "
          f"retry_count={m['retry_count']} session_id={m['session_id']}")  # fmt: skip


def test_interactive_tui_completes_through_its_hooks(harness) -> None:
    """The TUI in tmux (for a human to attach to): the Write is approved by the hook, the
    Stop hook ends the turn, supervise types ``/exit`` and the task completes."""
    h = harness(final_text="done in the TUI")
    project = h.project()
    h.write_profile(
        agent={"mode": "interactive"},
        approval={"rules": [{"tool": "Write", "action": "approve"}]},
    )
    h.submit("tui", "write hello.txt", project)
    h.start()
    h.finish()
    m = h.manifests()["tui"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), info
    assert m["exit_code"] == 0 and (project / "hello.txt").exists(), info
    events = h.events("tui")
    hooks = [e["hook_event_name"] for e in events if e["event"] == "hook"]
    assert "PermissionRequest" in hooks and "Stop" in hooks, hooks
    permissions = [(e["tool"], e["decision"]) for e in events if e["event"] == "permission"]
    assert permissions == [("Write", "approve")], permissions
    print(f"\ntui: status={m['status']} verdict={m['verdict']} "
          f"retry_count={m['retry_count']} session_id={m['session_id']}")  # fmt: skip


def test_interactive_without_hooks_answers_the_dialog_from_the_screen(harness) -> None:
    """Fallback: no hooks, so the Write dialog is read from the screen, held across two
    checks, ruled on and answered with the keys of its "Yes" choice."""
    h = harness(final_text="done from the screen")
    project = h.project()
    h.write_profile(
        agent={"mode": "interactive", "hooks": False},
        approval={"rules": [{"tool": "Write", "action": "approve"}]},
    )
    h.submit("screen", "write hello.txt", project)
    h.start()
    h.wait_for("the approved write", lambda: (project / "hello.txt").exists(), timeout=90)
    events = h.events("screen")
    permissions = [e for e in events if e["event"] == "permission"]
    assert [(p["tool"], p["decision"], p["source"]) for p in permissions] == [
        ("Write", "approve", "screen")
    ], permissions
    assert permissions[0]["subject"].endswith("hello.txt"), permissions
    task_id = h.manifests()["screen"]["task_id"]
    stopped = h.cli("stop", "-c", str(h.profile), task_id)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    h.finish()
    m = h.manifests()["screen"]
    assert (m["status"], m["abandon_reason"], m["verdict"]) == ("abandoned", "stopped", "ABANDONED")


def test_circuit_breaker_pauses_after_failed_tool_calls_until_approved(harness) -> None:
    """``max_denials`` failed tool calls in a row pause the agent (SIGSTOP) as an escalation;
    ``supervise approve`` lets it go on, and the count starts again."""
    h = harness(final_text="recovered after the breaker")
    project = h.project()
    h.write_profile(
        monitor={"max_denials": 2},
        approval={"rules": [{"tool": "Bash", "match": "^(false|echo ok)", "action": "approve"}]},
    )
    h.submit("breaker", "[[bash: false]] [[bash: false]] [[bash: echo ok > ok.txt]] go", project)
    h.start()
    h.wait_for("the breaker", lambda: h.status("breaker") == "escalated", timeout=90)
    m = h.manifests()["breaker"]
    assert m["escalation"]["paused"] is True, m
    assert m["escalation"]["reason"].startswith("circuit breaker: 2 consecutive"), m
    # Nothing to wait on: a paused (SIGSTOPped) agent shows nothing; a second in which the
    # third step would have run if the pause did not hold.
    time.sleep(1.0)
    assert not (project / "ok.txt").exists()  # paused: the third step has not run
    done = h.cli("approve", "-c", str(h.profile), m["task_id"])
    assert done.returncode == 0, done.stdout + done.stderr
    h.finish()
    m = h.manifests()["breaker"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), info
    assert (project / "ok.txt").exists() and m["denials"] == 0, info
    signalled = [e["signal"] for e in h.events("breaker") if e["event"] == "agent_signalled"]
    assert signalled == ["SIGSTOP", "SIGCONT"], signalled
    print(f"\nbreaker: status={m['status']} verdict={m['verdict']} "
          f"retry_count={m['retry_count']} session_id={m['session_id']}")  # fmt: skip


def test_a_resume_while_escalated_rules_on_the_new_runs_requests(harness) -> None:
    """``supervise resume`` on an escalated task kills the agent whose request waited; the
    resumed run's next request must be ruled on (escalated again), not ignored behind the
    dead run's request. (The CLI answers the killed call itself on resume, so the mock
    goes on to the second step.)"""
    h = harness(final_text="approved the second time")
    project = h.project()
    h.write_profile(
        approval={"rules": [{"tool": "Bash", "match": "^echo esc", "action": "escalate"}]}
    )
    h.submit("again", "[[bash: echo esc1 > one.txt]] [[bash: echo esc2 > two.txt]]", project)
    h.start()
    h.wait_for("the first escalation", lambda: h.status("again") == "escalated", timeout=90)
    task_id = h.manifests()["again"]["task_id"]
    resumed = h.cli("resume", "-c", str(h.profile), task_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr

    def escalated_twice() -> bool:
        events = [e["event"] for e in h.events("again")]
        return events.count("escalated") == 2 and h.status("again") == "escalated"

    h.wait_for("the second escalation", escalated_twice, timeout=90)
    approved = h.cli("approve", "-c", str(h.profile), task_id)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    h.finish()
    m = h.manifests()["again"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 1), info
    assert (project / "two.txt").exists() and not (project / "one.txt").exists(), info
    asked = [e["subject"] for e in h.events("again") if e["event"] == "permission"]
    assert asked == ["echo esc1 > one.txt", "echo esc2 > two.txt", "echo esc2 > two.txt"]
