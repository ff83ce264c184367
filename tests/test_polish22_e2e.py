"""Issue 22 polish with the real Claude Code CLI against tests/support/mock_anthropic.py: after
``supervise continue`` the rendered ``tail`` shows where turn 2 starts and its prompt's first
line, between turn 1's result and turn 2's, and no JSON."""

from __future__ import annotations

import pytest
from support.claude_harness import harness  # noqa: F401  (the fixture)

pytestmark = pytest.mark.e2e

FOLLOW_UP = "Now write the curl version into NOTES.md.\nUse one line."


def test_tail_of_a_continued_claude_task_marks_the_second_turn(harness) -> None:  # noqa: F811
    h = harness(final_text="DONE: turn over")
    project = h.project()
    h.write_profile()
    h.submit("chat", "Say DONE.", project, model="sonnet")
    h.start()
    h.finish()
    first = h.manifests()["chat"]
    assert (first["status"], first["verdict"]) == ("completed", "PASS"), h.diagnostics()
    task_id = first["task_id"]
    asked = h.cli("continue", "-c", str(h.profile), task_id, FOLLOW_UP)
    assert asked.returncode == 3, asked.stderr  # queued: the next engine takes it
    h.start()
    h.finish()
    second = h.manifests()["chat"]
    assert (second["status"], second["turn"]) == ("completed", 2), h.diagnostics()
    tail = h.cli("tail", "-c", str(h.profile), task_id, "-n", "100")
    assert tail.returncode == 0, tail.stderr
    lines = tail.stdout.splitlines()
    mark = "--- turn 2: Now write the curl version into NOTES.md. ---"
    assert lines.count(mark) == 1, tail.stdout
    at = lines.index(mark)
    results = [i for i, line in enumerate(lines) if line.startswith("result: success")]
    assert len(results) == 2 and results[0] < at < results[1], tail.stdout
    assert not any(line.lstrip().startswith('{"') for line in lines), tail.stdout
