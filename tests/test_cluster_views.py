"""The fleet as an operator sees it (issue 20): ``supervise wait`` through a PostgreSQL
restart, ``hosts``' ``last_error`` cleared by the next good heartbeat, and ``status
--cluster`` with ``--status``, ``--sort`` and ``--snapshot``. Real server
(tests/support/cluster_support.py), real engines and the real CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli_w
from conftest import Setup, wait_for
from support import cluster_engines, cluster_hosts
from support.cluster_engines import cluster_profile, engines, rows, supervise
from support.cluster_support import postgres_executor

psycopg = pytest.importorskip("psycopg")


server = cluster_engines.server  # one throwaway PostgreSQL per module
dsn = cluster_hosts.dsn  # a fresh database with our schema, per test


def _submit(dsn: str, setup: Setup, name: str, prompt: str) -> str:
    from supervisor.cluster.submit import submit
    from supervisor.config import load_profile, load_task

    file = setup.root / f"{name}.toml"
    file.write_text(tomli_w.dumps(setup.task(name, prompt)))
    profile = load_profile(setup.profile)
    return submit(dsn, profile, load_task(file, profile)).task_id


def test_wait_rides_out_a_database_restart(tmp_path: Path) -> None:
    """Issue 20: ``supervise wait ID`` on a fleet task exited 1 ("cannot read the fleet's
    tasks") while PostgreSQL restarted, though the task went on to PASS. It now retries
    within its own deadline and exits 0 when the task passes."""
    with postgres_executor() as (dsn, server), engines(tmp_path, dsn, count=1) as hosts:
        # It ends when the test says (after the outage), not after a time a loaded machine
        # could outlast before the outage begins (the waiter would be done by then).
        release = tmp_path / "release"
        task_id = _submit(dsn, hosts["h0"], "through", f"until_file: {release}\nexit: 0")
        state = "SELECT state FROM supervise_tasks WHERE id = %s"
        wait_for(lambda: rows(dsn, state, task_id) == [("running",)], timeout=30)
        env = {k: v for k, v in os.environ.items() if k != "SUPERVISE_CLUSTER_DSN"}
        waiting = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "wait", task_id, "--timeout", "120"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**env, "SUPERVISE_CLUSTER_DSN": dsn},
        )  # fmt: skip
        try:
            time.sleep(1)  # the waiter is past its start-up (nothing to wait on: it is quiet)
            server.stop()
            time.sleep(3)  # the database outage under test; the waiter must outlast it
            assert waiting.poll() is None, waiting.communicate()  # still waiting
            server.start()
            release.touch()
            out, err = waiting.communicate(timeout=90)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait()
    assert waiting.returncode == 0, (out, err)
    assert out.strip() == f"{task_id}: completed PASS"
    assert err.count("retrying") == 1 and "answers again" in err, err  # once, not per poll


def test_wait_gives_up_at_its_own_deadline_while_the_database_is_down(
    tmp_path: Path, dsn: str
) -> None:
    """A database that is not there: ``wait --timeout`` retries until its deadline, then
    exits 1 with the database's error (one line when it starts retrying, one when it gives
    up); with the database there, a task still queued at the deadline is 124 as before."""
    setup = Setup(tmp_path, "sv-unused")
    cluster_profile(setup, dsn, "h0")
    task_id = _submit(dsn, setup, "never", "exit: 0")
    gone = re.sub(r"port=\d+", "port=1", dsn)  # nothing listens there
    env = {"SUPERVISE_CLUSTER_DSN": dsn}
    first = supervise("wait", task_id, "--timeout", "1", env=env)
    assert first.returncode == 124, first  # queued: no engine runs here
    down = supervise("wait", task_id, "--timeout", "2", env={"SUPERVISE_CLUSTER_DSN": gone})
    assert down.returncode == 1, down  # no row was ever read: nothing to report as running
    said = down.stderr.splitlines()
    assert len(said) == 2 and "retrying" in said[0] and said[1].endswith("gave up)"), said


def test_hosts_last_error_clears_on_the_next_good_heartbeat(tmp_path: Path, dsn: str) -> None:
    """Issue 20: ``hosts`` kept showing a ``last_error`` long after the database answered
    again. The first heartbeat after an error reports it; the next good one clears it.
    The error is made for sure: the hosts' table is renamed away until the writer has met
    it (killing its backends hit a connection that lives milliseconds only by chance)."""
    from supervisor.cluster.writer import Writer

    writer = Writer(dsn, "h0", 2, lambda: 0, "test", ["supervise"], 0.5,
                    tmp_path / "outbox.jsonl", 30.0, "report")  # fmt: skip
    error = "SELECT last_error FROM supervise_hosts WHERE host_id = 'h0'"
    writer.start()
    try:
        wait_for(lambda: rows(dsn, error) == [(None,)], timeout=60)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE supervise_hosts RENAME TO supervise_hosts_away")
            try:
                wait_for(lambda: writer._last_error is not None, timeout=15, every=0.05)
            finally:
                conn.execute("ALTER TABLE supervise_hosts_away RENAME TO supervise_hosts")
        seen: list[object] = []

        def reported() -> bool:
            seen.append(rows(dsn, error)[0][0])
            return seen[-1] is not None

        wait_for(reported, timeout=15, every=0.05)
        wait_for(lambda: rows(dsn, error) == [(None,)], timeout=60)
        listed = supervise("hosts", "--json", env={"SUPERVISE_CLUSTER_DSN": dsn})
        assert [h["last_error"] for h in json.loads(listed.stdout)] == [None]
    finally:
        writer.close()


def test_status_cluster_honours_status_sort_and_snapshot(tmp_path: Path, dsn: str) -> None:
    """Issue 20: ``status --cluster`` ignored ``--status``, ``--sort`` and ``--snapshot``.
    They now work as for the local status (the same code selects and orders)."""
    setup = Setup(tmp_path, "sv-unused")
    cluster_profile(setup, dsn, "h0")
    ids = {name: _submit(dsn, setup, name, "exit: 0") for name in ("b-run", "a-fail", "c-done")}
    update = (
        "UPDATE supervise_tasks SET state = %s, verdict = %s, owner_host = 'h0', "
        "failure_reason = %s, updated_at = now() - %s * interval '1 second' WHERE id = %s"
    )
    rows_set = [("running", None, None, 50, "b-run"), ("failed", "FAIL", "auth", 10, "a-fail"),
                ("completed", "PASS", None, 90, "c-done")]  # fmt: skip
    with psycopg.connect(dsn, autocommit=True) as conn:
        for state, verdict, reason, age, name in rows_set:
            conn.execute(update, (state, verdict, reason, age, ids[name]))
    env = {"SUPERVISE_CLUSTER_DSN": dsn}

    def listed(*args: str) -> list[str]:
        done = supervise("status", "--cluster", "--json", *args, env=env)
        assert done.returncode == 0, done.stderr
        return [row["name"] for row in json.loads(done.stdout)]

    assert listed() == ["b-run", "a-fail", "c-done"]  # submission order, as before
    assert listed("--status", "failed") == ["a-fail"]
    assert listed("--status", "done", "--status", "running") == ["b-run", "c-done"]
    assert listed("--sort", "name") == ["a-fail", "b-run", "c-done"]
    assert listed("--sort", "age") == ["c-done", "b-run", "a-fail"]
    assert listed("--sort", "group") == ["b-run", "a-fail", "c-done"]
    table = supervise("status", "--cluster", "--status", "failed", env=env)
    assert table.returncode == 0 and "a-fail" in table.stdout and "b-run" not in table.stdout
    snap = supervise("status", "--cluster", "--snapshot", env=env)
    assert snap.returncode == 0, snap.stderr
    data = json.loads(snap.stdout)
    assert [t["name"] for t in data["tasks"]] == ["b-run", "a-fail", "c-done"]
    assert data["hosts"] == [] and data["totals"]["tasks"] == 3
    assert data["totals"]["failed"] == 1 and data["totals"]["done"] == 1
