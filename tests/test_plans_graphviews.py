"""Issue 26, part 1: the plan graph in ``serve`` (``/plans`` and ``/api/plans``; a real
``supervise serve`` and Debian's chromium through Playwright; ``top``:
tests/test_tui_plans.py), from one model (:mod:`supervisor.views.plangraph`): a plan made
by a real engine (A fails, B and C end ``abandoned``/``dependency``), a claimed plan still
blocked, names holding markup and control characters, and a plan of 1,000 tasks."""

from __future__ import annotations

import json
import sys
from typing import Any

import tomli_w
from conftest import Setup
from support import web_serve
from support.plan_fixture import MARKUP, big_plan, blocked_plan
from support.repos import make_repo

from supervisor.config import load_profile
from supervisor.taskdir.folder import TaskDir
from supervisor.views import model, plangraph

browser, serve = web_serve.browser, web_serve.serve


def engine_plan(setup: Setup) -> dict[str, dict[str, Any]]:
    """A → B, A → C run by a real engine; A fails its acceptance: B and C end abandoned."""
    make_repo(setup.project)
    setup.write_profile(extra={"security": {"task_may_set": ["acceptance"]}})
    failing = {"command": [sys.executable, "-c", "raise SystemExit(1)"]}
    tasks = [
        setup.task("A", "print: a\nexit: 0", acceptance=failing),
        setup.task("B", "print: b\nexit: 0", after=["A"]),
        setup.task("C", "print: c\nexit: 0", after=["A"]),
    ]
    setup.drop("plan.toml", tomli_w.dumps({"tasks": tasks}))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    return setup.manifests()


def snapshot(setup: Setup) -> model.Snapshot:
    loaded = load_profile(setup.profile)
    return model.Reader(loaded.state_dir, loaded.spool_dir).snapshot()


def test_the_graph_of_an_engine_made_plan_in_top_and_serve(setup: Setup, browser: Any) -> None:
    m = engine_plan(setup)
    a, b, c = (m[k]["task_id"] for k in "ABC")
    assert (m["A"]["status"], m["A"]["verdict"]) == ("completed", "FAIL")
    assert m["B"]["abandon_reason"] == "dependency"
    found = plangraph.graph(snapshot(setup).tasks)
    assert len(found.plans) == 1 and found.plans[0].ended
    assert found.plans[0].edges == [(a, b), (a, c)]
    text = plangraph.text(found)
    assert f"A ({a}) [completed FAIL] → B ({b}) [abandoned ABANDONED]" in text, text
    with serve(setup.profile) as served:
        status, body = served.request("GET", "/api/plans", served.auth)
        assert status == 200, body
        plan = json.loads(body)["plans"][0]
        assert plan["edges"] == [{"from": a, "to": b}, {"from": a, "to": c}]
        statuses = {t["name"]: t["status"] for t in plan["tasks"]}
        assert statuses == {"A": "completed", "B": "abandoned", "C": "abandoned"}
        page = browser.new_page()
        page.goto(served.url)
        page.wait_for_selector("#live.on")
        page.click("#plans-link")
        page.wait_for_selector("#plan-1")
        rows = page.locator("#plan-1 tr.edge")
        assert rows.count() == 2
        assert rows.nth(0).get_attribute("data-from") == a
        assert rows.nth(0).get_attribute("data-to") == b
        cells = rows.nth(0).locator("td").all_inner_texts()
        assert (cells[1], cells[4]) == ("completed FAIL", "abandoned ABANDONED")
        assert "dependency" in cells[5], cells
        page.close()


def test_blocked_tasks_and_hostile_names_in_serve(setup: Setup, browser: Any) -> None:
    a, _, _ = blocked_plan(setup)
    with serve(setup.profile) as served:
        page = browser.new_page()
        page.goto(f"{served.base}plans?token={served.token}")
        page.wait_for_selector("#plan-1")
        text = page.inner_text("#plan-1")
        assert MARKUP in text and "\\x1b[31mred" in text and "\x1b" not in text
        assert f"blocked on A ({a})" in text
        assert page.locator("main script").count() == 0
        assert page.evaluate("window.pwned") is None
        statuses = page.locator("#plan-1 td.status").all_inner_texts()
        assert statuses == ["queued", "blocked", "queued", "blocked"]
        # live: A starts running; the open page follows without a reload (before, it
        # said "Reload for the latest")
        page.wait_for_selector("#live.on")
        page.evaluate("window.sameDocument = true")
        task = TaskDir(setup.state / "tasks" / a)
        manifest = task.read_manifest()
        manifest.status = "running"  # type: ignore[assignment]
        task.write_manifest(manifest)
        page.wait_for_selector("#plan-1 tr.edge td.status.s-running", timeout=10_000)
        assert page.evaluate("window.sameDocument") is True
        assert page.locator("#plan-1 td.status").all_inner_texts()[0] == "running"
        page.close()


def test_a_plan_of_1000_tasks_stays_a_usable_page(setup: Setup, browser: Any) -> None:
    big_plan(setup)
    found = plangraph.graph(snapshot(setup).tasks)
    assert len(found.plans) == 1 and len(found.plans[0].nodes) == 1000
    assert len(found.plans[0].edges) == plangraph.MAX_EDGES
    assert found.edges_left_out == 1 + 2 + 997 * 3 - plangraph.MAX_EDGES  # 994
    with serve(setup.profile) as served:
        page = browser.new_page()
        page.goto(f"{served.base}plans?token={served.token}")
        page.wait_for_selector("#plans-cut")
        assert page.locator("#plan-1 tr.edge").count() == plangraph.MAX_EDGES
        assert page.inner_text("#plans-cut").startswith(f"{found.edges_left_out} more edges")
        page.click("text=← all tasks")
        page.wait_for_selector("#live.on")
        page.close()
