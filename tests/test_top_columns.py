"""``supervise top`` (issue 22, item 9): the task-id and outcome columns, the columns a wide
terminal adds, and the filter (the ``/`` key, ``--status``, ``--filter``), driven by
Textual's pilot at 80 and 160 columns against the views fixture on a fixed clock.

With ``SUPERVISE_CAPTURES=DIR`` the 80- and 160-column tests save their screens there
(``top-80.svg``, ``top-160.svg``) for a closing note.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import views_fixture as vf
from support.tui_app import make_app
from textual.widgets import DataTable, Input, Static

from supervisor.views import model
from supervisor.views.taskfilter import FilterError, TaskFilter, parse_statuses
from supervisor.views.tui import TopApp
from supervisor.views.tui_columns import short_id

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _colour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture
def fixture(tmp_path: Path) -> vf.Fixture:
    return vf.build(tmp_path)


def keys(app: TopApp) -> list[str]:
    return [str(key.value) for key in app.query_one(DataTable).columns]


def cell(app: TopApp, task_id: str, column: str) -> str:
    return str(app.query_one(DataTable).get_cell(task_id, column))


def row_ids(app: TopApp) -> list[str]:
    return [task_id for task_id, _ in app._order]


def capture(app: TopApp, name: str) -> None:
    folder = os.environ.get("SUPERVISE_CAPTURES")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        svg = app.export_screenshot(title=f"supervise top ({name})")
        (Path(folder) / f"{name}.svg").write_text(svg, encoding="utf-8")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_80_columns_show_the_task_id_and_the_outcome(fixture: vf.Fixture) -> None:
    async def go() -> None:
        app = make_app(fixture)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert keys(app) == ["group", "id", "status", "state", "outcome", "last"]
            assert cell(app, "bad-auth-2a3b4c", "outcome") == "FAIL auth"
            assert cell(app, "gave-up-5d6e7f", "outcome") == "ABANDONED retries exhausted"
            widths = [c.width for c in app.query_one(DataTable).columns.values()]
            assert sum(widths) + 2 * len(widths) <= 80 and widths[-1] >= 8  # no column cut
            assert cell(app, "docs-8a9b0c", "outcome") == "PASS"
            assert cell(app, "refactor-0a1b2c", "outcome") == ""
            # an id longer than its column keeps the suffix that tells tasks apart
            assert cell(app, "check-tests-3d4e5f", "id") == "check-tes…3d4e5f"
            capture(app, "top-80")

    run(go())


def test_two_tasks_of_one_name_differ_by_their_id(fixture: vf.Fixture) -> None:
    twin = fixture.state_dir / "tasks" / "refactor-ffffff"
    twin.mkdir()
    manifest = (fixture.state_dir / "tasks" / "refactor-0a1b2c" / "manifest.json").read_text()
    (twin / "manifest.json").write_text(manifest.replace("refactor-0a1b2c", "refactor-ffffff"))

    async def go() -> None:
        app = make_app(fixture)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert cell(app, "refactor-0a1b2c", "id") != cell(app, "refactor-ffffff", "id")

    run(go())


def test_short_id_keeps_head_and_suffix() -> None:
    assert short_id("a-very-long-task-name-3d4e5f", 16) == "a-very-lo…3d4e5f"
    assert short_id("short-1a2b3c", 16) == "short-1a2b3c"
    assert short_id("evil\x1bname-1a2b3c", 40) == "evil\\x1bname-1a2b3c"
    assert len(short_id("x" * 10_000, 18)) == 18


def test_160_columns_add_model_cost_retries_output_age_and_branch(
    fixture: vf.Fixture,
) -> None:
    async def go() -> None:
        app = make_app(fixture)
        async with app.run_test(size=(160, 24)) as pilot:
            await pilot.pause()
            assert keys(app) == [
                "group",
                "id",
                "status",
                "state",
                "outcome",
                "model",
                "cost",
                "retries",
                "output",
                "branch",
                "last",
            ]
            assert app.query_one(DataTable).columns["last"].width >= 20
            assert cell(app, "refactor-0a1b2c", "branch") == (
                "supervise/refactor-0a1b2c 3 files +41 -7"
            )
            assert cell(app, "refactor-0a1b2c", "cost") == "0.42"
            assert cell(app, "refactor-0a1b2c", "model") == "claude-sonnet-4-6"
            assert cell(app, "gave-up-5d6e7f", "retries") == "3"
            assert cell(app, "docs-8a9b0c", "output") == "1s"  # output.log is 1 s old
            capture(app, "top-160")

    run(go())


def test_columns_follow_a_resize(fixture: vf.Fixture) -> None:
    async def go() -> None:
        app = make_app(fixture)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.resize_terminal(220, 24)
            await pilot.pause()
            assert "branch" in keys(app) and app.query_one(DataTable).row_count == 11
            assert cell(app, "evil-name-1d2e3f", "name") == "evil\\x1b[31mname"  # not a colour
            assert cell(app, "bad-auth-2a3b4c", "outcome") == "FAIL auth"
            await pilot.resize_terminal(80, 24)
            await pilot.pause()
            assert "branch" not in keys(app)

    run(go())


def test_slash_filters_by_id_name_or_status_and_escape_clears(fixture: vf.Fixture) -> None:
    async def go() -> None:
        app = make_app(fixture)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("slash", *"parser")  # a word of the name only
            await pilot.pause()
            assert row_ids(app) == ["refactor-0a1b2c"]
            head = str(app.query_one("#head", Static).render())
            assert "filter 'parser': 1 shown" in head
            await pilot.press("enter")  # keeps the filter; keys act on the table again
            await pilot.pause()
            assert app.query_one(DataTable).has_focus and row_ids(app) == ["refactor-0a1b2c"]
            await pilot.press("slash", *(["backspace"] * 6), *"HUNG")  # status, any case
            await pilot.pause()
            assert row_ids(app) == ["stuck-loop-9d0e1f"]
            await pilot.press("escape")
            await pilot.pause()
            assert len(row_ids(app)) == len(vf.TASKS)
            assert not app.query_one(Input).has_class("shown")

    run(go())


def test_status_filter_keeps_statuses_and_groups(fixture: vf.Fixture) -> None:
    async def go() -> None:
        shown = TaskFilter(parse_statuses(["needs_you", "failed,hung"]))
        app = make_app(fixture, task_filter=shown)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            # "failed" names a status and a group: the group (abandoned too) is kept
            assert sorted(row_ids(app)) == [
                "ask-perm-a1b2c3",
                "bad-auth-2a3b4c",
                "gave-up-5d6e7f",
                "stuck-loop-9d0e1f",
            ]
            groups = [str(r[0]) for r in map(app.query_one(DataTable).get_row_at, range(4))]
            assert [g for g in groups if g] == ["Needs you 1", "Recovering 1", "Failed 2"]

    run(go())


def test_filter_matches_every_word() -> None:
    task = model.Task(task_id="refactor-0a1b2c", name="refactor-parser", status="running")
    assert TaskFilter(text="REFACTOR running").keeps(task)
    assert not TaskFilter(text="refactor hung").keeps(task)
    assert TaskFilter(frozenset({"running"})).keeps(task)
    assert not TaskFilter(frozenset({"queued"})).keeps(task)
    with pytest.raises(FilterError, match=r"--status 'runing' is no status or group; use one"):
        parse_statuses(["running,runing"])


def test_top_refuses_a_bad_status_in_one_line(fixture: vf.Fixture) -> None:
    argv = ["top", "-c", str(fixture.profile), "--status", "bogus\x1b"]
    code = f"import sys; from supervisor.cli import main; sys.exit(main({argv!r}))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(
        "supervise top: --status 'bogus\\x1b' is no status or group; use one of queued,"
    )


def test_filter_text_is_escaped_in_the_head_and_split_once(fixture: vf.Fixture) -> None:
    hostile = TaskFilter(text="[red]x\x1b]0;t\x07 " + "y" * 1_000_000)
    assert hostile.words[0] == "[red]x\x1b]0;t\x07" and len(hostile.words) == 2

    async def go() -> None:
        app = make_app(fixture, task_filter=hostile)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            assert row_ids(app) == []
            head = str(app.query_one("#head", Static).render())
            assert "[red]x\\x1b]0;t\\x07" in head and "\x1b" not in head
            assert len(head) < 500  # the pasted megabyte is cut in the head
            await pilot.resize_terminal(12, 6)  # too narrow for any column: still drawn
            await pilot.pause()
            assert keys(app)[-1] == "last"

    run(go())


def test_a_live_task_on_a_host_whose_engine_is_not_running_says_so() -> None:
    """Issue 25: ``top`` marks a task not ended whose engine (this host) is not running or
    stale, in red; an ended task, and any task under a running engine, is shown as is."""
    from supervisor.views.tui_columns import COLUMNS, cells

    status = next(c for c in COLUMNS if c.key == "status")
    live = model.Task("t1", "a", "running", group="running")
    ended = model.Task("t2", "b", "completed", group="done")
    assert str(cells(live, 0, (status,))[0]) == "running"
    shown = cells(live, 0, (status,), "not running")[0]
    assert str(shown) == "running (engine not running)" and str(shown.style) == "bold red"
    assert str(cells(live, 0, (status,), "stale")[0]) == "running (engine stale)"
    assert str(cells(ended, 0, (status,), "not running")[0]) == "completed"


def test_a_fleet_hosts_top_marks_its_live_tasks_while_its_engine_is_down(
    fixture: vf.Fixture,
) -> None:
    """The views fixture has no engine running: a fleet host's ``top`` (``[cluster]``)
    marks its running task; a single host's (the header says it already) does not."""

    async def go(fleet_host: bool) -> str:
        app = make_app(fixture, fleet_host=fleet_host)
        async with app.run_test(size=(160, 24)) as pilot:
            await pilot.pause()
            return cell(app, "refactor-0a1b2c", "status")

    assert run(go(True)) == "running (engine not running)"
    assert run(go(False)) == "running"
