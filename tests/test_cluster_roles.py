"""The fleet's roles (issue 15, "Trust"): ``supervise cluster roles`` prints and applies
``supervisor/cluster/roles.sql``; a login role in ``supervise_submit`` can submit and read
but not change a task; a login role in ``supervise_engine`` runs a real engine that claims
and completes a task. Real PostgreSQL (tests/support/cluster_support.py), real engine and CLI.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

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

psycopg = pytest.importorskip("psycopg")
__all__ = ["dsn", "server"]  # the fixtures, imported for this module


def _login(dsn: str, group: str) -> tuple[str, str]:
    """A new login role in ``group`` (trust auth on the test server); ``(name, its DSN)``."""
    name = f"u_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE {group}")
    return name, dsn.replace("user=postgres", f"user={name}")


#: The rights ``engine_preflight``'s first check looks at (queries.sql, engine_rights).
FIRST_CHECK = (
    "UPDATE ON supervise_tasks",
    "INSERT ON supervise_hosts",
    "INSERT ON supervise_events",
    "UPDATE ON procrastinate_jobs",
)


def _submit_as(setup: Setup, dsn: str, name: str, prompt: str, **task: object) -> str:
    """``supervise submit`` of a task ``name`` with a profile on ``dsn`` (a login's); its id."""
    file = setup.root / f"{name}.toml"
    file.write_text(tomli_w.dumps(setup.task(name, prompt, **task)))
    done = supervise("submit", "-c", str(cluster_profile(setup, dsn, "h0")), str(file))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def roles(dsn: str) -> Iterator[str]:
    """The schema and the roles applied (twice: re-runnable) on a fresh database."""
    env = {"SUPERVISE_CLUSTER_DSN": dsn}
    assert supervise("cluster", "init", env=env).returncode == 0
    for _ in range(2):
        done = supervise("cluster", "roles", "--apply", env=env)
        assert done.returncode == 0, done.stderr
        assert "supervise_submit, supervise_operator, supervise_engine" in done.stdout
    yield dsn


def test_roles_prints_the_sql_without_a_database() -> None:
    done = supervise("cluster", "roles")
    assert done.returncode == 0, done.stderr
    assert "CREATE ROLE supervise_submit NOLOGIN" in done.stdout
    assert "whoever can INSERT into supervise_tasks can run agents" in done.stdout


def test_roles_before_init_is_one_line(dsn: str) -> None:
    done = supervise("cluster", "roles", "--apply", env={"SUPERVISE_CLUSTER_DSN": dsn})
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "supervise cluster init" in done.stderr


def test_submit_role_submits_and_reads_but_cannot_update(setup: Setup, roles: str) -> None:
    """alice (supervise_submit) submits with the real CLI and reads ``status --cluster`` and
    ``hosts``; her UPDATE and DELETE of a task and her writes to hosts are refused."""
    _, alice = _login(roles, "supervise_submit")
    profile = cluster_profile(setup, alice, "h0")
    task = setup.root / "t.toml"
    task.write_text(tomli_w.dumps(setup.task("a", "exit: 0")))
    done = supervise("submit", "-c", str(profile), str(task))
    assert done.returncode == 0, done.stderr
    task_id = done.stdout.strip()
    status = supervise("status", "--cluster", env={"SUPERVISE_CLUSTER_DSN": alice})
    assert status.returncode == 0, status.stderr
    assert task_id in status.stdout and "queued" in status.stdout
    assert supervise("hosts", env={"SUPERVISE_CLUSTER_DSN": alice}).returncode == 0
    with psycopg.connect(alice, autocommit=True) as conn:
        for statement in (
            f"UPDATE supervise_tasks SET state = 'claimed' WHERE id = '{task_id}'",
            f"DELETE FROM supervise_tasks WHERE id = '{task_id}'",
            "INSERT INTO supervise_hosts (host_id, capacity) VALUES ('evil', 1)",
            "UPDATE procrastinate_jobs SET status = 'doing'",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    assert rows(roles, "SELECT state FROM supervise_tasks WHERE id = %s", task_id) == [("queued",)]
    assert rows(roles, "SELECT status FROM procrastinate_jobs") == [("todo",)]


def test_failed_defer_under_the_submit_role_is_one_line(setup: Setup, roles: str) -> None:
    """A login that may insert a task but not defer its job (no procrastinate rights) and,
    like supervise_submit, may not delete: one line, no traceback, and nothing stored (the
    row and its job are one transaction)."""
    name, partial = _login(roles, "supervise_submit")
    with psycopg.connect(roles, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE p_{name} LOGIN")
        conn.execute(f"GRANT INSERT, SELECT ON supervise_tasks TO p_{name}")
    partial = partial.replace(f"user={name}", f"user=p_{name}")
    task = setup.root / "t.toml"
    task.write_text(tomli_w.dumps(setup.task("a", "exit: 0")))
    done = supervise("submit", "-c", str(cluster_profile(setup, partial, "h0")), str(task))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert rows(roles, "SELECT id FROM supervise_tasks") == []
    assert done.stderr.startswith("supervise submit: the database login ")  # issue 25
    assert "permission denied for table procrastinate_jobs" in done.stderr
    assert "it needs the supervise_submit role" in done.stderr
    assert done.stderr.endswith("; nothing was submitted\n")


def test_engine_role_runs_a_real_engine(setup: Setup, roles: str) -> None:
    """bob (supervise_engine) runs ``supervise run``: it heartbeats, claims alice's task,
    runs it and records it completed, with its events."""
    _, alice = _login(roles, "supervise_submit")
    _, bob = _login(roles, "supervise_engine")
    task_id = _submit_as(setup, alice, "b", "print: hello\nexit: 0")
    cluster_profile(setup, bob, "h0")
    engine = start_engine(setup)
    try:
        wait_for(lambda: rows(roles, "SELECT 1 FROM supervise_hosts"), timeout=30)
        listed = supervise("hosts", "--json", env={"SUPERVISE_CLUSTER_DSN": alice})
        assert [(h["host_id"], h["state"]) for h in json.loads(listed.stdout)] == [("h0", "alive")]
        wait_for(lambda: rows(roles, "SELECT state FROM supervise_tasks WHERE id = %s",
                              task_id) == [("completed",)], timeout=60)  # fmt: skip
        wait_for(lambda: rows(roles, "SELECT count(*) FROM procrastinate_jobs") == [(0,)],
                 timeout=60)  # fmt: skip
    finally:
        stop_engines([engine])
    [(owner, generation)] = rows(roles, "SELECT owner_host, generation FROM supervise_tasks")
    assert (owner, generation) == ("h0", 1)
    events = [e for (e,) in rows(roles, "SELECT event FROM supervise_events ORDER BY id")]
    assert "launched" in events
    assert rows(roles, "SELECT host_id, last_error FROM supervise_hosts") == [("h0", None)]
    log = (setup.root / "engine.log").read_text()
    assert "permission denied" not in log, log


def test_operator_role_stops_a_task_on_another_host_submit_role_cannot(
    setup: Setup, roles: str
) -> None:
    """carol (supervise_operator) routes ``stop`` to the engine bob runs; alice
    (supervise_submit) gets one line (permission denied) and no request row is left."""
    _, alice = _login(roles, "supervise_submit")
    _, carol = _login(roles, "supervise_operator")
    _, bob = _login(roles, "supervise_engine")
    task_id = _submit_as(setup, carol, "long", "print: working\nsleep: 60\n")
    cluster_profile(setup, bob, "h0")
    engine = start_engine(setup)
    try:
        wait_for(lambda: rows(roles, "SELECT state FROM supervise_tasks WHERE id = %s",
                              task_id) == [("running",)], timeout=60)  # fmt: skip
        refused = supervise("stop", task_id, env={"SUPERVISE_CLUSTER_DSN": alice})
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.count("\n") == 1 and "permission denied" in refused.stderr
        assert rows(roles, "SELECT count(*) FROM supervise_controls") == [(0,)]
        stopped = supervise("stop", task_id, env={"SUPERVISE_CLUSTER_DSN": carol})
        assert stopped.returncode == 0, stopped.stderr
        wait_for(lambda: rows(roles, "SELECT state FROM supervise_tasks WHERE id = %s",
                              task_id) == [("abandoned",)], timeout=30)  # fmt: skip
    finally:
        stop_engines([engine])
    assert rows(roles, "SELECT verb, ok FROM supervise_controls") == [("stop", True)]


def test_engine_refuses_a_login_without_engine_rights_in_one_line(setup: Setup,
                                                                   roles: str) -> None:  # fmt: skip
    """``supervise run`` with a supervise_submit login: one line naming the login and the
    role to grant, exit 1 (it used to start and retry "permission denied" forever)."""
    name, alice = _login(roles, "supervise_submit")
    cluster_profile(setup, alice, "h0")
    done = supervise("run", str(setup.profile), "--exit-when-idle")
    assert done.returncode == 1
    assert done.stderr == (f"supervise run: the database login '{name}' cannot run an engine "
                           "(it may not update tasks or write heartbeats); grant it the "
                           "supervise_engine role ('supervise cluster roles')\n")  # fmt: skip


def test_engine_refuses_a_login_missing_any_grant(setup: Setup, roles: str) -> None:
    """A login given the four rights the first check looks at (update tasks, write
    heartbeats and events, update jobs) but not the rest of supervise_engine's: ``run``
    names a missing grant and the GRANT that fixes it, exit 1, and starts with the role."""
    name, bob = _login(roles, "supervise_submit")
    with psycopg.connect(roles, autocommit=True) as conn:
        for grant in FIRST_CHECK:
            conn.execute(f"GRANT {grant} TO {name}")
    cluster_profile(setup, bob, "h0")
    done = supervise("run", str(setup.profile), "--exit-when-idle")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    lacks = f"supervise run: the database login '{name}' lacks what supervise_engine grants: "
    assert done.stderr.startswith(lacks)
    assert f"fix: GRANT supervise_engine TO {name}" in done.stderr
    with psycopg.connect(roles, autocommit=True) as conn:
        conn.execute(f"GRANT supervise_engine TO {name}")
    assert supervise("run", str(setup.profile), "--exit-when-idle").returncode == 0


def test_operator_stops_a_task_no_host_has_claimed(setup: Setup, roles: str) -> None:
    """A task pinned to a host that never comes waits ``queued``: carol (operator) stops it
    (abandoned, its waiting job cancelled, ``wait`` ends); alice (submit) may not."""
    _, alice = _login(roles, "supervise_submit")
    _, carol = _login(roles, "supervise_operator")
    task_id = _submit_as(setup, alice, "pinned", "exit: 0", host="nowhere")
    refused = supervise("stop", task_id, env={"SUPERVISE_CLUSTER_DSN": alice})
    assert refused.returncode == 1 and "permission denied" in refused.stderr
    assert refused.stderr.count("\n") == 1
    stopped = supervise("stop", task_id, env={"SUPERVISE_CLUSTER_DSN": carol})
    assert (stopped.returncode, stopped.stdout) == (
        0, f"{task_id}: abandoned (stopped before any host claimed it)\n")  # fmt: skip
    assert rows(roles, "SELECT state, verdict FROM supervise_tasks") == [("abandoned", "ABANDONED")]
    assert rows(roles, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'") == [(0,)]
    again = supervise("stop", task_id, env={"SUPERVISE_CLUSTER_DSN": carol})
    assert again.returncode == 1 and "already ended: abandoned" in again.stderr
    waited = supervise("wait", task_id, "--timeout", "5", env={"SUPERVISE_CLUSTER_DSN": carol})
    assert waited.returncode == 1 and "abandoned" in waited.stdout


def test_the_accounts_table_is_the_engine_roles_and_checked(roles: str) -> None:
    """Issue 26 (the fleet's account limits, schema v8): supervise_engine notes a limit and
    takes a start in ``supervise_accounts``; a login without the role is told it lacks
    INSERT and UPDATE on it (``cluster check --role engine``, ``run``'s preflight);
    supervise_submit reads it (``hosts``) and may not write it."""
    import time

    from psycopg_pool import ConnectionPool

    from supervisor.cluster.accountstore import AccountStore, limited
    from supervisor.cluster.roles import missing_rights

    _, bob = _login(roles, "supervise_engine")
    _, alice = _login(roles, "supervise_submit")
    with ConnectionPool(bob, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        store = AccountStore(pool, "h0")
        assert store.note("acct-0123456789ab", time.time() + 600, "t1") is True
        assert store.start("acct-0123456789ab", 5.0) is False  # before the reset
    [line] = limited(alice)
    assert line.startswith("acct-0123456789ab: account limited until")
    with psycopg.connect(alice) as conn:
        lacks = missing_rights(conn, "supervise_engine")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE supervise_accounts SET until = 0")
    assert lacks is not None
    assert {"INSERT on table supervise_accounts", "UPDATE on table supervise_accounts"} <= set(
        lacks
    ), lacks
