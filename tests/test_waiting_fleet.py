"""Issue 22 item 2 in the fleet: ``supervise wait`` with only the DSN returns on an
``escalated`` row with exit 10 (``needs`` names its host) and ``--terminal-only`` waits on.
Real PostgreSQL (``tests/support/cluster_support.py``); the row's state is set as a host's writer
would set it, since ``wait`` reads only the rows."""

from __future__ import annotations

import json

import pytest
import tomli_w
from conftest import Setup
from support import cluster_engines
from support.cluster_engines import cluster_profile, supervise

from supervisor.waiting import EXIT_NEEDS_YOU

psycopg = pytest.importorskip("psycopg")
server, dsn = cluster_engines.server, cluster_engines.dsn


def test_fleet_wait_returns_on_an_escalated_row(setup: Setup, dsn: str) -> None:
    env = {"SUPERVISE_CLUSTER_DSN": dsn}
    assert supervise("cluster", "init", env=env).returncode == 0
    profile = cluster_profile(setup, dsn, "h1")
    ids = []
    for name in ("esc", "ok"):
        task = setup.root / f"{name}.toml"
        task.write_text(tomli_w.dumps(setup.task(name, "exit: 0")))
        done = supervise("submit", "-c", str(profile), str(task), "--json")
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout)["task_id"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE supervise_tasks SET state = 'escalated', owner_host = 'h1' WHERE id = %s",
            (ids[0],),
        )
        conn.execute(
            "UPDATE supervise_tasks SET state = 'completed', verdict = 'PASS' WHERE id = %s",
            (ids[1],),
        )
    waited = supervise("wait", *ids, "--json", env=env)
    assert waited.returncode == EXIT_NEEDS_YOU, waited.stderr
    shown = json.loads(waited.stdout)
    assert shown[0]["needs"] == {"kind": "escalation", "host": "h1"}
    assert "needs" not in shown[1] and shown[1]["status"] == "completed"
    text = supervise("wait", ids[0], env=env)
    assert (text.returncode, text.stdout) == (10, f"{ids[0]}: escalated needs-you on host h1\n")
    held = supervise("wait", ids[0], "--terminal-only", "--timeout", "1", env=env)
    assert held.returncode == 124, held.stderr
    assert held.stdout == f"{ids[0]}: escalated -\n"
