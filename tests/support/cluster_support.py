"""A throwaway PostgreSQL server for the cluster tests, from the Debian ``postgresql``
binaries (``/usr/lib/postgresql/<major>/bin``), driven by pytest-postgresql's
:class:`PostgreSQLExecutor` (``pg_ctl initdb``, ``start -w``, ``stop``).

``initdb`` refuses to run as root ("cannot be run as root"), and CI runs as root: then every
``pg_ctl`` call goes through ``runuser -u postgres --`` (a small wrapper script handed to the
executor as its ``pg_ctl``), and the data and socket folders are owned by ``postgres``.
The server listens on loopback only (``listen_addresses=127.0.0.1``: pytest-postgresql's
readiness check is a TCP connect) and on its unix socket in a private temp folder, which is
what the tests connect to; nothing can connect from beyond this machine.

No server binaries: the tests are skipped, unless ``SUPERVISE_REQUIRE_POSTGRES=1`` (set by
``.ci/run``), which makes that a failure.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def pg_bin() -> Path | None:
    """The newest ``/usr/lib/postgresql/<major>/bin`` holding ``pg_ctl``, or ``None``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parent.parent.name))  # fmt: skip
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    """A free loopback port (the socket file is ``.s.PGSQL.<port>`` too)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(dsn: str, timeout: float = 30) -> None:
    """Until the server accepts a session (``pg_ctl start`` and a TCP connect succeed while
    it still answers "the database system is starting up")."""
    import time

    import psycopg

    end = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(dsn, connect_timeout=5).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a private server; yield its DSN (unix socket, user ``postgres``, trust auth)."""
    with postgres_executor() as (dsn, _):
        yield dsn


@contextlib.contextmanager
def postgres_executor(max_connections: int = 200) -> Iterator[tuple[str, Any]]:
    """:func:`postgres_server`, also yielding its executor (``stop()``, then ``start()``
    again on the same data folder: a restart of the server); ``max_connections`` is the
    server's (issue 25's out-of-slots test starts one with a few)."""
    from pytest_postgresql.executors.proc import PostgreSQLExecutor

    binaries = pg_bin()
    if binaries is None:
        if os.environ.get("SUPERVISE_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL server binaries not found (apt-get install postgresql)")
        pytest.skip("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin)")
    base = Path(tempfile.mkdtemp(prefix="supervise-pg-"))
    pg_ctl = str(binaries / "pg_ctl")
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        owner = pwd.getpwnam("postgres")
        os.chown(base, owner.pw_uid, owner.pw_gid)
        wrapper = Path(tempfile.mkdtemp(prefix="supervise-pgctl-")) / "pg_ctl"
        wrapper.write_text(f'#!/bin/sh\nexec runuser -u postgres -- {pg_ctl} "$@"\n')
        wrapper.chmod(0o755)
        pg_ctl = str(wrapper)
    port = _free_port()
    executor = PostgreSQLExecutor(
        executable=pg_ctl,
        host="127.0.0.1",
        port=port,
        datadir=str(base / "data"),
        unixsocketdir=str(base),
        logfile=str(base / "server.log"),
        startparams="-w",
        dbname="supervise",
        postgres_options=(
            f" -c listen_addresses=127.0.0.1 -c max_connections={max_connections} -c fsync=off"
        ),
    )
    executor.start()
    try:
        import psycopg

        admin = f"host={base} port={port} user=postgres dbname=postgres"
        wait_ready(admin)
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute("CREATE DATABASE supervise")
        yield f"host={base} port={port} user=postgres dbname=supervise", executor
    finally:
        with contextlib.suppress(Exception):
            executor.stop()
        shutil.rmtree(base, ignore_errors=True)
        if pg_ctl != str(binaries / "pg_ctl"):
            shutil.rmtree(Path(pg_ctl).parent, ignore_errors=True)


@contextlib.contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new, empty database on ``server`` (a DSN naming ``dbname=supervise``) for one
    test; yields its DSN; dropped afterwards ``WITH (FORCE)`` (engines may hold sessions)."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield server.replace("dbname=supervise", f"dbname={name}")
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
