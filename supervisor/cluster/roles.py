"""``supervise cluster roles``: the SQL of the fleet's three group roles (``roles.sql``,
shipped in the package), printed for an admin to read, or applied with ``--apply``.

* ``supervise_submit``: read every table, insert a task, defer its procrastinate job;
* ``supervise_operator``: ``supervise_submit``, plus control requests routed to another
  host (``stop``/``resume``/``approve``/``deny``: :mod:`supervisor.cluster.control`);
* ``supervise_engine``: what ``supervise run`` with ``[cluster]`` writes, and procrastinate's
  worker tables, sequences and functions.

All are ``NOLOGIN``: an admin grants them to login roles. The file is re-runnable (roles
created only when absent; grants are idempotent in PostgreSQL) and must run after
``supervise cluster init`` (it grants on the tables init made). Whoever can insert into
``supervise_tasks`` can run agents on every host: the trust model (README "Several hosts").
"""

from __future__ import annotations

from importlib import resources

import psycopg

from supervisor.cluster.db import ClusterError, connect, one_line
from supervisor.cluster.schema import INIT_LOCK
from supervisor.cluster.sqlfiles import query

#: The roles the SQL creates.
ROLES = ("supervise_submit", "supervise_operator", "supervise_engine")


def sql() -> str:
    """The text of ``supervisor/cluster/roles.sql``."""
    return resources.files("supervisor.cluster").joinpath("roles.sql").read_text("utf-8")


def apply(dsn: str) -> None:
    """Run :func:`sql` in one transaction, under ``cluster init``'s advisory lock (two runs
    at once would race on the catalog: "tuple concurrently updated").

    Raises:
        ClusterError: refused (not the owner of the tables, a role missing the right to
            create roles, or ``cluster init`` not run yet); nothing is applied.
    """
    with connect(dsn, autocommit=False) as conn:
        try:
            conn.execute(query("init_lock"), (INIT_LOCK,))
            found = conn.execute(query("tasks_table")).fetchone()
            if found is None or found[0] is None:
                raise ClusterError(
                    "the cluster database has no supervise tables; run "
                    "'supervise cluster init' first"
                )
            conn.execute(sql())
            conn.commit()
        except psycopg.Error as exc:
            conn.rollback()
            raise ClusterError(f"cluster roles failed: {one_line(exc)}") from exc
