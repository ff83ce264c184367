"""Retention (issue 25 part 4): ``supervise cluster prune --older-than D`` and the
sweeper's periodic prune (``[cluster] prune_after``), on a real PostgreSQL
(tests/support/cluster_support.py) through the real CLI.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Iterator

import pytest
from support.cluster_engines import dsn, rows, server, supervise

from supervisor.taskdir.states import FINAL, FleetState

psycopg = pytest.importorskip("psycopg")
__all__ = ["dsn", "server"]  # the fixtures, imported for this module

DAY = 86400


@pytest.fixture
def db(dsn: str) -> Iterator[str]:
    """A database after ``cluster init``."""
    done = supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn})
    assert done.returncode == 0, done.stderr
    yield dsn


def _task(
    conn: psycopg.Connection,
    state: str,
    age_days: float,
    owner: str | None = None,
    host: str | None = None,
    events: int = 2,
) -> str:
    """A task row in ``state``, last changed ``age_days`` ago, with ``events`` events, one
    control request and one ended procrastinate job (and a waiting one when queued)."""
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    conn.execute(
        "INSERT INTO supervise_tasks (id, name, spec, queue, state, owner_host, host, "
        "updated_at) VALUES (%s, 't', '{}', 'supervise', %s, %s, %s, "
        "now() - make_interval(secs => %s))",
        (task_id, state, owner, host, age_days * DAY),
    )
    for n in range(events):
        conn.execute(
            "INSERT INTO supervise_events (transition_id, task_id, host_id, generation, event) "
            "VALUES (%s, %s, 'h', 1, 'launched')",
            (f"{task_id}:{n}", task_id),
        )
    conn.execute(
        "INSERT INTO supervise_controls (task_id, host_id, verb) VALUES (%s, 'h', 'stop')",
        (task_id,),
    )
    status = "todo" if state == "queued" else "failed"
    conn.execute(
        "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, queueing_lock) "
        "VALUES ('supervise', 'supervise.run_task', %s, %s, %s)",
        (json.dumps({"task_id": task_id}), status, task_id if status == "todo" else None),
    )
    return task_id


def _host(conn: psycopg.Connection, host_id: str, state: str, age_days: float) -> None:
    conn.execute(
        "INSERT INTO supervise_hosts (host_id, capacity, state, heartbeat_at) "
        "VALUES (%s, 1, %s, now() - make_interval(secs => %s))",
        (host_id, state, age_days * DAY),
    )


def _ids(dsn: str) -> set[str]:
    return {r[0] for r in rows(dsn, "SELECT id FROM supervise_tasks")}


def test_prune_removes_ended_tasks_their_rows_and_retired_hosts_only(db: str) -> None:
    """Old ended tasks go with their events, controls and ended jobs; live, queued and recent
    ones stay, whatever their age; a retired host goes, an alive one (however silent) and a
    dead one that still owns a task stay. ``--dry-run`` counts the same and removes nothing."""
    with psycopg.connect(db, autocommit=True) as conn:
        old = [_task(conn, str(s), 40) for s in sorted(FINAL)]
        live = [_task(conn, s, 40, owner="busy") for s in ("running", "claimed", "waiting")]
        queued = _task(conn, "queued", 40)
        recent = _task(conn, "completed", 1)
        _host(conn, "retired", "stopped", 40)
        _host(conn, "gone", "dead", 40)
        _host(conn, "busy", "dead", 40)  # owns live tasks
        _host(conn, "silent", "alive", 40)  # never removed: the sweeper decides
        _host(conn, "fresh", "stopped", 1)
    env = {"SUPERVISE_CLUSTER_DSN": db}
    dry = supervise("cluster", "prune", "--older-than", "30d", "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    expected = {"tasks": 6, "events": 12, "controls": 6, "jobs": 6, "hosts": 2}
    assert json.loads(dry.stdout) == {"dry_run": True, "older_than_s": 30 * DAY, **expected}
    assert len(_ids(db)) == 11
    done = supervise("cluster", "prune", "--older-than", "30d", "--batch", "4", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "removed 6 tasks, 12 events, 6 control requests, 6 jobs, 2 hosts "
        "(ended or gone for over 30d)\n"
    )
    assert _ids(db) == {*live, queued, recent}
    assert not set(old) & {r[0] for r in rows(db, "SELECT task_id FROM supervise_events")}
    assert rows(db, "SELECT count(*) FROM procrastinate_jobs") == [(5,)]
    hosts = {r[0] for r in rows(db, "SELECT host_id FROM supervise_hosts")}
    assert hosts == {"busy", "silent", "fresh"}
    again = supervise("cluster", "prune", "--older-than", "30d", "--json", env=env)
    assert json.loads(again.stdout)["tasks"] == 0


def test_prune_final_states_are_fleetstates_final(db: str) -> None:
    """The states migration 0007's function removes are FINAL (one list, checked here)."""
    [(source,)] = rows(db, "SELECT prosrc FROM pg_proc WHERE proname = 'supervise_prune'")
    listed = re.search(r"state IN \(([^)]*)\)", source)
    assert listed is not None
    assert set(re.findall(r"'([a-z_]+)'", listed.group(1))) == {str(s) for s in FINAL}
    assert FleetState.HOST_LOST in FINAL


def test_two_prunes_at_once_split_the_work(db: str) -> None:
    """A prune whose batch is still open (its rows locked) does not block a second one,
    which skips those rows: together they remove each row once, with no error."""
    from supervisor.cluster.retention import prune_some

    with psycopg.connect(db, autocommit=True) as conn:
        for _ in range(10):
            _task(conn, "completed", 40, events=1)
    bounded = "-c statement_timeout=5000"  # a prune that waited on the lock fails, not hangs
    with (
        psycopg.connect(db) as first,
        psycopg.connect(db, autocommit=True, options=bounded) as second,
    ):
        held = first.execute("SELECT tasks FROM supervise_prune(%s, 4)", (DAY,)).fetchone()
        assert held == (4,)  # uncommitted: its 4 rows are locked
        other = prune_some(second, DAY, batch=100)
        assert (other.tasks, other.events) == (6, 6)
        first.commit()
    assert _ids(db) == set()


def test_prunes_at_once_from_the_cli_count_every_row_once(db: str) -> None:
    """Three ``cluster prune`` processes at once over 300 old tasks in batches of 7: no
    error, and their counts add up to 300."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO supervise_tasks (id, name, spec, queue, state, updated_at) "
            "SELECT 'x-' || n, 'x', '{}', 'supervise', 'failed', now() - interval '2 days' "
            "FROM generate_series(1, 300) n"
        )
    results: list[dict[str, int]] = []

    def run() -> None:
        done = supervise(
            "cluster",
            "prune",
            "--older-than",
            "1d",
            "--batch",
            "7",
            "--json",
            env={"SUPERVISE_CLUSTER_DSN": db},
        )
        assert done.returncode == 0, done.stderr
        results.append(json.loads(done.stdout))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3
    assert sum(r["tasks"] for r in results) == 300
    assert _ids(db) == set()


def test_the_sweep_prunes_when_due(db: str) -> None:
    """``sweep_once`` with a :class:`Schedule` (``prune_after``) prunes one batch after its
    commit, then not again until due; with no ``prune_after`` it never prunes."""
    from supervisor.cluster.retention import Schedule
    from supervisor.cluster.sweeper import sweep_once

    with psycopg.connect(db, autocommit=True) as conn:
        first = [_task(conn, "completed", 3) for _ in range(3)]
    sweep_once(db, prune=Schedule(None))
    assert _ids(db) == set(first)
    schedule = Schedule(2 * DAY)
    assert sweep_once(db, prune=schedule).swept
    assert _ids(db) == set()
    with psycopg.connect(db, autocommit=True) as conn:
        later = _task(conn, "completed", 3)
    sweep_once(db, prune=schedule)  # not due for PRUNE_EVERY seconds
    assert _ids(db) == {later}


def test_prune_after_is_a_cluster_key() -> None:
    from supervisor.config.cluster import ClusterSpec

    assert ClusterSpec().prune_after is None
    assert ClusterSpec(prune_after=30 * DAY).prune_after == 30 * DAY
    for bad in (0, -1, "30d", float("nan")):
        with pytest.raises(ValueError):
            ClusterSpec(prune_after=bad)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--older-than", "soon"], "'soon' is not a duration"),
        (["--older-than", "36501d"], "give at most 100 years"),
        (["--older-than", "1d", "--batch", "0"], "--batch: give 1 to 10000"),
    ],
)
def test_bad_prune_arguments_are_one_line(args: list[str], said: str) -> None:
    done = supervise("cluster", "prune", *args, env={"SUPERVISE_CLUSTER_DSN": "host=/nowhere"})
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr


def test_a_periodic_prune_the_login_may_not_run_is_one_warning(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An engine login without EXECUTE on supervise_prune (roles.sql not re-applied): the
    sweeper's prune logs one line and waits a full period; nothing is removed."""
    from supervisor.cluster.retention import Schedule

    name = f"u_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN")
        task = _task(conn, "completed", 3)
    schedule = Schedule(DAY, every=3600)
    with psycopg.connect(db.replace("user=postgres", f"user={name}")) as conn:
        assert schedule.run(conn) is None
        assert schedule.run(conn) is None  # not due again: no second warning
    warnings = [r.getMessage() for r in caplog.records if "periodic prune failed" in r.message]
    assert len(warnings) == 1 and "permission denied for function supervise_prune" in warnings[0]
    assert _ids(db) == {task}
