"""Connections to the fleet's database: every one bounded by timeouts.

libpq's ``connect_timeout`` (seconds) bounds the connect; the server's
``statement_timeout`` (milliseconds) bounds each statement, so a wedged database never
holds a caller longer than :data:`CONNECT_TIMEOUT` + :data:`STATEMENT_TIMEOUT`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg

from supervisor.config.cluster import cluster_dsn
from supervisor.errors import SuperviseError

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: Seconds to wait for a connection (libpq ``connect_timeout``; libpq's minimum is 2).
CONNECT_TIMEOUT = 5
#: Seconds any one statement may run.
STATEMENT_TIMEOUT = 10.0


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


def connect(dsn: str, autocommit: bool = True) -> psycopg.Connection:
    """A connection with both timeouts set.

    Raises:
        ClusterError: the server cannot be reached (libpq's message, one line).
    """
    try:
        return psycopg.connect(
            dsn,
            autocommit=autocommit,
            connect_timeout=CONNECT_TIMEOUT,
            options=f"-c statement_timeout={int(STATEMENT_TIMEOUT * 1000)}",
        )
    except psycopg.Error as exc:
        raise ClusterError(f"cannot connect to the cluster database: {one_line(exc)}") from exc


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
