"""``supervise continue`` with the real Claude Code CLI (issue 22): a headless task completes
against tests/mock_anthropic.py, then a follow-up resumes the SAME session with the new
prompt on stdin (``--resume``), and the second turn completes."""

from __future__ import annotations

import json

import pytest
from test_claude_agent import harness  # noqa: F401  (the fixture)

from supervisor.taskdir import FOLLOWED_UP

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
    assert [e["event"] for e in h.events("chat")].count(FOLLOWED_UP) == 1
