"""Our tables, versioned, and procrastinate's schema: ``supervise cluster init`` / ``check``.

Re-runnable: everything is applied in one transaction under an advisory lock (two inits at
once wait for each other), procrastinate's schema only when its ``procrastinate_jobs``
table is absent (its ``schema.sql`` is not idempotent), and each of our migrations once, in
order, recorded in ``supervise_schema_version``. The migrations are the numbered files of
``supervisor/cluster/migrations/`` (:func:`supervisor.cluster.sqlfiles.migrations`), the
other statements named queries (:func:`supervisor.cluster.sqlfiles.query`).

Tables:

* ``supervise_tasks``: one row per submitted task: its validated spec (JSON, prompt inline),
  ``state`` (``queued`` until a host claims it, then the manifest's status; one of
  :class:`~supervisor.taskdir.states.FleetState`, a CHECK since v4), the
  ``owner_host`` and ``generation`` of the claim (:mod:`supervisor.cluster.intake`), the
  manifest's summary fields;
* ``supervise_events``: each transition a host reported (task, host, generation, event);
* ``supervise_hosts``: one row per host: heartbeat, capacity (``max_concurrent``), running
  count, version, queues, last error, ``state`` (``alive``, ``stopped`` after a clean stop,
  ``dead`` once the sweeper found no heartbeat for ``host_timeout``), ``stopped_at``,
  ``lost_at``, and the host's own ``host_timeout`` (seconds) and ``on_host_lost`` (each host
  declares how long its silence means loss and what becomes of its tasks then);
* ``supervise_controls``: operator requests (``stop``, ``resume``, ``approve``, ``deny``)
  routed to the host owning the task, with its answer (``done_at``, ``ok``, ``result``).

``supervise_cancel_queued(task, requested_by)`` (v3, ``SECURITY DEFINER``, granted to
``supervise_operator`` by roles.sql): ``stop`` of a task no host has claimed yet ends it
``abandoned`` and cancels its waiting job, without UPDATE rights on the tasks table.

``supervise_tasks.restarted_from`` lists the runs a task had on lost hosts (``on_host_lost =
"restart"``): ``[{"host_id", "generation", "session_id"}]``, oldest first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
from procrastinate import App, SyncPsycopgConnector
from procrastinate import __version__ as procrastinate_version

from supervisor.cluster.db import ClusterError, connect, one_line
from supervisor.cluster.sqlfiles import migrations, query

#: ``pg_advisory_xact_lock`` key of ``cluster init`` ("supv" in ASCII).
INIT_LOCK = 0x73757076

#: The schema version this code needs: the last file of ``migrations/``.
SCHEMA_VERSION = migrations()[-1].version


@dataclass(frozen=True)
class InitResult:
    """What :func:`init` did: ``procrastinate`` (its schema applied now), the versions
    ``applied`` now, and the ``version`` the database is at."""

    procrastinate: bool
    applied: list[int]
    version: int


def _current_version(conn: psycopg.Connection) -> int:
    row = conn.execute(query("schema_version")).fetchone()
    return int(row[0]) if row else 0


def _has_procrastinate(conn: psycopg.Connection) -> bool:
    row = conn.execute(query("has_procrastinate")).fetchone()
    return bool(row and row[0])


def init(dsn: str) -> InitResult:
    """Apply procrastinate's schema (when absent) and our pending migrations.

    Raises:
        ClusterError: the database refused (its message, one line); nothing is applied.
    """
    with connect(dsn, autocommit=False) as conn:
        try:
            conn.execute(query("init_lock"), (INIT_LOCK,))
            fresh = not _has_procrastinate(conn)
            if fresh:
                # The same SQL procrastinate's own `schema --apply` runs, in our transaction.
                conn.execute(App(connector=SyncPsycopgConnector()).schema_manager.get_schema())
            conn.execute(query("create_version_table"))
            current = _current_version(conn)
            applied = []
            for migration in migrations():
                if migration.version > current:
                    conn.execute(migration.sql)
                    conn.execute(query("record_version"), (migration.version,))
                    applied.append(migration.version)
            conn.commit()
        except psycopg.Error as exc:
            conn.rollback()
            raise ClusterError(f"cluster init failed: {one_line(exc)}") from exc
    return InitResult(fresh, applied, max(current, *applied) if applied else current)


@dataclass(frozen=True)
class CheckResult:
    """What :func:`check` found: the server's version, our schema version (0: none),
    whether procrastinate's tables exist, and ``problems`` (each one line with the fix)."""

    server: str
    version: int
    procrastinate: bool
    problems: list[str]


def check(dsn: str) -> CheckResult:
    """Connect and compare the schema with what this code needs.

    Raises:
        ClusterError: the database cannot be reached.
    """
    with connect(dsn) as conn:
        try:
            server = str(conn.execute(query("server_version")).fetchone()[0])  # type: ignore[index]
            has_table = conn.execute(query("has_version_table")).fetchone()
            version = _current_version(conn) if has_table and has_table[0] else 0
            procrastinate = _has_procrastinate(conn)
        except psycopg.Error as exc:
            raise ClusterError(f"cluster check failed: {one_line(exc)}") from exc
    problems = []
    if not procrastinate:
        problems.append("procrastinate's tables are missing; run 'supervise cluster init'")
    if version < SCHEMA_VERSION:
        problems.append(
            f"schema version {version}, this supervise needs {SCHEMA_VERSION}; "
            "run 'supervise cluster init'"
        )
    elif version > SCHEMA_VERSION:
        problems.append(
            f"schema version {version} is newer than this supervise knows "
            f"({SCHEMA_VERSION}); upgrade supervise on this host"
        )
    return CheckResult(server, version, procrastinate, problems)


def versions() -> dict[str, str]:
    """Library versions for ``cluster check`` and the hosts table."""
    return {"procrastinate": procrastinate_version, "psycopg": psycopg.__version__}


def engine_preflight(dsn: str, host_id: str, heartbeat: float) -> str | None:
    """Before ``supervise run`` starts a cluster engine: one line naming what is wrong and
    the fix when the database answers but cannot serve an engine (schema missing or of
    another version, a login without the engine's rights, ``host_id`` taken by an engine
    that is running: :func:`host_id_in_use`), else None. A database that does not answer is
    no reason to refuse: the engine starts, supervises its own tasks and dispatches once
    the database is back (issue 15, "PostgreSQL down")."""
    try:
        found = check(dsn)
    except ClusterError:
        return None
    if found.problems:
        return found.problems[0]
    try:
        with connect(dsn) as conn:
            row = conn.execute(query("engine_rights")).fetchone()
    except (ClusterError, psycopg.Error):
        return None
    if row is not None and not row[0]:
        return (
            f"the database login {row[1]!r} cannot run an engine (it may not update "
            "tasks or write heartbeats); grant it the supervise_engine role "
            "('supervise cluster roles')"
        )
    return host_id_in_use(dsn, host_id, heartbeat)


def host_id_in_use(dsn: str, host_id: str, heartbeat: float) -> str | None:
    """One line when another engine runs under ``host_id`` now, else None. Two engines
    with one id would share its queue and its heartbeat row, and each would take the
    other's tasks for lost. A row that beat within its ``host_timeout`` is watched for up
    to two of this profile's ``heartbeat`` periods (seconds): a heartbeat that moves is
    another engine's (this one has not started its writer yet); one that stays is this
    host's previous run, ended without a clean stop (SIGKILL, a crash), and no reason to
    refuse. Database errors are no reason either (None)."""
    try:
        with connect(dsn) as conn:
            row = conn.execute(query("alive_heartbeat"), (host_id,)).fetchone()
            if row is None or row[1] > row[2]:
                return None
            deadline = time.monotonic() + 2 * heartbeat + 0.5
            while time.monotonic() < deadline:
                time.sleep(min(0.25, heartbeat / 4))
                now = conn.execute(query("alive_heartbeat"), (host_id,)).fetchone()
                if now is not None and now[0] != row[0]:
                    return (
                        f"host id {host_id!r} is in use by an engine that is running "
                        "(its heartbeat moves); give this engine its own "
                        "[cluster] host_id"
                    )
    except (ClusterError, psycopg.Error):
        return None
    return None
