"""Our tables, versioned, and procrastinate's schema: ``supervise cluster init`` / ``check``.

Re-runnable: everything is applied in one transaction under an advisory lock (two inits at
once wait for each other), procrastinate's schema only when its ``procrastinate_jobs``
table is absent (its ``schema.sql`` is not idempotent), and each of our migrations once, in
order, recorded in ``supervise_schema_version``.

Tables:

* ``supervise_tasks``: one row per submitted task: its validated spec (JSON, prompt inline),
  ``state`` (``queued`` until a host claims it, then the manifest's status), the
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

#: ``pg_advisory_xact_lock`` key of ``cluster init`` ("supv" in ASCII).
INIT_LOCK = 0x73757076

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE supervise_tasks (
            id text PRIMARY KEY,
            name text NOT NULL,
            spec jsonb NOT NULL,
            host text,
            queue text NOT NULL,
            state text NOT NULL DEFAULT 'queued',
            owner_host text,
            generation integer NOT NULL DEFAULT 0,
            submitted_at timestamptz NOT NULL DEFAULT now(),
            claimed_at timestamptz,
            updated_at timestamptz NOT NULL DEFAULT now(),
            session_id text,
            started_at text,
            finished_at text,
            exit_code integer,
            retry_count integer,
            failure_reason text,
            verdict text,
            error text
        );
        CREATE INDEX supervise_tasks_owner ON supervise_tasks (owner_host, state);
        CREATE TABLE supervise_events (
            id bigserial PRIMARY KEY,
            transition_id text NOT NULL UNIQUE,
            task_id text NOT NULL,
            host_id text NOT NULL,
            generation integer NOT NULL,
            event text NOT NULL,
            state text,
            at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX supervise_events_task ON supervise_events (task_id);
        CREATE TABLE supervise_hosts (
            host_id text PRIMARY KEY,
            heartbeat_at timestamptz NOT NULL DEFAULT now(),
            started_at timestamptz NOT NULL DEFAULT now(),
            capacity integer NOT NULL,
            running integer NOT NULL DEFAULT 0,
            version text,
            queues text[] NOT NULL DEFAULT '{}',
            last_error text
        );
        """,
    ),
    (
        2,
        """
        ALTER TABLE supervise_hosts ADD COLUMN state text NOT NULL DEFAULT 'alive';
        ALTER TABLE supervise_hosts ADD COLUMN stopped_at timestamptz;
        ALTER TABLE supervise_hosts ADD COLUMN lost_at timestamptz;
        ALTER TABLE supervise_hosts ADD COLUMN host_timeout double precision NOT NULL
            DEFAULT 30;
        ALTER TABLE supervise_hosts ADD COLUMN on_host_lost text NOT NULL DEFAULT 'report';
        ALTER TABLE supervise_tasks ADD COLUMN restarted_from jsonb NOT NULL DEFAULT '[]';
        CREATE TABLE supervise_controls (
            id bigserial PRIMARY KEY,
            task_id text NOT NULL,
            host_id text NOT NULL,
            verb text NOT NULL,
            requested_by text,
            requested_at timestamptz NOT NULL DEFAULT now(),
            done_at timestamptz,
            ok boolean,
            result text
        );
        CREATE INDEX supervise_controls_pending ON supervise_controls (host_id)
            WHERE done_at IS NULL;
        """,
    ),
    (
        3,
        """
        CREATE FUNCTION supervise_cancel_queued(task text, requested_by text)
            RETURNS boolean
            LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
        AS $$
        DECLARE
            job bigint;
            gen integer;
        BEGIN
            UPDATE supervise_tasks SET state = 'abandoned', verdict = 'ABANDONED',
                error = 'stopped before any host claimed it (' || requested_by || ')',
                finished_at = to_char(now() AT TIME ZONE 'UTC',
                                      'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                updated_at = now()
            WHERE id = task AND state = 'queued' RETURNING generation INTO gen;
            IF NOT FOUND THEN
                RETURN false;
            END IF;
            FOR job IN SELECT id FROM procrastinate_jobs
                       WHERE queueing_lock = task AND status = 'todo' LOOP
                PERFORM procrastinate_cancel_job_v1(job, false, true);
            END LOOP;
            INSERT INTO supervise_events (transition_id, task_id, host_id, generation, event,
                                          state)
            VALUES ('cancel:' || task || ':' || gen, task, '', gen, 'stopped', 'abandoned')
            ON CONFLICT (transition_id) DO NOTHING;
            RETURN true;
        END
        $$;
        REVOKE ALL ON FUNCTION supervise_cancel_queued(text, text) FROM PUBLIC;
        """,
    ),
)
#: The schema version this code needs.
SCHEMA_VERSION = MIGRATIONS[-1][0]

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS supervise_schema_version (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


@dataclass(frozen=True)
class InitResult:
    """What :func:`init` did: ``procrastinate`` (its schema applied now), the versions
    ``applied`` now, and the ``version`` the database is at."""

    procrastinate: bool
    applied: list[int]
    version: int


def _current_version(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT coalesce(max(version), 0) FROM supervise_schema_version").fetchone()
    return int(row[0]) if row else 0


def _has_procrastinate(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()
    return bool(row and row[0])


def init(dsn: str) -> InitResult:
    """Apply procrastinate's schema (when absent) and our pending migrations.

    Raises:
        ClusterError: the database refused (its message, one line); nothing is applied.
    """
    with connect(dsn, autocommit=False) as conn:
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (INIT_LOCK,))
            fresh = not _has_procrastinate(conn)
            if fresh:
                # The same SQL procrastinate's own `schema --apply` runs, in our transaction.
                conn.execute(App(connector=SyncPsycopgConnector()).schema_manager.get_schema())
            conn.execute(_VERSION_TABLE)
            current = _current_version(conn)
            applied = []
            for version, sql in MIGRATIONS:
                if version > current:
                    conn.execute(sql)
                    conn.execute(
                        "INSERT INTO supervise_schema_version (version) VALUES (%s)", (version,)
                    )
                    applied.append(version)
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
            server = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
            has_table = conn.execute(
                "SELECT to_regclass('supervise_schema_version') IS NOT NULL"
            ).fetchone()
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


#: What an engine writes (``supervise_engine`` in roles.sql grants these).
_ENGINE_RIGHTS = """
SELECT has_table_privilege('supervise_tasks', 'UPDATE')
    AND has_table_privilege('supervise_hosts', 'INSERT')
    AND has_table_privilege('supervise_events', 'INSERT')
    AND has_table_privilege('procrastinate_jobs', 'UPDATE'), current_user"""


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
            row = conn.execute(_ENGINE_RIGHTS).fetchone()
    except (ClusterError, psycopg.Error):
        return None
    if row is not None and not row[0]:
        return (
            f"the database login {row[1]!r} cannot run an engine (it may not update "
            "tasks or write heartbeats); grant it the supervise_engine role "
            "('supervise cluster roles')"
        )
    return host_id_in_use(dsn, host_id, heartbeat)


_BEAT = (
    "SELECT heartbeat_at, extract(epoch FROM now() - heartbeat_at)::float, host_timeout "
    "FROM supervise_hosts WHERE host_id = %s AND state = 'alive'"
)


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
            row = conn.execute(_BEAT, (host_id,)).fetchone()
            if row is None or row[1] > row[2]:
                return None
            deadline = time.monotonic() + 2 * heartbeat + 0.5
            while time.monotonic() < deadline:
                time.sleep(min(0.25, heartbeat / 4))
                now = conn.execute(_BEAT, (host_id,)).fetchone()
                if now is not None and now[0] != row[0]:
                    return (
                        f"host id {host_id!r} is in use by an engine that is running "
                        "(its heartbeat moves); give this engine its own "
                        "[cluster] host_id"
                    )
    except (ClusterError, psycopg.Error):
        return None
    return None
