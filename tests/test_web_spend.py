"""``serve`` draws spend over time (issue 26): ``/spend`` shows the profile's spend per local
day (14 bars) and per hour of today as inline SVG drawn by the server, with the same figures
as ``supervise cost`` (``/api/cost``); a task name or account holding markup shows as text.
A real ``supervise serve`` and Debian's chromium through Playwright
(tests/support/web_serve.py)."""

from __future__ import annotations

import json
import time
from typing import Any

from support import web_serve
from support.views_fixture import Fixture
from support.web_serve import EVIL

from supervisor.taskdir.folder import utc_iso

browser, fixture, serve = web_serve.browser, web_serve.fixture, web_serve.serve


def _spent(fixture: Fixture, task_id: str, usd: float, at: float, **extra: Any) -> None:
    folder = fixture.state_dir / "tasks" / task_id
    folder.mkdir()
    manifest = {"task_id": task_id, "task_name": task_id, "status": "completed"}
    manifest |= {"claude": {"total_cost_usd": usd}, "finished_at": utc_iso(at), **extra}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_the_spend_page_draws_days_and_hours_and_escapes_names(
    browser: Any, fixture: Fixture
) -> None:
    now = time.time()
    _spent(fixture, "today-1a2b3c", 1.25, now - 1, task_name=EVIL, account=EVIL)
    _spent(fixture, "old-4d5e6f", 0.5, now - 3 * 86400)
    with serve(fixture.profile) as served:
        status, body = served.request("GET", "/api/cost", served.auth)
        assert status == 200, body
        report = json.loads(body)
        page = browser.new_page()
        page.goto(served.url)
        page.wait_for_selector("#live.on")
        page.click("#spend-link")
        page.wait_for_selector("#spend-days")
        days = page.locator("#spend-days g.bar")
        assert days.count() == 14
        usd = [float(v) for v in days.evaluate_all("gs => gs.map(g => g.dataset.usd)")]
        today_usd = report["by_day"][-1]["usd"]
        assert usd[-1] == today_usd and usd[-1] >= 1.25
        assert usd[-4] >= 0.5  # three days ago
        hours = page.locator("#spend-hours g.bar")
        assert hours.count() == time.localtime().tm_hour + 1
        assert (
            sum(float(v) for v in hours.evaluate_all("gs => gs.map(g => g.dataset.usd)"))
            == (usd[-1])
        )
        names = page.inner_text("#spend-tasks")
        assert "<script>window.pwned=1</script>\\x1b[31mred" in names
        assert page.locator("main script").count() == 0
        assert page.evaluate("window.pwned") is None
        page.close()
