"""Issue 15's small items: a task naming ``host`` under a profile without ``[cluster]``
(a warning in ``validate``; the engine runs it and logs the same line), task files dropped
in the spool folder of a cluster host (run locally, not in the database, said once in the
log), and the prompt size limit for tasks stored in the database (refused at submit, and
rejected at the claim when a row was written around ``supervise submit``). Real engines,
real PostgreSQL (tests/support/cluster_support.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomli_w
from conftest import Setup, wait_for
from support.cluster_engines import (
    cluster_profile,
    dsn,
    rows,
    server,
    start_engine,
    stop_engines,
    supervise,
)

from supervisor.config import MAX_PROMPT_BYTES

psycopg = pytest.importorskip("psycopg")
__all__ = ["dsn", "server"]  # fixtures, imported for this module


def _statuses(setup: Setup) -> dict[str, str]:
    """Task name -> status, from this host's manifests."""
    out = {}
    for path in (setup.state / "tasks").glob("*/manifest.json"):
        manifest = json.loads(path.read_text())
        out[manifest["task_name"]] = manifest["status"]
    return out


def test_validate_warns_about_host_without_cluster(setup: Setup) -> None:
    profile = setup.write_profile()
    task = setup.root / "t.toml"
    task.write_text(tomli_w.dumps(setup.task("t", "exit: 0", host="h1")))
    done = supervise("validate", "-c", str(profile), str(task))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"warning: {task}: key 'host' = 'h1' is ignored: {profile} "
                                  "has no [cluster] table")  # fmt: skip
    assert done.stdout == f"ok: {task} (task)\n"
    as_json = json.loads(supervise("validate", "-c", str(profile), str(task), "--json").stdout)
    assert as_json[0]["ok"] and "is ignored" in as_json[0]["warnings"][0]
    plain = setup.root / "plain.toml"
    plain.write_text(tomli_w.dumps(setup.task("p", "exit: 0")))
    assert supervise("validate", "-c", str(profile), str(plain)).stderr == ""


def test_single_host_engine_runs_a_task_naming_host(setup: Setup) -> None:
    """Without [cluster] the engine ignores ``host``: the task runs here, and the log says
    so in one line."""
    setup.write_profile()
    engine = start_engine(setup)
    try:
        setup.drop("pinned.toml", setup.task("pinned", "print: hi\nexit: 0", host="h1"))
        wait_for(lambda: _statuses(setup).get("pinned") == "completed", timeout=60)
    finally:
        stop_engines([engine])
    log = (setup.root / "engine.log").read_text()
    assert log.count("key 'host' = 'h1' is ignored") == 1, log


def test_spool_tasks_of_a_cluster_host_run_locally(setup: Setup, dsn: str) -> None:
    """Files dropped in a cluster host's spool run on that host and never reach the
    database; the log says so once, and says that a ``host`` naming another is ignored."""
    assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn}).returncode == 0
    cluster_profile(setup, dsn, "h0")
    engine = start_engine(setup)
    try:
        setup.drop("a.toml", setup.task("a", "exit: 0"))
        setup.drop("b.toml", setup.task("b", "exit: 0", host="h7"))
        wait_for(lambda: _statuses(setup) == {"a": "completed", "b": "completed"}, timeout=60)
        wait_for(lambda: rows(dsn, "SELECT count(*) FROM supervise_hosts") == [(1,)])
    finally:
        stop_engines([engine])
    assert rows(dsn, "SELECT count(*) FROM supervise_tasks") == [(0,)]
    assert rows(dsn, "SELECT count(*) FROM supervise_events") == [(0,)]
    log = (setup.root / "engine.log").read_text()
    assert log.count("are not in the fleet's database") == 1, log
    assert log.count("key 'host' = 'h7' is ignored for a spool file") == 1, log


def test_prompts_in_the_database_obey_the_spool_limit(setup: Setup, dsn: str) -> None:
    """A prompt over MAX_PROMPT_BYTES is refused by ``supervise submit`` with the spool's
    line; a row written around submit (raw SQL, as any holder of supervise_submit can) is
    rejected by the host that claims it, with the same reason."""
    from supervisor.cluster.submit import TASK_NAME, sync_app

    assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn}).returncode == 0
    profile = cluster_profile(setup, dsn, "h0")
    big = "x" * (MAX_PROMPT_BYTES + 1)
    task = setup.root / "big.toml"
    task.write_text(tomli_w.dumps(setup.task("big", big)))
    refused = supervise("submit", "-c", str(profile), str(task))
    spool_like = supervise("validate", "-c", str(profile), str(task))
    assert refused.returncode == 1 and spool_like.returncode == 1
    assert refused.stderr == spool_like.stderr and refused.stderr.count("\n") == 1
    assert f"at most {MAX_PROMPT_BYTES} bytes" in refused.stderr
    assert rows(dsn, "SELECT count(*) FROM supervise_tasks") == [(0,)]

    spec = {"name": "raw", "prompt": big, "project_dir": str(setup.project)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO supervise_tasks (id, name, spec, queue) VALUES "
                     "('raw-0a0b0c', 'raw', %s::jsonb, 'supervise')",
                     (json.dumps(spec),))  # fmt: skip
    app = sync_app(dsn)
    with app.open():
        app.configure_task(TASK_NAME, queue="supervise", queueing_lock="raw-0a0b0c").defer(
            task_id="raw-0a0b0c"
        )
    engine = start_engine(setup)
    try:
        wait_for(lambda: rows(dsn, "SELECT state FROM supervise_tasks") == [("rejected",)],
                 timeout=60)  # fmt: skip
    finally:
        stop_engines([engine])
    [(error,)] = rows(dsn, "SELECT error FROM supervise_tasks")
    assert f"at most {MAX_PROMPT_BYTES} bytes" in error
    assert not (setup.state / "tasks" / "raw-0a0b0c").exists()
    assert Path(setup.spool / "rejected" / "raw-0a0b0c.toml").is_file()
