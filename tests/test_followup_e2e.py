"""``supervise continue`` with the real Claude Code CLI (issue 22): a headless task completes
against tests/support/mock_anthropic.py, then a follow-up resumes the SAME session with the new
prompt on stdin (``--resume``), and the second turn completes."""

from __future__ import annotations

import json

import pytest
from support.claude_harness import harness  # noqa: F401  (the fixture)

from supervisor.taskdir.events import Event

pytestmark = pytest.mark.e2e

FOLLOW_UP = "Now also say FOLLOWED."


def test_a_headless_claude_task_continues_its_session(harness) -> None:  # noqa: F811
    h = harness(final_text="DONE: turn over")
    project = h.project()
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]})
    h.submit("chat", "Create hello.txt, then say DONE.", project, model="sonnet")
    h.start()
    h.finish()
    first = h.manifests()["chat"]
    assert (first["status"], first["verdict"]) == ("completed", "PASS"), h.diagnostics()
    session = first["claude"]["session_id"]
    asked = h.cli("continue", "-c", str(h.profile), first["task_id"], FOLLOW_UP, "--json")
    assert asked.returncode == 3, asked.stderr  # queued: the next engine takes it
    h.start()
    h.finish()
    second = h.manifests()["chat"]
    info = json.dumps(second, indent=1) + h.diagnostics()
    assert (second["status"], second["verdict"], second["turn"]) == ("completed", "PASS", 2), info
    assert second["claude"]["session_id"] == session, info
    (earlier,) = second["turns"]
    assert (earlier["turn"], earlier["status"], earlier["verdict"]) == (1, "completed", "PASS")
    # the mock saw the same session carry the new prompt
    later = [
        r
        for r in h.mock.message_requests(session)
        if r.offers_tools and FOLLOW_UP in json.dumps(r.messages[-1:])
    ]
    assert later, info
    assert [e["event"] for e in h.events("chat")].count(Event.FOLLOWED_UP) == 1


def test_an_escalated_claude_task_is_stopped_then_continued(harness) -> None:  # noqa: F811
    """A task waiting for a person: ``continue`` stops its agent cleanly (turn 1 ends
    abandoned, reason stopped) and resumes the same session with the new prompt."""
    h = harness(final_text="DONE: skipped it")
    project = h.project()
    rule = {"tool": "Bash", "match": "^echo escalated", "action": "escalate"}
    h.write_profile(approval={"rules": [rule]})
    h.submit("esc", "[[bash: echo escalated > escalated.txt]] do it", project)
    h.start()
    h.wait_for("the escalation", lambda: h.status("esc") == "escalated", timeout=90)
    session = h.manifests()["esc"]["session_id"]
    task_id = h.manifests()["esc"]["task_id"]
    asked = h.cli("continue", "-c", str(h.profile), task_id, FOLLOW_UP, "--wait", "60")
    assert asked.returncode == 0, asked.stdout + asked.stderr + h.diagnostics()
    h.wait_for(
        "the follow-up's request",
        lambda: any(
            FOLLOW_UP in json.dumps(r.messages[-1:]) for r in h.mock.message_requests(session)
        ),
        timeout=90,
    )
    m = h.manifests()["esc"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    assert m["turn"] == 2 and m["session_id"] == session, info
    (earlier,) = m["turns"]
    assert (earlier["status"], earlier["abandon_reason"]) == ("abandoned", "stopped"), info
    assert not (project / "escalated.txt").exists()
    if h.status("esc") not in ("completed", "failed", "abandoned"):
        h.cli("stop", "-c", str(h.profile), task_id, "--wait", "30")
    h.finish()
