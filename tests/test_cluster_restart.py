"""Issue 15: PostgreSQL stopped and started again under a running fleet, and a worker
whose connections the server drops or whose LISTEN connection goes deaf. Real server
(tests/support/cluster_support.py), real engines (``support.cluster_engines.engines``).

Every engine here runs with procrastinate's fetch polling interval at
:data:`POLL` seconds (``SUPERVISE_CLUSTER_FETCH_POLL``, see
:mod:`supervisor.cluster.health`): a task that starts before half of it has passed was
dispatched through LISTEN/NOTIFY, never by polling. That is what is asserted (an order a loaded
machine cannot turn around); the seconds it took are printed, not bounded.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import tomli_w
from conftest import Setup, wait_for
from support.cluster_engines import DOING, TERMINAL, _host_runs, _max_overlap, engines, rows

psycopg = pytest.importorskip("psycopg")

#: The workers' polling interval in these tests (seconds): far beyond every bound asserted.
POLL = "120"
BEFORE_POLL = float(POLL) / 2
"""Seconds: a task launched within this was not fetched by the poll (see the docstring)."""


@pytest.fixture(autouse=True)
def long_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    from supervisor.cluster.health import FETCH_POLL_ENV

    monkeypatch.setenv(FETCH_POLL_ENV, POLL)


def _submit(dsn: str, setup: Setup, name: str, prompt: str) -> str:
    from supervisor.cluster.submit import submit
    from supervisor.config import load_profile, load_task

    profile = load_profile(setup.profile)
    file = setup.root / f"{name}.toml"
    file.write_text(tomli_w.dumps(setup.task(name, prompt)))
    return submit(dsn, profile, load_task(file, profile)).task_id


def _launched(hosts: dict[str, Setup]) -> dict[str, int]:
    """task id -> launch events in the local event logs of every host."""
    counts: dict[str, int] = {}
    for setup in hosts.values():
        for log in (setup.state / "tasks").glob("*/events.jsonl"):
            events = [json.loads(line) for line in log.read_text().splitlines()]
            launches = sum(e["event"] == "launched" for e in events)
            counts[log.parent.name] = counts.get(log.parent.name, 0) + launches
    return counts


def _started_before_the_poll(dsn: str, hosts: dict[str, Setup], name: str) -> float:
    """Submit a short task; seconds until a host launches it (fails if not launched before
    :data:`BEFORE_POLL`, when only the poll could have fetched it)."""
    begin = time.monotonic()
    task_id = _submit(dsn, hosts["h0"], name, "exit: 0")
    wait_for(lambda: _launched(hosts).get(task_id), timeout=BEFORE_POLL, every=0.02)
    return time.monotonic() - begin


def test_postgres_restart_mid_run(tmp_path: Path) -> None:
    """The must-show: three engines with two slots each; three long tasks (running through
    the outage), three short ones (ending during it) and two queued; the server stopped
    for 10 s and started again on the same data folder. Nothing starts while it is down;
    within 5 s of its return the queued tasks start in the slots the short ones freed, and
    a task submitted then starts within about 1 s (LISTEN/NOTIFY: polling is 120 s here).
    No host ever holds more than two tasks (claimed or running: the long tasks' jobs live
    on), every task starts exactly once (every host's local events and the database's),
    every outbox is flushed (file gone, events written), each row's state matches the
    manifest of the host that ran it, and every procrastinate job ended normally (none
    aborted, failed or left ``doing``). Each engine logs the outage in two lines, one when
    it starts and one when it ends, and no traceback."""
    from support.cluster_support import postgres_executor

    with postgres_executor() as (dsn, server), engines(tmp_path, dsn, count=3) as hosts:
        ids = [_submit(dsn, hosts["h0"], f"long{i}", "sleep: 16\nexit: 0") for i in range(3)]
        ids += [_submit(dsn, hosts["h0"], f"short{i}", "sleep: 2\nexit: 0") for i in range(3)]
        running = "SELECT count(*) FROM supervise_tasks WHERE state = 'running'"
        wait_for(lambda: rows(dsn, running) == [(6,)], timeout=30)
        ids += [_submit(dsn, hosts["h0"], f"queued{i}", "sleep: 2\nexit: 0") for i in range(2)]
        server.stop()
        down = time.monotonic()
        outboxes = [setup.state / "cluster-outbox.jsonl" for setup in hosts.values()]
        # The short tasks end meanwhile: their transitions wait in their hosts' outboxes.
        wait_for(lambda: sum(o.exists() for o in outboxes) >= 1, timeout=60)
        # The outage under test lasts 10 s (nothing may start meanwhile).
        time.sleep(max(0.0, 10 - (time.monotonic() - down)))
        assert sum(_launched(hosts).values()) == 6  # dispatch paused
        statuses = [m["status"] for s in hosts.values() for m in s.manifests().values()]
        assert statuses.count("completed") == 3 and statuses.count("running") == 3
        server.start()
        back = time.monotonic()
        wait_for(lambda: sum(_launched(hosts).values()) == 8, timeout=BEFORE_POLL, every=0.02)
        resumed = time.monotonic() - back
        late = _started_before_the_poll(dsn, hosts, "late")
        print(f"queued tasks started {resumed:.2f} s after the return; a new one in {late:.2f} s")
        ids.append(rows(dsn, "SELECT id FROM supervise_tasks WHERE name = 'late'")[0][0])
        done = "SELECT count(*) FROM supervise_tasks WHERE state = ANY(%s)"
        wait_for(lambda: rows(dsn, done, list(TERMINAL)) == [(9,)], timeout=40)
        wait_for(lambda: rows(dsn, DOING) == [(0,)], timeout=60)
        wait_for(lambda: not any(o.exists() for o in outboxes), timeout=60)

        assert _launched(hosts) == {t: 1 for t in ids}
        launched = rows(dsn, "SELECT task_id, count(*) FROM supervise_events "
                             "WHERE event = 'launched' GROUP BY task_id")  # fmt: skip
        assert sorted(launched) == sorted((t, 1) for t in ids)
        events = rows(dsn, "SELECT task_id, event, count(*) FROM supervise_events "
                           "GROUP BY task_id, event")  # fmt: skip
        assert all(n == 1 for _, _, n in events), events
        assert rows(dsn, "SELECT status, count(*) FROM procrastinate_jobs GROUP BY status") == []
        table = {r[0]: r[1:] for r in rows(dsn, "SELECT id, state, owner_host, exit_code "
                                                "FROM supervise_tasks")}  # fmt: skip
        claims = dict(rows(dsn, "SELECT id, extract(epoch FROM claimed_at)::float8 "
                                "FROM supervise_tasks"))  # fmt: skip
        for host_id, setup in hosts.items():
            local = _host_runs(setup.state)
            # From its claim to its end, a task holds a slot of its host: never over 2
            # (a worker that aborted its jobs would fetch again beside running tasks).
            held = [(claims[t], end) for t, (_, end, _) in local.items()]
            assert 1 <= _max_overlap(held) <= 2, (host_id, held)
            for task_id in local:
                manifest = json.loads((setup.state / "tasks" / task_id /
                                       "manifest.json").read_text())  # fmt: skip
                assert table[task_id] == (manifest["status"], host_id, manifest["exit_code"])
                assert (task_id, "completed", 1) in events
            # Issue 25: the outage is one line when it starts and one when it ends, per engine
            # (on 812c663: 8-10 tracebacks per engine log)
            log = (setup.root / "engine.log").read_text()
            assert log.count("database unreachable") == 1, log
            assert log.count("database answering again") == 1, log
            assert "Traceback" not in log, log


def _worker_backends(dsn: str, host_id: str, listening: bool = False) -> list[int]:
    """The pids of the host's connections (``supervise:<host_id>:<role>``), or of its
    LISTEN connection alone."""
    from supervisor.cluster.db import application_name

    sql = "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s"
    name = application_name(host_id, "listen" if listening else "%")
    return [r[0] for r in rows(dsn, sql, name)]


def test_worker_connections_terminated(tmp_path: Path) -> None:
    """The server ends every connection of a host's worker (``pg_terminate_backend``) while
    its tasks run: the tasks go on (each starts once, ends completed), their jobs end
    normally (none left ``doing``), and a task submitted afterwards starts within about
    1 s: the worker listens again."""
    from support.cluster_support import postgres_server

    with postgres_server() as dsn, engines(tmp_path, dsn, count=1) as hosts:
        setup = hosts["h0"]
        first = [_submit(dsn, setup, f"t{i}", "sleep: 3\nexit: 0") for i in range(2)]
        running = "SELECT count(*) FROM supervise_tasks WHERE state = 'running'"
        wait_for(lambda: rows(dsn, running) == [(2,)], timeout=30)
        wait_for(lambda: _worker_backends(dsn, "h0", listening=True), timeout=60)
        killed = _worker_backends(dsn, "h0")
        for pid in killed:
            rows(dsn, "SELECT pg_terminate_backend(%s)", pid)
        wait_for(lambda: _worker_backends(dsn, "h0", listening=True)
                 and not set(killed) & set(_worker_backends(dsn, "h0")), timeout=60)  # fmt: skip
        done = "SELECT count(*) FROM supervise_tasks WHERE state = 'completed'"
        wait_for(lambda: rows(dsn, done) == [(2,)], timeout=30)
        late = _started_before_the_poll(dsn, hosts, "late")
        print(f"a task submitted after the kill started in {late:.2f} s")
        wait_for(lambda: rows(dsn, done) == [(3,)], timeout=30)
        wait_for(lambda: rows(dsn, DOING) == [(0,)], timeout=60)
        assert set(first) <= set(_launched(hosts))
        assert set(_launched(hosts).values()) == {1}


def test_deaf_listener_is_replaced(tmp_path: Path) -> None:
    """The worker's LISTEN connection stays open but hears nothing (its server process
    stopped with SIGSTOP: what a half-open TCP connection looks like): the round trip on it
    (issue 25: no NOTIFY) finds it deaf and listens again on a new connection, so a task
    submitted meanwhile starts within seconds, not after the 120 s polling interval."""
    from support.cluster_support import postgres_server

    with postgres_server() as dsn, engines(tmp_path, dsn, count=1) as hosts:
        [deaf] = wait_for(lambda: _worker_backends(dsn, "h0", listening=True), timeout=60)
        os.kill(deaf, signal.SIGSTOP)
        try:
            late = _started_before_the_poll(dsn, hosts, "late")
            print(f"a task submitted to a deaf listener started in {late:.2f} s")
            assert set(_worker_backends(dsn, "h0", listening=True)) - {deaf}
        finally:
            os.kill(deaf, signal.SIGCONT)
        log = (hosts["h0"].root / "engine.log").read_text()
        assert "did not answer its check" in log


def test_engine_started_while_the_database_is_down(tmp_path: Path) -> None:
    """An engine started while PostgreSQL is down for 16 s: its worker's pool tries to
    connect every second (psycopg_pool's own backoff, 1, 2, 4, 8, 16 s, would try next
    about 15 s after the return), so a task submitted once the server is back starts
    within 3 s."""
    from support.cluster_engines import cluster_profile, start_engine, stop_engines, supervise
    from support.cluster_support import postgres_executor, wait_ready

    with postgres_executor() as (dsn, server):
        assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn}).returncode == 0
        (tmp_path / "h0").mkdir()
        setup = Setup(tmp_path / "h0", f"sv-test-{os.urandom(5).hex()}")
        cluster_profile(setup, dsn, "h0")
        server.stop()
        engine = start_engine(setup)
        try:
            # The outage under test: 16 s of failed connects would grow psycopg_pool's backoff
            # (1, 2, 4, 8, 16 s); the worker's pool must keep trying every second.
            time.sleep(16)
            server.start()
            wait_ready(dsn)
            back = time.monotonic()
            task_id = _submit(dsn, setup, "late", "exit: 0")
            # Before the pool's backed-off next try (about 15 s after the return), not a speed.
            wait_for(lambda: _launched({"h0": setup}).get(task_id), timeout=10, every=0.05)
            print(f"started {time.monotonic() - back:.2f} s after the database's return")
        finally:
            stop_engines([engine])
            setup.tmux("kill-server")
            Path(f"/tmp/tmux-{os.getuid()}/{setup.socket_name}").unlink(missing_ok=True)
