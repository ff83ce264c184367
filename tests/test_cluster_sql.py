"""The fleet's SQL in files (issue 23, item 2): named queries in
``supervisor/cluster/sql/queries.sql``, numbered migrations in
``supervisor/cluster/migrations/``, loaded by :mod:`supervisor.cluster.sqlfiles`; a CHECK on
``supervise_tasks.state`` that lists exactly :class:`~supervisor.taskdir.states.FleetState`;
and a database made by the code before the files (schema version 3) migrated without loss.

The guards need no server; the migration tests run against a real PostgreSQL
(``tests/cluster_support.py``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cluster_support import fresh_database, postgres_server

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "supervisor" / "cluster"
#: A string that starts with one of these (upper case, as SQL is written here) is SQL.
SQL_START = re.compile(
    r"\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|GRANT|REVOKE|LISTEN|NOTIFY|SHOW|WITH)\b"
)


def _strings(path: Path) -> Iterator[tuple[int, str]]:
    """Every string constant of a module, f-strings' literal parts included, except
    docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.lineno, node.value


def test_no_sql_literal_in_the_product_modules() -> None:
    """Every statement sent to the fleet's database (the cluster's and the board's) is a
    named query or a migration file; the modules of ``supervisor/`` hold none (62 string
    constants on the base of issue 23, 3 of them in ``views/fleet.py``; the issue counted
    63 pieces)."""
    found = [
        f"{path.relative_to(REPO)}:{line}: {text.strip().splitlines()[0]}"
        for path in sorted((REPO / "supervisor").rglob("*.py"))
        for line, text in _strings(path)
        if SQL_START.match(text)
    ]
    assert found == []


def test_every_named_query_is_used_and_every_name_used_exists() -> None:
    from supervisor.cluster.sqlfiles import queries

    used = set()
    for path in (REPO / "supervisor").rglob("*.py"):
        used |= set(re.findall(r'\bquery\("([a-z0-9_]+)"\)', path.read_text(encoding="utf-8")))
    assert "listen" in queries()  # used through sqlfiles.listen(channel)
    assert used | {"listen"} == set(queries())


def test_query_file_format() -> None:
    from supervisor.cluster.sqlfiles import parse_queries

    text = "-- header %s\n\n-- one --\n-- what it does, 100 %\nSELECT 1;\n-- two --\nSELECT 2\n"
    assert parse_queries(text) == {"one": "SELECT 1;", "two": "SELECT 2"}
    with pytest.raises(ValueError, match="'one' is defined twice"):
        parse_queries(text + "-- one --\nSELECT 3;\n")


def test_migrations_are_numbered_files_and_the_last_is_the_schema_version() -> None:
    from supervisor.cluster.schema import SCHEMA_VERSION
    from supervisor.cluster.sqlfiles import migrations

    found = migrations()
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    assert [m.name for m in found] == sorted(p.name for p in (CLUSTER / "migrations").glob("*.sql"))
    assert SCHEMA_VERSION == found[-1].version == len(found)


def test_fleet_states_extend_the_statuses() -> None:
    from supervisor.taskdir.states import (
        FINAL,
        HOST_LOST,
        SPOOL_ONLY,
        TERMINAL,
        UNCLAIMED,
        FleetState,
        Status,
    )

    assert {s.value for s in Status} - SPOOL_ONLY < {s.value for s in FleetState}
    assert not SPOOL_ONLY & {s.value for s in FleetState}
    assert FleetState.HOST_LOST == HOST_LOST
    # the sets control.py and sweeper.py held before issue 23
    assert {"completed", "failed", "abandoned", "host_lost", "rejected", "superseded"} == FINAL
    assert {"queued", "claimed"} == UNCLAIMED
    assert TERMINAL <= FINAL and not FINAL & UNCLAIMED


# ---------------------------------------------------------------- against PostgreSQL


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture
def dsn(server: str) -> Iterator[str]:
    with fresh_database(server) as url:
        yield url


def test_the_check_lists_exactly_the_fleet_states(dsn: str) -> None:
    import psycopg

    from supervisor.cluster import schema
    from supervisor.cluster.schema import SCHEMA_VERSION
    from supervisor.taskdir.states import FleetState

    assert schema.init(dsn).version == SCHEMA_VERSION
    with psycopg.connect(dsn) as conn:
        (definition,) = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conname = 'supervise_tasks_state_check'"
        ).fetchone()
        assert set(re.findall(r"'([a-z_]+)'::text", definition)) == {s.value for s in FleetState}
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "INSERT INTO supervise_tasks (id, name, spec, queue, state) "
                "VALUES ('t1', 't', '{}', 'default', 'lost')"
            )


def _v3_database(dsn: str) -> None:
    """What ``supervise cluster init`` made before issue 23: procrastinate's schema, then
    schema versions 1-3 (the same statements, now ``migrations/0001``-``0003``), recorded."""
    import psycopg
    from procrastinate import App, SyncPsycopgConnector

    from supervisor.cluster.sqlfiles import migrations, query

    with psycopg.connect(dsn, autocommit=False) as conn:
        conn.execute(App(connector=SyncPsycopgConnector()).schema_manager.get_schema())
        conn.execute(query("create_version_table"))
        for migration in migrations()[:3]:
            conn.execute(migration.sql)
            conn.execute(query("record_version"), (migration.version,))


def _tables(dsn: str) -> dict[str, list[tuple]]:
    import psycopg

    names = ("supervise_tasks", "supervise_events", "supervise_hosts", "supervise_controls")
    with psycopg.connect(dsn) as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in names}


def test_a_version_3_fleet_database_migrates_without_loss(dsn: str) -> None:
    """A fleet database of schema version 3 with a task in every state, its events, a host
    and a control request: ``init`` applies v4 and later only, and every row is as it was."""
    import psycopg

    from supervisor.cluster import schema
    from supervisor.cluster.schema import SCHEMA_VERSION
    from supervisor.taskdir.states import FleetState

    _v3_database(dsn)
    with psycopg.connect(dsn) as conn:
        for n, state in enumerate(FleetState):
            conn.execute(
                "INSERT INTO supervise_tasks (id, name, spec, queue, state, owner_host, "
                "generation, exit_code, restarted_from) VALUES (%s, %s, %s, 'default', %s, "
                "'h1', %s, %s, '[{\"host_id\": \"h0\"}]')",
                (f"t{n}", f"task {n}", '{"prompt": "p"}', state.value, n, n % 3),
            )
            conn.execute(
                "INSERT INTO supervise_events (transition_id, task_id, host_id, generation, "
                "event, state) VALUES (%s, %s, 'h1', %s, 'launched', %s)",
                (f"x{n}", f"t{n}", n, state.value),
            )
        conn.execute(
            "INSERT INTO supervise_hosts (host_id, capacity, state, host_timeout) "
            "VALUES ('h1', 2, 'dead', 12.5)"
        )
        conn.execute(
            "INSERT INTO supervise_controls (task_id, host_id, verb) VALUES ('t1', 'h1', 'stop')"
        )
    before = _tables(dsn)
    assert schema.check(dsn).version == 3
    done = schema.init(dsn)
    assert (done.procrastinate, done.applied, done.version) == (
        False,
        list(range(4, SCHEMA_VERSION + 1)),
        SCHEMA_VERSION,
    )
    after = _tables(dsn)
    # v5 and v6 (issue 25) add supervise_hosts.connections and .stopped_host_grace: NULL for
    # a host of an earlier version, until its next heartbeat
    width = len(before["supervise_hosts"][0])
    assert [row[:width] for row in after["supervise_hosts"]] == before["supervise_hosts"]
    assert all(set(row[width:]) == {None} for row in after["supervise_hosts"])
    assert {**after, "supervise_hosts": before["supervise_hosts"]} == before
    assert len(before["supervise_tasks"]) == len(FleetState)
    assert schema.check(dsn).problems == []
