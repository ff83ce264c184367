"""Several hosts (issue 15), the foundation: ``[cluster]`` in the profile, the schema
(``supervise cluster init|check``), submission into PostgreSQL, and dispatch through
procrastinate to engines that each start a task exactly once and never exceed their
``max_concurrent``. Every test runs against a real PostgreSQL server
(``tests/cluster_support.py``) and real ``supervise`` processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from cluster_support import postgres_server
from conftest import FAKE_AGENT, Setup, wait_for

psycopg = pytest.importorskip("psycopg")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """One throwaway server per module (its DSN names the maintenance database)."""
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture
def dsn(server: str) -> Iterator[str]:
    """A fresh, empty database on the module's server for one test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield server.replace("dbname=supervise", f"dbname={name}")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


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


# ---------------------------------------------------------------- config and bad input


def test_single_host_profile_loads_no_postgresql_library(setup: Setup) -> None:
    """A profile without [cluster] builds its engine without importing procrastinate or
    psycopg (they are the 'cluster' extra)."""
    profile = setup.write_profile()
    code = (
        "import sys; from supervisor.config import load_profile; "
        "from supervisor.engine.scheduler import Engine; import supervisor.cli; "
        f"e = Engine(load_profile({str(profile)!r})); "
        "print(type(e.source).__name__, sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('procrastinate', 'psycopg', 'psycopg_pool')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split(" ", 1)  # fmt: skip
    assert out == ["SpoolIntake", "[]\n"]


@pytest.mark.parametrize(
    ("table", "key", "says"),
    [
        ({"host_id": "two words"}, "cluster.host_id", "not a usable host id"),
        ({"on_host_lost": "reboot"}, "cluster.on_host_lost", "'report' or 'restart'"),
        ({"host_timeout": -1}, "cluster.host_timeout", ""),
        ({"queues": ["host.x"]}, "cluster.queues", "hosts' own queues"),
        ({"dns": "x"}, "cluster.dns", ""),
    ],
)
def test_bad_cluster_table_is_one_line(setup: Setup, table: dict, key: str, says: str) -> None:
    profile = setup.write_profile(extra={"cluster": table})
    result = supervise("validate", str(profile))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(profile) in lines[0] and key in lines[0] and says in lines[0]
    assert "Traceback" not in result.stderr


def test_cluster_without_dsn_names_the_variable(setup: Setup) -> None:
    profile = cluster_profile(setup, None, "h1")
    result = supervise("cluster", "check", "-c", str(profile))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "SUPERVISE_CLUSTER_DSN" in result.stderr and str(profile) in result.stderr
    no_dsn = supervise("hosts")
    assert no_dsn.returncode == 2 and "SUPERVISE_CLUSTER_DSN" in no_dsn.stderr


def test_unreachable_database_is_one_line(tmp_path: Path) -> None:
    missing = f"host={tmp_path} port=1 dbname=x user=x"
    result = supervise("cluster", "check", env={"SUPERVISE_CLUSTER_DSN": missing})
    assert result.returncode == 1
    assert result.stderr.startswith("cannot connect to the cluster database: ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


# ---------------------------------------------------------------- schema


def test_init_twice_then_check(dsn: str) -> None:
    env = {"SUPERVISE_CLUSTER_DSN": dsn}
    before = supervise("cluster", "check", "--json", env=env)
    assert before.returncode == 1
    assert json.loads(before.stdout)["schema_version"] == 0
    first = supervise("cluster", "init", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "applied procrastinate's schema, supervise schema v1; schema version 1\n"
    second = supervise("cluster", "init", env=env)
    assert second.returncode == 0, second.stderr
    assert second.stdout == "already up to date; schema version 1\n"
    check = supervise("cluster", "check", "--json", env=env)
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    assert report["schema_version"] == 1 and report["procrastinate"] and not report["problems"]
    tables = {r[0] for r in rows(dsn, "SELECT tablename FROM pg_tables WHERE schemaname='public'")}
    assert {"supervise_tasks", "supervise_events", "supervise_hosts", "procrastinate_jobs",
            "supervise_schema_version"} <= tables  # fmt: skip


def test_submit_before_init_says_run_init(setup: Setup, dsn: str) -> None:
    profile = cluster_profile(setup, dsn, "h1")
    task = setup.root / "t.toml"
    task.write_text(tomli_w.dumps(setup.task("a", "exit: 0")))
    result = supervise("submit", "-c", str(profile), str(task))
    assert result.returncode == 1
    assert "supervise cluster init" in result.stderr and result.stderr.count("\n") == 1


# ---------------------------------------------------------------- submission


def test_submit_validates_like_the_spool(setup: Setup, dsn: str) -> None:
    """The same checks and error lines as the spool path; a valid task becomes a queued row
    with its prompt inline and one procrastinate job (queue, queueing_lock = task id)."""
    assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn}).returncode == 0
    profile = cluster_profile(setup, dsn, "h1")
    bad = setup.root / "bad.toml"
    bad.write_text(tomli_w.dumps(setup.task("b", "hi", env={"PATH": "/tmp"})))
    spool_like = supervise("validate", "-c", str(setup.write_profile()), str(bad))
    profile = cluster_profile(setup, dsn, "h1")
    refused = supervise("submit", "-c", str(profile), str(bad))
    assert refused.returncode == 1
    assert refused.stderr.replace(str(profile), "P") == spool_like.stderr.replace(
        str(setup.profile), "P"
    )
    assert "task_may_set" in refused.stderr
    missing = setup.root / "missing.toml"
    missing.write_text(tomli_w.dumps({"name": "m", "prompt": "x", "project_dir": "/nonexistent"}))
    assert supervise("submit", "-c", str(profile), str(missing)).returncode == 1
    assert rows(dsn, "SELECT count(*) FROM supervise_tasks") == [(0,)]

    prompt = setup.root / "prompt.md"
    prompt.write_text("print: from a file\nexit: 0\n")
    good = setup.root / "good.toml"
    good.write_text(tomli_w.dumps({"name": "good", "prompt_file": str(prompt),
                                   "project_dir": str(setup.project)}))  # fmt: skip
    done = supervise("submit", "-c", str(profile), str(good), "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    [(state, spec, queue)] = rows(dsn, "SELECT state, spec, queue FROM supervise_tasks "
                                       "WHERE id = %s", answer["task_id"])  # fmt: skip
    assert (state, queue) == ("queued", "supervise")
    assert spec["prompt"] == "print: from a file\nexit: 0\n" and "prompt_file" not in spec
    jobs = rows(dsn, "SELECT queue_name, queueing_lock, args, status FROM procrastinate_jobs")
    assert jobs == [("supervise", answer["task_id"], {"task_id": answer["task_id"]}, "todo")]

    pinned = setup.root / "pinned.toml"
    pinned.write_text(tomli_w.dumps(setup.task("p", "exit: 0", host="h2")))
    done = supervise("submit", "-c", str(profile), str(pinned), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["queue"] == "host.h2"
    badhost = setup.root / "badhost.toml"
    badhost.write_text(tomli_w.dumps(setup.task("p", "exit: 0", host="a/b")))
    result = supervise("submit", "-c", str(profile), str(badhost))
    assert result.returncode == 1 and "key 'host'" in result.stderr
