"""Issue 21: a failing interactive agent is never left to hang, and the audit names who
ruled. The real Claude Code CLI (pinned 2.1.328) in tmux against the mock Messages API
(tests/support/mock_anthropic.py), through the matrix fixture of tests/support/claude_matrix.py (the
CLI's own API retries bounded to one).

Measured with the real CLI (``../shared/notes/real-world-facts.md``): after an API failure
ends an interactive turn, the ``StopFailure`` hook fires (``authentication_failed``,
``server_error``) and the TUI stays at its prompt with its process alive. Before issue 21 the
engine then waited for the output to go stale: a 401 ended ``abandoned``/``max_retries``
after four false hangs, a 500 past the retries burned a retry.

Thresholds are the short ones CI can run (stale 15, grace 5): a run that only ends by
staleness takes at least 20 s a round, so the bounds below tell "acted on the hook" from
"judged hung".
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
from support import claude_matrix
from support.claude_matrix import FINISH_TIMEOUT, assert_resumed_by_id, kinds, outcome, report
from support.mock_anthropic import gateway_token

pytestmark = pytest.mark.e2e

matrix = claude_matrix.matrix  # the fixture: a Harness whose CLI retries once

SHORT = {"stale_threshold": 15, "grace_period": 5, "max_retries": 3}
"""The CI thresholds (seconds): a false hang would show within about 20 s."""
INTERACTIVE = {"mode": "interactive"}
WRITE_RULES = {"rules": [{"tool": "Write", "action": "approve"}]}


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def test_interactive_401_fails_auth_at_once(matrix) -> None:
    """A 401 in the TUI: the ``StopFailure`` hook (``authentication_failed``) ends the run at
    once, ``failed`` with ``failure_reason`` ``auth``, within 30 s of the failing request;
    no hang, no resume, and the notifier names the reason."""
    h = matrix()
    project = h.project()
    h.write_profile(agent=INTERACTIVE, monitor=SHORT, approval=WRITE_RULES)
    h.submit("auth401", "[[auth: 5]] write hello.txt", project)
    h.start()
    h.finish(FINISH_TIMEOUT)
    m = h.manifests()["auth401"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "auth401")
    assert outcome(m) == ("failed", "FAIL", 0), info
    assert m.get("failure_reason") == "auth", info
    events = kinds(h, "auth401")
    for never in ("stale", "hung", "resumed", "waiting", "completed"):
        assert never not in events, (never, events)
    failing = [r for r in h.mock.message_requests() if r.status == 401]
    assert failing, info
    acted = _epoch(m["finished_at"]) - failing[-1].received_at
    print(f"auth401: failed {acted:.1f} s after the failing request")
    assert acted > 0, info  # after the request, before any hang check (none above)
    notified = [json.loads(x) for x in h.notified.read_text(encoding="utf-8").splitlines()]
    failed = [n for n in notified if n["event"] == "failed"]
    assert len(failed) == 1 and "auth" in failed[0]["message"], notified


def test_interactive_500_past_retries_waits_then_resumes_and_completes(matrix) -> None:
    """A 500 that outlasts the CLI's retry in the TUI: ``StopFailure`` (``server_error``)
    is transient, so the task goes ``waiting`` (the agent stopped, never a retry), resumes
    its own session by id and completes with ``retry_count`` 0 and no hang."""
    h = matrix(final_text="done after the outage")
    project = h.project()
    h.write_profile(agent=INTERACTIVE, monitor=SHORT, approval=WRITE_RULES)
    h.submit("srv500", "[[server_error: 2]] write hello.txt", project)
    h.start()
    h.finish(FINISH_TIMEOUT)
    m = h.manifests()["srv500"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "srv500")
    assert outcome(m) == ("completed", "PASS", 0), info
    assert m["transient_waits"] == 1, info
    assert (project / "hello.txt").exists(), info
    events = kinds(h, "srv500")
    assert events.index("waiting") < events.index("resumed") < events.index("completed"), events
    for never in ("hung", "failed", "crashed"):
        assert never not in events, (never, events)
    failing = [r for r in h.mock.message_requests() if r.status >= 500]
    assert [r.status for r in failing] == [500, 500], info
    waited = next(e for e in h.events("srv500") if e["event"] == "waiting")
    acted = _epoch(waited["ts"]) - failing[-1].received_at
    print(f"srv500: waiting {acted:.1f} s after the failing request")
    assert_resumed_by_id(h, m, info)


def _permissions(h: Any, name: str) -> list[dict[str, Any]]:
    return [e for e in h.events(name) if e["event"] == "permission"]


def test_deadline_while_escalated_audits_the_deadline(matrix) -> None:
    """A deadline reached while a permission request waits for a human: the task ends
    ``abandoned`` (verdict ``ESCALATE``), the waiting hook is freed with a denial, and the
    audit line says the deadline ruled (``"by": "deadline"``), never the operator."""
    h = matrix()
    project = h.project()
    rules = {"rules": [{"tool": "Bash", "match": "^echo escalated", "action": "escalate"}]}
    h.write_profile(agent=INTERACTIVE, monitor={**SHORT, "deadline": 25}, approval=rules)
    h.submit("late", "[[bash: echo escalated > esc.txt]] go", project)
    h.start()
    h.finish(FINISH_TIMEOUT)
    m = h.manifests()["late"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "late")
    assert (m["status"], m["verdict"], m["abandon_reason"]) == (
        "abandoned",
        "ESCALATE",
        "deadline",
    ), info
    assert not (project / "esc.txt").exists(), info
    ruled = [(p["decision"], p["by"]) for p in _permissions(h, "late")]
    assert ruled == [("escalate", "rule"), ("deny", "deadline")], (ruled, info)


def test_interactive_limit_keeps_the_tui_then_resumes_at_the_reset(matrix) -> None:
    """A usage limit in the TUI (``StopFailure`` ``rate_limit``): the task waits with the
    agent kept at its prompt (Claude Code 2.1.234+ may continue by itself at the reset);
    the CLI here does not, so at the reset the kept agent is stopped and the session
    resumed by id, once, and completes: no retry, no hang, one limit wait."""
    h = matrix(final_text="finished after the limit")
    h.token = gateway_token()
    project = h.project()
    h.write_profile(agent=INTERACTIVE, monitor=SHORT, approval=WRITE_RULES)
    h.submit("tuilimit", "[[ratelimit: 1 reset=+8]] write hello.txt", project)
    h.start()
    h.finish(FINISH_TIMEOUT)
    m = h.manifests()["tuilimit"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "tuilimit")
    assert outcome(m) == ("completed", "PASS", 0), info
    assert m["limit_waits"] == 1 and (project / "hello.txt").exists(), info
    events = kinds(h, "tuilimit")
    waited = events.index("waiting")
    # kept: the agent is stopped only by the resume at the reset, not by the wait
    assert events.index("resumed", waited) < events.index("agent_stopped", waited), events
    assert events.count("resumed") == 1 and "hung" not in events, events
    assert_resumed_by_id(h, m, info)


def _long_monitor() -> dict[str, Any]:
    """The shipped ``profiles/long.toml`` ``[monitor]`` values (stale 90 + grace 30, checks
    every 30 s), without its notifier (the harness records notifications)."""
    path = Path(__file__).resolve().parent.parent / "profiles" / "long.toml"
    monitor = dict(tomllib.loads(path.read_text(encoding="utf-8"))["monitor"])
    for key in ("notifier", "notifier_timeout", "notify_on"):
        monitor.pop(key, None)
    return monitor


@pytest.mark.skipif(
    os.environ.get("SUPERVISE_LONG_E2E") != "1",
    reason="long real-CLI run; SUPERVISE_LONG_E2E=1 runs it",
)
def test_long_profile_interactive_401_and_500_are_acted_on_by_the_hook(matrix) -> None:
    """With ``long.toml``'s values a hang verdict takes 120 s, so a 401 ``failed`` within
    30 s and a 500 ``waiting`` within 30 s of the failing request were acted on by the
    ``StopFailure`` hook; the 500 then resumes (after the 30 s backoff) and completes."""
    h = matrix(final_text="done after the outage")
    project = h.project()
    h.write_profile(agent=INTERACTIVE, monitor=_long_monitor(), approval=WRITE_RULES)
    h.submit("auth401", "[[auth: 5]] write a.txt", project)
    h.submit("srv500", "[[server_error: 2]] write hello.txt", project)
    h.start()
    h.finish(FINISH_TIMEOUT + 120)
    ms = h.manifests()
    info = json.dumps(ms, indent=1) + h.diagnostics()
    report(h, "auth401")
    report(h, "srv500")
    assert outcome(ms["auth401"]) == ("failed", "FAIL", 0), info
    assert ms["auth401"]["failure_reason"] == "auth", info
    assert outcome(ms["srv500"]) == ("completed", "PASS", 0), info
    for name in ("auth401", "srv500"):
        assert "hung" not in kinds(h, name) and "stale" not in kinds(h, name), info
    by_session = {m["session_id"]: name for name, m in ms.items()}
    for name, event in (("auth401", "failed"), ("srv500", "waiting")):
        failing = [
            r
            for r in h.mock.message_requests()
            if r.status >= 400 and by_session.get(r.session_id or "") == name
        ]
        when = next(e for e in h.events(name) if e["event"] == event)
        acted = _epoch(when["ts"]) - failing[-1].received_at
        print(f"{name}: {event} {acted:.1f} s after the failing request (long.toml)")
        assert acted > 0, (name, acted, info)  # the figure is printed, not bounded
