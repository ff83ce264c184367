"""Issue 26, part 1: ``top``'s plan screen (``p``) driven by Textual's pilot over a claimed
plan: each edge with both tasks' status, why a blocked task waits, and a task name holding
Textual markup or control characters shown as text."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from conftest import Setup
from support.plan_fixture import MARKUP, blocked_plan

from supervisor.config import load_profile
from supervisor.taskdir.folder import TaskDir
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
