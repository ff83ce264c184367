"""Real ``supervise`` engines against a throwaway PostgreSQL (moved from tests/test_cluster.py):
the server and DSN fixtures, cluster profiles, starting and stopping engines, reading the
fleet's rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import Setup, wait_for

from support.cluster_support import fresh_database, postgres_server

psycopg = pytest.importorskip("psycopg")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """One throwaway server per module (its DSN names the maintenance database)."""
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture
def dsn(server: str) -> Iterator[str]:
    """A fresh, empty database on the module's server for one test."""
    with fresh_database(server) as url:
        yield url


def supervise(*args: str, env: dict[str, str] | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess:  # fmt: skip
    full = {k: v for k, v in os.environ.items() if k != "SUPERVISE_CLUSTER_DSN"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "supervisor.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False, env=full)  # fmt: skip


def cluster_profile(setup: Setup, dsn: str | None, host_id: str, max_concurrent: int = 2,
                    **cluster: Any) -> Path:  # fmt: skip
    table = {"host_id": host_id, "heartbeat": 0.5, **cluster}
    if dsn is not None:
        table["dsn"] = dsn
    return setup.write_profile(max_concurrent=max_concurrent, extra={"cluster": table},
                               max_retries=0)  # fmt: skip


def rows(dsn: str, sql: str, *params: Any) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


# ---------------------------------------------------------------- the fleet

TERMINAL = {"completed", "failed", "abandoned"}
DOING = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'"


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at once (an end at the same instant as a start comes first)."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    most = open_now = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


def _epoch(stamp: str) -> float:
    """An event's ``ts`` (ISO 8601, UTC, milliseconds) as seconds since the epoch."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _host_runs(state: Path) -> dict[str, tuple[float, float, list[dict]]]:
    """task id -> (launched ts, ended ts, events) from one host's local event logs."""
    found = {}
    for log in (state / "tasks").glob("*/events.jsonl"):
        events = [json.loads(line) for line in log.read_text().splitlines()]
        launched = [_epoch(e["ts"]) for e in events if e["event"] == "launched"]
        ended = [_epoch(e["ts"]) for e in events if e.get("status") in TERMINAL]
        assert launched and ended, f"{log}: no launch or no ending: {events}"
        found[log.parent.name] = (min(launched), min(ended), events)
    return found


#: The running engine of each host of :func:`engines`, by its folder.
ENGINES: dict[Path, subprocess.Popen] = {}


@contextmanager
def engines(tmp_path: Path, dsn: str, count: int = 3,
            max_concurrent: int = 2) -> Iterator[dict[str, Setup]]:  # fmt: skip
    """``count`` engines (hosts ``h0``...: own state dir, tmux socket, host id) on a fresh
    schema, running until the block ends (then SIGTERM by PID; their tmux servers killed).
    ``ENGINES[setup.root]`` is each one's process (a test may replace it)."""
    assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn}).returncode == 0
    hosts = {}
    for i in range(count):
        (tmp_path / f"h{i}").mkdir()
        hosts[f"h{i}"] = Setup(tmp_path / f"h{i}", f"sv-test-{uuid.uuid4().hex[:10]}")
        cluster_profile(hosts[f"h{i}"], dsn, f"h{i}", max_concurrent=max_concurrent)
    try:
        for setup in hosts.values():
            ENGINES[setup.root] = start_engine(setup)
        wait_for(lambda: len(rows(dsn, "SELECT 1 FROM supervise_hosts")) == count, timeout=30)
        yield hosts
    finally:
        stop_engines([ENGINES.pop(setup.root) for setup in hosts.values()
                      if setup.root in ENGINES])  # fmt: skip
        for setup in hosts.values():
            setup.tmux("kill-server")
            Path(f"/tmp/tmux-{os.getuid()}/{setup.socket_name}").unlink(missing_ok=True)


def start_engine(setup: Setup) -> subprocess.Popen:
    """``supervise run`` of ``setup``'s profile, its output appended to ``engine.log``."""
    with open(setup.root / "engine.log", "a") as out:
        argv = [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile)]
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def stop_engines(processes: list[subprocess.Popen]) -> None:
    """SIGTERM each by PID, then wait (SIGKILL after 30 s)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_beats(dsn: str, host_id: str, count: int = 3, timeout: float = 30) -> None:
    """Wait until ``host_id`` has written ``count`` more heartbeats (``heartbeat_at`` moved
    that often): its engine went round that many times, so whatever it would write or start
    by then, it has. The wait of a "nothing happened" check, in place of a sleep.

    Raises:
        AssertionError: fewer beats within ``timeout`` seconds.
    """
    sql = "SELECT heartbeat_at FROM supervise_hosts WHERE host_id = %s"
    seen: list[Any] = []

    def moved() -> bool:
        beat = rows(dsn, sql, host_id)
        if beat and (not seen or seen[-1] != beat[0][0]):
            seen.append(beat[0][0])
        return len(seen) > count

    wait_for(moved, timeout=timeout, every=0.05)
