"""Operations of the fleet (issue 25 part 6): ``cluster check`` checks the login's rights
for its role, permission errors name the role needed, ``submit --retry-for`` rides out a
PostgreSQL restart storing the task once, and ``project_dir`` is checked on the host that
runs the task (``submit --check-local`` for the check on the submitting machine). Real
PostgreSQL (tests/support/cluster_support.py), real roles, real CLI and engine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
import tomli_w
from conftest import Setup, read_line, wait_for
from support.cluster_engines import (
    cluster_profile,
    dsn,
    rows,
    server,
    start_engine,
    stop_engines,
    supervise,
)
from support.cluster_support import postgres_executor

psycopg = pytest.importorskip("psycopg")
__all__ = ["dsn", "server"]  # the fixtures, imported for this module


def _login(dsn: str, group: str | None) -> tuple[str, str]:
    """A new login role in ``group`` (none: no role at all); ``(name, its DSN)``."""
    name = f"u_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN" + (f" IN ROLE {group}" if group else ""))
    return name, dsn.replace("user=postgres", f"user={name}")


@pytest.fixture
def roles(dsn: str) -> Iterator[str]:
    """The schema and the roles applied on a fresh database."""
    env = {"SUPERVISE_CLUSTER_DSN": dsn}
    assert supervise("cluster", "init", env=env).returncode == 0
    assert supervise("cluster", "roles", "--apply", env=env).returncode == 0
    yield dsn


# ---------------------------------------------------------------- cluster check --role


def test_check_names_the_grant_a_host_login_lacks(setup: Setup, roles: str) -> None:
    """An engine profile with a supervise_submit login fails ``cluster check`` naming what
    supervise_engine grants and the GRANT to run; an engine login passes; ``--role submit``
    passes for the submit login; a login with no role fails ``--role submit``."""
    alice_name, alice = _login(roles, "supervise_submit")
    _, bob = _login(roles, "supervise_engine")
    _, carol = _login(roles, "supervise_operator")
    nobody_name, nobody = _login(roles, None)
    wrong = supervise("cluster", "check", "-c", str(cluster_profile(setup, alice, "h0")))
    assert wrong.returncode == 1
    assert wrong.stderr.count("\n") == 1, wrong.stderr
    assert f"the database login '{alice_name}' lacks what supervise_engine grants: " in wrong.stderr
    assert " on table procrastinate_" in wrong.stderr and " more; fix" in wrong.stderr
    assert f"fix: GRANT supervise_engine TO {alice_name}" in wrong.stderr
    right = supervise("cluster", "check", "-c", str(cluster_profile(setup, bob, "h0")))
    assert right.returncode == 0, right.stderr
    assert "rights: the login has what supervise_engine grants" in right.stdout
    for login, role in ((alice, "submit"), (carol, "operator"), (carol, "submit")):
        done = supervise("cluster", "check", "--role", role, env={"SUPERVISE_CLUSTER_DSN": login})
        assert done.returncode == 0, (role, done.stderr)
    refused = supervise(
        "cluster", "check", "--role", "operator", "--json", env={"SUPERVISE_CLUSTER_DSN": alice}
    )
    assert refused.returncode == 1
    [problem] = json.loads(refused.stdout)["problems"]
    assert "INSERT on table supervise_controls" in problem
    assert "UPDATE on column supervise_controls.done_at" in problem
    none = supervise("cluster", "check", "--role", "submit", env={"SUPERVISE_CLUSTER_DSN": nobody})
    assert none.returncode == 1 and f"GRANT supervise_submit TO {nobody_name}" in none.stderr


def test_check_without_roles_says_the_rights_were_not_checked(dsn: str) -> None:
    """A fleet run with one trusted login and no roles applied: ``cluster check`` passes
    and says the rights were not checked (the roles are server-wide: a test before this
    one on the server may have made them, and then the owner has every right)."""
    env = {"SUPERVISE_CLUSTER_DSN": dsn}
    assert supervise("cluster", "init", env=env).returncode == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        applied = conn.execute("SELECT to_regrole('supervise_engine') IS NOT NULL").fetchone()
    done = supervise("cluster", "check", env=env)
    assert done.returncode == 0, done.stderr
    if applied and applied[0]:
        assert "rights: the login has what supervise_engine grants" in done.stdout
    else:
        assert "rights: not checked: no role supervise_engine" in done.stdout


# ---------------------------------------------------------------- permission errors


def test_permission_errors_name_the_role_needed(setup: Setup, roles: str) -> None:
    """Each command a login may not run says, in one line, which role it needs and the
    GRANT: stop (operator), hosts and status --cluster (submit), submit (submit), cluster
    prune (engine)."""
    alice_name, alice = _login(roles, "supervise_submit")
    nobody_name, nobody = _login(roles, None)
    with psycopg.connect(roles, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO supervise_tasks (id, name, spec, queue, state, owner_host) "
            "VALUES ('t-0a0b0c', 't', '{}', 'supervise', 'running', 'h0')"
        )
        conn.execute("INSERT INTO supervise_hosts (host_id, capacity) VALUES ('h0', 1)")
    cases = [
        (alice_name, alice, ["stop", "t-0a0b0c"], "supervise_operator"),
        (alice_name, alice, ["cluster", "prune", "--older-than", "1d"], "supervise_engine"),
        (nobody_name, nobody, ["hosts"], "supervise_submit"),
        (nobody_name, nobody, ["status", "--cluster"], "supervise_submit"),
    ]
    for name, login, argv, role in cases:
        done = supervise(*argv, env={"SUPERVISE_CLUSTER_DSN": login})
        assert done.returncode == 1, (argv, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"it needs the {role} role" in done.stderr, (argv, done.stderr)
        assert f"GRANT {role} TO {name}" in done.stderr and "permission denied" in done.stderr
    task = setup.root / "t.toml"
    task.write_text(tomli_w.dumps(setup.task("a", "exit: 0")))
    done = supervise("submit", "-c", str(cluster_profile(setup, nobody, "h0")), str(task))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "it needs the supervise_submit role; as the database's owner run GRANT" in done.stderr
    assert rows(roles, "SELECT count(*) FROM supervise_tasks") == [(1,)]


# ---------------------------------------------------------------- project_dir on the host


def test_project_dir_is_checked_on_the_host_that_runs_the_task(setup: Setup, roles: str) -> None:
    """A submit naming a folder the submitting machine lacks is stored (it may exist on
    the hosts); ``--check-local`` refuses it as before; the host that claims it rejects it
    with one line naming the folder and the host, in its log and in ``supervise show``."""
    profile = cluster_profile(setup, roles, "h0")
    elsewhere = f"/nonexistent-{uuid.uuid4().hex[:6]}/repo"
    argv = ["submit", "-c", str(profile), "--prompt", "exit: 0", "--project", elsewhere]
    local = supervise(*argv, "--check-local")
    assert local.returncode == 1 and "does not exist" in local.stderr, local.stderr
    assert rows(roles, "SELECT count(*) FROM supervise_tasks") == [(0,)]
    done = supervise(*argv, "--name", "far")
    assert done.returncode == 0, done.stderr
    task_id = done.stdout.strip()
    [(spec,)] = rows(roles, "SELECT spec FROM supervise_tasks WHERE id = %s", task_id)
    assert spec["project_dir"] == elsewhere
    engine = start_engine(setup)
    try:
        state = "SELECT state FROM supervise_tasks WHERE id = %s"
        wait_for(lambda: rows(roles, state, task_id) == [("rejected",)], timeout=60)
    finally:
        stop_engines([engine])
    shown = supervise("show", task_id, env={"SUPERVISE_CLUSTER_DSN": roles})
    assert shown.returncode == 0, shown.stderr
    error = json.loads(shown.stdout)["error"]
    assert error.count("\n") == 0 and elsewhere in error and "host h0" in error, error
    log = (setup.root / "engine.log").read_text()
    [line] = [line for line in log.splitlines() if f"rejected {task_id}" in line]
    assert elsewhere in line and "host h0" in line, line


# ---------------------------------------------------------------- submit --retry-for


def test_submit_retry_for_rides_out_a_restart_and_stores_the_task_once(setup: Setup) -> None:
    """PostgreSQL is down when ``submit --retry-for 60`` starts: it says so in one line and
    tries again; the server comes back; the task is stored once, with one job."""
    with postgres_executor() as (url, executor):
        env = {"SUPERVISE_CLUSTER_DSN": url}
        assert supervise("cluster", "init", env=env).returncode == 0
        profile = cluster_profile(setup, url, "h0")
        task = setup.root / "t.toml"
        task.write_text(tomli_w.dumps(setup.task("r", "exit: 0")))
        executor.stop()
        argv = [sys.executable, "-m", "supervisor.cli", "submit", "-c", str(profile), str(task)]
        process = subprocess.Popen(
            [*argv, "--retry-for", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert process.stderr is not None
            said = read_line(process.stderr)  # written at its first failed try
            assert said.startswith("supervise submit: cannot connect to the cluster database")
            assert said.rstrip().endswith("s") and "retrying for up to" in said
            executor.start()
            out, rest = process.communicate(timeout=90)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == 0, said + rest
        assert rest == ""
        task_id = out.strip()
        assert rows(url, "SELECT id FROM supervise_tasks") == [(task_id,)]
        assert rows(url, "SELECT queueing_lock FROM procrastinate_jobs") == [(task_id,)]
        executor.stop()
        down = supervise("submit", "-c", str(profile), str(task), "--retry-for", "0")
        assert down.returncode == 1 and down.stderr.count("\n") == 1, down.stderr
        executor.start()


def test_a_retry_after_a_commit_whose_answer_was_lost_stores_nothing_more(
    setup: Setup, roles: str
) -> None:
    """The try that follows a commit that went through (its answer lost) finds its own row
    under the same id and spec and stops: one row, one job. Another task's row under that
    id is no match (an id clash draws a new id)."""
    from supervisor.cluster.submit import _submit_once

    profile = cluster_profile(setup, roles, "h0")
    assert profile.exists()
    doc = json.dumps({"name": "x", "prompt": "p", "project_dir": "/p"})
    first = _submit_once(roles, "x-0a0b0c", "x", doc, None, "supervise")
    again = _submit_once(roles, "x-0a0b0c", "x", doc, None, "supervise")
    assert again == first
    assert rows(roles, "SELECT count(*) FROM supervise_tasks") == [(1,)]
    assert rows(roles, "SELECT count(*) FROM procrastinate_jobs") == [(1,)]
    assert (
        _submit_once(roles, "x-0a0b0c", "x", doc.replace('"p"', '"q"'), None, "supervise") is None
    )


def test_retry_for_does_not_retry_a_refusal(setup: Setup, roles: str) -> None:
    """A permission error is no outage: ``--retry-for`` fails at once, one line."""
    _, nobody = _login(roles, None)
    task = setup.root / "t.toml"
    task.write_text(tomli_w.dumps(setup.task("a", "exit: 0")))
    profile = cluster_profile(setup, nobody, "h0")
    done = supervise("submit", "-c", str(profile), str(task), "--retry-for", "600", timeout=30)
    assert done.returncode == 1 and "retrying" not in done.stderr
    assert "supervise_submit" in done.stderr and done.stderr.count("\n") == 1


def test_retry_for_needs_a_cluster_profile(setup: Setup) -> None:
    task = setup.root / "t.toml"
    task.write_text(tomli_w.dumps(setup.task("a", "exit: 0")))
    profile = setup.write_profile()
    done = setup.supervise("submit", "-c", str(profile), str(task), "--retry-for", "5")
    assert done.returncode != 0
    assert "--retry-for is for a [cluster] profile" in done.stderr
