"""Issue 26, part 1: ``top``'s plan screen (``p``) driven by Textual's pilot over a claimed
plan: each edge with both tasks' status, why a blocked task waits, and a task name holding
Textual markup or control characters shown as text."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from conftest import Setup
from support.plan_fixture import MARKUP, big_plan, blocked_plan

from supervisor.config import load_profile
from supervisor.taskdir.folder import TaskDir
from supervisor.views import plangraph
from supervisor.views.tui import TopApp
from supervisor.views.tui_screens import PlansScreen


async def _plans_screen(app: TopApp, change: Callable[[], None]) -> tuple[str, str]:
    """The plan screen's text when opened, and after ``change`` and one refresh."""
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PlansScreen)
        shown = screen.body()
        change()
        app.refresh_view()  # the app's own refresh goes on under the plan screen
        screen.follow()
        await pilot.pause()
        later = screen.body()
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, PlansScreen)
        return shown, later


def test_top_shows_the_plans_with_markup_and_controls_as_text(setup: Setup) -> None:
    a, b, _ = blocked_plan(setup)
    loaded = load_profile(setup.profile)
    app = TopApp(loaded.state_dir, loaded.spool_dir, "sock", refresh_every=None)
    task_a = TaskDir(loaded.tasks_dir / a)
    running = lambda: task_a.update_manifest(lambda m: setattr(m, "status", "running"))  # noqa: E731
    shown, later = asyncio.run(_plans_screen(app, running))
    assert f"A ({a}) [queued] → {MARKUP} ({b}) [blocked]" in shown, shown
    assert f"{MARKUP} ({b}) waits: blocked on A ({a})" in shown
    assert "\\x1b[31mred" in shown and "\x1b" not in shown
    assert f"A ({a}) [running] → {MARKUP} ({b}) [blocked]" in later, later


async def _big(app: TopApp) -> str:
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PlansScreen)
        await pilot.press("end", "pagedown")  # it scrolls; q still closes it
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, PlansScreen)
        return screen.shown


def test_a_plan_of_1000_tasks_in_top(setup: Setup) -> None:
    """Attack (huge input): 2,994 edges show as 2,000 lines and a count of the others."""
    ids = big_plan(setup)
    loaded = load_profile(setup.profile)
    app = TopApp(loaded.state_dir, loaded.spool_dir, "sock", refresh_every=None)
    shown = asyncio.run(_big(app)).splitlines()
    assert shown[0] == "plan 1: 1000 tasks, in progress"
    assert sum("→" in line for line in shown) == plangraph.MAX_EDGES
    assert shown[-1] == "994 more edges not shown"
    assert sum(" waits: blocked on " in line for line in shown) == len(ids) - 1
