"""Attacks on the profile's daily cap (issue 26, ``[budget] daily_usd``;
/work/shared/notes/attack-classes.md): a full disk (a real 4 MiB tmpfs) while the engine
marks the held tasks and writes its daily-budget record, in process over real folders and
a real notifier process (as tests/test_daily_budget.py)."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Setup
from support.small_fs import small_fs  # noqa: F401  (a fixture)
from support.spend_tasks import task_with_cost

from supervisor.config import load_profile
from supervisor.engine.dailyspend import DailySpend
from supervisor.taskdir import layout

NOTIFIER = """import json, sys
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(json.load(sys.stdin)) + "\\n")
"""


def _fill(mount: Path) -> Path:
    """Fill the tmpfs to the last byte; returns the filler (remove it to make room)."""
    filler = mount / "filler"
    for size in (65536, 1):  # then what a smaller write could still use
        with open(filler, "ab", buffering=0) as out:
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError:
                pass
    return filler


def test_a_full_disk_while_held_is_one_line_and_the_marks_come_once_there_is_room(
    setup: Setup,
    small_fs: Path,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The state dir on a full tmpfs when the cap is reached: no crash, one line per thing
    not written, the hold holds; once there is room the queued tasks get their
    ``budget_hold`` (before the fix a mark that failed was taken as made and never
    written that day: ``status`` did not say why the task waits) and the notifier is not
    called again."""
    import time

    now = time.time()
    script, sent = setup.root / "notifier.py", setup.root / "notified.jsonl"
    script.write_text(NOTIFIER)
    state = small_fs / "state"
    profile_path = setup.write_profile(
        extra={
            "paths": {"spool_dir": str(setup.spool), "state_dir": str(state)},
            "budget": {"daily_usd": 1.0},
        },
        notifier=[sys.executable, str(script), str(sent)],
    )
    profile = load_profile(profile_path)
    profile.tasks_dir.mkdir(parents=True)
    task_with_cost(profile.tasks_dir, "spender", "completed", 3.0, now)
    queued = [
        task_with_cost(profile.tasks_dir, f"queued-{n}", "queued", None, now) for n in range(2)
    ]
    ledger = DailySpend(profile, lambda kind, body: body())
    filler = _fill(small_fs)
    caplog.set_level(logging.WARNING, logger="supervise.engine")
    hold = ledger.holds(queued, now)
    assert hold is not None  # held, full disk or not
    assert ledger.holds(queued, now + 1) is not None
    assert all(t.read_manifest().budget_hold is None for t in queued)  # no room to mark
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("cannot record the daily budget hold" in line for line in problems), problems
    assert any("cannot write" in line and layout.DAILY_BUDGET in line for line in problems)
    assert all("\n" not in line for line in problems)  # one line each, no traceback
    told = [json.loads(line) for line in sent.read_text().splitlines()]
    assert [e["event"] for e in told] == ["daily_budget"]  # told once, disk or not

    filler.unlink()  # room again
    assert ledger.holds(queued, now + 2) is not None
    for task in queued:
        mark = task.read_manifest().budget_hold
        assert mark is not None and mark["reason"] == hold.reason
    assert len(sent.read_text().splitlines()) == 1
    record = json.loads((state / layout.DAILY_BUDGET).read_text())  # written once there is room
    assert (record["day"], record["state"]) == (hold.day, "notified")
    restarted = DailySpend(profile, lambda kind, body: body())
    assert restarted.holds(queued, now + 3) is not None
    assert len(sent.read_text().splitlines()) == 1  # a restarted engine does not tell again
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert lines == problems  # each problem was one line, once


def test_a_real_engine_stepped_back_over_midnight_notifies_each_day_once(
    setup: Setup, tmp_path: Path
) -> None:
    """A real ``supervise run`` under libfaketime (``TZ=UTC``), started one minute after a
    midnight, the cap spent on both sides of it: it notifies the new day; its wall clock
    stepped back over the midnight holds (and tells) the day before, whose cap was reached
    and never told; stepped forward again, it holds the new day without telling it a second
    time (before the fix: a third call, and one more at every step over midnight)."""
    import time

    from conftest import stop_engine, wait_for
    from support.faketime_support import step_clock, stepped_env

    now = time.time()
    midnight = (now // 86400 + 1) * 86400  # UTC
    env, offset = stepped_env(tmp_path, f"+{int(midnight - now) + 60}")
    script, sent = setup.root / "notifier.py", setup.root / "notified.jsonl"
    script.write_text(NOTIFIER)
    setup.write_profile(
        extra={"budget": {"daily_usd": 1.0}}, notifier=[sys.executable, str(script), str(sent)]
    )
    tasks = setup.state / "tasks"
    task_with_cost(tasks, "spent-before", "completed", 3.0, midnight - 3600)
    task_with_cost(tasks, "spent-after", "completed", 4.0, midnight + 30)
    before, after = (time.strftime("%Y-%m-%d", time.gmtime(t)) for t in (midnight - 1, midnight))

    def days() -> list[str]:
        lines = sent.read_text().splitlines() if sent.exists() else []
        return [json.loads(line)["day"] for line in lines]

    def marked(name: str, day: str) -> bool:
        for path in tasks.glob("*/manifest.json"):
            m = json.loads(path.read_text())
            if m.get("task_name") == name and (m.get("budget_hold") or {}).get("day") == day:
                return True
        return False

    setup.drop("held.toml", setup.task("held", "exit: 0"))
    engine = setup.start(env=env)
    try:
        assert wait_for(lambda: days() == [after], 60)
        step_clock(offset, f"+{int(midnight - now) - 180}")  # back over midnight
        assert wait_for(lambda: days() == [after, before], 60), days()
        assert wait_for(lambda: marked("held", before), 30)
        step_clock(offset, f"+{int(midnight - now) + 60}")  # forward again
        assert wait_for(lambda: marked("held", after), 30)
        setup.drop("later.toml", setup.task("later", "exit: 0"))  # a look after that one
        assert wait_for(lambda: marked("later", after), 30)
        record = json.loads((setup.state / layout.DAILY_BUDGET).read_text())
        assert record["day"] == before and record["state"] == "notified", record
        assert sorted(record["days"]) == sorted([before, after])
    finally:
        stop_engine(engine)
    assert days() == [after, before]  # each day once


def test_a_step_back_over_midnight_during_the_call_tells_each_day_once(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock stepped back over midnight while the new day's notifier call still
    ran (seen in CI under load, ``..._stepped_back_over_midnight_notifies_each_day_once``):
    the day before is told, the new day's call ends, and the day before is not told again.
    Before the fix the ending call overwrote the day before's record and in-flight mark,
    and the next look told the day before a second time."""
    import time

    monkeypatch.setenv("TZ", "UTC")  # the midnight below is UTC's
    time.tzset()
    script, sent = setup.root / "notifier.py", setup.root / "notified.jsonl"
    script.write_text(NOTIFIER)
    profile = load_profile(
        setup.write_profile(
            extra={"budget": {"daily_usd": 1.0}},
            notifier=[sys.executable, str(script), str(sent)],
        )
    )
    profile.tasks_dir.mkdir(parents=True)
    midnight = (time.time() // 86400 + 1) * 86400
    task_with_cost(profile.tasks_dir, "spent-before", "completed", 3.0, midnight - 3600)
    task_with_cost(profile.tasks_dir, "spent-after", "completed", 4.0, midnight + 30)
    calls: list[Callable[[], None]] = []  # the notify pool, run when the test says
    ledger = DailySpend(profile, lambda kind, body: calls.append(body))
    after_now, before_now = midnight + 60, midnight - 180
    assert ledger.holds([], after_now) is not None and len(calls) == 1  # the new day's call
    assert ledger.holds([], before_now) is not None and len(calls) == 2  # stepped back
    calls[0]()  # the new day's call ends while the day before's runs
    for now in (before_now, before_now + 1, after_now):  # more looks, both sides
        assert ledger.holds([], now) is not None
    assert len(calls) == 2, "a day was told twice"
    calls[1]()
    assert ledger.holds([], before_now + 2) is not None and len(calls) == 2
    days = [json.loads(line)["day"] for line in sent.read_text().splitlines()]
    before, after = (time.strftime("%Y-%m-%d", time.localtime(t)) for t in (before_now, after_now))
    assert days == [after, before]
    record = json.loads((profile.state_dir / layout.DAILY_BUDGET).read_text())
    assert (record["day"], record["state"]) == (before, "notified")
    assert sorted(record["days"]) == sorted([before, after])
