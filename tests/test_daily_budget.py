"""The profile's daily cap (issue 26, ``[budget] daily_usd``): the engine's running total and
hold (:class:`supervisor.engine.dailyspend.DailySpend`, in process, over real task folders and
a real notifier process), then the whole engine with tmux and a fake Claude Code that reports
a cost (tests/support/fake_agent.py ``--claude``, ``cost:``)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FAKE_AGENT, Setup, stop_engine, wait_for
from support.faketime_support import step_clock, stepped_env
from support.spend_tasks import task_with_cost

from supervisor import costs
from supervisor.config import load_profile
from supervisor.engine.dailyspend import DailySpend
from supervisor.policy import spend
from supervisor.taskdir import layout
from supervisor.taskdir.folder import TaskDir

NOTIFIER = """import json, sys
event = json.load(sys.stdin)
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(event) + "\\n")
"""


def _notifier(root: Path) -> tuple[list[str], Path]:
    script, sent = root / "notifier.py", root / "notified.jsonl"
    script.write_text(NOTIFIER)
    return [sys.executable, str(script), str(sent)], sent


def _sent(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _ledger(setup: Setup, daily: float | None = 2.0) -> tuple[DailySpend, Path]:
    argv, sent = _notifier(setup.root)
    extra = {"budget": {"daily_usd": daily}} if daily is not None else {}
    setup.write_profile(extra=extra, notifier=argv)
    profile = load_profile(setup.profile)
    profile.tasks_dir.mkdir(parents=True, exist_ok=True)
    return DailySpend(profile, lambda kind, body: body()), sent


def test_queued_tasks_are_held_once_the_day_spent_the_cap_and_released_the_next_day(
    setup: Setup,
) -> None:
    now = time.time()
    ledger, sent = _ledger(setup)
    tasks = setup.state / "tasks"
    task_with_cost(tasks, "spent-yesterday", "completed", 5.0, now - 2 * 86400)
    task_with_cost(tasks, "spent-today", "completed", 1.5, now)
    queued = [task_with_cost(tasks, f"queued-{n}", "queued", None, now) for n in range(2)]
    assert ledger.holds(queued, now) is None  # 1.5 of 2.0: yesterday's 5.0 is not today's
    assert ledger.today(now) == 1.5

    ledger.saw("spent-today", TaskDir(tasks / "spent-today").read_manifest())  # seen again
    runner = task_with_cost(tasks, "runner", "running", 0.75, now)
    ledger.saw("runner", runner.read_manifest())  # the engine wrote its manifest
    hold = ledger.holds(queued, now)
    assert hold is not None and hold.reason == "daily budget reached: $2.25 of $2.00"
    for task in queued:
        mark = task.read_manifest().budget_hold
        assert mark is not None and mark["reason"] == hold.reason and mark["day"] == hold.day
    assert [e["reason"] for e in _sent(sent)] == [hold.reason]  # notified once
    assert ledger.holds(queued, now + 1) is not None
    assert len(_sent(sent)) == 1  # not twice the same day
    record = json.loads((setup.state / layout.DAILY_BUDGET).read_text())
    assert (record["day"], record["state"]) == (hold.day, "notified")

    tomorrow = hold.until + 1
    assert ledger.holds(queued, tomorrow) is None  # launches resume the next local day
    assert all(t.read_manifest().budget_hold is None for t in queued)


def test_a_restarted_engine_does_not_notify_again_but_redoes_a_call_a_kill_cut_short(
    setup: Setup,
) -> None:
    now = time.time()
    ledger, sent = _ledger(setup, daily=1.0)
    tasks = setup.state / "tasks"
    task_with_cost(tasks, "spender", "completed", 3.0, now)
    queued = [task_with_cost(tasks, "waiting", "queued", None, now)]
    assert ledger.holds(queued, now) is not None
    assert len(_sent(sent)) == 1

    again, _ = _ledger(setup, daily=1.0)  # the engine restarted: its total rebuilt
    assert again.holds(queued, now) is not None and again.today(now) == 3.0
    assert len(_sent(sent)) == 1  # the record says notified: never twice

    record_path = setup.state / layout.DAILY_BUDGET
    record = json.loads(record_path.read_text())
    record["state"] = "notifying"  # what a SIGKILL while the notifier ran leaves
    record_path.write_text(json.dumps(record))
    third, _ = _ledger(setup, daily=1.0)
    assert third.holds(queued, now) is not None
    assert len(_sent(sent)) == 2  # the cut-short call is made again, once
    assert third.holds(queued, now) is not None and len(_sent(sent)) == 2


def test_a_clock_stepped_back_over_midnight_does_not_notify_a_day_again(setup: Setup) -> None:
    """The cap held on both sides of a local midnight (each day notified once); the wall
    clock steps back an hour over that midnight and forward again (a VM snapshot restored,
    NTP): the hold follows the clock, and neither day is notified a second time, even by a
    restarted engine. (Before the fix, each step across midnight called the notifier.)"""
    midnight = spend.next_day(time.time(), costs.utc_offset(time.time()))
    before, after = midnight - 1800, midnight + 1800
    ledger, sent = _ledger(setup, daily=1.0)
    tasks = setup.state / "tasks"
    task_with_cost(tasks, "spent-before", "completed", 3.0, before - 600)
    task_with_cost(tasks, "spent-after", "completed", 4.0, after - 600)
    queued = [task_with_cost(tasks, "waiting", "queued", None, before)]
    first = ledger.holds(queued, before)
    second = ledger.holds(queued, after)
    assert first is not None and second is not None and first.day != second.day
    assert [e["day"] for e in _sent(sent)] == [first.day, second.day]
    stepped = ledger.holds(queued, after - 3600)  # stepped back one hour: the day before
    assert stepped is not None and stepped.day == first.day and stepped.until == midnight
    assert ledger.holds(queued, after + 60) is not None  # and forward again
    restarted, _ = _ledger(setup, daily=1.0)
    assert restarted.holds(queued, after - 3600) is not None
    assert restarted.holds(queued, after) is not None
    assert [e["day"] for e in _sent(sent)] == [first.day, second.day]  # each day once


def test_no_cap_reads_nothing_and_holds_nothing(setup: Setup) -> None:
    now = time.time()
    ledger, sent = _ledger(setup, daily=None)
    tasks = setup.state / "tasks"
    task_with_cost(tasks, "spender", "completed", 1e6, now)
    assert ledger.holds([task_with_cost(tasks, "q", "queued", None, now)], now) is None
    assert ledger.today(now) == 0.0 and not _sent(sent)


def test_a_damaged_manifest_is_not_counted_and_holds_nothing_up(setup: Setup) -> None:
    now = time.time()
    ledger, _ = _ledger(setup, daily=1.0)
    tasks = setup.state / "tasks"
    (tasks / "broken").mkdir(parents=True)
    (tasks / "broken" / layout.MANIFEST).write_text("{not json")
    (tasks / "fifo").mkdir()
    os.mkfifo(tasks / "fifo" / layout.MANIFEST)  # never blocks the reader
    task_with_cost(tasks, "spender", "completed", 0.5, now)
    assert ledger.holds([], now) is None and ledger.today(now) == 0.5


@pytest.mark.parametrize("value", [0, -1, "nan", "inf", 1e12, "ten", True])
def test_a_bad_daily_budget_is_one_line_naming_the_key(setup: Setup, value: Any) -> None:
    setup.write_profile(extra={"budget": {"daily_usd": value}})
    text = setup.profile.read_text().replace('"nan"', "nan").replace('"inf"', "inf")
    setup.profile.write_text(text)
    done = setup.supervise("validate", str(setup.profile))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "budget.daily_usd" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


# ---------------------------------------------------------------- the whole engine


def _fake_claude(root: Path) -> dict[str, Any]:
    fake = root / "claude"
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_AGENT}" --claude "$@"\n')
    fake.chmod(0o755)
    agent = {"kind": "claude", "binary": str(fake), "hooks": False}
    return {**agent, "permission_mode": "bypassPermissions"}


def _manifest(setup: Setup, name: str) -> dict[str, Any] | None:
    return setup.manifests().get(name)


def test_the_engine_holds_launches_once_a_task_spent_the_day_s_budget(setup: Setup) -> None:
    """A task reports $1.00 against a $0.50 daily budget: the next task stays ``queued``
    with the reason in its manifest and ``status``, the notifier runs once; after a restart
    (and a SIGKILL) a new task is held too and the notifier is not run again."""
    argv, sent = _notifier(setup.root)
    setup.write_profile(
        max_concurrent=2,
        extra={"agent": _fake_claude(setup.root), "budget": {"daily_usd": 0.5}},
        notifier=argv,
    )
    setup.drop("a.toml", setup.task("spender", "stream_tool: Bash 0\ncost: 1.0\n"))
    engine = setup.start()
    try:
        wait_for(lambda: (_manifest(setup, "spender") or {}).get("status") == "completed", 60)
        # notified when the cap is reached, before any task waits for it
        wait_for(lambda: [e for e in _sent(sent) if e["event"] == "daily_budget"], 60)
        setup.drop("b.toml", setup.task("held", "stream_tool: Bash 0\n"))
        held = wait_for(lambda: (_manifest(setup, "held") or {}).get("budget_hold"), 30)
        assert held["reason"] == "daily budget reached: $1.00 of $0.50"
        m = _manifest(setup, "held")
        assert m is not None and m["status"] == "queued"
        assert "launched" not in [e["event"] for e in setup.events(m["task_id"])]
        shown = setup.supervise("status", "-c", str(setup.profile))
        assert "daily budget reached: $1.00 of $0.50" in shown.stdout, shown.stdout
        cost = setup.supervise("cost", "-c", str(setup.profile), "--json")
        assert cost.returncode == 0, cost.stderr
        assert json.loads(cost.stdout)["total_usd"] == 1.0
    finally:
        os.kill(engine.pid, signal.SIGKILL)  # a crash: the next engine rebuilds the total
        engine.wait()
    engine = setup.start()
    try:
        setup.drop("c.toml", setup.task("later", "stream_tool: Bash 0\n"))
        wait_for(lambda: (_manifest(setup, "later") or {}).get("budget_hold"), 30)
        m = _manifest(setup, "held")
        assert m is not None and m["status"] == "queued"
    finally:
        stop_engine(engine)
    events = [e for e in _sent(sent) if e["event"] == "daily_budget"]  # (and spender's end)
    assert len(events) == 1, _sent(sent)
    assert events[0]["spent_usd"] == 1.0 and events[0]["daily_usd"] == 0.5
    assert events[0]["message"].startswith("supervise: daily budget reached: $1.00 of $0.50")


def test_pieces_of_a_model_manifest_are_those_of_its_json(setup: Setup) -> None:
    """The engine reads the pydantic manifest it wrote, ``supervise cost`` the JSON: the
    same pieces."""
    now = time.time()
    task = task_with_cost(setup.state / "tasks", "t", "completed", 0.25, now)
    model = costs.pieces(costs.manifest_fields(task.read_manifest()))
    raw = costs.pieces(json.loads((task.path / layout.MANIFEST).read_text()))
    assert model == raw and raw[0][1] == 0.25
    assert spend.local_day(now, costs.utc_offset(now)) == costs.day_of(now)


def test_held_launches_resume_at_the_next_local_midnight(setup: Setup, tmp_path: Path) -> None:
    """The engine's wall clock (libfaketime, as tests/test_clock_steps.py) steps past the
    next local midnight (``TZ=UTC``): the held task's mark goes and it launches and runs."""

    env, offset = stepped_env(tmp_path)
    argv, _ = _notifier(setup.root)
    setup.write_profile(extra={"budget": {"daily_usd": 1.0}}, notifier=argv)
    now = time.time()
    task_with_cost(setup.state / "tasks", "spent-today", "completed", 5.0, now)
    setup.drop("a.toml", setup.task("held", "exit: 0"))
    engine = setup.start(env=env)
    try:
        hold = wait_for(lambda: (_manifest(setup, "held") or {}).get("budget_hold"), 30)
        assert hold["reason"] == "daily budget reached: $5.00 of $1.00"
        midnight = (now // 86400 + 1) * 86400  # UTC
        step_clock(offset, f"+{int(midnight - time.time()) + 60}")
        done = wait_for(lambda: (_manifest(setup, "held") or {}).get("status") == "completed", 60)
        assert done
        m = _manifest(setup, "held")
        assert m is not None and m.get("budget_hold") is None
    finally:
        stop_engine(engine)
