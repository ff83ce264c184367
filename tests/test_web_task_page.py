"""A task's web page (issue 22, item 9): the output box opens at its newest line and follows
new output while the reader has not scrolled up, and the page draws the task's timeline
(one band per status, marks for resumes) as an SVG from its events. Driven by a real
``supervise serve`` and Debian's chromium through Playwright, as tests/test_web.py does; the
crashed-and-resumed task is run by the real engine with the fake agent.

With ``SUPERVISE_CAPTURES=DIR`` the timeline test saves a screenshot of the task page
(``task-page.png``) there, for a closing note.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from conftest import Setup
from support.views_fixture import Fixture
from support.web_serve import browser, fixture, serve  # noqa: F401 (pytest fixtures)

from supervisor.views import timeline

AT_BOTTOM = "(el => el.scrollHeight - el.scrollTop - el.clientHeight <= 2)"
OUTPUT = "document.getElementById('output')"


def _at_bottom(page: Any) -> bool:
    return bool(page.evaluate(f"{AT_BOTTOM}({OUTPUT})"))


def _append_and_wait(page: Any, log: Path, line: str) -> None:
    with open(log, "a") as handle:
        handle.write(line + "\n")
    page.wait_for_function(f"{OUTPUT}.textContent.includes({line!r})", timeout=10_000)


def test_output_box_opens_at_the_newest_line_and_follows(browser: Any, fixture: Fixture) -> None:  # noqa: F811
    log = fixture.state_dir / "tasks" / "refactor-0a1b2c" / "output.log"
    log.write_text("".join(f"line {i}\n" for i in range(400)))
    with serve(fixture.profile) as served:
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(served.base + f"task/refactor-0a1b2c?token={served.token}")
        page.wait_for_selector("#live.on")
        assert page.evaluate(f"{OUTPUT}.scrollHeight > {OUTPUT}.clientHeight")  # it scrolls
        assert _at_bottom(page), "the box opened at the oldest line"
        assert page.is_visible("#output >> text=line 399")
        _append_and_wait(page, log, "new output 1")
        assert _at_bottom(page), "the box did not follow new output"
        # the reader scrolls up: new output does not pull them down
        page.evaluate(f"{OUTPUT}.scrollTop = 0")
        page.wait_for_function(f"{OUTPUT}.scrollTop === 0")
        page.wait_for_timeout(100)  # the scroll event is delivered after the scroll
        _append_and_wait(page, log, "new output 2")
        assert page.evaluate(f"{OUTPUT}.scrollTop") < 50 and not _at_bottom(page)
        # back at the bottom: it follows again
        page.evaluate(f"{OUTPUT}.scrollTop = {OUTPUT}.scrollHeight")
        page.wait_for_function(f"{AT_BOTTOM}({OUTPUT})")
        page.wait_for_timeout(100)
        _append_and_wait(page, log, "new output 3")
        assert _at_bottom(page)
        page.close()


def _status_changes(events: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for event in events:
        status = event.get("status")
        if isinstance(status, str) and (not out or out[-1] != status):
            out.append(status)
    return out


def test_timeline_of_a_task_that_crashed_and_resumed(browser: Any, setup: Setup) -> None:  # noqa: F811
    setup.write_profile(base_interval=0.3, max_interval=2, max_retries=3, stale_threshold=30)
    prompt = "crash_runs: 1\nprint: working <b>bold</b>\nexit: 0"
    setup.drop("c.toml", setup.task("crashy", prompt))
    assert setup.run(timeout=120).returncode == 0
    m = setup.manifests()["crashy"]
    assert (m["status"], m["retry_count"]) == ("completed", 1)
    changes = _status_changes(setup.events(m["task_id"]))
    assert changes == ["queued", "running", "crashed", "running", "completed"]
    with serve(setup.profile) as served:
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(served.base + f"task/{m['task_id']}?token={served.token}")
        page.wait_for_selector("#live.on")
        bands = page.locator("svg.timeline rect.band")
        assert [bands.nth(i).get_attribute("data-status") for i in range(bands.count())] == changes
        marks = page.locator("svg.timeline g.mark").evaluate_all(
            "gs => gs.map(g => g.dataset.event)"
        )
        assert marks == ["resumed"]
        widths = bands.evaluate_all("rs => rs.map(r => r.getBoundingClientRect().width)")
        assert min(widths) > 0  # a one-second crash stays visible
        assert page.locator("section.timeline table").count() == 0  # a picture, not a table
        if os.environ.get("SUPERVISE_CAPTURES"):
            folder = Path(os.environ["SUPERVISE_CAPTURES"])
            folder.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(folder / "task-page.png"), full_page=True)
        page.close()


def test_timeline_bands_marks_and_escaping() -> None:
    events: list[dict[str, Any]] = [
        {"ts": "2026-11-23T12:00:00Z", "event": "queued", "status": "queued"},
        {"ts": "2026-11-23T12:00:01Z", "event": "launched", "status": "running"},
        {"ts": "2026-11-23T12:00:01Z", "event": "hook"},  # no status: no band
        {"ts": "bad", "event": "crashed", "status": "crashed"},  # no time: skipped
        {"ts": "2026-11-23T12:30:00Z", "event": "hung", "status": "hung"},
        {
            "ts": "2026-11-23T12:29:00Z",
            "event": "resumed",
            "status": "running",  # clock back
            "reason": "<script>x</script>\x1b[31m",
        },
        {"ts": "2026-11-23T12:40:00Z", "event": "escalated", "status": "<evil\u202e>"},
    ]
    now = 1795435200.0 + 3600  # 13:00
    line = timeline.timeline(events, now)
    assert [b.status for b in line.bands] == [
        "queued",
        "running",
        "hung",
        "running",
        "<evil\u202e>",
    ]
    pairs = zip(line.bands, line.bands[1:], strict=False)
    assert all(a.end == b.start and a.start <= a.end for a, b in pairs)
    assert line.bands[-1].end == now  # a live task's band runs to now
    assert [m.event for m in line.marks] == ["resumed", "escalated"]
    svg = str(timeline.svg(line))
    assert "<script>" not in svg and "\x1b" not in svg and "\u202e" not in svg
    assert "&lt;script&gt;x&lt;/script&gt;\\x1b[31m" in svg
    assert 'data-status="&lt;evil\\u202e&gt;"' in svg
    assert svg.count('<rect class="band') == 5
    assert str(timeline.svg(timeline.timeline([], now))) == (
        '<p class="empty">no status events yet</p>'
    )


def test_marks_close_together_keep_their_lines_but_labels_never_overlap() -> None:
    """An escalation approved a second later (as the Brain's trial did) drew both labels on
    one spot; the second keeps its line and its tooltip, and only a label with room shows."""
    events: list[dict[str, Any]] = [
        {"ts": "2026-11-23T12:00:00Z", "event": "launched", "status": "running"},
        {"ts": "2026-11-23T12:00:10Z", "event": "escalated", "status": "escalated"},
        {"ts": "2026-11-23T12:00:11Z", "event": "approved", "status": "running"},
        {"ts": "2026-11-23T13:00:00Z", "event": "resumed", "status": "running"},
        {"ts": "2026-11-23T13:00:01Z", "event": "completed", "status": "completed"},
    ]
    svg = str(timeline.svg(timeline.timeline(events, 1795435200.0 + 7200)))
    assert svg.count('<g class="mark') == 3
    assert svg.count("<title>approved") == 1 and ">approved</text>" not in svg
    assert ">escalated</text>" in svg and ">resumed</text>" in svg


def test_timeline_of_thousands_of_changes_stays_bounded() -> None:
    """A task that flapped 3,000 times draws its newest MAX_BANDS bands, says how many it
    left out, and no label in a band too narrow for it."""
    events = [
        {
            "ts": f"2026-11-23T12:{i // 60 % 60:02d}:{i % 60:02d}Z",
            "event": "resumed",
            "status": ("running", "waiting")[i % 2],
        }
        for i in range(3000)
    ]
    line = timeline.timeline(events, 0.0)
    assert len(line.bands) == timeline.MAX_BANDS and line.dropped == 3000 - timeline.MAX_BANDS
    assert line.bands[-1].start == line.bands[-1].end  # the newest kept
    assert len(line.marks) == timeline.MAX_BANDS  # none before the first band kept
    svg = str(timeline.svg(line))
    assert svg.count("<rect") == timeline.MAX_BANDS and "2700 older changes" in svg
    assert len(svg) < 1_000_000


def test_timeline_of_hostile_events_stays_small_and_drawable() -> None:
    """A 1 MB status or reason, a year-1 and a year-9999 time, a non-dict line: drawn,
    cut, never raising."""
    events: list[Any] = [
        "not a dict",
        {"ts": "0001-01-01T00:00:00+14:00", "event": "queued", "status": "queued"},
        {
            "ts": "9999-12-31T23:59:59-14:00",
            "event": "resumed",
            "status": "r" * 1_000_000,
            "reason": "why " * 250_000,
        },
    ]
    line = timeline.timeline(events, 0.0)
    assert len(line.bands[-1].status) == timeline.LABEL_MAX
    assert len(line.marks[0].detail) == timeline.DETAIL_MAX
    svg = str(timeline.svg(line))
    assert len(svg) < 10_000 and "UTC" in svg
