"""Issue 22, item 1 end to end: a headless Claude Code task (the real CLI, pinned, against
the mock Messages API) completes, and ``supervise tail`` shows what it did as text: the
tool call, the final answer and its summary, and no stream-json."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.claude_harness import RUN_TIMEOUT, Harness, harness, supervise  # noqa: F401
from support.claude_support import scrubbed_environ

pytestmark = pytest.mark.e2e


def test_tail_of_a_headless_claude_task_shows_no_json(harness) -> None:  # noqa: F811
    h: Harness = harness(final_text="DONE: hello.txt written")
    project = h.project()
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]})
    h.submit("hello", "Create hello.txt, then say DONE.", project, model="sonnet")
    h.start()
    h.finish()
    m = h.manifests()["hello"]
    assert m["status"] == "completed", h.diagnostics()
    raw = (Path(m["tmpdir"]) / "output.log").read_text(encoding="utf-8")
    assert '{"type":"assistant"' in raw  # the log on disk stays the raw stream

    tail = h.cli("tail", "-c", str(h.profile), m["task_id"], "-n", "100")
    assert tail.returncode == 0, tail.stderr
    lines = tail.stdout.splitlines()
    assert '{"type"' not in tail.stdout and '"session_id"' not in tail.stdout, tail.stdout
    assert "Write(hello.txt)" in lines, tail.stdout
    assert "DONE: hello.txt written" in lines, tail.stdout
    assert any(line.startswith("result: success · ") for line in lines), tail.stdout
    assert f"session {m['session_id']}" in tail.stdout

    status = h.cli("status", "-c", str(h.profile))
    assert "result: success · " in status.stdout and '{"' not in status.stdout, status.stdout
    raw_tail = h.cli("tail", "-c", str(h.profile), m["task_id"], "--raw", "-n", "100")
    assert '"type":"result"' in raw_tail.stdout and raw_tail.returncode == 0


def test_tail_follow_renders_a_live_headless_task(harness) -> None:  # noqa: F811
    """``tail -f`` started while the agent streams a Write for some seconds: the tool call,
    the final answer and the summary arrive through the follow (``-n 1`` printed only what
    was there), rendered, and it ends with the task."""
    h: Harness = harness(final_text="FOLLOWED DONE")
    project = h.project()
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]})
    h.submit("slow", "[[slow_write: big.txt 6]] write the big file", project, model="sonnet")
    h.start()
    m = h.wait_for("the task folder", lambda: h.manifests().get("slow"))
    follow = subprocess.Popen(
        [*supervise(), "tail", "-c", str(h.profile), m["task_id"], "-f", "-n", "1"],
        cwd=h.root,
        env=scrubbed_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = follow.communicate(timeout=RUN_TIMEOUT)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    h.finish()
    assert follow.returncode == 0, err
    assert h.status("slow") == "completed", h.diagnostics()
    lines = out.splitlines()
    assert "Write(big.txt)" in lines and "FOLLOWED DONE" in lines, out
    assert lines.index("Write(big.txt)") < lines.index("FOLLOWED DONE"), out
    assert any(line.startswith("result: success · ") for line in lines), out
    assert '{"' not in out, out
