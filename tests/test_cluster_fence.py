"""Fencing in the fleet (issue 20): a task runs on at most one host at any moment, also
when only an engine dies (its tmux server and agents live on), and a returning host checks
ownership before it records an ending, notifies or runs acceptance.

Real PostgreSQL (``tests/cluster_support.py``), real engines, real tmux, the fake agent's
brain; each agent run stamps its start and end (``stamp:`` cue of ``tests/fake_agent.py``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import test_cluster
import test_cluster_sweep
from conftest import wait_for
from test_cluster import rows, start_engine
from test_cluster_sweep import HOST_TIMEOUT, cleanup, host, state_of, submit

from supervisor.cluster.lease import fence_of

psycopg = pytest.importorskip("psycopg")

server, dsn = test_cluster.server, test_cluster_sweep.dsn


def runs(stamps: Path) -> list[dict[str, Any]]:
    """The agent runs a ``stamp:`` file records, in start order: ``host`` (the task folder's
    host directory name), ``start`` and ``end`` (epoch s; ``None``: no end line)."""
    found: list[dict[str, Any]] = []
    for line in stamps.read_text().splitlines():
        what, at, task_dir = line.split(" ", 2)
        name = Path(task_dir).parents[2].name  # <host>/state/tasks/<id>
        if what == "start":
            found.append({"host": name, "start": float(at), "end": None})
        else:
            run = next(r for r in reversed(found) if r["host"] == name and r["end"] is None)
            run["end"] = float(at)
    return found


def test_engine_only_crash_fences_the_orphan_before_the_task_runs_elsewhere(
    tmp_path: Path, dsn: str
) -> None:
    """h0's engine alone is SIGKILLed; its tmux server and agent live on. The wrapper stops
    the orphaned agent once the engine's lease has gone unrenewed, before the sweeper
    (host_timeout later) restarts the task on h1: the two runs never overlap, and the orphan
    ran no longer after its engine died than the stated bound (lease + 2 polls + grace)."""
    h0 = host(tmp_path, dsn, "h0", on_host_lost="restart")
    h1 = host(tmp_path, dsn, "h1")
    stamps = tmp_path / "stamps"
    engines: dict[str, Any] = {"h0": start_engine(h0)}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 30)
        task = submit(dsn, h0, "long", f"stamp: {stamps}\nsleep: 12\nexit: 0")
        wait_for(lambda: state_of(dsn, task)[:2] == ("running", "h0"), timeout=30)
        wait_for(lambda: stamps.exists(), timeout=10)
        engines["h1"] = start_engine(h1)
        wait_for(lambda: len(rows(dsn, "SELECT 1 FROM supervise_hosts")) == 2, timeout=30)
        killed = time.time()
        engines["h0"].kill()
        engines.pop("h0").wait()
        wait_for(lambda: state_of(dsn, task)[:2] == ("completed", "h1"), timeout=60)
    finally:
        cleanup([h0, h1], list(engines.values()))
    found = runs(stamps)
    assert [r["host"] for r in found] == ["h0", "h1"], found
    orphan, new = found
    assert orphan["end"] is not None, "the orphan on h0 was never stopped"
    fence = fence_of(HOST_TIMEOUT, 0.5)
    ran_on = orphan["end"] - killed
    print(f"orphan ran {ran_on:.2f} s after its engine died (bound {fence.bound:.2f} s, "
          f"host_timeout {HOST_TIMEOUT} s); new run started {new['start'] - killed:.2f} s "
          "after the kill")  # fmt: skip
    assert orphan["end"] < new["start"], found
    assert ran_on <= fence.bound + 1.0  # + scheduling slack on a loaded machine


def test_returning_host_records_no_pass_for_a_superseded_copy(tmp_path: Path, dsn: str) -> None:
    """h0's engine is SIGKILLed; its agent exits 0 while the engine is down, and the sweeper
    (simulated as its contract says) gave the task a newer generation meanwhile. h0 back
    records the copy ``superseded``: never ``completed``, no acceptance run, no PASS
    notified."""
    accepted, notified = tmp_path / "accepted", tmp_path / "notified"
    notifier = [sys.executable, "-c", "import sys, pathlib; pathlib.Path(sys.argv[1]).open('a')"
                ".write(sys.stdin.read() + '\\n')", str(notified)]  # fmt: skip
    h0 = host(tmp_path, dsn, "h0", host_timeout=30.0)
    table = {"host_id": "h0", "dsn": dsn, "heartbeat": 0.5}
    h0.write_profile(max_concurrent=2, max_retries=0, notifier=notifier, extra={"cluster": table})
    check = [sys.executable, "-c", f"open({str(accepted)!r}, 'w').write('ran')"]
    engines: dict[str, Any] = {"h0": start_engine(h0)}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 30)
        task = submit(dsn, h0, "short", "sleep: 3\nexit: 0", acceptance={"command": check})
        wait_for(lambda: state_of(dsn, task)[:2] == ("running", "h0"), timeout=30)
        engines["h0"].kill()
        engines.pop("h0").wait()
        rows(dsn, "UPDATE supervise_tasks SET state = 'host_lost', generation = generation + 1 "
                  "WHERE id = %s RETURNING id", task)  # fmt: skip
        done = h0.state / "tasks" / task / "done"
        wait_for(done.exists, timeout=20)  # the agent ended on its own while no engine ran
        engines["h0"] = start_engine(h0)
        manifest = h0.state / "tasks" / task / "manifest.json"
        wait_for(lambda: json.loads(manifest.read_text())["status"] in ("superseded",
                 "completed", "failed"), timeout=30)  # fmt: skip
        time.sleep(1.0)  # an acceptance check or notifier started now would have run
    finally:
        cleanup([h0], list(engines.values()))
    record = json.loads(manifest.read_text())
    assert record["status"] == "superseded", record
    assert not accepted.exists()
    assert "PASS" not in (notified.read_text() if notified.exists() else "")
    events = [json.loads(line)["event"] for line in (manifest.parent / "events.jsonl")
              .read_text().splitlines()]  # fmt: skip
    assert "completed" not in events and "verifying" not in events
    assert state_of(dsn, task)[0] == "host_lost"
    assert os.path.exists(manifest)
