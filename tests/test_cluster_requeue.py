"""Issue 25, part 3: restarted and requeued work keeps its place. A lost host's tasks (and
any task put back to ``queued``) run ahead of new submissions, in submission order
(:data:`supervisor.cluster.sweeper.REQUEUE_PRIORITY`; procrastinate fetches ``priority
DESC, id ASC``). Real PostgreSQL (``tests/support/cluster_support.py``): the sweep's jobs
fetched as a worker fetches them, then real engines with the fake agent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for
from support import cluster_hosts
from support.cluster_engines import rows, start_engine
from support.cluster_hosts import (
    HOST_TIMEOUT,
    cleanup,
    host,
    kill_pid,
    lose_machine,
    state_of,
    submit,
)

psycopg = pytest.importorskip("psycopg")

server, dsn = cluster_hosts.server, cluster_hosts.dsn  # pytest fixtures, found by name


def _up(dsn: str) -> None:
    """Silence counts only while the server has been up (``dead_hosts``' ``watched``)."""
    up = "SELECT now() - pg_postmaster_start_time() > interval '3 s'"
    wait_for(lambda: rows(dsn, up)[0][0], timeout=60)


def _task(conn: Any, task_id: str, state: str, minute: int, owner: str | None = None) -> None:
    """A task row submitted ``minute`` minutes after midnight (its submission order)."""
    conn.execute(
        "INSERT INTO supervise_tasks (id, name, spec, queue, state, owner_host, generation, "
        "submitted_at) VALUES (%s, %s, '{}', 'supervise', %s, %s, %s, "
        "'2026-01-01'::timestamptz + make_interval(mins => %s))",
        (task_id, task_id, state, owner, 0 if owner is None else 1, minute),
    )


def _defer(conn: Any, task_id: str, priority: int = 0) -> None:
    conn.execute(
        "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW('supervise', 'supervise.run_task', %s, "
        "NULL, %s, '{}'::jsonb, NULL::timestamptz)::procrastinate_job_to_defer_v1])",
        (priority, task_id),
    )


def _fetch_order(dsn: str) -> list[str]:
    """The task ids (queueing locks) of every waiting job, in the order a worker of queue
    ``supervise`` fetches them (procrastinate's own ``procrastinate_fetch_job_v2``)."""
    order = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            (lock,) = conn.execute(
                "SELECT queueing_lock FROM procrastinate_fetch_job_v2(ARRAY['supervise'], NULL)"
            ).fetchone()
            if lock is None:
                return order
            order.append(lock)


def test_a_lost_hosts_tasks_are_fetched_before_the_backlog_in_submission_order(
    dsn: str,
) -> None:
    """A dead host (restart) held two running tasks and one claimed, submitted at minutes
    5, 1 and 3; a backlog of four tasks submitted before and after them waits at priority
    0. After one sweep a worker fetches the lost host's three first, oldest submission
    first, then the backlog in its own order. Failed before the change: the backlog came
    first (the new jobs were deferred at priority 0 behind it)."""
    from supervisor.cluster import sweeper

    _up(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO supervise_hosts (host_id, capacity, heartbeat_at, host_timeout, "
            "on_host_lost) VALUES ('gone', 3, now() - interval '1 minute', 3, 'restart')"
        )
        _task(conn, "late", "running", 5, owner="gone")
        _task(conn, "early", "running", 1, owner="gone")
        _task(conn, "mid", "claimed", 3, owner="gone")
        for n, minute in enumerate((0, 2, 4, 6)):
            _task(conn, f"backlog-{n}", "queued", minute)
            _defer(conn, f"backlog-{n}")
    result = sweeper.sweep_once(dsn)
    assert result.dead == ("gone",)
    assert sorted(result.restarted + result.requeued) == ["early", "late", "mid"]
    priorities = dict(rows(dsn, "SELECT queueing_lock, priority FROM procrastinate_jobs"))
    assert {priorities[t] for t in ("early", "mid", "late")} == {sweeper.REQUEUE_PRIORITY}
    assert _fetch_order(dsn) == ["early", "mid", "late", *(f"backlog-{n}" for n in range(4))]


def test_a_job_already_waiting_for_a_requeued_task_is_raised_not_doubled(dsn: str) -> None:
    """A task whose job rule (d) had retried (waiting at priority 0) when its host turned
    dead keeps that one job, raised to the requeue priority: fetched before the backlog."""
    from supervisor.cluster import sweeper

    _up(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO supervise_hosts (host_id, capacity, heartbeat_at, host_timeout, "
            "on_host_lost) VALUES ('gone', 1, now() - interval '1 minute', 3, 'restart')"
        )
        _task(conn, "backlog", "queued", 0)
        _defer(conn, "backlog")
        _task(conn, "lost", "running", 1, owner="gone")
        _defer(conn, "lost")  # retried by rule (d) a sweep before
    assert sweeper.sweep_once(dsn).restarted == ("lost",)
    assert rows(dsn, "SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock = 'lost'") == [
        (1,)
    ]
    assert _fetch_order(dsn) == ["lost", "backlog"]


def test_a_declined_claim_keeps_a_requeued_tasks_place(dsn: str) -> None:
    """``defer_again`` (an earlier copy still runs here) gives a task claimed before
    (generation > 0) the requeue priority, and a never claimed one priority 0."""
    from supervisor.cluster.ownership import defer_again
    from supervisor.cluster.submit import TASK_NAME
    from supervisor.cluster.sweeper import REQUEUE_PRIORITY

    with psycopg.connect(dsn, autocommit=True) as conn:
        _task(conn, "fresh", "queued", 0)
        _task(conn, "again", "queued", 1)
        conn.execute("UPDATE supervise_tasks SET generation = 2 WHERE id = 'again'")
        defer_again(conn, TASK_NAME, "fresh", 0.0)
        defer_again(conn, TASK_NAME, "again", 0.0)
    assert dict(rows(dsn, "SELECT queueing_lock, priority FROM procrastinate_jobs")) == {
        "fresh": 0,
        "again": REQUEUE_PRIORITY,
    }


def test_requeue_priority_is_between_submissions_and_holds() -> None:
    """Above a submission's job (0), below the hold jobs a restarted worker fetches first."""
    from supervisor.cluster.intake import HOLD_PRIORITY
    from supervisor.cluster.sweeper import REQUEUE_PRIORITY

    assert 0 < REQUEUE_PRIORITY < HOLD_PRIORITY


# ---------------------------------------------------------------- real engines


@pytest.fixture
def fleet(tmp_path: Path, dsn: str) -> Iterator[dict[str, Any]]:
    h0 = host(tmp_path, dsn, "h0", max_concurrent=2, on_host_lost="restart")
    # h1's longer host_timeout is the fleet's largest: dead workers' jobs turn stale (rule
    # (d) retries them, keeping their old place) long after h0 is declared dead, so h0's
    # tasks get the sweep's new jobs, the path that queued them behind the backlog.
    h1 = host(tmp_path, dsn, "h1", max_concurrent=1, host_timeout=30.0)
    engines: dict[str, Any] = {}
    try:
        yield {"h0": h0, "h1": h1, "engines": engines}
    finally:
        cleanup([h0, h1], list(engines.values()))


def _agent_pid(project: Path, other_than: int = 0) -> int:
    """The fake agent's PID in ``project`` once it is not ``other_than`` (a new run)."""
    file = project / "agent_pid"

    def pid() -> int:
        try:
            return int(file.read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    wait_for(lambda: pid() not in (0, other_than), timeout=30)
    return pid()


def test_a_lost_hosts_tasks_run_first_on_a_full_fleet(
    tmp_path: Path, dsn: str, fleet: dict[str, Any]
) -> None:
    """h0 (restart) runs A then B; h1's one slot holds a blocker; three short tasks wait
    behind them. h0 is lost (SIGKILL of the engine, its tmux server and agents); once the
    sweeper put A and B back, h1's slot frees (its agent killed by PID) and h1 launches A,
    then B, then the backlog: the launched events say so (no clock involved)."""
    h0, h1, engines = fleet["h0"], fleet["h1"], fleet["engines"]
    projects = tmp_path / "projects"
    projects.mkdir()
    engines["h0"] = start_engine(h0)
    wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 30)
    a = submit(dsn, h0, "a", "print: a\nsleep: 120\nexit: 0", projects / "a")
    b = submit(dsn, h0, "b", "print: b\nsleep: 120\nexit: 0", projects / "b")
    wait_for(lambda: {state_of(dsn, t)[:2] for t in (a, b)} == {("running", "h0")}, 30)
    engines["h1"] = start_engine(h1)
    wait_for(lambda: len(rows(dsn, "SELECT 1 FROM supervise_hosts")) == 2, timeout=30)
    blocker = submit(dsn, h1, "blk", "print: blk\nsleep: 120\nexit: 0", projects / "blk",
                     host="h1")  # fmt: skip
    wait_for(lambda: state_of(dsn, blocker)[:2] == ("running", "h1"), timeout=30)
    backlog = [submit(dsn, h1, f"q{n}", "exit: 0", projects / f"q{n}") for n in range(3)]
    assert {state_of(dsn, t)[0] for t in backlog} == {"queued"}
    old = {t: _agent_pid(projects / t) for t in ("a", "b")}
    lose_machine(h0, engines.pop("h0"), [projects / "a" / "agent_pid",
                                         projects / "b" / "agent_pid"])  # fmt: skip
    wait_for(lambda: {state_of(dsn, t) for t in (a, b)} == {("queued", None, 2)},
             timeout=HOST_TIMEOUT + 30)  # fmt: skip
    kill_pid(_agent_pid(projects / "blk"))
    for name, task in (("a", a), ("b", b)):
        wait_for(lambda task=task: state_of(dsn, task)[:2] == ("running", "h1"), timeout=30)
        kill_pid(_agent_pid(projects / name, other_than=old[name]))
    done = "SELECT count(*) FROM supervise_tasks WHERE state = 'completed'"
    wait_for(lambda: rows(dsn, done) == [(3,)], timeout=60)
    launched = rows(dsn, "SELECT task_id FROM supervise_events WHERE host_id = 'h1' "
                         "AND event = 'launched' ORDER BY id")  # fmt: skip
    assert [t for (t,) in launched] == [blocker, a, b, *backlog]
