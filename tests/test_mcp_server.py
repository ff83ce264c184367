"""``supervise mcp`` (issue 22 item 6) driven by the official SDK's stdio client against a
live engine that runs the fake agent: submit → wait → show → tail, the resources, and one
clear error text for each kind of bad call."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import anyio
import pytest
from conftest import Setup, read_line
from support.ops_engine import engine

pytest.importorskip("mcp")

from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from support.mcp_client import _ok, _refused, _session

from supervisor.cli import app as cli

TOOLS = {
    "submit",
    "status",
    "show",
    "wait",
    "tail",
    "cost",
    "attempts",
    "continue",
    "approve",
    "deny",
    "stop",
    "resume",
    "submit_plan",
    "plan",
}


def test_the_cost_tool_gives_the_profile_s_spend_and_daily_budget(setup: Setup) -> None:
    """Issue 26: ``cost`` is ``supervise cost --json`` of the server's profile."""
    profile = setup.write_profile(extra={"budget": {"daily_usd": 0.5}})
    folder = setup.state / "tasks" / "spent-1"
    folder.mkdir(parents=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    manifest = {"task_id": "spent-1", "status": "completed", "finished_at": stamp}
    (folder / "manifest.json").write_text(
        json.dumps({**manifest, "claude": {"total_cost_usd": 0.75}})
    )

    async def body(s: ClientSession) -> None:
        out = await _ok(s, "cost", days=1)
        assert out["total_usd"] == 0.75 and out["by_task"][0]["task_id"] == "spent-1"
        assert out["budgets"][0]["reached"] is True
        assert "days" in await _refused(s, "cost", days=0)

    _session(profile, body)


def test_the_attempts_tool_lists_a_group_submitted_through_mcp(setup: Setup) -> None:
    """Issue 26: ``submit`` with ``attempts`` in ``task`` returns the group's id; the
    ``attempts`` tool lists its attempts (claimed by the engine); bad ids are one line."""
    from support.repos import make_repo

    make_repo(setup.project)
    profile = setup.write_profile()

    async def body(s: ClientSession) -> None:
        keys = {"attempts": 2, "models": ["model-p", "model-q"], "pick": "all"}
        done = await _ok(
            s, "submit", name="two", prompt="exit: 0", project_dir=str(setup.project), task=keys
        )
        waiting = await _refused(s, "attempts", id=done["task_id"])  # not claimed yet
        assert "waits in the spool" in waiting
        run = setup.run(timeout=120)
        assert run.returncode == 0, run.stderr
        found = await _ok(s, "attempts", id=done["task_id"])
        assert found["group"] == done["task_id"] and found["pick"] == "all"
        assert [a["model"] for a in found["attempts"]] == ["model-p", "model-q"]
        assert {a["status"] for a in found["attempts"]} == {"completed"}
        again = await _ok(s, "attempts", id=found["attempts"][0]["task_id"])
        assert again["group"] == found["group"]
        for bad in ("../x", "a\x1b[31mb", ""):
            assert "a task id is lowercase letters" in await _refused(s, "attempts", id=bad)

    _session(profile, body)


def test_the_sdk_client_submits_waits_shows_and_tails(setup: Setup) -> None:
    profile = setup.write_profile()

    async def body(s: ClientSession) -> None:
        listed = {tool.name: tool for tool in (await s.list_tools()).tools}
        assert set(listed) == TOOLS
        assert listed["submit"].input_schema["required"] == ["name", "prompt", "project_dir"]
        assert listed["wait"].input_schema["properties"]["timeout"]
        placed = await _ok(
            s,
            "submit",
            name="via-mcp",
            project_dir=str(setup.project),
            prompt="print: hello from mcp\nexit: 0",
        )
        task_id = placed["task_id"]
        assert task_id.startswith("via-mcp-") and "warning" not in placed
        waited = await _ok(s, "wait", task_ids=[task_id], timeout=60)
        assert waited["pending"] == [] and waited["code"] == 0, waited
        assert waited["tasks"][0]["status"] == "completed"
        # brief by default (no raw output_tail for an agent to pay for); whole with full
        assert "output_tail" not in waited["tasks"][0] and "result" in waited["tasks"][0]
        whole = await _ok(s, "wait", task_ids=[task_id], timeout=5, full=True)
        assert "hello from mcp" in whole["tasks"][0]["output_tail"]
        shown = await _ok(s, "show", task_id=task_id)
        assert (shown["task_id"], shown["verdict"]) == (task_id, "PASS")
        assert "hello from mcp" in await _ok(s, "tail", task_id=task_id, lines=50)
        rows = await _ok(s, "status")
        assert [r["task_id"] for r in rows["tasks"]] == [task_id]
        templates = {t.uri_template for t in (await s.list_resource_templates()).resource_templates}
        assert templates == {
            "supervise://task/{task_id}/manifest",
            "supervise://task/{task_id}/output",
        }
        read = await s.read_resource(f"supervise://task/{task_id}/manifest")
        assert json.loads(read.contents[0].text)["verdict"] == "PASS"
        read = await s.read_resource(f"supervise://task/{task_id}/output")
        assert "hello from mcp" in read.contents[0].text
        assert "already ended" in await _refused(s, "approve", task_id=task_id)
        assert "prompt" in await _refused(s, "continue", task_id=task_id, prompt="  ")
        assert "no task 'nosuch-1'" in await _refused(
            s, "continue", task_id="nosuch-1", prompt="more"
        )

    with engine(setup):
        _session(profile, body)


def test_stop_through_mcp_takes_the_cli_request_path(setup: Setup) -> None:
    profile = setup.write_profile()

    async def body(s: ClientSession) -> None:
        placed = await _ok(
            s,
            "submit",
            name="long",
            project_dir=str(setup.project),
            prompt="print: started\nsleep: 60",
        )
        task_id = placed["task_id"]
        with anyio.fail_after(60):  # poll for the claim: the manifest appears
            while (await s.call_tool("show", {"task_id": task_id})).is_error:
                await anyio.sleep(0.1)
        stopped = await _ok(s, "stop", task_id=task_id, wait_s=30)
        assert (stopped["result"], stopped["status"]) == ("applied", "abandoned"), stopped
        assert (await _ok(s, "show", task_id=task_id))["abandon_reason"] == "stopped"
        assert "already ended: abandoned" in await _refused(s, "resume", task_id=task_id)

    with engine(setup):
        _session(profile, body)


def test_bad_calls_get_one_clear_line_and_stay_inside_the_profile(setup: Setup) -> None:
    profile = setup.write_profile()
    outside = setup.root / "outside"
    (outside / "x").mkdir(parents=True)
    (outside / "x" / "manifest.json").write_text('{"status": "completed"}')

    async def body(s: ClientSession) -> None:
        for bad in ("../outside/x", "/etc", "NOPE", "a\x1b[31mb", ""):
            assert "a task id is lowercase letters" in await _refused(s, "show", task_id=bad)
        assert "no task 'nosuch-1'" in await _refused(s, "show", task_id="nosuch-1")
        assert "no task 'nosuch-1'" in await _refused(s, "tail", task_id="nosuch-1")
        assert "no task nosuch-1 in" in await _refused(s, "wait", task_ids=["nosuch-1"])
        assert "no task 'nosuch-1'" in await _refused(s, "stop", task_id="nosuch-1")
        assert "timeout must be a number from 0 to 300" in await _refused(
            s, "wait", task_ids=["nosuch-1"], timeout=1e9
        )
        assert "give 1 to 100 task ids" in await _refused(s, "wait", task_ids=[])
        line = await _refused(s, "tail", task_id="x", lines="many")
        assert line.startswith("tail: argument 'lines': Input should be a valid integer"), line
        line = await _refused(s, "submit", name="m")
        assert "argument 'prompt': Field required; argument 'project_dir'" in line, line
        project = str(setup.project)
        line = await _refused(
            s, "submit", name="m", prompt="x", project_dir=project, model="nosuch"
        )
        assert "unknown model alias 'nosuch'" in line
        line = await _refused(s, "submit", name="m", prompt="x", project_dir="relative/dir")
        assert "absolute" in line
        line = await _refused(
            s,
            "submit",
            name="m",
            prompt="x",
            project_dir=project,
            task={"prompt_file": "/etc/passwd"},
        )
        assert "prompt_file is not taken here" in line
        line = await _refused(
            s,
            "submit",
            name="m",
            prompt="x",
            project_dir=project,
            task={"env": {"LD_PRELOAD": "/tmp/x.so"}},
        )
        assert "does not let task files set it" in line
        line = await _refused(
            s,
            "submit",
            name="m",
            prompt="x",
            project_dir=project,
            task={"monitor": {"deadline": 1e12}},
        )
        assert "monitor.deadline" in line
        for uri in ("supervise://task/nosuch-1/manifest", "supervise://task/..%2Fx/output"):
            with pytest.raises(MCPError):
                await s.read_resource(uri)

    _session(profile, body)
    assert not setup.spool.exists() or not list(setup.spool.glob("*.toml"))


def test_without_the_extra_mcp_is_one_line_and_exit_2(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # what find_spec sees without the package
    assert cli.main(["mcp", "-c", str(setup.write_profile())]) == 2
    assert capsys.readouterr().err.strip() == (
        "supervise mcp needs the 'mcp' extra: pip install 'supervise-agents[mcp]'"
    )


def test_tail_and_show_escape_what_the_agent_printed(setup: Setup) -> None:
    from supervisor.config import load_profile
    from supervisor.mcp_tools import as_text, manifest, tail

    profile = load_profile(setup.write_profile())
    folder = setup.state / "tasks" / "evil-0a0a0a"
    folder.mkdir(parents=True)
    hostile = "red \x1b[31mtext\x1b]0;title\x07 \x9b2J \u202ereversed\u202c end"
    (folder / "manifest.json").write_text(
        json.dumps({"task_id": "evil-0a0a0a", "status": "running", "summary": hostile})
    )
    (folder / "output.log").write_text(f"first\n{hostile}\n")
    shown = tail(profile, "evil-0a0a0a", 5) + as_text(manifest(profile, "evil-0a0a0a"))
    for char in ("\x1b", "\x07", "\x9b", "\u202e", "\u202c"):
        assert char not in shown, (char, shown)
    assert "first\n" in shown and "reversed" in shown


def test_the_server_exits_when_its_client_goes_even_during_a_wait(setup: Setup) -> None:
    """Found by attack (SIGKILL halfway / the client gone): stdin closed while a 300 s
    wait blocked kept the server alive until the wait's end."""
    profile = setup.write_profile()
    placed = setup.supervise(
        "submit", "-c", str(profile), "--prompt", "x", "--project", str(setup.project), "--json"
    )
    task_id = json.loads(placed.stdout)["task_id"]  # in the spool: no engine runs
    server = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "mcp", "-c", str(profile)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    def send(message: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        server.stdin.flush()

    try:
        send(
            {
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"},
                },
            }
        )
        assert '"id":1' in read_line(server.stdout)
        send({"method": "notifications/initialized"})
        send(
            {
                "id": 2,
                "method": "tools/call",
                "params": {"name": "wait", "arguments": {"task_ids": [task_id], "timeout": 300}},
            }
        )
        send({"id": 3, "method": "tools/call", "params": {"name": "status", "arguments": {}}})
        assert '"id":3' in read_line(server.stdout)  # the wait is blocking meanwhile
        server.stdin.close()
        assert server.wait(timeout=60) == 0  # far below the wait's 300 s
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
