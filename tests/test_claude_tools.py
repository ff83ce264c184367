"""Tool calls in flight (issue 21): the Claude Code adapter's tracking
(:mod:`supervisor.agents.claude.tools`) from the hooks and from the headless stream, fed
with what the real CLI 2.1.328 sent (tests/fixtures/claude/tools/, .../headless/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FAKE_AGENT

from supervisor.agents import AgentView, adapter_for
from supervisor.agents.claude import hooks
from supervisor.agents.claude.adapter import ClaudeAdapter
from supervisor.agents.claude.tools import HEARTBEAT, MAX_CLOSED, MAX_OPEN, ToolsInFlight
from supervisor.audit import By
from supervisor.config import AgentSpec, ApprovalRule, MonitorPolicy, ResolvedTask, TaskSpec
from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso

FIXTURES = Path(__file__).parent / "fixtures" / "claude"
TOOLS = FIXTURES / "tools"
HEADLESS = FIXTURES / "headless"
T0 = 1_700_000_000.0


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _hooks() -> list[dict[str, Any]]:
    """The hook events of the 65 s Bash call, in the order the CLI fired them."""
    return json.loads((TOOLS / "bash-long-hooks.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------- the fixture


def test_the_cli_prints_a_heartbeat_every_30_s_while_a_tool_runs() -> None:
    """The measured fact behind ``HEARTBEAT`` and ``validate``'s warning."""
    objs = _lines(TOOLS / "bash-long.jsonl")
    times = [float(t) for t in (TOOLS / "bash-long.times").read_text().split()]
    beats = [(t, o) for t, o in zip(times, objs, strict=True) if o["type"] == "tool_progress"]
    assert len(beats) == 2
    assert [o["elapsed_time_seconds"] for _, o in beats] == [HEARTBEAT, 2 * HEARTBEAT]
    assert all(o["heartbeat"] is True and o["tool_name"] == "Bash" for _, o in beats)
    assert beats[1][0] - beats[0][0] == pytest.approx(HEARTBEAT, abs=1.0)
    tool_use = next(
        o
        for o in objs
        if o["type"] == "assistant" and o["message"]["content"][0]["type"] == "tool_use"
    )
    call_id = tool_use["message"]["content"][0]["id"]
    assert {o["parent_tool_use_id"] for _, o in beats} == {call_id}
    # nothing but the heartbeats between the tool_use line and its result
    start = objs.index(tool_use)
    end = next(i for i, o in enumerate(objs) if o["type"] == "user")
    between = {o["type"] + "/" + str(o.get("subtype")) for o in objs[start + 1 : end]}
    assert between <= {"tool_progress/None", "system/task_started", "system/task_notification"}


def test_pre_tool_use_comes_before_the_permission_request_and_carries_the_id() -> None:
    events = [(h["event"], h["input"].get("tool_use_id")) for h in _hooks()]
    names = [e for e, _ in events]
    assert names.index("PreToolUse") < names.index("PermissionRequest") < names.index("PostToolUse")
    ids = dict(events)
    assert ids["PreToolUse"] == ids["PostToolUse"] and ids["PreToolUse"].startswith("toolu_")
    assert ids["PermissionRequest"] is None  # matched with the PreToolUse just before


def test_a_denied_call_gets_no_post_tool_hook() -> None:
    """Measured (headless/captures.json): a denied Bash call fires PreToolUse and
    PermissionRequest, then only PostToolBatch: the ruling itself must close it."""
    cases = json.loads((HEADLESS / "captures.json").read_text(encoding="utf-8"))["cases"]
    for name in ("bash-denied", "bash-unanswered"):
        fired = cases[name]["hooks_fired"]
        assert "PreToolUse" in fired and "PostToolBatch" in fired, fired
        assert not {"PostToolUse", "PostToolUseFailure", "PermissionDenied"} & set(fired)


# ---------------------------------------------------------------------------- the tracker


def test_the_stream_alone_shows_the_tool_in_flight() -> None:
    """``hooks = false``: the ``tool_use`` block without its ``tool_result``."""
    tools = ToolsInFlight()
    seen = []
    for i, obj in enumerate(_lines(TOOLS / "bash-long.jsonl")):
        tools.feed_stream(obj, T0 + i)
        seen.append((obj["type"], tools.oldest(T0 + i)))
    opened = next(i for i, (_, found) in enumerate(seen) if found is not None)
    beats = [found for kind, found in seen if kind == "tool_progress"]
    assert beats == [(T0 + opened, "Bash")] * 2  # open through the heartbeats
    assert [found for kind, found in seen if kind == "user"] == [None]
    assert seen[-1][1] is None


def test_the_hooks_open_park_start_and_close_a_call() -> None:
    tools = ToolsInFlight()
    by_event = {h["event"]: h["input"] for h in _hooks()}
    tools.feed_hook("PreToolUse", by_event["PreToolUse"], T0)
    assert tools.oldest(T0 + 1) == (T0, "Bash")
    request = by_event["PermissionRequest"]
    tools.asked(request["tool_name"], request["tool_input"])
    assert tools.oldest(T0 + 2) is None  # waiting for a ruling: not in flight
    tools.asked(request["tool_name"], request["tool_input"])  # read again: no change
    tools.ruled(True, request["tool_name"], request["tool_input"])
    assert tools.oldest(T0 + 3) == (T0 + 3, "Bash")  # runs from the check after the ruling
    assert tools.oldest(T0 + 9) == (T0 + 3, "Bash")
    tools.feed_hook("PostToolUse", by_event["PostToolUse"], T0 + 10)
    assert tools.oldest(T0 + 10) is None
    # the stream's lines for the same call, read after the hook, do not reopen it
    for obj in _lines(TOOLS / "bash-long.jsonl"):
        if obj["type"] == "assistant":
            tools.feed_stream(obj, T0 + 11)
    assert tools.oldest(T0 + 11) is None


def test_a_denial_closes_the_call() -> None:
    tools = ToolsInFlight()
    tools.open("toolu_1", "Bash", {"command": "curl x"}, T0)
    tools.asked("Bash", {"command": "curl x"})
    tools.ruled(False, "Bash", {"command": "curl x"})
    assert tools.oldest(T0 + 1) is None and not tools.calls


@pytest.mark.parametrize("event", ["Stop", "StopFailure", "SessionEnd"])
def test_the_end_of_the_turn_closes_every_call(event: str) -> None:
    tools = ToolsInFlight()
    tools.open("a", "Bash", None, T0)
    tools.open("b", "Read", None, T0 + 1)
    tools.feed_hook(event, {}, T0 + 2)
    assert tools.oldest(T0 + 2) is None


def test_post_tool_batch_closes_the_calls_it_lists_only() -> None:
    tools = ToolsInFlight()
    tools.open("a", "Bash", None, T0)
    tools.open("b", "Task", None, T0 + 1)
    tools.feed_hook("PostToolBatch", {"tool_calls": [{"tool_use_id": "a"}, "junk", 3]}, T0 + 2)
    assert tools.oldest(T0 + 2) == (T0 + 1, "Task")


@pytest.mark.parametrize("kind", ["result", "supervise_launch"])
def test_the_end_of_a_run_in_the_stream_closes_every_call(kind: str) -> None:
    tools = ToolsInFlight()
    tools.open("a", "Bash", None, T0)
    tools.feed_stream({"type": kind}, T0 + 1)
    assert tools.oldest(T0 + 1) is None


def test_the_same_call_reported_twice_is_one_call() -> None:
    """PreToolUse and the stream's tool_use name the same call; a hook file read twice."""
    tools = ToolsInFlight()
    tools.open("toolu_1", "Bash", None, T0)
    tools.open("toolu_1", "Bash", None, T0 + 5)
    assert len(tools.calls) == 1 and tools.oldest(T0 + 6) == (T0, "Bash")


def test_the_oldest_of_parallel_calls_counts() -> None:
    tools = ToolsInFlight()
    tools.open("late", "Read", None, T0 + 5)
    tools.open("early", "Bash", None, T0 + 1)
    assert tools.oldest(T0 + 6) == (T0 + 1, "Bash")


# ---------------------------------------------------------------------------- hostile input


@pytest.mark.parametrize("key", [None, 7, "", "x" * 201, ["toolu"], {"a": 1}, True])
def test_a_call_without_a_usable_id_is_ignored(key: Any) -> None:
    tools = ToolsInFlight()
    tools.feed_hook("PreToolUse", {"tool_use_id": key, "tool_name": "Bash"}, T0)
    tools.feed_hook("PostToolUse", {"tool_use_id": key}, T0)
    block = {"type": "tool_use", "id": key, "name": "Bash"}
    tools.feed_stream({"type": "assistant", "message": {"content": [block]}}, T0)
    assert tools.oldest(T0) is None


def test_a_flood_of_calls_is_capped_and_the_oldest_stays() -> None:
    tools = ToolsInFlight()
    for i in range(10 * MAX_OPEN):
        tools.open(f"toolu_{i}", "\u202eBash\x00" * 100, {"x": "y" * 10_000}, T0 + i)
    assert len(tools.calls) == MAX_OPEN
    since, name = tools.oldest(T0 + 1e5) or (None, "")
    assert since == T0 and name.startswith("BashBash") and name.isprintable()
    assert len(name) <= 200  # clipped; the control and bidi characters dropped
    for i in range(10 * MAX_CLOSED):
        tools.close(f"gone_{i}")
    assert len(tools.closed) == MAX_CLOSED


def test_the_record_survives_a_restart_and_garbage_is_skipped() -> None:
    tools = ToolsInFlight()
    tools.open("toolu_1", "Bash", None, T0)
    tools.open("toolu_2", "Write", None, T0 + 1)
    tools.asked("Write", None)
    saved = json.loads(json.dumps(tools.report()))
    again = ToolsInFlight()
    again.restore([*saved, "junk", {"id": 5}, {"id": "toolu_3", "since": "soon"}, None])
    # every call counts from the first check after the restart (another engine's clock)
    assert again.oldest(T0 + 2) == (T0 + 2, "Bash")
    assert again.calls["toolu_2"].waiting is True
    assert again.calls["toolu_3"].since == T0 + 2
    assert again.take_changed() is False  # restoring is no change to write
    again.restore({"not": "a list"})


@pytest.mark.parametrize("since", [T0 + 3600, float("nan"), float("inf")])
def test_a_start_after_now_or_not_finite_counts_from_now(since: float) -> None:
    tools = ToolsInFlight()
    tools.restore([{"id": "toolu_1", "name": "Bash", "since": since}])
    assert tools.oldest(T0) == (T0, "Bash")
    assert tools.oldest(T0 + 10) == (T0, "Bash")  # and then it ages


# ---------------------------------------------------------------------------- the adapter


def _adapter(tmp_path: Path, mode: str = "headless", **spec: Any) -> ClaudeAdapter:
    folder = tmp_path / "task"
    folder.mkdir(exist_ok=True)
    task = TaskSpec(name="t", prompt="p", project_dir=tmp_path)
    rules = [
        ApprovalRule(tool="Bash", match="^python3", action="approve"),
        ApprovalRule(tool="Bash", match="^rm", action="escalate"),
    ]
    resolved = ResolvedTask(task, "p", "m", MonitorPolicy(deadline=600.0), rules=tuple(rules))
    manifest = Manifest(
        task_id="t1",
        task_name="t",
        model="m",
        project_dir=str(tmp_path),
        session_name="t1",
        session_id="00000000-0000-4000-8000-000000000000",
        tmpdir=str(folder),
        created_at=utc_iso(),
        **spec,
    )
    agent = AgentSpec(kind="claude", mode=mode)  # type: ignore[arg-type]
    adapter = adapter_for(agent, TaskDir(folder), resolved, manifest, "denied", lambda k: None)
    assert isinstance(adapter, ClaudeAdapter)
    return adapter


def _hook(tmp_path: Path, event: str, data: dict[str, Any]) -> None:
    """A signal file as the relay writes it (hook-<time_ns>-<pid>-<event>.json)."""
    name = f"hook-{time.time_ns():020d}-1-{event}.json"
    (tmp_path / "task" / name).write_text(json.dumps(data), encoding="utf-8")
    time.sleep(0.001)  # the next file sorts after this one


def _bash(call_id: str, command: str) -> dict[str, dict[str, Any]]:
    tool_input = {"command": command, "description": "d"}
    base = {"tool_name": "Bash", "tool_input": tool_input}
    return {
        "pre": {**base, "hook_event_name": "PreToolUse", "tool_use_id": call_id},
        "ask": {**base, "hook_event_name": "PermissionRequest"},
        "post": {**base, "hook_event_name": "PostToolUse", "tool_use_id": call_id},
    }


def _look(adapter: ClaudeAdapter, now: float) -> AgentView:
    return adapter.observe(now, "running", None)


def test_the_adapter_reports_an_approved_tool_until_its_post_hook(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    call = _bash("toolu_a", "python3 -c 'x'")
    _hook(tmp_path, "PreToolUse", call["pre"])
    _hook(tmp_path, "PermissionRequest", call["ask"])
    view = _look(adapter, T0)
    assert view.requests == 1 and view.tool_since is None  # waiting for its ruling
    adapter.rule(T0)
    view = _look(adapter, T0 + 1)
    assert (view.tool_since, view.tool_name) == (T0 + 1, "Bash")
    assert adapter.report()["claude"]["tools_in_flight"][0]["id"] == "toolu_a"
    _hook(tmp_path, "PostToolUse", call["post"])
    assert _look(adapter, T0 + 50).tool_since is None


def test_a_tool_denied_by_the_rules_is_not_in_flight(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    call = _bash("toolu_d", "curl http://example.invalid")
    _hook(tmp_path, "PreToolUse", call["pre"])
    _hook(tmp_path, "PermissionRequest", call["ask"])
    _look(adapter, T0)
    adapter.rule(T0)
    assert _look(adapter, T0 + 1).tool_since is None


@pytest.mark.parametrize("approve", [True, False])
def test_an_escalated_tool_waits_until_the_operator_rules(tmp_path: Path, approve: bool) -> None:
    """Escalation timing is unchanged: the request escalates at the check that reads it;
    the call is not in flight while a human is asked; approved, it runs from then."""
    adapter = _adapter(tmp_path)
    call = _bash("toolu_e", "rm -rf build")
    _hook(tmp_path, "PreToolUse", call["pre"])
    _hook(tmp_path, "PermissionRequest", call["ask"])
    view = _look(adapter, T0)
    assert view.escalate is not None and view.tool_since is None
    adapter.rule(T0)
    assert _look(adapter, T0 + 100).tool_since is None
    adapter.answer(approve, by=By.OPERATOR)
    view = _look(adapter, T0 + 200)
    assert view.tool_since == (T0 + 200 if approve else None)


def test_a_restarted_engine_keeps_the_tool_in_flight(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    _hook(tmp_path, "PreToolUse", _bash("toolu_r", "ls -a")["pre"])
    assert _look(adapter, T0).tool_since == T0
    again = _adapter(tmp_path, claude=adapter.report()["claude"])
    assert _look(again, T0 + 30).tool_since == T0 + 30  # counted again from the restart


def test_a_new_run_closes_what_the_last_one_left_open(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    _hook(tmp_path, "PreToolUse", _bash("toolu_k", "ls -a")["pre"])
    assert _look(adapter, T0).tool_since == T0
    adapter.launch(resume=True)
    assert _look(adapter, T0 + 1).tool_since is None


def test_headless_without_hooks_reads_the_tool_from_the_stream(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path)
    stream = tmp_path / "task" / hooks.STREAM
    lines = (TOOLS / "bash-long.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    first_tool = next(i for i, line in enumerate(lines) if '"tool_use"' in line)
    stream.write_text("".join(lines[: first_tool + 1]), encoding="utf-8")
    assert _look(adapter, T0).tool_name == "Bash"
    with open(stream, "a", encoding="utf-8") as handle:
        handle.writelines(lines[first_tool + 1 :])
    assert _look(adapter, T0 + 70).tool_since is None


def test_every_change_of_the_open_calls_asks_for_a_manifest_write(tmp_path: Path) -> None:
    """A quiet check skips the manifest write for up to a minute; a tool starting or
    ending must not be lost that way (a SIGKILLed engine's successor reads it back)."""
    adapter = _adapter(tmp_path)
    assert adapter.unsaved() is False
    call = _bash("toolu_w", "ls -a")
    _hook(tmp_path, "PreToolUse", call["pre"])
    _look(adapter, T0)
    assert adapter.unsaved() is True and adapter.unsaved() is False
    _look(adapter, T0 + 1)
    assert adapter.unsaved() is False  # nothing changed
    _hook(tmp_path, "PostToolUse", call["post"])
    _look(adapter, T0 + 2)
    assert adapter.unsaved() is True


def test_the_settings_register_pre_tool_use_with_a_matcher_and_post_tool_batch(
    tmp_path: Path,
) -> None:
    registered = hooks.settings(tmp_path, 60)["hooks"]
    assert registered["PreToolUse"][0]["matcher"] == "*"
    assert registered["PreToolUse"][0]["hooks"][0]["timeout"] == hooks.HOOK_TIMEOUT
    assert "PostToolBatch" in registered
    assert "PermissionRequest" not in registered["PreToolUse"][0]["hooks"][0]["command"]


@pytest.mark.parametrize(
    ("value", "env", "said"),
    [
        ("-1", None, "allowed: from 0 to 31536000 (got -1)"),
        ("inf", None, "finite number (got inf)"),
        ("nan", None, "finite number (got nan)"),
        ("1e12", None, "at most 31536000 seconds (1 year)"),
        ('"600"', None, "valid number (got '600')"),
        ("true", None, "valid number (got True)"),
        ("60", "inf", "env MONITOR_TOOL_BUDGET='inf': Input should be a finite number"),
    ],
)
def test_a_tool_budget_out_of_range_is_one_line(
    tmp_path: Path, value: str, env: str | None, said: str
) -> None:
    (tmp_path / "project").mkdir()
    task = tmp_path / "t.toml"
    task.write_text(
        f'name = "q"\nprompt = "p"\nproject_dir = "project"\n[monitor]\ntool_budget = {value}\n',
        encoding="utf-8",
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    done = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "validate", str(task)],
        cwd=tmp_path,
        env={**clean, **({"MONITOR_TOOL_BUDGET": env} if env else {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert str(task) in line and said in line
    assert "tool_budget" in line or "TOOL_BUDGET" in line


def test_a_restart_reads_the_stream_again_and_keeps_the_running_call(tmp_path: Path) -> None:
    """Found by the SIGKILL test: a restarted adapter reads ``stream.jsonl`` from its start;
    the run's ``supervise_launch`` marker closed the restored call and its ``tool_use``
    line could not open it again (the id counted as closed), so a running tool was lost."""
    stream = tmp_path / "task" / hooks.STREAM
    lines = (TOOLS / "bash-long.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    first_tool = next(i for i, line in enumerate(lines) if '"tool_use"' in line)
    adapter = _adapter(tmp_path)
    stream.write_text('{"type": "supervise_launch"}\n' + "".join(lines[: first_tool + 3]))
    assert _look(adapter, T0).tool_name == "Bash"
    again = _adapter(tmp_path, claude=adapter.report()["claude"])
    assert (_look(again, T0 + 20).tool_since, again.tools.oldest(T0 + 20)) == (
        T0 + 20,
        (T0 + 20, "Bash"),
    )


# ---------------------------------------------------------------------------- live, fake agent


@pytest.mark.parametrize(("budget", "retries"), [(None, 0), (0, 1)])
def test_a_live_headless_run_without_hooks_is_kept_healthy_by_its_tool(
    setup, tmp_path: Path, budget: int | None, retries: int
) -> None:
    """The engine, tmux and a fake Claude Code (tests/support/fake_agent.py ``--claude``) that runs
    one tool for 9 s printing only a heartbeat every 4 s, with ``hooks = false``, stale 2 /
    grace 1: the stream's ``tool_use`` without its ``tool_result`` keeps the run healthy
    (``completed``, no retry). With ``tool_budget = 0`` the same run is hung and resumed."""
    fake = tmp_path / "claude"
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_AGENT}" --claude "$@"\n')
    fake.chmod(0o755)
    agent = {"kind": "claude", "binary": str(fake), "hooks": False}
    agent["permission_mode"] = "bypassPermissions"  # headless without hooks must not ask
    setup.write_profile(
        extra={"agent": agent},
        base_interval=0.5,
        stale_threshold=2,
        grace_period=1,
        **({} if budget is None else {"tool_budget": budget}),
    )
    setup.drop("tool.toml", setup.task("tool", "stream_tool: Bash 9\nheartbeat: 4\n"))
    done = setup.run(timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    m = setup.manifests()["tool"]
    kinds = [e["event"] for e in setup.events(m["task_id"])]
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", retries), kinds
    assert ("hung" in kinds) is (retries == 1), kinds
    assert m["claude"]["tools_in_flight"] == []
    assert m["claude"]["result"] == ("done" if retries == 0 else None)  # the resume: no tool
