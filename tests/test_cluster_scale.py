"""A fleet that scales (issue 25, part 7): many engines, as separate ``supervise run``
processes with their own state dirs, tmux sockets, host ids and logins, against one
PostgreSQL at its default ``max_connections`` (100), the fake agent, 10 short tasks per
engine (``tests/support/cluster_scale.py``).

The count is :data:`~support.cluster_scale.DEFAULT_HOSTS` (12) here, which a 2-core CI
machine runs beside the rest of the suite and which already exceeds 100 connections at 10
per engine (issue 25: twelve idle engines used 97 of 100); ``SUPERVISE_SCALE_HOSTS=40`` runs
the issue's full count; ``benchmarks/cluster.py --hosts 40`` measures it
(benchmarks/README, "Issue 25").
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest
from conftest import wait_for
from support.cluster_scale import (
    HOSTS_ENV,
    MAX_STEADY,
    ScaleFleet,
    connection_figures,
    default_postgres,
    engine_connections,
    idle_connections,
    scale_fleet,
    scale_hosts,
    wait_all_ended,
)

psycopg = pytest.importorskip("psycopg")

#: Tasks per engine.
PER_ENGINE = 10


@pytest.mark.slow
def test_many_engines_on_a_default_postgres_lose_double_and_stall_nothing() -> None:
    """N engines, 10 short tasks each: every task ends ``completed``, each launched once
    fleet-wide (the hosts' local event logs and ``supervise_events``), dispatch moves until
    the last one (no state count frozen for 90 s), no engine dies, and once idle again each
    engine holds at most 2 connections: the median of its samples over 3 heartbeats, taken
    once the engines closed what the burst opened (a pool shrinks over time; at most
    ``SETTLE`` seconds, the time it took printed, never asserted)."""
    count = scale_hosts()
    with (
        default_postgres() as dsn,
        scale_fleet(dsn, count, slots=2, heartbeat=1.0, host_timeout=5.0) as fleet,
    ):
        ids = [fleet.submit("exit: 0") for _ in range(PER_ENGINE * count)]
        final = wait_all_ended(fleet, len(ids))
        assert final == {"completed": len(ids)}, final
        wait_for(
            lambda: (
                fleet.rows("SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'")
                == [(0,)]
            ),
            timeout=60,
        )
        assert fleet.dead_engines() == []
        launched = fleet.launches()
        doubled = {t: hosts for t, hosts in launched.items() if len(hosts) != 1}
        assert doubled == {}, doubled
        assert sorted(launched) == sorted(ids)
        events = fleet.rows(
            "SELECT task_id, count(*) FROM supervise_events "
            "WHERE event = 'launched' GROUP BY task_id",
        )
        assert dict(events) == dict.fromkeys(ids, 1)
        figures = idle_connections(fleet)
        print(f"{count} idle engines: connections {figures}")
        over = {h: n for h, n in figures["per_engine_steady"].items() if n > MAX_STEADY}
        assert over == {}, f"engines over {MAX_STEADY} steady connections: {over}"


@pytest.mark.parametrize("value", ["0", "-3", "abc", "1e3", "4.5", "\u0662"])
def test_a_bad_engine_count_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """``SUPERVISE_SCALE_HOSTS`` that is not a positive whole number (zero, negative, text,
    a float, a non-ASCII digit) names the variable and the fix; unset or blank: the default."""
    monkeypatch.setenv(HOSTS_ENV, value)
    with pytest.raises(ValueError, match=f"^{HOSTS_ENV}=.*give a positive number of engines$"):
        scale_hosts()
    monkeypatch.setenv(HOSTS_ENV, " 7 ")
    assert scale_hosts() == 7
    monkeypatch.setenv(HOSTS_ENV, "")
    assert scale_hosts(default=5) == 5


def test_a_stalled_dispatch_is_reported_with_the_rows() -> None:
    """No engine runs: the queued task never moves, and the wait says so (the counts, the
    jobs doing) once nothing changed for ``stall`` seconds, instead of waiting forever."""
    with default_postgres() as dsn, tempfile.TemporaryDirectory() as tmp:
        fleet = ScaleFleet(Path(tmp), dsn, 1)  # not started
        fleet.submit("exit: 0")
        with pytest.raises(AssertionError, match=r"stalled.*\{'queued': 1\}.*doing: 0"):
            wait_all_ended(fleet, 1, stall=1.0)


def test_the_harness_cleans_up_when_the_block_fails() -> None:
    """The block raises with one engine already SIGKILLed (a host lost halfway): every
    engine is gone (by PID), no tmux server is left on the hosts' sockets, the hosts'
    folder is removed; then the server is stopped and its folder removed. Each engine's
    sessions are counted under its own login meanwhile."""
    seen: dict = {}
    with default_postgres() as dsn:
        with pytest.raises(RuntimeError, match="boom"), scale_fleet(dsn, 2) as fleet:
            seen.update(
                root=fleet.root,
                pids=[p.pid for p in fleet.procs.values()],
                sockets=[s.socket_name for s in fleet.hosts.values()],
            )
            with psycopg.connect(dsn, autocommit=True) as conn:
                wait_for(
                    lambda: all(engine_connections(conn, fleet.logins)[h] for h in ("h0", "h1")),
                    timeout=30,
                )
            fleet.kill("h1")
            raise RuntimeError("boom")
        assert not seen["root"].exists()
        assert [pid for pid in seen["pids"] if psutil.pid_exists(pid)] == []
        for socket in seen["sockets"]:
            listed = subprocess.run(["tmux", "-L", socket, "ls"], capture_output=True, check=False)
            assert listed.returncode != 0
    folder = Path(dsn.split()[0].removeprefix("host="))
    assert not folder.exists()


def test_steady_is_an_engines_median_and_peak_its_most() -> None:
    """A connection opened now and then (a claim, a sweep) is a peak, not steady; an engine
    whose sessions are all gone counts 0; the fleet's total is per sample."""
    samples = [
        {"h0": 2, "h1": 9, "other": 1},
        {"h0": 3, "h1": 9, "other": 0},
        {"h0": 2, "h1": 10, "other": 0},
        {"h0": 2, "h1": 0, "other": 2},
    ]
    figures = connection_figures(samples, ["h0", "h1"])
    assert figures["per_engine_steady"] == {"h0": 2, "h1": 9}
    assert figures["per_engine_peak"] == {"h0": 3, "h1": 10}
    assert (figures["total_steady"], figures["total_peak"]) == (11, 12)
    assert (figures["engine_steady_max"], figures["engine_peak_max"]) == (9, 10)
    assert figures["other_peak"] == 2
    with pytest.raises(ValueError, match="no connection samples"):
        connection_figures([], ["h0"])
