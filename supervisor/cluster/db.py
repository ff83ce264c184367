"""Connections to the fleet's database: every one bounded by timeouts.

libpq's ``connect_timeout`` (seconds) bounds the connect; the server's
``statement_timeout`` (milliseconds) bounds each statement, so a wedged database never
holds a caller longer than :data:`CONNECT_TIMEOUT` + :data:`STATEMENT_TIMEOUT`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import psycopg
from psycopg_pool import ConnectionPool

from supervisor.config.cluster import cluster_dsn
from supervisor.errors import SuperviseError

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: Seconds to wait for a connection (libpq ``connect_timeout``; libpq's minimum is 2).
CONNECT_TIMEOUT = 5
#: Seconds any one statement may run.
STATEMENT_TIMEOUT = 10.0
#: What every connection of ours starts its ``application_name`` with
#: (``pg_stat_activity``): ``supervise:<host_id>:<role>`` for an engine's
#: (:func:`application_name`), ``supervise:cli`` for a command's.
APPLICATION_PREFIX = "supervise"
#: The one line for a database that ``supervise cluster init`` has not set up (a query met
#: PostgreSQL's ``undefined_table``, SQLSTATE 42P01).
NO_TABLES = "the cluster database has no supervise tables; run 'supervise cluster init -c PROFILE'"

#: Where a connection comes from: a DSN (a new connection, closed after use: the CLI, the
#: tests) or the engine's shared pool (:mod:`supervisor.cluster.connections`).
Source = str | ConnectionPool


class ClusterError(SuperviseError, RuntimeError):
    """The database cannot be reached or answered with an error (one line, for the CLI)."""


def dsn_of(profile: LoadedProfile) -> str:
    """The profile's DSN (``SUPERVISE_CLUSTER_DSN`` first).

    Raises:
        ConfigError: the profile has no ``[cluster]`` or no DSN.
    """
    from supervisor.errors import ConfigError

    if profile.spec.cluster is None:
        raise ConfigError([f"{profile.path}: no [cluster] table; add one to use the fleet"])
    return cluster_dsn(profile.spec.cluster, profile.path)


def application_name(host_id: str | None = None, role: str = "cli") -> str:
    """``supervise:<host_id>:<role>`` (an engine's connection: ``pool`` or ``listen``), or
    ``supervise:cli`` (a command's): how ``pg_stat_activity`` counts them. PostgreSQL keeps
    the first 63 bytes (``NAMEDATALEN``)."""
    if host_id is None:
        return f"{APPLICATION_PREFIX}:{role}"
    return f"{APPLICATION_PREFIX}:{host_id}:{role}"


def connect_kwargs(name: str) -> dict[str, object]:
    """psycopg connect arguments of every connection of ours: both timeouts, the name."""
    return {
        "connect_timeout": CONNECT_TIMEOUT,
        "application_name": name,
        "options": f"-c statement_timeout={int(STATEMENT_TIMEOUT * 1000)}",
    }


def connect(dsn: str, autocommit: bool = True, name: str | None = None) -> psycopg.Connection:
    """A connection with both timeouts set, named ``name`` (default ``supervise:cli``).

    Raises:
        ClusterError: the server cannot be reached (libpq's message, one line).
    """
    try:
        return psycopg.connect(
            dsn, autocommit=autocommit, **connect_kwargs(name or application_name())
        )
    except psycopg.Error as exc:
        raise ClusterError(f"cannot connect to the cluster database: {one_line(exc)}") from exc


def acquire(source: Source) -> psycopg.Connection:
    """A connection (autocommit) from ``source``: the pool's (waiting at most its
    ``timeout``), or a new one. Give it back with :func:`release`.

    Raises:
        ClusterError: none could be had (the database down, or out of connections).
    """
    if isinstance(source, str):
        return connect(source)
    try:
        return source.getconn()
    except psycopg.Error as exc:  # psycopg_pool.PoolTimeout is an OperationalError
        raise ClusterError(f"no connection to the cluster database: {one_line(exc)}") from exc


def release(source: Source, conn: psycopg.Connection) -> None:
    """Give back a connection from :func:`acquire` (closed when it was a new one)."""
    if isinstance(source, str):
        conn.close()
    else:
        source.putconn(conn)


@contextmanager
def borrow(source: Source) -> Iterator[psycopg.Connection]:
    """:func:`acquire` for the block, then :func:`release` (autocommit: a block that
    needs a transaction opens one with ``conn.transaction()``).

    Raises:
        ClusterError: as :func:`acquire`.
    """
    conn = acquire(source)
    try:
        yield conn
    finally:
        release(source, conn)


def one_line(exc: BaseException) -> str:
    """The first line of an error's text (libpq's messages run over several), followed by
    its cause's when it has one: procrastinate wraps every psycopg error in a bare
    "Database error." (``ConnectorException``), which alone names nothing."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    cause = exc.__cause__
    if cause is not None and cause is not exc:
        inner = one_line(cause)
        if inner and inner not in line:  # a message that quotes its cause already stays
            return f"{line.rstrip('.:')}: {inner}"
    return line
