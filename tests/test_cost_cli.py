"""``supervise cost`` (issue 26): spend per day, profile, account and task from the manifests
of one or more profiles' state dirs (and their archive), as a real process."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Setup

from supervisor.taskdir.folder import utc_iso

DAY = 86400.0


def _write(tasks: Path, task_id: str, **fields: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = {"task_id": task_id, "task_name": task_id, "status": "completed"}
    manifest.update(fields)
    (tasks / task_id).mkdir(parents=True, exist_ok=True)
    (tasks / task_id / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def _cost(setup: Setup, *args: str, env: dict[str, str] | None = None) -> Any:
    done = setup.supervise("cost", "-c", str(setup.profile), *args, env=env)
    return done


def _json(setup: Setup, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = _cost(setup, "--json", *args, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def spent(setup: Setup) -> Setup:
    """Four tasks of two accounts: one with two follow-up turns over three days, one ended
    yesterday, one running now, one that reports no cost."""
    setup.write_profile()
    tasks = setup.state / "tasks"
    now = time.time()
    turns = [
        {"turn": 1, "cost_usd": 1.0, "finished_at": utc_iso(now - 2 * DAY)},
        {"turn": 2, "cost_usd": 1.5, "finished_at": utc_iso(now - DAY)},
    ]
    _write(
        tasks,
        "followed",
        turn=3,
        turns=turns,
        claude={"total_cost_usd": 2.25},
        finished_at=utc_iso(now - 60),
        account="acct-aaaaaaaaaaaa",
    )
    _write(
        tasks,
        "yesterday",
        claude={"total_cost_usd": 0.5},
        finished_at=utc_iso(now - DAY),
        account="acct-bbbbbbbbbbbb",
    )
    _write(
        tasks,
        "running",
        status="running",
        claude={"total_cost_usd": 0.125},
        last_checked_at=utc_iso(now - 5),
    )
    _write(tasks, "generic", finished_at=utc_iso(now))
    return setup


def test_each_task_s_total_is_counted_once_and_split_over_its_days(spent: Setup) -> None:
    """The follow-up task's total 2.25 is 1.0 + 0.5 + 0.75 over three days, never its
    turns' running totals added (1.0 + 1.5 + 2.25); accounts and the missing one as ``-``."""
    out = _json(spent)
    assert out["version"] == 1 and out["total_usd"] == 2.875
    assert (out["tasks"], out["tasks_with_cost"], out["unreadable"]) == (4, 3, [])
    today = time.strftime("%Y-%m-%d")
    by_day = {row["day"]: row["usd"] for row in out["by_day"]}
    assert sorted(by_day.values()) == [0.875, 1.0, 1.0] and by_day[today] == 0.875
    assert {r["account"]: r["usd"] for r in out["by_account"]} == {
        "acct-aaaaaaaaaaaa": 2.25,
        "acct-bbbbbbbbbbbb": 0.5,
        "-": 0.125,
    }
    assert [r["profile"] for r in out["by_profile"]] == ["profile"]
    rows = {r["task_id"]: r for r in out["by_task"]}
    assert rows["followed"]["usd"] == 2.25 and rows["followed"]["turns"] == 3
    assert "generic" not in rows
    assert out["budgets"] == []
    assert "UTC" in out["timezone"]


def test_days_and_since_cut_the_window(spent: Setup) -> None:
    today = _json(spent, "--days", "1")
    assert today["total_usd"] == 0.875  # the follow-up's current turn and the running task
    assert {r["task_id"]: r["usd"] for r in today["by_task"]} == {
        "followed": 0.75,
        "running": 0.125,
    }
    two = _json(spent, "--days", "2")
    assert two["total_usd"] == 1.875
    assert _json(spent, "--since", "36h")["total_usd"] == 1.875
    assert _json(spent, "--until", "12h")["total_usd"] == 2.0
    assert _json(spent, "--since", "2000-01-01", "--until", "2000-01-02")["total_usd"] == 0


def test_days_are_the_local_zone_s_and_say_so(spent: Setup) -> None:
    """A spend at 23:30 UTC is today's in UTC and tomorrow's in Asia/Tokyo."""
    tasks = spent.state / "tasks"
    late = time.mktime(time.strptime("2026-11-20 23:30", "%Y-%m-%d %H:%M")) - time.timezone
    _write(tasks, "late", claude={"total_cost_usd": 3.0}, finished_at=utc_iso(late))
    env = {**os.environ, "TZ": "UTC"}
    utc = {r["day"]: r["usd"] for r in _json(spent, env=env)["by_day"]}
    tokyo_out = _json(spent, env={**os.environ, "TZ": "Asia/Tokyo"})
    tokyo = {r["day"]: r["usd"] for r in tokyo_out["by_day"]}
    assert utc["2026-11-20"] == 3.0 and "2026-11-21" not in utc
    assert tokyo["2026-11-21"] == 3.0 and "2026-11-20" not in tokyo
    assert "+09:00" in tokyo_out["timezone"]
    text = _cost(spent, env={**os.environ, "TZ": "Asia/Tokyo"})
    assert "days in local time, JST (UTC+09:00)" in text.stdout


def test_unreadable_manifests_are_counted_and_named_once(spent: Setup) -> None:
    tasks = spent.state / "tasks"
    (tasks / "torn").mkdir()
    (tasks / "torn" / "manifest.json").write_text('{"status": "compl')
    (tasks / "list").mkdir()
    (tasks / "list" / "manifest.json").write_text("[1, 2]")
    (tasks / "fifo").mkdir()
    os.mkfifo(tasks / "fifo" / "manifest.json")
    (tasks / "huge").mkdir()
    (tasks / "huge" / "manifest.json").write_text(" " * (9 * 1024 * 1024))
    (tasks / "deep").mkdir()
    (tasks / "deep" / "manifest.json").write_text("[" * 100000)
    (tasks / "claim-in-progress").mkdir()  # no manifest yet: no task, nothing to name
    done = _cost(spent)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 5, lines
    for name in ("torn", "list", "fifo", "huge", "deep"):
        assert sum(f"/{name}/manifest.json" in line for line in lines) == 1, lines
    assert "5 unreadable, not counted" in done.stdout
    out = json.loads(_cost(spent, "--json").stdout)
    assert len(out["unreadable"]) == 5 and out["total_usd"] == 2.875


def test_hostile_values_are_ignored_and_escaped(spent: Setup) -> None:
    tasks = spent.state / "tasks"
    # 1e308 and 10**400 once overflowed the micro-dollar sums (a traceback, no report).
    for n, value in enumerate([-5, "1e9", True, None, [1], 1e400, 1e308, 10**400, 2e9]):
        _write(tasks, f"bad-{n}", claude={"total_cost_usd": value}, finished_at="not a time")
    _write(tasks, "bad-turn", claude={"total_cost_usd": 0.5}, turns=[{"cost_usd": 1e308}])
    evil = "\x1b[31mred\u202e\x07"
    _write(
        tasks,
        "evil",
        task_name=evil,
        account=evil,
        claude={"total_cost_usd": 1.0},
        finished_at=utc_iso(time.time()),
        turns="nope",
    )
    out = _json(spent)
    # the evil task's 1.0 and bad-turn's 0.5; the bad values count nothing
    assert out["total_usd"] == 4.375
    text = _cost(spent)
    assert text.returncode == 0, text.stderr
    assert "\x1b" not in text.stdout and "\u202e" not in text.stdout and "\x07" not in text.stdout


def test_the_archive_is_read_with_archived(spent: Setup) -> None:
    archive = spent.state / "archive"
    archive.mkdir()
    with tarfile.open(archive / "2026-10.tar.gz", "w:gz") as tar:
        for task_id, cost in (("old-1", 4.0), ("old-2", 0.25)):
            data = json.dumps(
                {
                    "task_id": task_id,
                    "status": "completed",
                    "claude": {"total_cost_usd": cost},
                    "finished_at": "2026-10-03T10:00:00Z",
                }
            ).encode()
            info = tarfile.TarInfo(f"{task_id}/manifest.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (archive / "2026-09.tar.gz").write_bytes(b"not a tarball")
    assert _json(spent)["total_usd"] == 2.875
    out = _json(spent, "--archived")
    assert out["total_usd"] == 7.125
    assert {r["task_id"] for r in out["by_task"] if r["archived"]} == {"old-1", "old-2"}
    assert len(out["unreadable"]) == 1 and "2026-09" in out["unreadable"][0]["path"]


def test_several_profiles_and_one_section(spent: Setup, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "other.toml").write_text(
        spent.profile.read_text().replace('"state"', f'"{other / "state"}"')
        + "\n[budget]\ndaily_usd = 0.5\n"
    )
    _write(
        other / "state" / "tasks",
        "o",
        claude={"total_cost_usd": 0.75},
        finished_at=utc_iso(time.time()),
    )
    done = spent.supervise(
        "cost", "-c", str(spent.profile), "-c", str(other / "other.toml"), "--json"
    )
    out = json.loads(done.stdout)
    assert {r["profile"]: r["usd"] for r in out["by_profile"]} == {"profile": 2.875, "other": 0.75}
    assert out["budgets"] == [
        {"profile": "other", "daily_usd": 0.5, "today_usd": 0.75, "reached": True}
    ]
    text = spent.supervise("cost", "-c", str(spent.profile), "--by", "day")
    assert "by day" in text.stdout and "by task" not in text.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--days", "0"],
        ["--days", "100000000"],
        ["--days", "2", "--since", "1d"],
        ["--since", "yesterday"],
        ["--since", "9" * 400 + "d"],
        ["--by", "x"],
        ["--top", "-1"],
    ],
)
def test_bad_options_are_one_line_and_exit_2(spent: Setup, args: list[str]) -> None:
    done = _cost(spent, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "supervise cost: " in done.stderr.strip().splitlines()[-1]
