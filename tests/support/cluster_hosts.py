"""Helpers of the sweeper tests (moved from tests/test_cluster_sweep.py): hosts, submitting, a
row's state, killing a host, cleanup."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import Setup

from support import cluster_engines
from support.cluster_engines import rows, stop_engines, supervise
from support.cluster_support import fresh_database

#: Seconds: small, so a loss is seen within seconds (heartbeat 0.5 s).
HOST_TIMEOUT = 4.0


server = cluster_engines.server  # one throwaway PostgreSQL per module


@pytest.fixture
def dsn(server: str) -> Iterator[str]:
    """A fresh database with our schema, for one test."""
    with fresh_database(server) as url:
        assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": url}).returncode == 0
        yield url


def host(tmp_path: Path, dsn: str, host_id: str, max_concurrent: int = 2,
         extra: dict[str, Any] | None = None, **cluster: Any) -> Setup:  # fmt: skip
    """A host's folder and profile (own state dir, tmux socket, host id)."""
    (tmp_path / host_id).mkdir()
    setup = Setup(tmp_path / host_id, f"sv-test-{uuid.uuid4().hex[:10]}")
    table = {"host_id": host_id, "dsn": dsn, "heartbeat": 0.5, "host_timeout": HOST_TIMEOUT,
             **cluster}  # fmt: skip
    setup.write_profile(max_concurrent=max_concurrent, extra={"cluster": table, **(extra or {})},
                        max_retries=0)  # fmt: skip
    return setup


def submit(dsn: str, setup: Setup, name: str, prompt: str, project: Path | None = None,
           **extra: Any) -> str:  # fmt: skip
    from supervisor.cluster.submit import submit as submit_task
    from supervisor.config import load_profile, load_task

    profile = load_profile(setup.profile)
    file = setup.root / f"{name}.toml"
    file.write_text(tomli_w.dumps(setup.task(name, prompt, project, **extra)))
    return submit_task(dsn, profile, load_task(file, profile)).task_id


def state_of(dsn: str, task_id: str) -> tuple:
    return rows(dsn, "SELECT state, owner_host, generation FROM supervise_tasks WHERE id = %s",
                task_id)[0]  # fmt: skip


def kill_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def cleanup(hosts: list[Setup], engines: list[Any]) -> None:
    stop_engines([e for e in engines if e is not None])
    for setup in hosts:
        setup.tmux("kill-server")
        Path(f"/tmp/tmux-{os.getuid()}/{setup.socket_name}").unlink(missing_ok=True)


def lose_machine(setup: Setup, engine: Any, pid_files: list[Path]) -> float:
    """SIGKILL the engine, its tmux server and the given processes, by PID (a machine
    loss); the time of the kill (epoch seconds). (Moved from tests/test_cluster_sweep.py,
    issue 25: tests/test_cluster_requeue.py loses a host too.)"""
    server = setup.tmux("display-message", "-p", "#{pid}").stdout.strip()
    at = time.time()
    engine.kill()
    engine.wait()
    if server:
        kill_pid(int(server))
    for file in pid_files:
        if file.exists() and file.read_text().strip():
            kill_pid(int(file.read_text().strip()))
    return at
