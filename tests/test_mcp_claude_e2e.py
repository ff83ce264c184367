"""The real Claude Code CLI (2.1.328) uses ``supervise mcp`` as its MCP server (issue 22 item
6): a scripted turn of the mock Messages API calls ``mcp__supervise__submit`` (a task for
the engine's fake agent) and then ``mcp__supervise__wait`` on the id it got back; the task
ends completed/PASS and the wait's result says so.

What the CLI sent (the MCP tools it offered, the tool_result of each call) is compared with
``tests/fixtures/claude/mcp/``: refresh it with ``SUPERVISE_RECORD_FIXTURES=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Setup
from support.claude_harness import Harness
from support.claude_support import (
    agent_env,
    make_home,
    require_claude,
    scrubbed_environ,
    start_mock,
    stop_mock,
)
from support.mock_tool_calls import last_tool_result_text
from support.ops_engine import engine

pytest.importorskip("mcp")

pytestmark = pytest.mark.e2e

FIXTURE = Path(__file__).parent / "fixtures" / "claude" / "mcp" / "submit-wait.json"
#: Seconds a wait of the brain may block: it returns as soon as the task needs a person
#: or ends, long before this.
WAIT = 120
TOOLS = ("submit", "wait", "approve", "show", "tail", "continue", "submit_plan", "plan")
#: What the CLI sent and got for a plan (submit_plan, then plan), as for ``FIXTURE``.
PLAN_FIXTURE = FIXTURE.with_name("submit-plan.json")


def _brain(root: Path, profile: Path, prompt: str, base_url: str) -> subprocess.CompletedProcess:
    """``claude -p PROMPT`` with ``supervise mcp -c PROFILE`` as its one MCP server."""
    claude = require_claude()
    work = root / "brain"
    work.mkdir()
    home = make_home(root / "brain-home", [work])
    config = root / "mcp.json"
    server = {
        "command": sys.executable,
        "args": ["-m", "supervisor.cli", "mcp", "-c", str(profile)],
    }
    config.write_text(json.dumps({"mcpServers": {"supervise": server}}))
    allowed = ",".join(f"mcp__supervise__{name}" for name in TOOLS)
    argv = [
        claude,
        "-p",
        prompt,
        "--mcp-config",
        str(config),
        "--strict-mcp-config",
        "--allowedTools",
        allowed,
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "claude-sonnet-4-6",
    ]
    # 2.1.328 offers MCP tools deferred (behind its ToolSearch tool, which a real model
    # calls first); the scripted mock calls them by name, so they are offered up front.
    env = {**scrubbed_environ(), **agent_env(home, base_url), "ENABLE_TOOL_SEARCH": "false"}
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=180)


def _seen(mock: Any) -> dict[str, Any]:
    """What the CLI sent: each offered supervise tool (name, input schema's keys), and the
    tool_result text it passed back after each call."""
    main = [r for r in mock.message_requests() if r.offers_tools]
    offered = {
        t["name"]: sorted(t.get("input_schema", {}).get("properties", {}))
        for t in main[0].body["tools"]
        if t["name"].startswith("mcp__supervise__")
    }
    results = [last_tool_result_text(r.messages) for r in main[1:]]
    blocks = [_result_blocks(r.messages) for r in main[1:]]
    return {"offered": offered, "results": results, "blocks": blocks}


def _result_blocks(messages: list[dict[str, Any]]) -> list[str]:
    """The last tool_result's content blocks, each as its type and first word."""
    last = messages[-1]["content"][-1]["content"]
    return [f"{b['type']}:{b.get('text', '').split(None, 1)[0][:20]}" for b in last]


def test_claude_code_submits_through_supervise_mcp_and_waits_for_the_result(
    setup: Setup,
) -> None:
    profile = setup.write_profile()
    child = {
        "name": "delegated",
        "prompt": "print: done by the fake agent\nexit: 0",
        "project_dir": str(setup.project),
    }
    prompt = (
        f"[[tool: mcp__supervise__submit | {json.dumps(child)}]]\n"
        '[[tool: mcp__supervise__wait | {"task_ids": ["{{task_id}}"], "timeout": 90}]]\n'
        "[[final: the delegated task passed]]"
    )
    mock = start_mock()
    try:
        with engine(setup):
            done = _brain(setup.root, profile, prompt, mock.base_url)
        seen = _seen(mock)
    finally:
        stop_mock(mock)
    print(
        done.stdout[-6000:],
        done.stderr[-2000:],
        [
            (r.reply_kind, [t["name"] for t in (r.body or {}).get("tools", [])][-12:])
            for r in mock.message_requests()
        ],
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    manifest = setup.manifests()["delegated"]
    assert (manifest["status"], manifest["verdict"]) == ("completed", "PASS"), manifest
    submitted, waited = (json.loads(text) for text in seen["results"][:2])
    assert submitted["task_id"] == manifest["task_id"]
    assert waited["pending"] == [] and waited["tasks"][0]["verdict"] == "PASS", waited
    final = json.loads(done.stdout.strip().splitlines()[-1])
    assert (final["type"], final["result"]) == ("result", "the delegated task passed")
    shape = {
        "offered": seen["offered"],
        "result_blocks": seen["blocks"][:2],
        "result_keys": [sorted(json.loads(t)) for t in seen["results"][:2]],
    }
    if os.environ.get("SUPERVISE_RECORD_FIXTURES") == "1":
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(shape, indent=2) + "\n")
    assert shape == json.loads(FIXTURE.read_text())


def test_claude_code_submits_a_plan_and_follows_it(setup: Setup) -> None:
    """Issue 26, part 5: the brain submits A → B with ``submit_plan`` while no engine runs
    (its answer warns so), follows it with ``plan`` (waiting to be claimed, by the name
    submit_plan gave); an engine then runs the plan: A, then B, both PASS."""
    profile = setup.write_profile()
    tasks = [
        {"name": "A", "prompt": "print: a\nexit: 0", "project_dir": str(setup.project)},
        {"name": "B", "prompt": "print: b\nexit: 0", "project_dir": str(setup.project)},
    ]
    tasks[1]["after"] = ["A"]
    setup.project.mkdir(exist_ok=True)
    prompt = (
        f"[[tool: mcp__supervise__submit_plan | {json.dumps({'tasks': tasks})}]]\n"
        '[[tool: mcp__supervise__plan | {"plan": "{{task_id}}"}]]\n'
        "[[final: the plan waits for an engine]]"
    )
    mock = start_mock()
    try:
        done = _brain(setup.root, profile, prompt, mock.base_url)
        seen = _seen(mock)
    finally:
        stop_mock(mock)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    submitted, followed = (json.loads(text) for text in seen["results"][:2])
    assert submitted["tasks"] == ["A", "B"] and "no engine" in submitted["warning"], submitted
    assert followed == {
        "plan": submitted["plan"],
        "state": "waiting to be claimed",
        "why": "in the spool: the engine claims it at its next intake",
    }
    ran = setup.run(timeout=120)
    assert ran.returncode == 0, ran.stderr
    m = setup.manifests()
    assert [(m[k]["status"], m[k]["verdict"]) for k in "AB"] == [("completed", "PASS")] * 2
    assert m["B"]["after"] == [m["A"]["task_id"]]
    assert m["B"]["launched_at"] >= m["A"]["finished_at"]
    shape = {
        "offered": {k: v for k, v in seen["offered"].items() if "plan" in k},
        "result_blocks": seen["blocks"][:2],
        "result_keys": [sorted(json.loads(t)) for t in seen["results"][:2]],
    }
    if os.environ.get("SUPERVISE_RECORD_FIXTURES") == "1":
        PLAN_FIXTURE.write_text(json.dumps(shape, indent=2) + "\n")
    assert shape == json.loads(PLAN_FIXTURE.read_text())


def _inert(text: str) -> str:
    """``text`` (JSON) with the mock's directive brackets as JSON escapes: the brain's own
    script does not see the child's directives, the child's prompt holds them again."""
    return text.replace("[[", "\\u005b\\u005b").replace("]]", "\\u005d\\u005d")


def test_claude_code_runs_the_escalation_loop_through_supervise_mcp(tmp_path: Path) -> None:
    """The brain submits a Claude Code task whose Bash call a rule escalates, waits (back on
    the escalation, code 10), approves it, waits (PASS), continues it with a follow-up,
    waits (PASS, turn 2) and reads the rendered result; every call through ``supervise
    mcp``."""
    mock = start_mock(final_text="child finished")
    h = Harness(tmp_path, mock)
    engine_proc = None
    try:
        project = h.project()
        rule = {"tool": "Bash", "match": "^echo escalated", "action": "escalate"}
        profile = h.write_profile(approval={"rules": [rule]})
        child = {
            "name": "loop",
            "project_dir": str(project),
            "prompt": "[[bash: echo escalated > escalated.txt]] do it",
        }
        task = _inert(json.dumps(child))
        wait = '[[tool: mcp__supervise__wait | {"task_ids": ["{{task_id}}"], "timeout": WAIT}]]\n'
        prompt = (
            f"[[tool: mcp__supervise__submit | {task}]]\n{wait}"
            '[[tool: mcp__supervise__approve | {"task_id": "{{task_id}}", "wait_s": 30}]]\n'
            f"{wait}"
            '[[tool: mcp__supervise__continue | {"task_id": "{{task_id}}", "wait_s": 30, '
            '"prompt": "now check it once more"}]]\n'
            f"{wait}"
            '[[tool: mcp__supervise__tail | {"task_id": "{{task_id}}"}]]\n'
            "[[final: the loop is done]]"
        ).replace("WAIT", str(WAIT))
        engine_proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "run", str(profile)],
            env=scrubbed_environ(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        h.proc = engine_proc  # Harness.close ends it by PID
        done = _brain(tmp_path, profile, prompt, mock.base_url)
        brain = [r for r in mock.message_requests() if "[[tool:" in json.dumps(r.messages[:1])]
        results = [last_tool_result_text(r.messages) for r in brain if r.offers_tools][1:]
    finally:
        h.close()
        stop_mock(mock)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:], h.diagnostics())
    manifest = h.manifests()["loop"]
    assert (manifest["status"], manifest["verdict"]) == ("completed", "PASS"), h.diagnostics()
    assert (project / "escalated.txt").exists()
    task_id = manifest["task_id"]
    needs = json.loads(results[1])  # the wait returned on the escalation: exit code 10
    assert (needs["code"], needs["needs_you"]) == (10, [task_id]), needs
    assert needs["tasks"][0]["needs"]["tool"] == "Bash", needs
    approved = json.loads(results[2])
    assert (approved["verb"], approved["result"]) == ("approve", "applied"), results
    waited = json.loads(results[3])
    assert (waited["code"], waited["tasks"][0]["verdict"]) == (0, "PASS"), waited
    followed = json.loads(results[4])
    assert (followed["verb"], followed["result"], followed["turn"]) == ("continue", "applied", 2)
    again = json.loads(results[5])
    assert (again["code"], again["tasks"][0]["turn"]) == (0, 2), again
    assert manifest["turn"] == 2 and len(manifest["turns"]) >= 1, manifest
    assert "child finished" in results[6] and '{"type"' not in results[6], results[6]
    final = json.loads(done.stdout.strip().splitlines()[-1])
    assert final["result"] == "the loop is done"
