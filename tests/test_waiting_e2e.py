"""Issue 22 item 2 end to end: the orchestrator's loop on the real Claude Code CLI (pinned)
against the mock Messages API. A Bash request escalates by rule; ``supervise wait`` returns
with the needs-you code and what the task needs; ``approve``; ``wait`` again returns 0."""

from __future__ import annotations

import json

import pytest
from support.claude_harness import harness  # noqa: F401 (the fixture)

from supervisor.waiting import EXIT_NEEDS_YOU

pytestmark = pytest.mark.e2e


def test_wait_returns_on_an_escalation_then_approve_then_wait_passes(harness) -> None:  # noqa: F811
    h = harness(final_text="the escalated step ran")
    project = h.project()
    h.write_profile(
        approval={"rules": [{"tool": "Bash", "match": "^echo needs", "action": "escalate"}]}
    )
    h.submit("loop", "[[bash: echo needs-you > asked.txt]] do it", project)
    h.start()
    h.wait_for("the task folder", lambda: "loop" in h.manifests(), timeout=60)
    task_id = h.manifests()["loop"]["task_id"]
    asked = h.cli("wait", "-c", str(h.profile), task_id, "--json", "--timeout", "50")
    assert asked.returncode == EXIT_NEEDS_YOU, asked.stdout + asked.stderr + h.diagnostics()
    [entry] = json.loads(asked.stdout)
    assert (entry["task_id"], entry["status"]) == (task_id, "escalated")
    needs = entry["needs"]
    assert (needs["kind"], needs["tool"], needs["subject"]) == (
        "permission",
        "Bash",
        "echo needs-you > asked.txt",
    ), needs
    assert needs["rule"] == 1 and needs["detail"].startswith("rule 1 (Bash"), needs
    assert needs["reason"].startswith("Bash 'echo needs-you > asked.txt' waits for approve")
    assert needs["source"] == "hook", needs
    assert not (project / "asked.txt").exists()
    text = h.cli("wait", "-c", str(h.profile), task_id)
    assert text.returncode == EXIT_NEEDS_YOU
    assert text.stdout.startswith(f"{task_id}: escalated needs-you Bash(echo needs-you")
    approved = h.cli("approve", "-c", str(h.profile), task_id)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    done = h.cli("wait", "-c", str(h.profile), task_id, "--json", "--timeout", "50")
    assert done.returncode == 0, done.stdout + done.stderr + h.diagnostics()
    [manifest] = json.loads(done.stdout)
    assert (manifest["status"], manifest["verdict"]) == ("completed", "PASS"), manifest
    assert (project / "asked.txt").read_text().strip() == "needs-you"
    h.finish()
