"""``supervise serve`` with ``[cluster]`` (issue 15, item 4): the fleet grouped by host,
read from a real PostgreSQL (tests/support/cluster_support.py) beside a real engine, shown in
Debian's chromium through Playwright (tests/test_web.py's fixtures); and the fleet model
(:mod:`supervisor.views.fleet`) without a server.
"""

from __future__ import annotations

import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import Setup, wait_for
from support.cluster_engines import (
    cluster_profile,
    dsn,
    rows,
    server,
    start_engine,
    stop_engines,
    supervise,
)
from support.views_fixture import Fixture
from support.web_serve import EVIL, browser, fixture, serve

from supervisor.views.fleet import Fleet, FleetCache, group_by_host

psycopg = pytest.importorskip("psycopg")

__all__ = ["browser", "dsn", "fixture", "server"]  # fixtures, imported for this module


def _host(host_id: str, state: str = "alive", age: float = 1.0) -> dict[str, Any]:
    return {"host_id": host_id, "state": state, "age_s": age, "capacity": 2, "running": 1,
            "version": "0.1", "last_error": None}  # fmt: skip


def _task(task_id: str, owner: str | None, state: str = "running") -> dict[str, Any]:
    return {"id": task_id, "name": task_id, "state": state, "owner_host": owner, "host": None,
            "generation": 1, "exit_code": None, "failure_reason": None, "error": None,
            "age_s": 2.0}  # fmt: skip


# ---------------------------------------------------------------- the model


def test_group_by_host_local_first_unknown_owner_and_unclaimed() -> None:
    """Tasks go under their owner; the local host comes first; an owner with no hosts row
    is shown as ``unknown``; tasks no host owns are ``unclaimed``; a host without tasks is
    still listed."""
    fleet = group_by_host(
        "h2",
        [_host("h1"), _host("h2"), _host("h3", "dead", 99.0)],
        [_task("a", "h1"), _task("b", "h2"), _task("c", None, "queued"), _task("d", "gone"),
         _task("e", "h1", "completed")],
        total=7,
    )  # fmt: skip
    assert [(h.host_id, h.state, h.local) for h in fleet.hosts] == [
        ("h2", "alive", True), ("gone", "unknown", False), ("h1", "alive", False),
        ("h3", "dead", False),
    ]  # fmt: skip
    assert [[t["id"] for t in h.tasks] for h in fleet.hosts] == [["b"], ["d"], ["a", "e"], []]
    assert [t["id"] for t in fleet.unclaimed] == ["c"]
    assert (fleet.read, fleet.error, fleet.shown, fleet.total) == (True, None, 5, 7)


def test_cache_reads_off_the_caller_and_keeps_the_last_error() -> None:
    """``get()`` never waits for the database: it returns the last read and starts one in
    the background when due; a failing reader's error is kept as one line."""
    calls: list[float] = []
    release, finished = threading.Event(), threading.Event()

    def slow() -> Fleet:
        calls.append(time.monotonic())
        release.wait(30)  # the slow reader under test: get() must not wait for it
        finished.set()
        return group_by_host("h0", [_host("h0")], [], 0)

    cache = FleetCache("h0", slow, every=0.2)
    first = cache.get()  # returned while the reader still waits on ``release``
    assert not finished.is_set() and not first.read and cache.version == 0
    assert cache.get() is first  # one read at a time
    wait_for(lambda: len(calls) == 1)
    release.set()
    wait_for(lambda: cache.version == 1, timeout=60)
    assert cache.get().read and cache.get().hosts[0].host_id == "h0"

    def broken() -> Fleet:
        raise RuntimeError("boom")

    failing = FleetCache("h0", broken)
    failing.get()
    wait_for(lambda: failing.version == 1, timeout=60)
    assert failing.get().error == "cannot read the fleet: RuntimeError('boom')"
    assert FleetCache("h0", None, error="no DSN").get().error == "no DSN"


# ---------------------------------------------------------------- the page


def test_board_shows_the_fleet_by_host(browser: Any, setup: Setup, dsn: str) -> None:
    """A real engine h0 runs a task; h1 (alive) owns a task whose name holds <script> and
    an ANSI sequence, h2 is dead; a task pinned to h9 waits unclaimed. The page lists the
    hosts with their states and tasks, links h0's task to its full local page, keeps the
    local board, shows the evil name as text, and follows a change in the database."""
    assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn}).returncode == 0
    profile = cluster_profile(setup, dsn, "h0")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO supervise_hosts (host_id, capacity, running, last_error) "
                     "VALUES ('h1', 3, 1, 'disk <b>full</b>')")  # fmt: skip
        conn.execute("INSERT INTO supervise_hosts (host_id, capacity, state, heartbeat_at) "
                     "VALUES ('h2', 2, 'dead', now() - interval '90 seconds')")  # fmt: skip
        conn.execute("INSERT INTO supervise_tasks (id, name, spec, queue, state, owner_host, "
                     "generation) VALUES ('evil-1a2b3c', %s, '{}', 'supervise', 'running', "
                     "'h1', 1)", (EVIL,))  # fmt: skip
    ids = {}
    for name, extra in (("local", {}), ("pinned", {"host": "h9"})):
        file = setup.root / f"{name}.toml"
        file.write_text(tomli_w.dumps(setup.task(name, "print: hi\nsleep: 60\nexit: 0", **extra)))
        done = supervise("submit", "-c", str(profile), str(file))
        assert done.returncode == 0, done.stderr
        ids[name] = done.stdout.strip()
    engine = start_engine(setup)
    try:
        wait_for(lambda: rows(dsn, "SELECT state FROM supervise_tasks WHERE id = %s",
                              ids["local"]) == [("running",)], timeout=60)  # fmt: skip
        with serve(profile) as served:
            page = browser.new_page()
            page.goto(served.url)
            page.wait_for_selector("#live.on")
            page.wait_for_selector("#host-h0[data-state=alive]", timeout=10_000)
            states = page.eval_on_selector_all(
                "#hosts tbody tr", "rows => rows.map(r => [r.id, r.dataset.state])"
            )
            assert states == [["host-h0", "alive"], ["host-h1", "alive"], ["host-h2", "dead"]]
            assert "(this host)" in page.inner_text("#host-h0")
            assert "disk <b>full</b>" in page.inner_text("#host-h1")
            local = page.locator(f"#tasks-h0 a[href='/task/{ids['local']}']")
            assert local.count() == 1
            assert page.locator(f"#group-running #task-{ids['local']}").count() == 1
            evil = page.inner_text("#tasks-h1")
            assert "<script>window.pwned=1</script>\\x1b[31mred" in evil
            assert page.locator("#tasks-h1 a").count() == 0  # not this host: no local page
            assert page.evaluate("window.pwned") is None
            assert ids["pinned"] in page.inner_text("#tasks-unclaimed")
            assert page.locator("#fleet-error").count() == 0
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE supervise_tasks SET state = 'host_lost' "
                             "WHERE id = 'evil-1a2b3c'")  # fmt: skip
            page.wait_for_selector("#fleet-task-evil-1a2b3c[data-state=host_lost]",
                                   timeout=10_000)  # fmt: skip
            page.locator(f"#tasks-h0 a[href='/task/{ids['local']}']").click()
            page.wait_for_url(f"**/task/{ids['local']}")
            assert page.url.endswith(f"/task/{ids['local']}")
            page.close()
    finally:
        stop_engines([engine])


def test_unreachable_database_is_one_line_and_the_local_view_works(
    browser: Any, fixture: Fixture, tmp_path: Path
) -> None:
    """A [cluster] whose database does not answer: one escaped line on the page, and the
    local board (every group of the views fixture) as without [cluster]."""
    profile = tomllib.loads(fixture.profile.read_text())
    missing = tmp_path / "nopg"
    missing.mkdir()
    profile["cluster"] = {"host_id": "h0", "dsn": f"host={missing} port=1 dbname=x user=x"}
    fixture.profile.write_text(tomli_w.dumps(profile))
    with serve(fixture.profile) as served:
        page = browser.new_page()
        page.goto(served.url)
        page.wait_for_selector("#live.on")
        page.wait_for_selector("#fleet-error", timeout=10_000)
        line = page.inner_text("#fleet-error")
        assert line.startswith("fleet database: cannot connect to the cluster database: ")
        assert "\n" not in line.strip()
        for group, task_ids in fixture.ids.items():
            for task_id in task_ids:
                assert page.locator(f"#group-{group} #task-{task_id}").count() == 1, task_id
        assert page.evaluate("window.pwned") is None
        page.close()


def test_a_task_on_a_stopped_dead_or_unknown_host_shows_that_state() -> None:
    """Issue 25: an unfinished task whose owner is stopped, dead or has no row carries that
    state (``host_marker``) and its board row says so; an ended task or an alive host's
    shows none; the host's heading names a state that is not alive."""
    from supervisor.views.webpage import _environment

    fleet = group_by_host(
        "h1",
        [_host("h1"), _host("h2", "stopped"), _host("h3", "dead")],
        [_task("a", "h1"), _task("b", "h2"), _task("c", "h3"), _task("d", "h3", "completed"),
         _task("e", "gone")],
        total=5,
    )  # fmt: skip
    markers = {t["id"]: t["host_marker"] for h in fleet.hosts for t in h.tasks}
    assert markers == {"a": None, "b": "stopped", "c": "dead", "d": None, "e": "unknown"}
    html = _environment().get_template("fleet.html").render(fleet=fleet)
    assert 'id="fleet-task-b" data-state="running" data-host-state="stopped"' in html
    assert 'id="fleet-task-a" data-state="running" data-host-state=""' in html
    assert "(host dead)" in html and "(host unknown)" in html
    assert 'h3 <span class="host-state s-dead">dead</span>' in html
