"""Issue 25, part 5: a cleanly stopped host keeps its tasks for ``[cluster]
stopped_host_grace`` seconds (:data:`supervisor.config.cluster.STOPPED_HOST_GRACE` by
default), then the sweeper applies its ``on_host_lost`` as for a lost host (rule (e) of
:mod:`supervisor.cluster.sweeper`); its agents stop before that (the released lease names
the seconds they may run on: :mod:`supervisor.cluster.lease`, the wrapper's step 6).
Real PostgreSQL; the wrapper's side and a stopped host's task restarted elsewhere are in
tests/test_cluster_fence.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Setup
from hypothesis import given
from hypothesis import strategies as st
from support import cluster_hosts
from support.cluster_engines import rows, supervise
from support.cluster_hosts import state_of

from supervisor.cluster.sweeper import HostRow, gone

psycopg = pytest.importorskip("psycopg")

server, dsn = cluster_hosts.server, cluster_hosts.dsn  # pytest fixtures, found by name


@given(
    st.sampled_from(["alive", "stopped", "dead"]),
    st.one_of(st.none(), st.floats(0, 1000)),
    st.one_of(st.none(), st.floats(0.001, 1000)),
)
def test_a_host_is_given_up_when_dead_or_stopped_past_its_grace(
    state: str, stopped_s: float | None, grace: float | None
) -> None:
    row = HostRow("h", state, 1.0, 30.0, "report", stopped_s, grace)
    past = stopped_s is not None and grace is not None and stopped_s > grace
    assert gone(row) == (state == "dead" or (state == "stopped" and past))


def _stopped_host(conn: Any, host_id: str, grace: float | None, ago: float, mode: str) -> None:
    conn.execute(
        "INSERT INTO supervise_hosts (host_id, capacity, state, stopped_at, heartbeat_at, "
        "host_timeout, on_host_lost, stopped_host_grace) VALUES (%s, 2, 'stopped', "
        "now() - make_interval(secs => %s), now() - make_interval(secs => %s), 3, %s, %s)",
        (host_id, ago, ago, mode, grace),
    )
    conn.execute(
        "INSERT INTO supervise_tasks (id, name, spec, queue, state, owner_host, generation, "
        "session_id) VALUES (%s, %s, '{}', 'supervise', 'running', %s, 1, 's-1')",
        (f"t-{host_id}", f"t-{host_id}", host_id),
    )


def test_the_sweeper_gives_up_a_stopped_hosts_tasks_after_its_own_grace(dsn: str) -> None:
    """Four stopped hosts, each with a running task: past its grace in report mode (the
    task is host_lost), past it in restart mode (queued again, at the requeue priority),
    within its grace, and with no grace declared (a host of an earlier version: for
    ever). The hosts stay ``stopped``; a second sweep does nothing more."""
    from supervisor.cluster import sweeper

    with psycopg.connect(dsn, autocommit=True) as conn:
        _stopped_host(conn, "report", 5.0, 60, "report")
        _stopped_host(conn, "restart", 5.0, 60, "restart")
        _stopped_host(conn, "within", 600.0, 60, "restart")
        _stopped_host(conn, "old", None, 6000, "restart")
    done = sweeper.sweep_once(dsn)
    assert (done.dead, done.lost, done.restarted) == ((), ("t-report",), ("t-restart",))
    assert state_of(dsn, "t-report") == ("host_lost", "report", 2)
    assert state_of(dsn, "t-restart") == ("queued", None, 2)
    assert state_of(dsn, "t-within") == ("running", "within", 1)
    assert state_of(dsn, "t-old") == ("running", "old", 1)
    assert rows(dsn, "SELECT DISTINCT state FROM supervise_hosts") == [("stopped",)]
    assert rows(dsn, "SELECT queueing_lock, priority FROM procrastinate_jobs") == [
        ("t-restart", sweeper.REQUEUE_PRIORITY)
    ]
    again = sweeper.sweep_once(dsn)
    assert (again.lost, again.restarted, again.requeued) == ((), (), ())


def test_stopped_host_grace_must_be_positive_seconds(setup: Setup) -> None:
    for bad in (0, -5, "soon", float("inf"), float("nan"), 1e12):
        profile = setup.write_profile(extra={"cluster": {"stopped_host_grace": bad}})
        result = supervise("validate", str(profile))
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "cluster.stopped_host_grace" in lines[0], result.stderr


def test_a_grace_shorter_than_the_fence_is_one_line(setup: Setup) -> None:
    """With the default host_timeout 30 s and heartbeat 5 s a stopped host's agents take up
    to the fence's bound, 19.5 s, to stop: a 10 s grace could restart a task elsewhere while
    it still runs, so it is refused in one line that names the key and the bound."""
    profile = setup.write_profile(extra={"cluster": {"stopped_host_grace": 10}})
    result = supervise("validate", str(profile))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "stopped_host_grace (10 s)" in lines[0], result.stderr
    assert "19.5 s" in lines[0] and str(profile) in lines[0]
    fine = setup.write_profile(extra={"cluster": {"stopped_host_grace": 19.5}})
    assert supervise("validate", str(fine)).returncode == 0


def test_four_sweeps_at_once_give_a_stopped_hosts_task_up_once(dsn: str) -> None:
    """Sweeps racing (threads) on a host stopped past its grace: one restart, one event,
    one waiting job, generation moved once."""
    import threading

    from supervisor.cluster import sweeper

    with psycopg.connect(dsn, autocommit=True) as conn:
        _stopped_host(conn, "gone", 1.0, 60, "restart")
    barrier, results = threading.Barrier(4), []

    def run() -> None:
        barrier.wait()
        results.append(sweeper.sweep_once(dsn))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(r.restarted for r in results) == [(), (), (), ("t-gone",)]
    assert state_of(dsn, "t-gone") == ("queued", None, 2)
    assert rows(dsn, "SELECT count(*) FROM supervise_events") == [(1,)]
    assert rows(dsn, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'") == [(1,)]
