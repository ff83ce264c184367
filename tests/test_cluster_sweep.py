"""Several hosts (issue 15), hosts and failures: the sweeper
(:mod:`supervisor.cluster.sweeper`). A host that stops beating for its own
``host_timeout`` is declared dead; its unlaunched tasks go back to the queue, its running
ones become ``host_lost`` (and run again elsewhere with ``on_host_lost = "restart"``); a
cleanly stopped host is ``stopped``, never dead. Real PostgreSQL
(``tests/support/cluster_support.py``), real engines, the fake agent; the rules themselves also as
pure functions (hypothesis).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Setup, wait_for
from hypothesis import given
from hypothesis import strategies as st
from support import cluster_hosts
from support.cluster_engines import rows, start_engine, stop_engines, supervise, wait_beats
from support.cluster_hosts import (
    HOST_TIMEOUT,
    cleanup,
    host,
    lose_machine,
    state_of,
    submit,
)
from support.repos import make_repo

from supervisor.cluster.sweeper import (
    HostRow,
    TaskRow,
    dead_hosts,
    fate_of,
    stale_after,
    sweep_once,
)
from supervisor.taskdir.states import HOST_LOST, LIVE, TERMINAL
from supervisor.taskdir.states import UNCLAIMED as UNLAUNCHED  # one set (issue 23)

server, dsn = (
    cluster_hosts.server,
    cluster_hosts.dsn,
)  # pytest fixtures, found by name in this module

psycopg = pytest.importorskip("psycopg")
RUN_JOBS = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing' " \
           "AND task_name = 'supervise.run_task'"  # fmt: skip


def local_launches(setup: Setup) -> dict[str, int]:
    """task id -> 'launched' events in the host's own event logs."""
    found = {}
    for log in (setup.state / "tasks").glob("*/events.jsonl"):
        events = [json.loads(line) for line in log.read_text().splitlines()]
        found[log.parent.name] = sum(e["event"] == "launched" for e in events)
    return found


def epoch(value: Any) -> float:
    return value.timestamp()


# ---------------------------------------------------------------- a machine lost


def test_machine_loss_requeues_loses_and_restarts(tmp_path: Path, dsn: str) -> None:
    """h0 (on_host_lost = restart) is SIGKILLed with its tmux server while it holds a task
    still preparing its worktree (never launched), a running task (busy on its first run, so
    it still runs at the kill however long the other hosts take to start) and a running task
    pinned to it. The unlaunched one starts elsewhere within 10 s; h0 is dead and its running
    tasks host_lost within host_timeout + 5 s; the unpinned running one runs again
    elsewhere and completes, restarted_from naming the lost run; the pinned one is only
    host_lost. Every task starts once per generation (every host's logs and the
    database); no run job stays doing."""
    setup_pid = tmp_path / "setup.pid"
    code = f"import os, time; open({str(setup_pid)!r}, 'w').write(str(os.getpid()))"
    slow_setup = [sys.executable, "-c", code + "; time.sleep(120)"]
    h0 = host(tmp_path, dsn, "h0", max_concurrent=3, on_host_lost="restart",
              extra={"workspace": {"setup": slow_setup, "branch": "h0/{task_id}"}})  # fmt: skip
    others = [host(tmp_path, dsn, f"h{i}") for i in (1, 2)]
    engines: dict[str, Any] = {"h0": start_engine(h0)}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 30)
        projects = tmp_path / "projects"
        ids = {
            "slow": submit(dsn, h0, "slow", "print: prepared\nexit: 0",
                           make_repo(projects / "repo")),
            "run": submit(dsn, h0, "run", "print: run\nbusy_runs: 1\nexit: 0", projects / "run"),
            "pinned": submit(dsn, h0, "pinned", "print: pinned\nsleep: 60\nexit: 0",
                             projects / "pinned", host="h0"),
        }  # fmt: skip
        wait_for(lambda: state_of(dsn, ids["run"])[:2] == ("running", "h0")
                 and state_of(dsn, ids["pinned"])[:2] == ("running", "h0")
                 and setup_pid.exists(), timeout=30)  # fmt: skip
        assert state_of(dsn, ids["slow"])[0] in UNLAUNCHED
        assert state_of(dsn, ids["slow"])[1] == "h0"
        [(first_session,)] = rows(dsn, "SELECT session_id FROM supervise_tasks WHERE id = %s",
                                  ids["run"])  # fmt: skip
        for i, setup in enumerate(others, 1):
            engines[f"h{i}"] = start_engine(setup)
        wait_for(lambda: len(rows(dsn, "SELECT 1 FROM supervise_hosts")) == 3, timeout=30)
        agents = [projects / n / "agent_pid" for n in ("run", "pinned")]
        killed = lose_machine(h0, engines.pop("h0"), [setup_pid, *agents])

        def lost_at() -> Any:
            return rows(dsn, "SELECT lost_at FROM supervise_hosts WHERE host_id = 'h0' "
                             "AND state = 'dead'")  # fmt: skip

        wait_for(lambda: lost_at(), timeout=HOST_TIMEOUT + 10)
        dead = epoch(lost_at()[0][0]) - killed
        wait_for(lambda: state_of(dsn, ids["pinned"])[0] == HOST_LOST, timeout=60)
        done = "SELECT count(*) FROM supervise_tasks WHERE state = 'completed'"
        wait_for(lambda: rows(dsn, done) == [(2,)], timeout=60)
        wait_for(lambda: rows(dsn, RUN_JOBS) == [(0,)], timeout=60)
        events = rows(dsn, "SELECT task_id, host_id, generation, event, at FROM "
                           "supervise_events ORDER BY id")  # fmt: skip
    finally:
        cleanup([h0, *others], list(engines.values()))

    def at(task: str, event: str, host: str | None = None) -> list[float]:
        return [epoch(e[4]) - killed for e in events if e[0] == ids[task] and e[3] == event
                and host in (None, e[1])]  # fmt: skip

    lost = at("pinned", HOST_LOST, host="h0") + at("run", HOST_LOST, host="h0")
    slow_start = [t for t in at("slow", "launched") if t > 0]
    restarted = [t for t in at("run", "launched") if t > 0]
    print(f"kill -> dead {dead:.2f} s; -> host_lost {max(lost):.2f} s; unlaunched started "
          f"elsewhere {slow_start[0]:.2f} s; running restarted elsewhere {restarted[0]:.2f} s "
          f"(host_timeout {HOST_TIMEOUT} s, heartbeat 0.5 s)")  # fmt: skip
    # Order, not speed (the figures are printed above): dead, then lost, after the kill.
    assert dead > 0 and min(lost) > 0, (dead, lost)
    assert len(lost) == 2
    assert len(slow_start) == 1
    assert len(restarted) == 1
    # Each task started exactly once per generation, on one host, in the database...
    launches: dict[tuple[str, int], list[str]] = {}
    for task_id, host_id, generation, event, _ in events:
        if event == "launched":
            launches.setdefault((task_id, generation), []).append(host_id)
    assert all(len(h) == 1 for h in launches.values()), launches
    assert sorted((t, len(h)) for (t, _), h in launches.items()) == sorted(
        [(ids["run"], 1), (ids["run"], 1), (ids["pinned"], 1), (ids["slow"], 1)])  # fmt: skip
    # ... and in every host's own logs: h0 launched run and pinned, never slow.
    local = {name: local_launches(s) for name, s in (("h0", h0), ("h1", others[0]),
                                                       ("h2", others[1]))}  # fmt: skip
    assert local["h0"] == {ids["run"]: 1, ids["pinned"]: 1, ids["slow"]: 0}
    elsewhere = {**local["h1"], **local["h2"]}
    assert set(local["h1"]).isdisjoint(local["h2"])
    assert elsewhere == {ids["run"]: 1, ids["slow"]: 1}
    table = "SELECT id, state, owner_host, generation, restarted_from, session_id FROM " \
            "supervise_tasks"  # fmt: skip
    final = {r[0]: r[1:] for r in rows(dsn, table)}
    assert final[ids["pinned"]][:4] == (HOST_LOST, "h0", 2, [])
    state, owner, generation, restarted_from, session = final[ids["run"]]
    assert (state, generation) == ("completed", 3) and owner in ("h1", "h2")
    assert restarted_from == [{"host_id": "h0", "generation": 1, "session_id": first_session}]
    assert session and session != first_session
    assert final[ids["slow"]][:4] == ("completed", next(iter(
        h for h, n in local.items() if n.get(ids["slow"]))), 3, [])  # fmt: skip
    hosts = json.loads(supervise("hosts", "--json", env={"SUPERVISE_CLUSTER_DSN": dsn}).stdout)
    assert {h["host_id"]: h["state"] for h in hosts}["h0"] == "dead"
    status = supervise("status", "--cluster", env={"SUPERVISE_CLUSTER_DSN": dsn}).stdout
    assert any(ids["pinned"] in line and HOST_LOST in line for line in status.splitlines())


def test_report_mode_loss_is_host_lost_only_and_the_host_may_return(tmp_path: Path,
                                                                    dsn: str) -> None:  # fmt: skip
    """on_host_lost = report (the default): a lost host's running task is host_lost and
    runs nowhere else; the host beating again is alive again (its lost task stays lost)."""
    from supervisor.cluster.writer import Writer

    h0, h1 = host(tmp_path, dsn, "h0"), host(tmp_path, dsn, "h1")
    engines = {"h0": start_engine(h0)}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 30)
        task = submit(dsn, h0, "long", "print: long\nsleep: 60\nexit: 0")
        wait_for(lambda: state_of(dsn, task)[:2] == ("running", "h0"), timeout=30)
        engines["h1"] = start_engine(h1)
        wait_for(lambda: len(rows(dsn, "SELECT 1 FROM supervise_hosts")) == 2, timeout=30)
        lose_machine(h0, engines.pop("h0"), [h0.project / "agent_pid"])
        wait_for(lambda: state_of(dsn, task) == (HOST_LOST, "h0", 2), timeout=HOST_TIMEOUT + 5)
        wait_beats(dsn, "h1", 4)  # h1 has every chance to take it: it must not
        assert state_of(dsn, task) == (HOST_LOST, "h0", 2)
        assert local_launches(h1) == {}
        assert rows(dsn, "SELECT restarted_from FROM supervise_tasks") == [([],)]
        assert rows(dsn, "SELECT count(*) FROM supervise_events WHERE event = %s",
                    HOST_LOST) == [(1,)]  # fmt: skip
        # The host's writer beats again (as a returning engine's would): alive; closed: stopped.
        writer = Writer(dsn, "h0", 2, lambda: 0, "test", ["supervise"], 0.5,
                        tmp_path / "outbox.jsonl", HOST_TIMEOUT, "report")  # fmt: skip
        writer.start()
        host_state = "SELECT state, lost_at IS NOT NULL FROM supervise_hosts WHERE host_id = 'h0'"
        wait_for(lambda: rows(dsn, host_state) == [("alive", True)], timeout=60)
        writer.close()
        assert rows(dsn, host_state) == [("stopped", True)]
        assert state_of(dsn, task) == (HOST_LOST, "h0", 2)
    finally:
        cleanup([h0, h1], list(engines.values()))


def test_engine_killed_then_back_stops_its_copy_nothing_runs_twice(tmp_path: Path,
                                                                  dsn: str) -> None:  # fmt: skip
    """h0's engine alone is SIGKILLed (its tmux server and agent live on, as after a crash of
    supervise). Its agent is fenced (the lease, issue 20); the real sweeper declares h0
    dead, its task host_lost and (restart) runs it on h1; h0's engine comes back and
    records its old copy superseded, never launched again; the task completes once, on
    h1."""
    h0 = host(tmp_path, dsn, "h0", on_host_lost="restart")
    h1 = host(tmp_path, dsn, "h1")
    engines: dict[str, Any] = {"h0": start_engine(h0)}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 30)
        task = submit(dsn, h0, "long", "print: long\nsleep: 15\nexit: 0")
        wait_for(lambda: state_of(dsn, task)[:2] == ("running", "h0"), timeout=30)
        pid_file = h0.state / "tasks" / task / "pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=60)
        old_agent = int(pid_file.read_text())
        engines["h1"] = start_engine(h1)
        wait_for(lambda: len(rows(dsn, "SELECT 1 FROM supervise_hosts")) == 2, timeout=30)
        killed = time.time()
        engines["h0"].kill()
        engines.pop("h0").wait()
        wait_for(lambda: state_of(dsn, task)[:2] == ("running", "h1"), timeout=HOST_TIMEOUT + 8)
        restarted = time.time() - killed
        # h0's copy was fenced by its wrapper (its engine's lease ran out) before h1 ran it.
        assert not os.path.exists(f"/proc/{old_agent}") or "State:\tZ" in Path(
            f"/proc/{old_agent}/status").read_text()  # fmt: skip
        engines["h0"] = start_engine(h0)
        wait_for(lambda: _status(h0, task) == "superseded", timeout=60)
        wait_for(lambda: state_of(dsn, task)[0] == "completed", timeout=40)
        wait_for(lambda: rows(dsn, "SELECT state FROM supervise_hosts WHERE host_id = 'h0'")
                 == [("alive",)], timeout=60)  # fmt: skip
    finally:
        cleanup([h0, h1], list(engines.values()))
    print(f"kill -> running on h1 {restarted:.2f} s (host_timeout {HOST_TIMEOUT} s)")
    assert h0.tmux("has-session", "-t", task).returncode != 0
    assert not os.path.exists(f"/proc/{old_agent}") or "State:\tZ" in Path(
        f"/proc/{old_agent}/status").read_text()  # fmt: skip
    assert local_launches(h0) == {task: 1} and local_launches(h1) == {task: 1}
    [(owner, generation, restarted_from)] = rows(
        dsn, "SELECT owner_host, generation, restarted_from FROM supervise_tasks"
    )
    assert (owner, generation) == ("h1", 3)
    assert [r["host_id"] for r in restarted_from] == ["h0"]
    launched = rows(dsn, "SELECT host_id, generation FROM supervise_events "
                         "WHERE event = 'launched' ORDER BY id")  # fmt: skip
    assert launched == [("h0", 1), ("h1", 3)]


def test_a_sweep_killed_mid_transaction_blocks_no_later_sweep(tmp_path: Path, dsn: str) -> None:
    """A host SIGKILLed in the middle of a sweep: while its transaction holds the sweep's
    advisory lock no other sweep runs (one at a time, fleet-wide), and once its backend is
    gone the lock is gone with it, so the next sweep declares a silent host dead."""
    from supervisor.cluster.sweeper import SWEEP_LOCK

    ghost = "SELECT state FROM supervise_hosts WHERE host_id = 'ghost'"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO supervise_hosts (host_id, capacity, heartbeat_at, "
            "host_timeout) VALUES ('ghost', 1, now() - interval '1 minute', 4)"
        )
    holder = psycopg.connect(dsn)  # not autocommit: the lock lives as long as its transaction
    holder.execute("SELECT pg_advisory_xact_lock(%s)", (SWEEP_LOCK,))
    h0 = host(tmp_path, dsn, "h0")
    engines = [start_engine(h0)]
    try:
        wait_beats(dsn, "h0", 16)  # 8 s: h0 tries a sweep every second meanwhile
        assert rows(dsn, ghost) == [("alive",)]
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (holder.info.backend_pid,))
        wait_for(lambda: rows(dsn, ghost) == [("dead",)], timeout=60)
    finally:
        holder.close()
        cleanup([h0], engines)


def test_database_down_longer_than_host_timeout_declares_no_host_dead(tmp_path: Path) -> None:
    """The server is stopped for twice the hosts' host_timeout while a task runs: on its
    return every heartbeat is stale for a moment, and no sweep may take that for a loss:
    both hosts stay alive, the task is never host_lost or restarted, and completes once."""
    from support.cluster_support import postgres_executor

    with postgres_executor() as (url, server):
        assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": url}).returncode == 0
        h0 = host(tmp_path, url, "h0", on_host_lost="restart")
        h1 = host(tmp_path, url, "h1", on_host_lost="restart")
        engines = [start_engine(h0), start_engine(h1)]
        try:
            wait_for(lambda: len(rows(url, "SELECT 1 FROM supervise_hosts")) == 2, timeout=30)
            task = submit(url, h0, "long", "print: long\nsleep: 16\nexit: 0")
            wait_for(lambda: state_of(url, task)[0] == "running", timeout=30)
            server.stop()
            time.sleep(2 * HOST_TIMEOUT)  # the outage under test: longer than host_timeout
            server.start()
            # pg_ctl -w may return while the server still says "starting up" on a loaded
            # machine: the sweep comes as soon as it accepts a connection.
            wait_for(lambda: _accepts(url), timeout=60)
            # A sweep at once, before any writer got through (they retry every second):
            # every heartbeat is older than host_timeout now.
            assert sweep_once(url).dead == ()
            hosts = "SELECT host_id, state FROM supervise_hosts ORDER BY host_id"
            wait_for(lambda: rows(url, hosts) == [("h0", "alive"), ("h1", "alive")], 60)
            for host_id in ("h0", "h1"):  # every host beats again; sweeps run meanwhile
                wait_beats(url, host_id)
            assert rows(url, hosts) == [("h0", "alive"), ("h1", "alive")]
            wait_for(lambda: state_of(url, task)[0] == "completed", timeout=40)
        finally:
            cleanup([h0, h1], engines)
        assert state_of(url, task)[2] == 1
        assert rows(url, "SELECT count(*) FROM supervise_events WHERE event = %s",
                    HOST_LOST) == [(0,)]  # fmt: skip
        assert sum(local_launches(h0).values()) + sum(local_launches(h1).values()) == 1


def test_a_host_back_from_the_dead_may_run_its_own_restarted_task(tmp_path: Path,
                                                                   dsn: str) -> None:  # fmt: skip
    """on_host_lost = restart while every other slot is full: h0, back, takes the job of its
    own lost task. Its earlier copy is stopped (superseded) and its folder set aside to
    ``state_dir/superseded/<id>.g1``; the new run gets a fresh folder and session of the
    same name and completes (it was rejected with FileExistsError before)."""
    h0 = host(tmp_path, dsn, "h0", on_host_lost="restart")
    h1 = host(tmp_path, dsn, "h1", max_concurrent=1)
    engines: dict[str, Any] = {"h0": start_engine(h0)}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 30)
        repo = make_repo(tmp_path / "repo")  # a worktree and branch per run (the default)
        task = submit(dsn, h0, "long", "print: long\nsleep: 12\nexit: 0", repo)
        wait_for(lambda: state_of(dsn, task)[:2] == ("running", "h0"), timeout=30)
        engines["h1"] = start_engine(h1)
        blocker = submit(dsn, h1, "blocker", "sleep: 60\nexit: 0", host="h1")
        wait_for(lambda: state_of(dsn, blocker)[:2] == ("running", "h1"), timeout=30)
        engines["h0"].kill()
        engines.pop("h0").wait()
        wait_for(lambda: state_of(dsn, task) == ("queued", None, 2), timeout=HOST_TIMEOUT + 8)
        engines["h0"] = start_engine(h0)
        wait_for(lambda: state_of(dsn, task)[0] == "completed", timeout=60)
    finally:
        cleanup([h0, h1], list(engines.values()))
    assert state_of(dsn, task) == ("completed", "h0", 3)
    assert _status(h0, task) == "completed"
    earlier = json.loads((h0.state / "superseded" / f"{task}.g1" / "manifest.json").read_text())
    assert earlier["status"] == "superseded"
    # Both runs' worktrees and branches: the earlier one set aside with its generation.
    now = json.loads((h0.state / "tasks" / task / "manifest.json").read_text())["workspace"]
    assert (now["branch"], earlier["workspace"]["branch"]) == (
        f"supervise/{task}", f"supervise/{task}.g1")  # fmt: skip
    assert earlier["workspace"]["path"] == now["path"] + ".g1"
    branches = subprocess.run(
        ["git", "branch", "--format=%(refname:short)"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert {f"supervise/{task}", f"supervise/{task}.g1"} <= set(branches)
    launched = rows(dsn, "SELECT host_id, generation FROM supervise_events "
                         "WHERE task_id = %s AND event = 'launched' ORDER BY id", task)  # fmt: skip
    assert launched == [("h0", 1), ("h0", 3)]


def _status(setup: Setup, task_id: str) -> str | None:
    try:
        manifest = json.loads((setup.state / "tasks" / task_id / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return manifest.get("status")


# ---------------------------------------------------------------- a clean stop


def test_cleanly_stopped_host_is_stopped_not_dead(tmp_path: Path, dsn: str) -> None:
    """An engine stopped with SIGTERM (its task left running in tmux) is 'stopped' with
    stopped_at, stays so past its host_timeout (the sweeper of another host runs), and its
    task is not host_lost; started again, it is alive and the task completes there."""
    h0 = host(tmp_path, dsn, "h0")
    h1 = host(tmp_path, dsn, "h1")
    engines = {"h1": start_engine(h1)}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h1",)], 30)
        engines["h0"] = start_engine(h0)
        task = submit(dsn, h0, "long", "print: long\nsleep: 8\nexit: 0", host="h0")
        wait_for(lambda: state_of(dsn, task)[:2] == ("running", "h0"), timeout=30)
        stop_engines([engines.pop("h0")])
        [(state, stopped_at)] = rows(dsn, "SELECT state, stopped_at FROM supervise_hosts "
                                          "WHERE host_id = 'h0'")  # fmt: skip
        assert state == "stopped" and stopped_at is not None
        # h1 (whose sweeper runs) beats past h0's stop + host_timeout + 2 s, database time.
        past = "SELECT (SELECT heartbeat_at FROM supervise_hosts WHERE host_id = 'h1') > " \
               "(SELECT stopped_at FROM supervise_hosts WHERE host_id = 'h0') + " \
               "make_interval(secs => %s)"  # fmt: skip
        wait_for(lambda: rows(dsn, past, HOST_TIMEOUT + 2) == [(True,)], timeout=60)
        assert rows(dsn, "SELECT state, lost_at FROM supervise_hosts WHERE host_id = 'h0'") == [
            ("stopped", None)]  # fmt: skip
        assert state_of(dsn, task) == ("running", "h0", 1)
        assert not rows(dsn, "SELECT 1 FROM supervise_events WHERE event = %s", HOST_LOST)
        engines["h0"] = start_engine(h0)
        wait_for(lambda: rows(dsn, "SELECT state FROM supervise_hosts WHERE host_id = 'h0'")
                 == [("alive",)], timeout=30)  # fmt: skip
        wait_for(lambda: state_of(dsn, task) == ("completed", "h0", 1), timeout=30)
    finally:
        cleanup([h0, h1], list(engines.values()))


# ---------------------------------------------------------------- two sweepers at once


def test_two_sweeps_at_once_act_once(dsn: str) -> None:
    """Sweeps run concurrently (threads, and without the advisory lock's help: the second
    waits on the row locks) bump each lost task's generation once, write each event once
    and retry each job once."""
    from supervisor.cluster import sweeper

    # Silence counts only while the server has been up (dead_hosts' watched).
    up = "SELECT now() - pg_postmaster_start_time() > interval '3 s'"
    wait_for(lambda: rows(dsn, up)[0][0], timeout=60)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO supervise_hosts (host_id, capacity, heartbeat_at, host_timeout,"
                     " on_host_lost) VALUES ('gone', 2, now() - interval '1 minute', 3, "
                     "'restart')")  # fmt: skip
        for task_id, state, pin in (("t-run", "running", None), ("t-pin", "running", "gone"),
                                    ("t-claimed", "claimed", None),
                                    ("t-done", "completed", None)):  # fmt: skip
            conn.execute("INSERT INTO supervise_tasks (id, name, spec, host, queue, state, "
                         "owner_host, generation, session_id) VALUES (%s, %s, '{}', %s, "
                         "'supervise', %s, 'gone', 1, 's-1')",
                         (task_id, task_id, pin, state))  # fmt: skip
    results: list[Any] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        results.append(sweeper.sweep_once(dsn))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 4
    acted = [r for r in results if r.dead]
    assert len(acted) == 1 and acted[0].dead == ("gone",)
    # Whatever interleaving: a sweep after all of them finds nothing left to do.
    again = sweeper.sweep_once(dsn)
    assert (again.dead, again.requeued, again.lost, again.restarted) == ((), (), (), ())
    table = "SELECT id, state, owner_host, generation, restarted_from FROM supervise_tasks"
    final = {r[0]: r[1:] for r in rows(dsn, table)}
    assert final == {
        "t-run": ("queued", None, 2, [{"host_id": "gone", "generation": 1, "session_id": "s-1"}]),
        "t-pin": (HOST_LOST, "gone", 2, []),
        "t-claimed": ("queued", None, 2, []),
        "t-done": ("completed", "gone", 1, []),
    }
    events = rows(dsn, "SELECT task_id, event, count(*) FROM supervise_events "
                       "GROUP BY task_id, event ORDER BY task_id")  # fmt: skip
    assert events == [("t-claimed", "requeued", 1), ("t-pin", HOST_LOST, 1),
                      ("t-run", HOST_LOST, 1)]  # fmt: skip
    jobs = rows(dsn, "SELECT queueing_lock, status FROM procrastinate_jobs ORDER BY 1")
    assert jobs == [("t-claimed", "todo"), ("t-run", "todo")]
    # Without the advisory lock (two sweepers racing on the row locks alone): still once.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE supervise_hosts SET state = 'alive'")
        conn.execute("UPDATE supervise_tasks SET state = 'running', owner_host = 'gone', "
                     "generation = 5 WHERE id = 't-pin'")  # fmt: skip
    with psycopg.connect(dsn) as first, psycopg.connect(dsn) as second:
        one = sweeper._sweep(first, math.inf)
        thread = threading.Thread(target=lambda: results.append(sweeper._sweep(second, math.inf)))
        thread.start()
        locked = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        wait_for(lambda: rows(dsn, locked) == [(1,)], timeout=60)  # the second waits on them
        first.commit()
        thread.join(30)
        second.commit()
    two = results[-1]
    assert one.lost == ("t-pin",) and two.lost == () and two.dead == ()
    assert state_of(dsn, "t-pin") == (HOST_LOST, "gone", 6)


# ---------------------------------------------------------------- the pure rules

hosts_st = st.builds(
    HostRow,
    host_id=st.sampled_from(["a", "b", "c"]),
    state=st.sampled_from(["alive", "stopped", "dead"]),
    age=st.floats(0, 100),
    host_timeout=st.floats(0.5, 60),
    on_host_lost=st.sampled_from(["report", "restart"]),
)
TASK_STATES = sorted(UNLAUNCHED | {str(s) for s in LIVE} | {str(s) for s in TERMINAL}
                     | {"rejected", HOST_LOST})  # fmt: skip


@given(st.lists(hosts_st, max_size=6, unique_by=lambda h: h.host_id))
def test_dead_hosts_are_alive_ones_silent_past_their_own_timeout(hosts: list[HostRow]) -> None:
    dead = dead_hosts(hosts)
    for h in hosts:
        assert (h.host_id in dead) == (h.state == "alive" and h.age > h.host_timeout)


@given(st.lists(hosts_st, max_size=6, unique_by=lambda h: h.host_id), st.floats(0, 100))
def test_silence_counts_only_while_the_sweeper_watched(hosts: list[HostRow],
                                                       watched: float) -> None:  # fmt: skip
    """After an outage, a heartbeat older than what the sweeper saw proves nothing."""
    dead = dead_hosts(hosts, watched)
    for h in hosts:
        silent = min(h.age, watched)
        assert (h.host_id in dead) == (h.state == "alive" and silent > h.host_timeout)
        if watched <= h.host_timeout:
            assert h.host_id not in dead
    assert stale_after(hosts) == max([h.host_timeout for h in hosts], default=30.0)


@given(hosts_st, st.sampled_from(TASK_STATES), st.sampled_from([None, "a", "b"]),
       st.booleans())  # fmt: skip
def test_fate_of_a_dead_hosts_task(owner: HostRow, state: str, pin: str | None,
                                   owned: bool) -> None:  # fmt: skip
    task = TaskRow("t", state, owner.host_id if owned else "other", 4, pin, "s")
    fate = fate_of(task, owner)
    if owner.state != "dead" or not owned or state not in UNLAUNCHED | set(LIVE):
        assert fate is None  # alive and stopped hosts' tasks, and ended ones, stay as they are
    elif state in UNLAUNCHED:
        assert fate == "requeue"  # never launched: simply queued again, whatever the mode
    elif owner.on_host_lost == "restart" and pin is None:
        assert fate == "restart"
    else:
        assert fate == "host_lost"  # report mode, or pinned to the lost host


def test_heartbeat_not_shorter_than_host_timeout_is_one_line(setup: Setup) -> None:
    """A host beating less often than its own timeout would be swept while alive."""
    profile = setup.write_profile(extra={"cluster": {"heartbeat": 10, "host_timeout": 5}})
    result = supervise("validate", str(profile))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert str(profile) in line and "'cluster'" in line
    assert "heartbeat (10 s) must be shorter than host_timeout (5 s)" in line


def _accepts(url: str) -> bool:
    """Whether the server at ``url`` accepts a connection now."""
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.OperationalError:
        return False
    return True


def test_a_sweep_that_raises_does_not_end_the_sweeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweeper is a coroutine of the engine's (no procrastinate job any more, which
    procrastinate would log and run again): an unexpected error in one sweep is logged and
    the next sweep runs."""
    import asyncio

    from supervisor.cluster import sweeper

    calls: list[float] = []
    done = asyncio.Event()

    def sweep_once(source: Any, watched: float, prune: Any = None) -> None:
        calls.append(watched)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        if len(calls) == 3:
            loop.call_soon_threadsafe(done.set)

    async def run() -> None:
        task = asyncio.create_task(sweeper.serve("dsn"))
        await asyncio.wait_for(done.wait(), timeout=10)
        task.cancel()

    monkeypatch.setattr(sweeper, "sweep_once", sweep_once)
    monkeypatch.setattr(sweeper, "SWEEP_EVERY", 0.01)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    assert len(calls) >= 3 and calls[1] == 0.0  # the failed sweep restarted the count


@given(hosts=st.integers(min_value=1, max_value=100_000), draw=st.floats(0.0, 0.999))
def test_a_larger_fleet_sweeps_no_more_often_in_all(hosts: int, draw: float) -> None:
    """Each engine sweeps every SWEEP_EVERY s in a small fleet and less often in a larger
    one, so the whole fleet tries about FLEET_SWEEPS sweeps a second (at the mean draw)
    whatever its size, never fewer than a small fleet; the draw spreads engines over
    half to one and a half of that interval."""
    from supervisor.cluster import sweeper

    every = sweeper.sweep_every(hosts, draw)
    mean = sweeper.sweep_every(hosts)
    assert 0.5 * mean <= every < 1.5 * mean
    assert mean >= sweeper.SWEEP_EVERY
    assert math.isclose(hosts / mean, min(hosts / sweeper.SWEEP_EVERY, sweeper.FLEET_SWEEPS))
