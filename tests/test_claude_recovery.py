"""Issue 10's recovery matrix with the real Claude Code CLI (pinned 2.1.328, see
docs/claude-code-e2e.md) in tmux, against the mock Messages API (tests/support/mock_anthropic.py).

Each case scripts one real-world failure with a mock directive (``[[stall_stream: N]]``,
``[[server_error: N]]``, ``[[overloaded: N]]``, ``[[billing]]``, ``[[auth: N]]``) or with the
real thing (SIGKILL, ``supervise approve|deny``, an engine stopped by SIGTERM and started
again, a mock that refuses connections) and ends in the status, verdict and ``retry_count``
it states. The CLI's own API retries are bounded to one (``CLAUDE_CODE_MAX_RETRIES=1``), so a
failure "outlasts the CLI's retries" after two answers.

Cases of the matrix that live in tests/test_claude_agent.py (not repeated here):
SIGKILL → resumed (``test_two_tasks_in_one_project_each_resume_their_own_session``, which
also covers two tasks resuming their own sessions in one folder) and a 429 → waiting →
resumed (``test_rate_limit_with_reset_time_waits_and_resumes_without_a_retry``).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from support import claude_matrix
from support.claude_harness import Harness
from support.claude_matrix import (
    FINISH_TIMEOUT,
    assert_resumed_by_id,
    kinds,
    outcome,
    report,
)
from support.mock_anthropic import gateway_token

matrix = claude_matrix.matrix  # pytest fixtures, found by name in this module

pytestmark = pytest.mark.e2e


def stop_engine(h: Harness) -> None:
    """End ``supervise run`` by PID with SIGTERM; the agents' tmux sessions stay."""
    assert h.proc is not None
    h.proc.send_signal(signal.SIGTERM)
    out, _ = h.proc.communicate(timeout=30)
    assert h.proc.returncode == 0, out


# ---------------------------------------------------------------------------- hang


def test_mid_turn_stall_is_hung_then_resumed_by_id(matrix) -> None:
    """The API stream starts, then goes silent: the CLI prints nothing, the output goes
    stale, the task is ``hung``; the agent is stopped (Claude Code exits 143 on SIGTERM),
    resumed with ``--resume <its session id>`` and completes."""
    h = matrix(final_text="done after the stall")
    project = h.project()
    h.write_profile(
        monitor={"stale_threshold": 3, "grace_period": 2, "max_retries": 2},
        approval={"rules": [{"tool": "Write", "action": "approve"}]},
    )
    h.submit("stall", "[[stall_stream: 1]] write hello.txt", project)
    h.start()
    h.finish(FINISH_TIMEOUT)
    m = h.manifests()["stall"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "stall")
    assert outcome(m) == ("completed", "PASS", 1), info
    assert (project / "hello.txt").exists(), info
    events = kinds(h, "stall")
    assert events.index("hung") < events.index("resumed") < events.index("completed"), events
    assert "failed" not in events and "crashed" not in events, events
    stalled = [r for r in h.mock.message_requests() if r.reply_kind == "stalled"]
    assert [r.session_id for r in stalled] == [m["session_id"]], info
    assert_resumed_by_id(h, m, info)
    assert m["claude"]["result"] == "done after the stall", info


# ---------------------------------------------------------------------------- escalations


LIVE_ON = 5
"""Seconds the agent works on after an answer (a ``sleep`` step), so that several checks
look at the answered run while it is alive: a false ``crashed`` shows within about 2 s."""


def _escalating_task(h: Harness, name: str, project: Path) -> None:
    """An escalated Bash step, then a ``LIVE_ON`` s step approved by rule."""
    h.submit(name, f"[[bash: echo escalated > esc.txt]] [[bash: sleep {LIVE_ON}]] go", project)


ESCALATE_RULES = {
    "rules": [
        {"tool": "Bash", "match": "^echo escalated", "action": "escalate"},
        {"tool": "Bash", "match": "^sleep ", "action": "approve"},
    ]
}


def _answer_keeps_the_run(h: Harness, name: str, pid: int, info: str) -> None:
    """The answered run went on: one launch, no crash, no respawn, the same agent PID."""
    events = kinds(h, name)
    assert "crashed" not in events and "resumed" not in events, (events, info)
    assert events.count("launched") == 1, events
    assert h.manifests()[name]["pid"] == pid, info


def _decisions(h: Harness, name: str) -> list[tuple[str, str]]:
    """(decision, who) of each permission ruling: who is "rule", "default" or "operator"."""
    events = [e for e in h.events(name) if e["event"] == "permission"]
    return [(e["decision"], "rule" if e.get("rule") else e["by"]) for e in events]


@pytest.mark.parametrize("restart", [False, True], ids=["live", "after_restart"])
def test_approve_keeps_the_live_run(matrix, restart: bool) -> None:
    """``supervise approve`` on an escalated request: the agent goes on in the same run and
    completes (no false ``crashed``), also when the engine was restarted while it waited."""
    h = matrix(final_text="approved and done")
    project = h.project()
    h.write_profile(approval=ESCALATE_RULES)
    _escalating_task(h, "approve", project)
    h.start()
    h.wait_for("the escalation", lambda: h.status("approve") == "escalated", timeout=90)
    m = h.manifests()["approve"]
    if restart:
        stop_engine(h)
        h.start()
        # answered once the new engine runs: before it holds its lock, the CLI reports the
        # request as queued (exit 3), not applied
        h.wait_for("adoption", lambda: "adopted" in kinds(h, "approve"), timeout=30)
    done = h.cli("approve", "-c", str(h.profile), m["task_id"])
    assert done.returncode == 0, done.stdout + done.stderr
    h.finish(FINISH_TIMEOUT)
    final = h.manifests()["approve"]
    info = json.dumps(final, indent=1) + h.diagnostics()
    report(h, "approve")
    assert outcome(final) == ("completed", "PASS", 0), info
    assert (project / "esc.txt").exists(), info
    _answer_keeps_the_run(h, "approve", m["pid"], info)
    assert _decisions(h, "approve")[:2] == [("escalate", "rule"), ("approve", "operator")]


@pytest.mark.parametrize("restart", [False, True], ids=["live", "after_restart"])
def test_deny_keeps_the_live_run(matrix, restart: bool) -> None:
    """``supervise deny``: the agent is told, goes on in the same run and completes; the
    denied command never ran. Also after an engine restart while it waited."""
    h = matrix(final_text="went on without it")
    project = h.project()
    h.write_profile(approval=ESCALATE_RULES)
    _escalating_task(h, "deny", project)
    h.start()
    h.wait_for("the escalation", lambda: h.status("deny") == "escalated", timeout=90)
    m = h.manifests()["deny"]
    if restart:
        stop_engine(h)
        h.start()
        # answered once the new engine runs: before it holds its lock, the CLI reports the
        # request as queued (exit 3), not applied
        h.wait_for("adoption", lambda: "adopted" in kinds(h, "deny"), timeout=30)
    done = h.cli("deny", "-c", str(h.profile), m["task_id"])
    assert done.returncode == 0, done.stdout + done.stderr
    h.finish(FINISH_TIMEOUT)
    final = h.manifests()["deny"]
    info = json.dumps(final, indent=1) + h.diagnostics()
    report(h, "deny")
    assert outcome(final) == ("completed", "PASS", 0), info
    assert not (project / "esc.txt").exists(), info
    _answer_keeps_the_run(h, "deny", m["pid"], info)
    assert final["claude"]["result"] == "went on without it", info
    assert _decisions(h, "deny")[:2] == [("escalate", "rule"), ("deny", "operator")]


@pytest.mark.parametrize("restart", [False, True], ids=["live", "after_restart"])
def test_breaker_continue_keeps_the_live_run(matrix, restart: bool) -> None:
    """Two failed tool calls trip the breaker (the agent is paused with SIGSTOP);
    ``supervise approve`` continues it (SIGCONT) in the same run, also after an engine
    restart while it was paused."""
    h = matrix(final_text="recovered after the breaker")
    project = h.project()
    h.write_profile(
        monitor={"max_denials": 2},
        approval={
            "rules": [{"tool": "Bash", "match": "^(false|sleep |echo ok)", "action": "approve"}]
        },
    )
    prompt = f"[[bash: false]] [[bash: false]] [[bash: sleep {LIVE_ON}]] [[bash: echo ok > ok.txt]]"
    h.submit("breaker", prompt, project)
    h.start()
    h.wait_for("the breaker", lambda: h.status("breaker") == "escalated", timeout=90)
    m = h.manifests()["breaker"]
    assert m["escalation"]["paused"] is True, m
    if restart:
        stop_engine(h)
        h.start()
        h.wait_for("adoption", lambda: "adopted" in kinds(h, "breaker"), timeout=30)
        adopted = h.manifests()["breaker"]
        assert (adopted.get("escalation") or {}).get("paused") is True, json.dumps(adopted)
    done = h.cli("approve", "-c", str(h.profile), m["task_id"])
    assert done.returncode == 0, done.stdout + done.stderr
    h.finish(FINISH_TIMEOUT)
    final = h.manifests()["breaker"]
    info = json.dumps(final, indent=1) + h.diagnostics()
    report(h, "breaker")
    assert outcome(final) == ("completed", "PASS", 0), info
    assert (project / "ok.txt").exists() and final["denials"] == 0, info
    _answer_keeps_the_run(h, "breaker", m["pid"], info)
    signalled = [e["signal"] for e in h.events("breaker") if e["event"] == "agent_signalled"]
    assert signalled == ["SIGSTOP", "SIGCONT"], signalled


def test_limit_wait_survives_an_engine_restart(matrix) -> None:
    """A 429 with a reset time puts the task in ``waiting``; the engine is stopped and started
    again during the wait, and the new engine waits it out and resumes the same session."""
    h = matrix(final_text="finished after the limit")
    h.token = gateway_token()
    project = h.project()
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]})
    h.submit("limited", "[[ratelimit: 1 reset=+8]] write hello.txt", project)
    h.start()
    h.wait_for("the limit", lambda: h.status("limited") == "waiting", timeout=90)
    stop_engine(h)
    waiting = h.manifests()["limited"]
    assert waiting["status"] == "waiting" and waiting["limit_waits"] == 1, waiting
    h.start()
    h.finish(FINISH_TIMEOUT)
    m = h.manifests()["limited"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "limited")
    assert outcome(m) == ("completed", "PASS", 0), info
    assert m["limit_waits"] == 1, info
    assert kinds(h, "limited").count("resumed") == 1, info
    assert_resumed_by_id(h, m, info)


# ---------------------------------------------------------------------------- failure classes


@pytest.mark.parametrize(
    ("directive", "status"),
    [("[[server_error: 2]]", 500), ("[[overloaded: 2]]", 529)],
    ids=["500", "529"],
)
def test_transient_api_error_waits_and_resumes_the_same_session(
    matrix, directive: str, status: int
) -> None:
    """A 500 or 529 that outlasts the CLI's own retry ends the run (``is_error``, exit 1):
    that is temporary, so the task waits (backoff), resumes its own session by id and
    completes; the wait is not a retry."""
    h = matrix(final_text="done after the outage")
    project = h.project()
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]})
    h.submit("transient", f"{directive} write hello.txt", project)
    h.start()
    h.finish(FINISH_TIMEOUT)
    m = h.manifests()["transient"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "transient")
    failed = [r.status for r in h.mock.message_requests() if r.status >= 500]
    assert failed == [status, status], info  # the first run met both, then gave up
    assert outcome(m) == ("completed", "PASS", 0), info
    events = kinds(h, "transient")
    assert events.index("waiting") < events.index("resumed") < events.index("completed"), events
    assert "failed" not in events, events
    assert_resumed_by_id(h, m, info)


def test_connection_refused_waits_and_resumes_when_the_api_is_back(matrix) -> None:
    """The API refuses connections (nothing listens on its port) past the CLI's retry: the
    task waits; once the API listens again it resumes its session and completes."""
    h = matrix(final_text="done once reachable")
    project = h.project()
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]})
    h.mock.go_offline()
    h.submit("refused", "write hello.txt", project)
    h.start()
    h.wait_for("the wait", lambda: h.status("refused") == "waiting", timeout=90)
    h.mock.go_online()
    h.finish(FINISH_TIMEOUT)
    m = h.manifests()["refused"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "refused")
    assert outcome(m) == ("completed", "PASS", 0), info
    assert (project / "hello.txt").exists(), info
    assert "failed" not in kinds(h, "refused"), info
    assert_resumed_by_id(h, m, info)


@pytest.mark.parametrize(
    ("directive", "reason", "text"),
    [
        ("[[billing]]", "billing", "Credit balance is too low"),
        ("[[auth: 5]]", "auth", "Not logged in"),
    ],
    ids=["billing", "auth"],
)
def test_permanent_api_error_fails_with_its_reason(
    matrix, directive: str, reason: str, text: str
) -> None:
    """A 400 "credit balance is too low" or a 401 is not temporary: the task ends ``failed``
    at once (no wait, no resume) with ``failure_reason`` naming the class, in the manifest,
    the summary and the notifier's message."""
    h = matrix()
    project = h.project()
    h.write_profile()
    h.submit("permanent", f"{directive} write hello.txt", project)
    h.start()
    h.finish(FINISH_TIMEOUT)
    m = h.manifests()["permanent"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "permanent")
    assert outcome(m) == ("failed", "FAIL", 0), info
    assert m.get("failure_reason") == reason, info
    assert m["claude"]["is_error"] is True and text in m["claude"]["result"], info
    assert text in m["summary"], info
    events = kinds(h, "permanent")
    assert "waiting" not in events and "resumed" not in events, events
    notified = [json.loads(x) for x in h.notified.read_text(encoding="utf-8").splitlines()]
    failed = [n for n in notified if n["event"] == "failed"]
    assert len(failed) == 1 and reason in failed[0]["message"], notified
