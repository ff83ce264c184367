"""Issue 25 (conn): an engine's connections to the fleet's database, counted by their
``application_name`` (``supervise:<host_id>:<role>``), PostgreSQL out of connection slots,
and the notifications an idle fleet sends. Real server (tests/support/cluster_support.py),
real engines (``support.cluster_engines.engines``)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import Setup, wait_for
from hypothesis import given
from hypothesis import strategies as st
from support import cluster_engines
from support.cluster_engines import ENGINES, engines, rows, supervise, wait_beats

psycopg = pytest.importorskip("psycopg")
server, dsn = cluster_engines.server, cluster_engines.dsn  # fixtures, found by name

#: This host's connections by role (``pg_stat_activity``; the test's own are unnamed).
BY_ROLE = (
    "SELECT application_name, count(*) FROM pg_stat_activity "
    "WHERE application_name LIKE %s GROUP BY 1"
)
STEADY = {"supervise:h0:pool": 1, "supervise:h0:listen": 1}


def _by_role(dsn: str, host_id: str = "h0") -> dict[str, int]:
    return dict(rows(dsn, BY_ROLE, f"supervise:{host_id}:%"))


def _submit(dsn: str, setup: Setup, name: str, prompt: str) -> str:
    from supervisor.cluster.submit import submit
    from supervisor.config import load_profile, load_task

    profile = load_profile(setup.profile)
    file = setup.root / f"{name}.toml"
    file.write_text(tomli_w.dumps(setup.task(name, prompt)))
    return submit(dsn, profile, load_task(file, profile)).task_id


def test_an_idle_engine_holds_two_connections(tmp_path: Path, dsn: str) -> None:
    """An idle engine holds two connections: its pool's one and its LISTEN connection,
    both named; nothing else of it is connected (before issue 25: ten, and one more per
    claim, control answer and sweep). ``supervise hosts`` shows the count its heartbeat
    reports. A task run in between borrows from the pool and leaves the count at two."""
    from supervisor.cluster.connections import POOL_MAX

    with engines(tmp_path, dsn, count=1) as hosts:
        wait_for(lambda: _by_role(dsn) == STEADY, timeout=90)
        task = _submit(dsn, hosts["h0"], "short", "exit: 0")
        done = "SELECT state FROM supervise_tasks WHERE id = %s"
        wait_for(lambda: rows(dsn, done, task) == [("completed",)], timeout=30)
        wait_for(lambda: _by_role(dsn) == STEADY, timeout=90)
        seen = []
        for _ in range(4):  # one sample per heartbeat, four heartbeats
            wait_beats(dsn, "h0", count=1)
            seen.append(_by_role(dsn))
        # a burst may borrow up to the pool's max for a moment; never another LISTEN
        assert all(s["supervise:h0:listen"] == 1 for s in seen), seen
        assert all(s.get("supervise:h0:pool", 0) <= POOL_MAX for s in seen), seen
        assert set(seen[0]) <= set(STEADY)

        def listed() -> int:
            out = supervise("hosts", "--json", env={"SUPERVISE_CLUSTER_DSN": dsn})
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)[0]["connections"]

        wait_for(lambda: listed() == 2, timeout=60)


def test_an_idle_fleet_sends_no_notification(tmp_path: Path, dsn: str) -> None:
    """Two idle engines: no NOTIFY on any of their channels over several heartbeats and
    sweeps (before issue 25, each pinged its own LISTEN connection every 2 s); a submit
    notifies the shared queue's channels once each (procrastinate's defer trigger)."""
    from supervisor.cluster.control import host_channel

    channels = [
        host_channel("h0"),
        host_channel("h1"),
        "procrastinate_any_queue_v1",
        "procrastinate_queue_v1#supervise",
        "supervise_control_done",
    ]
    with engines(tmp_path, dsn, count=2) as hosts, psycopg.connect(dsn, autocommit=True) as ear:
        for host_id in ("h0", "h1"):
            name = f"supervise:{host_id}:listen"
            wait_for(lambda h=host_id, n=name: _by_role(dsn, h).get(n), timeout=90)
        for channel in channels:
            ear.execute(f'LISTEN "{channel}"')
        wait_beats(dsn, "h0", count=6)
        heard = list(ear.notifies(timeout=0.1))
        assert heard == []
        _submit(dsn, hosts["h0"], "one", "exit: 0")
        heard = list(ear.notifies(timeout=1.0, stop_after=2))
        assert sorted(n.channel for n in heard) == [
            "procrastinate_any_queue_v1",
            "procrastinate_queue_v1#supervise",
        ]


def _fill(dsn: str) -> list[Any]:
    """Connections to the server until it refuses one (its max_connections reached)."""
    held = []
    while True:
        try:
            held.append(psycopg.connect(dsn, autocommit=True, connect_timeout=5))
        except psycopg.OperationalError as exc:
            assert "too many clients" in str(exc), exc
            return held


def test_out_of_connection_slots_is_said_once_and_dispatch_resumes(tmp_path: Path) -> None:
    """PostgreSQL with max_connections = 12, all taken while the engine's connections are
    gone (the engine stopped with SIGSTOP, its backends terminated, a task submitted, every
    slot filled, then SIGCONT): the engine says so in ONE line naming the cause and the fix
    while it keeps trying (the server refuses it again and again: its log says so), and
    once slots free up it runs the queued task by itself and says so once."""
    from support.cluster_support import postgres_executor

    with postgres_executor(max_connections=12) as (dsn, pg), engines(tmp_path, dsn, 1) as hosts:
        setup, engine = hosts["h0"], ENGINES[hosts["h0"].root]
        wait_for(lambda: _by_role(dsn).get("supervise:h0:listen"), timeout=90)
        refused = Path(pg.logfile)
        os.kill(engine.pid, signal.SIGSTOP)
        try:
            named = "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s"
            pids = [r[0] for r in rows(dsn, named, "supervise:h0:%")]
            for pid in pids:
                rows(dsn, "SELECT pg_terminate_backend(%s)", pid)
            wait_for(lambda: not _by_role(dsn), timeout=60)
            task = _submit(dsn, setup, "queued", "exit: 0")
            held = _fill(dsn)
        finally:
            os.kill(engine.pid, signal.SIGCONT)
        try:
            log = setup.root / "engine.log"
            wait_for(lambda: "no connection slot left" in log.read_text(), timeout=30)
            # the engine tried again and again meanwhile (the server logged each refusal)
            wait_for(lambda: refused.read_text().count("too many clients") >= 4, timeout=40)
        finally:
            for conn in held:
                conn.close()
        done = "SELECT state FROM supervise_tasks WHERE id = %s"
        wait_for(lambda: rows(dsn, done, task) == [("completed",)], timeout=60)
        text = log.read_text()
        print(text)
        assert text.count("no connection slot left") == 1
        assert "max_connections" in text and "pooler" in text
        assert text.count("database unreachable") <= 1  # the LISTEN connection ended first
        assert text.count("database answering again") == 1
        assert "Traceback" not in text


@given(
    alive=st.integers(min_value=-3, max_value=10_000),
    slots=st.integers(min_value=0, max_value=100_000),
    reserved=st.integers(min_value=0, max_value=100),
)
def test_the_burst_is_the_engines_share_of_the_slots(alive: int, slots: int, reserved: int) -> None:
    """The pool's burst is within [POOL_MIN, POOL_MAX] whatever the server says, and
    wherever the slots allow two per engine, the fleet's engines at their burst (and one
    LISTEN each) leave CLI_HEADROOM slots free."""
    from supervisor.cluster.connections import CLI_HEADROOM, POOL_MAX, POOL_MIN, burst_size

    size = burst_size(alive, slots, reserved)
    assert POOL_MIN <= size <= POOL_MAX
    hosts, free = max(1, alive), slots - reserved - CLI_HEADROOM
    if free >= 2 * hosts:
        assert hosts * (size + 1) <= free
    if free >= (POOL_MAX + 1) * hosts:
        assert size == POOL_MAX


def test_a_large_fleet_shrinks_every_pools_burst(tmp_path: Path) -> None:
    """With 40 more hosts alive (rows of hosts that beat, as a large fleet's), the engine's
    next heartbeat sizes its pool to its share of PostgreSQL's default 100 slots: 1
    connection, said in one line; four tasks at once then borrow that one (never more than
    one pooled connection); when the fleet is small again, the burst is back to 4."""
    from support.cluster_support import postgres_executor

    from supervisor.cluster.connections import POOL_MAX

    with (
        postgres_executor(max_connections=100) as (dsn, _),
        engines(tmp_path, dsn, count=1, max_concurrent=4) as hosts,
    ):
        setup = hosts["h0"]
        wait_for(lambda: _by_role(dsn).get("supervise:h0:listen"), timeout=90)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for i in range(40):
                conn.execute(
                    "INSERT INTO supervise_hosts (host_id, capacity, host_timeout, on_host_lost) "
                    "VALUES (%s, 2, 3600, 'report')",
                    (f"big{i}",),
                )
        log = setup.root / "engine.log"
        shrunk = "the pool opens at most 1 connection(s): 41 host(s) alive"
        wait_for(lambda: shrunk in log.read_text(), timeout=30)
        tasks = [_submit(dsn, setup, f"t{i}", "sleep: 2\nexit: 0") for i in range(4)]
        seen = []
        ended = "SELECT count(*) FROM supervise_tasks WHERE state = 'completed'"
        while rows(dsn, ended) != [(len(tasks),)]:
            seen.append(_by_role(dsn).get("supervise:h0:pool", 0))
            assert len(seen) < 2000, "the four tasks did not end"
        assert max(seen) <= 1, seen
        rows(dsn, "DELETE FROM supervise_hosts WHERE host_id LIKE 'big%%' RETURNING 1")
        grown = f"the pool opens at most {POOL_MAX} connection(s): 1 host(s) alive"
        wait_for(lambda: grown in log.read_text(), timeout=30)
        assert "Traceback" not in log.read_text()


def test_a_full_host_listens_on_its_own_channel_only() -> None:
    """The LISTEN connection's channels: the host's own and the shared queues' while the
    host has a free slot; its own only while it is full (a submit wakes only the hosts that
    can take it); back when a slot frees."""
    import asyncio

    from supervisor.cluster.connections import SharedConnector

    sent: list[str] = []

    class Conn:
        async def execute(self, statement: Any) -> None:
            sent.append(statement.as_string(None))

    full = [False]
    connector = SharedConnector.__new__(SharedConnector)
    connector.host_channel, connector.full = "procrastinate_queue_v1#host.h0", lambda: full[0]
    heard: set[str] = set()
    shared = ["procrastinate_queue_v1#supervise"]

    async def look() -> list[str]:
        sent.clear()
        await connector._listen_to(Conn(), heard, shared)  # type: ignore[arg-type]
        return list(sent)

    assert asyncio.run(look()) == [
        'LISTEN "procrastinate_queue_v1#host.h0";',
        'LISTEN "procrastinate_queue_v1#supervise";',
    ]
    full[0] = True
    assert asyncio.run(look()) == ['UNLISTEN "procrastinate_queue_v1#supervise";']
    assert asyncio.run(look()) == []
    full[0] = False
    assert asyncio.run(look()) == ['LISTEN "procrastinate_queue_v1#supervise";']


def test_a_call_that_began_during_an_outage_does_not_open_another(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The writer's wait for a pooled connection (10 s) began during an outage and failed
    just after the LISTEN connection saw the database answer: one outage, one pair of lines
    (CI once logged a second pair in test_cluster_restart's must-show)."""
    import time

    import psycopg

    from supervisor.cluster.connections import Outage

    outage = Outage()
    with caplog.at_level("WARNING", logger="supervise.cluster"):
        outage.failed(psycopg.OperationalError("server closed the connection"), "the LISTEN")
        began = time.monotonic()  # the writer starts waiting for a connection
        outage.ok()
        outage.failed(psycopg.OperationalError("couldn't get a connection"), "the writer", began)
        assert outage.since is None and outage.count == 1
        outage.failed(psycopg.OperationalError("down again"), "the writer", time.monotonic())
    lines = [r.getMessage() for r in caplog.records]
    assert sum("database unreachable" in line for line in lines) == 2, lines
    assert sum("answering again" in line for line in lines) == 1, lines
    assert "down again" in lines[-1]
