"""Issue 26, part 1 (must show): a plan A -> B, A -> C run by a real engine, real tmux, the
fake agent and a git repository for the worktrees."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import tomli_w
from conftest import Setup, stop_engine, wait_for
from support.repos import make_repo, sh

#: A's acceptance: prints a marker that becomes A's summary, exits with the given code.
ACCEPT = "import sys; print('A-RESULT-4242'); sys.exit({code})"
PROMPT_B = "print: b\nexit: 0\nA said <<{after.A.summary}>> on {after.A.branch} {braces}"


def plan(setup: Setup, a_passes: bool) -> str:
    """The plan file: A, then B and C after A, both building on A's branch."""
    accept = {"command": [sys.executable, "-c", ACCEPT.format(code=0 if a_passes else 1)]}
    tasks: list[dict[str, Any]] = [
        setup.task("A", "print: a\nexit: 0", acceptance=accept),
        setup.task("B", PROMPT_B, after=["A"], workspace={"base": "after:A"}),
        setup.task("C", "print: c\nexit: 0", after=["A"], workspace={"base": "after:A"}),
    ]
    return tomli_w.dumps({"tasks": tasks})


def event_lines(setup: Setup, manifests: dict[str, dict]) -> str:
    """``NAME ts event status [reason]`` for every event of the plan (the report's lines)."""
    lines = []
    for name in ("A", "B", "C"):
        for e in setup.events(manifests[name]["task_id"]):
            if e["event"] in ("hook",):
                continue
            extra = e.get("abandon_reason") or ""
            lines.append(f"{name} {e['ts']} {e['event']} {e.get('status', '')} {extra}".rstrip())
    return "\n".join(lines)


def names(setup: Setup, task_id: str) -> list[str]:
    return [e["event"] for e in setup.events(task_id)]


def first_ts(setup: Setup, task_id: str, event: str) -> str:
    return next(e["ts"] for e in setup.events(task_id) if e["event"] == event)


def profile(setup: Setup) -> None:
    make_repo(setup.project)
    may = ["model", "acceptance", "workspace"]
    setup.write_profile(max_concurrent=4, extra={"security": {"task_may_set": may}})


def test_b_and_c_start_after_a_passes_from_a_branch_with_a_summary(setup: Setup) -> None:
    profile(setup)
    setup.drop("plan.toml", plan(setup, a_passes=True))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()
    print(done.stderr[-3000:])
    print(event_lines(setup, m))
    a = m["A"]
    assert (a["status"], a["verdict"]) == ("completed", "PASS"), a["summary"]
    done_a = first_ts(setup, a["task_id"], "completed")
    for name in ("B", "C"):
        task = m[name]
        assert (task["status"], task["verdict"]) == ("completed", "PASS"), task["summary"]
        assert task["after"] == [a["task_id"]] and task["requires"] == "pass"
        seen = names(setup, task["task_id"])
        assert seen[:3] == ["queued", "blocked", "unblocked"], seen
        assert first_ts(setup, task["task_id"], "launched") >= done_a
        ws = task["workspace"]
        assert ws["base"] == a["workspace"]["branch"]
        assert ws["base_commit"] == a["workspace"]["head_commit"]
        # A's committed work is in B's and C's history
        head_a = a["workspace"]["head_commit"]
        sh(setup.project, "merge-base", "--is-ancestor", head_a, ws["branch"])
    worktree_b = Path(m["B"]["workspace"]["path"])
    prompt = (worktree_b / "received_prompt.bin").read_text()
    assert "A said <<Acceptance passed (exit 0): A-RESULT-4242>>" in prompt
    assert f"on {a['workspace']['branch']} {{braces}}" in prompt


def test_b_and_c_end_abandoned_dependency_without_launching_when_a_fails(setup: Setup) -> None:
    profile(setup)
    setup.drop("plan.toml", plan(setup, a_passes=False))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()
    print(done.stderr[-3000:])
    print(event_lines(setup, m))
    a = m["A"]
    assert (a["status"], a["verdict"]) == ("completed", "FAIL")
    for name in ("B", "C"):
        task = m[name]
        assert (task["status"], task["abandon_reason"]) == ("abandoned", "dependency")
        assert task["verdict"] == "ABANDONED" and task["launched_at"] is None
        assert a["task_id"] in task["summary"] and "verdict FAIL" in task["summary"]
        seen = names(setup, task["task_id"])
        assert seen == ["queued", "blocked", "abandoned"], seen
        assert not (setup.state / "tasks" / task["task_id"] / "launch.json").exists()


def _ids(setup: Setup) -> dict[str, str]:
    return {name: m["task_id"] for name, m in setup.manifests().items()}


def test_a_blocked_task_survives_an_engine_kill_and_a_lost_manifest(setup: Setup) -> None:
    setup.write_profile(max_concurrent=4)
    tasks = [
        setup.task("A", "print: a\nsleep: 8\nexit: 0"),
        setup.task("B", "print: b\nexit: 0", after=["A"]),
    ]
    setup.drop("plan.toml", tomli_w.dumps({"tasks": tasks}))
    engine = setup.start()
    try:
        wait_for(lambda: "launched" in names(setup, _ids(setup).get("A", "-")), timeout=60)
        b = _ids(setup)["B"]
        assert setup.manifests()["B"]["status"] == "blocked"
        os.kill(engine.pid, signal.SIGKILL)  # halfway: A runs, B is blocked
        engine.wait(timeout=10)
    finally:
        stop_engine(engine)
    # and B's manifest lost (a power cut): rebuilt from its log, without 'after'; the
    # blocked event still holds B back until A ends
    (setup.state / "tasks" / b / "manifest.json").unlink()
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()
    assert (m["A"]["status"], m["B"]["status"]) == ("completed", "completed")
    seen = names(setup, b)
    assert seen.count("launched") == 1 and seen.count("unblocked") == 1, seen
    assert seen.index("unblocked") < seen.index("launched")
    assert first_ts(setup, b, "launched") >= first_ts(setup, m["A"]["task_id"], "completed")


def test_a_blocked_task_can_be_stopped_and_never_launches(setup: Setup) -> None:
    setup.write_profile(max_concurrent=4)
    tasks = [
        setup.task("A", "print: a\nsleep: 3\nexit: 0"),
        setup.task("B", "print: b\nexit: 0", after=["A"]),
    ]
    setup.drop("plan.toml", tomli_w.dumps({"tasks": tasks}))
    engine = setup.start()
    try:
        wait_for(lambda: "B" in setup.manifests(), timeout=60)
        b = _ids(setup)["B"]
        wait_for(lambda: "blocked" in names(setup, b), timeout=30)
        out = setup.supervise("stop", "-c", str(setup.profile), b)
        assert out.returncode == 0, out.stderr
        wait_for(lambda: setup.manifests()["A"]["status"] == "completed", timeout=60)
    finally:
        stop_engine(engine)
    m = setup.manifests()["B"]
    assert (m["status"], m["abandon_reason"], m["launched_at"]) == ("abandoned", "stopped", None)
    assert names(setup, b) == ["queued", "blocked", "stop_requested", "abandoned"]


def test_the_profiles_inline_tasks_may_name_each_other(setup: Setup) -> None:
    tasks = [
        setup.task("B", "print: b\nexit: 0", after=["A"]),  # named before A: resolved anyway
        setup.task("A", "print: a\nexit: 3"),
    ]
    setup.write_profile(extra={"tasks": tasks})
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()
    assert (m["A"]["status"], m["A"]["verdict"]) == ("failed", "FAIL")
    assert (m["B"]["status"], m["B"]["abandon_reason"]) == ("abandoned", "dependency")
    assert m["B"]["after"] == [m["A"]["task_id"]]


def test_files_naming_each_other_are_claimed_whatever_their_order(setup: Setup) -> None:
    setup.write_profile()
    b = setup.drop("b.toml", setup.task("B", "print: b\nexit: 0", after=["A"]))
    os.utime(b, (1_000_000, 1_000_000))  # B is older: the spool takes it first
    setup.drop("a.toml", setup.task("A", "print: a\nexit: 0"))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()
    assert (m["A"]["status"], m["B"]["status"]) == ("completed", "completed")
    assert m["B"]["after"] == [m["A"]["task_id"]]
    assert first_ts(setup, m["B"]["task_id"], "launched") >= first_ts(
        setup, m["A"]["task_id"], "completed"
    )
    assert not (setup.spool / "rejected").exists()
