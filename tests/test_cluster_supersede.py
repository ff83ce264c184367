"""Several hosts (issue 15): a host's copy of a task whose row went to a newer generation is
stopped and ends ``superseded`` (never resumed; the database keeps the newer generation's
state), and adopted tasks hold worker slots after a restart. The sweeper is simulated as
its contract says: the row's generation raised, state ``host_lost`` or claimed by another
host. Real PostgreSQL, real ``supervise run`` engines, the fake agent's brain.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import tomli_w
from conftest import Setup, wait_for
from support import cluster_engines
from support.cluster_engines import (
    DOING,
    ENGINES,
    engines,
    rows,
    start_engine,
    stop_engines,
    wait_beats,
)

from supervisor.config import load_profile, load_task

psycopg = pytest.importorskip("psycopg")


# The fixtures of tests/test_cluster.py: a server per module, a fresh database per test.
server, dsn = cluster_engines.server, cluster_engines.dsn


EVENTS = "SELECT generation, event FROM supervise_events WHERE task_id = %s ORDER BY id"
ROW = "SELECT state, owner_host, generation, updated_at FROM supervise_tasks WHERE id = %s"


def _submit(setup: Setup, dsn: str, name: str, prompt: str, **extra: object) -> str:
    from supervisor.cluster.submit import submit

    profile = load_profile(setup.profile)
    file = setup.root / f"{name}.toml"
    file.write_text(tomli_w.dumps(setup.task(name, prompt, **extra)))
    return submit(dsn, profile, load_task(file, profile)).task_id


def _manifest(setup: Setup, task_id: str) -> dict:
    try:
        return json.loads((setup.state / "tasks" / task_id / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}


def _status(setup: Setup, task_id: str) -> str | None:
    return _manifest(setup, task_id).get("status")


def _agent_pid(setup: Setup, task_id: str) -> int:
    """The agent's PID, once its wrapper wrote it."""
    file = setup.state / "tasks" / task_id / "pid"
    wait_for(lambda: file.exists() and file.read_text().strip(), timeout=60)
    return int(file.read_text())


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def _assert_copy_stopped(setup: Setup, task_id: str, pid: int) -> None:
    """Its tmux session and agent are gone, its record says superseded and why."""
    wait_for(lambda: not _alive(pid), timeout=60)
    assert setup.tmux("has-session", "-t", task_id).returncode != 0
    manifest = _manifest(setup, task_id)
    assert manifest["verdict"] == "ABANDONED" and "newer generation" in manifest["summary"]
    events = [e["event"] for e in setup.events(task_id)]
    assert "superseded" in events and "resumed" not in events
    assert "supersede_requested" in events


def test_restarted_engine_stops_a_copy_the_sweeper_took_away(tmp_path: Path, dsn: str) -> None:
    """An engine SIGKILLed while its task runs (tmux keeps it); the sweeper marks the task
    host_lost with a new generation; the engine started again stops its copy (session and
    agent gone), records it superseded, and leaves the database row as the sweeper wrote
    it; a second task whose generation did not move is adopted and reported as before."""
    with engines(tmp_path, dsn, count=1) as hosts:
        setup = hosts["h0"]
        # A stubborn agent: the stop's SIGKILL after its grace period ends it.
        lost = _submit(setup, dsn, "lost", "ignore_term\ntick: 0.5\nsleep: 120\nexit: 0")
        kept = _submit(setup, dsn, "kept", "sleep: 6\nexit: 0")
        running = "SELECT count(*) FROM supervise_tasks WHERE state = 'running'"
        wait_for(lambda: rows(dsn, running) == [(2,)], timeout=30)
        pid = _agent_pid(setup, lost)
        engine = ENGINES[setup.root]
        engine.kill()  # SIGKILL: no clean stop, tmux keeps the sessions
        engine.wait()
        logged = rows(dsn, EVENTS, lost)
        rows(dsn, "UPDATE supervise_tasks SET state = 'host_lost', generation = generation + 1, "
                  "updated_at = now() WHERE id = %s RETURNING id", lost)  # fmt: skip
        swept = rows(dsn, ROW, lost)
        assert _alive(pid)
        ENGINES[setup.root] = start_engine(setup)
        wait_for(lambda: _status(setup, lost) == "superseded", timeout=30)
        _assert_copy_stopped(setup, lost, pid)
        wait_for(lambda: _status(setup, kept) == "completed", timeout=30)
        wait_for(lambda: rows(dsn, ROW, kept)[0][0] == "completed", timeout=60)
        wait_beats(dsn, "h0")  # a few heartbeats: nothing more is written for the lost task
        assert rows(dsn, ROW, lost) == swept
    assert rows(dsn, "SELECT generation, owner_host FROM supervise_tasks WHERE id = %s",
                kept) == [(1, "h0")]  # fmt: skip
    # The lost generation's transitions after the sweep wrote no event row but the stop's.
    assert rows(dsn, EVENTS, lost) == [*logged, (1, "superseded")]
    assert [e for _, e in logged].count("launched") == 1


def test_running_engine_stops_its_copy_within_seconds(tmp_path: Path, dsn: str) -> None:
    """A live engine (partitioned, as the sweeper saw it) whose task was given to another
    host notices with its next heartbeat and stops its copy; its worker slot frees (the
    job ends) and the row keeps the other host's claim."""
    with engines(tmp_path, dsn, count=1) as hosts:
        setup = hosts["h0"]
        task_id = _submit(setup, dsn, "moved", "tick: 0.5\nsleep: 120\nexit: 0")
        running = "SELECT state FROM supervise_tasks WHERE id = %s"
        wait_for(lambda: rows(dsn, running, task_id) == [("running",)], timeout=30)
        pid = _agent_pid(setup, task_id)
        rows(dsn, "UPDATE supervise_tasks SET state = 'claimed', owner_host = 'h9', "
                  "generation = generation + 1, updated_at = now() WHERE id = %s "
                  "RETURNING id", task_id)  # fmt: skip
        taken = rows(dsn, ROW, task_id)
        moved_at = time.monotonic()
        wait_for(lambda: _status(setup, task_id) == "superseded", timeout=60)
        noticed = time.monotonic() - moved_at
        _assert_copy_stopped(setup, task_id, pid)
        print(f"copy stopped and superseded {noticed:.2f} s after its row moved")
        wait_for(lambda: rows(dsn, DOING) == [(0,)], timeout=60)
        wait_beats(dsn, "h0")  # a few heartbeats: nothing more is written for it
        assert rows(dsn, ROW, task_id) == taken
        assert rows(dsn, "SELECT running FROM supervise_hosts") == [(0,)]


def test_adopted_tasks_hold_their_worker_slots(tmp_path: Path, dsn: str) -> None:
    """h0 (max_concurrent 2) restarted while its 2 tasks run: its worker fetches nothing
    new, so 2 tasks submitted meanwhile wait in the database and start on h1 once it is
    up, not queued locally on h0. The holds end with the tasks: no job left doing."""
    go = tmp_path / "go"  # h0's first tasks end when the test says: a loaded machine's
    # slow restarts must not free h0's slots before h1 is up (seen in CI at 10 s)
    with engines(tmp_path, dsn, count=2) as hosts:
        h0, h1 = hosts["h0"], hosts["h1"]
        first = [_submit(h0, dsn, f"a{i}", f"until_file: {go}\nexit: 0", host="h0")
                 for i in range(2)]  # fmt: skip
        running = "SELECT count(*) FROM supervise_tasks WHERE state = 'running' AND " \
                  "owner_host = 'h0'"  # fmt: skip
        wait_for(lambda: rows(dsn, running) == [(2,)], timeout=30)
        stop_engines([ENGINES.pop(h0.root), ENGINES.pop(h1.root)])  # tmux keeps the tasks
        assert rows(dsn, "SELECT count(*) FROM procrastinate_workers") == [(0,)]
        ENGINES[h0.root] = start_engine(h0)
        # h0's task worker, once it runs (the sweeper has no worker since issue 25)
        workers = "SELECT count(*) FROM procrastinate_workers"
        wait_for(lambda: rows(dsn, workers) == [(1,)], timeout=30)
        later = [_submit(h0, dsn, f"b{i}", "sleep: 1\nexit: 0") for i in range(2)]
        wait_beats(dsn, "h0", 4)  # h0's worker listens: without holds it would take both now
        states = "SELECT state, owner_host FROM supervise_tasks WHERE id = ANY(%s)"
        assert rows(dsn, states, later) == [("queued", None)] * 2
        holds = "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'supervise.hold' " \
                "AND status = 'doing'"  # fmt: skip
        assert rows(dsn, holds) == [(2,)]
        ENGINES[h1.root] = start_engine(h1)
        wait_for(lambda: sorted(rows(dsn, states, later)) == [("completed", "h1")] * 2,
                 timeout=30)  # fmt: skip
        go.touch()
        assert sorted(os.listdir(h0.state / "tasks")) == sorted(first)
        done = "SELECT count(*) FROM supervise_tasks WHERE state = 'completed'"
        wait_for(lambda: rows(dsn, done) == [(4,)], timeout=30)
        wait_for(lambda: rows(dsn, DOING) == [(0,)], timeout=60)
    launched = rows(dsn, "SELECT task_id, count(*), min(host_id) FROM supervise_events "
                         "WHERE event = 'launched' GROUP BY task_id")  # fmt: skip
    assert sorted(launched) == sorted([(t, 1, "h0") for t in first] +
                                      [(t, 1, "h1") for t in later])  # fmt: skip
    assert json.loads((h0.state / "tasks" / first[0] / "cluster.json").read_text()) == {
        "host_id": "h0", "generation": 1}  # fmt: skip


def test_waiting_for_an_earlier_copy_holds_no_connection(tmp_path: Path, dsn: str) -> None:
    """A claim that waits (up to ``EARLIER_COPY_WAIT`` s) for this host's earlier copy of
    its task to end holds no connection meanwhile: the engine's pool is small (issue 25:
    one steady connection) and its heartbeats and fetches borrow from it. Here the copy
    does not end and the engine stops: one statement before the wait, one after it (the
    task's job again, for any host)."""
    import contextlib
    import threading
    import types
    from collections.abc import Iterator

    from supervisor.cluster import schema
    from supervisor.cluster.ownership import ready_to_claim

    schema.init(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO supervise_tasks (id, name, spec, queue, state) "
            "VALUES ('t1', 't1', '{}', 'supervise', 'queued')"
        )
    tasks = tmp_path / "tasks"
    (tasks / "t1").mkdir(parents=True)
    (tasks / "t1" / "manifest.json").write_text('{"status": "running"}')  # the earlier copy
    lent, held = [], threading.Event()

    @contextlib.contextmanager
    def lend() -> Iterator[psycopg.Connection]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            held.set()
            lent.append(conn.info.backend_pid)
            try:
                yield conn
            finally:
                held.clear()

    profile = types.SimpleNamespace(tasks_dir=tasks, state_dir=tmp_path / "state")
    stopping, result = threading.Event(), []
    waiter = threading.Thread(
        target=lambda: result.append(ready_to_claim(lend, profile, "t1", stopping))  # type: ignore[arg-type]
    )
    waiter.start()
    try:
        wait_for(lambda: len(lent) == 1 and not held.is_set() and waiter.is_alive())
    finally:
        stopping.set()
        waiter.join(timeout=30)
    assert result == [False] and len(lent) == 2
    jobs = "SELECT count(*) FROM procrastinate_jobs WHERE queueing_lock = 't1' AND status = 'todo'"
    with psycopg.connect(dsn) as conn:
        assert conn.execute(jobs).fetchone() == (1,)
