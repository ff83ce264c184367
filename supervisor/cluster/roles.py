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

from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg.conninfo import conninfo_to_dict

from supervisor.cluster.db import NO_TABLES, ClusterError, connect, one_line
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
                raise ClusterError(NO_TABLES)
            conn.execute(sql())
            conn.commit()
        except psycopg.Error as exc:
            conn.rollback()
            raise ClusterError(f"cluster roles failed: {one_line(exc)}") from exc


#: The group role each command of the fleet needs (``supervise run`` and the sweeper's
#: prune need ``supervise_engine``): what a permission error names (:func:`denied_line`).
NEEDED = {
    "submit": "supervise_submit",
    "hosts": "supervise_submit",
    "status": "supervise_submit",
    "show": "supervise_submit",
    "wait": "supervise_submit",
    "stop": "supervise_operator",
    "resume": "supervise_operator",
    "approve": "supervise_operator",
    "deny": "supervise_operator",
    "prune": "supervise_engine",
    "run": "supervise_engine",
}
#: ``cluster check --role``: the short names of :data:`ROLES`.
ROLE_NAMES = {role.removeprefix("supervise_"): role for role in ROLES}
#: Missing rights named in a check's line before "and N more".
SHOWN = 6
#: PostgreSQL's SQLSTATE for "permission denied" (``insufficient_privilege``, Appendix A).
INSUFFICIENT_PRIVILEGE = "42501"


def missing_rights(conn: psycopg.Connection, role: str) -> list[str] | None:
    """What the connected login lacks of what ``role`` (a group role of :data:`ROLES`)
    holds in this database, read from the catalog (``aclexplode`` of the tables',
    sequences', functions' and columns' ACLs, checked with ``has_table_privilege``,
    ``has_sequence_privilege``, ``has_function_privilege``, ``has_column_privilege``): so
    the grants themselves stay in roles.sql alone. ``["UPDATE on table supervise_tasks",
    ...]``; None when the role does not exist (roles.sql not applied).

    Raises:
        psycopg.Error: the database refused.
    """
    exists = conn.execute(query("role_exists"), (role,)).fetchone()
    if not exists or not exists[0]:
        return None
    found = conn.execute(query("role_missing"), (role,)).fetchall()
    return [f"{privilege} on {kind} {name}" for _, kind, name, privilege in found]


@dataclass(frozen=True)
class RoleCheck:
    """What :func:`check_role` found: ``checked`` False when the role does not exist
    (roles.sql not applied: a fleet run with one trusted login), and one line per
    ``problem``."""

    checked: bool
    problems: list[str]


def check_role(dsn: str, role: str) -> RoleCheck:
    """``supervise cluster check --role``: whether the login has every right ``role``
    grants (a superuser or the tables' owner has them all).

    Raises:
        ClusterError: the database cannot be reached or refused.
    """
    with connect(dsn) as conn:
        try:
            user = conn.execute(query("role_exists"), (role,)).fetchone()
            missing = missing_rights(conn, role)
        except psycopg.Error as exc:
            raise ClusterError(f"cluster check failed: {one_line(exc)}") from exc
    login = user[1] if user else "?"
    if missing is None or not missing:
        return RoleCheck(missing is not None, [])
    more = f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else ""
    return RoleCheck(
        True,
        [
            f"the database login {login!r} lacks what {role} grants: "
            f"{', '.join(missing[:SHOWN])}{more}; fix: GRANT {role} TO {login} "
            "(as the database's owner; 'supervise cluster roles' shows the grants)"
        ],
    )


def engine_role_problem(dsn: str) -> str | None:
    """Before ``supervise run`` starts a cluster engine, after
    :func:`~supervisor.cluster.schema.engine_preflight`: the first line of
    :func:`check_role` for the role ``run`` needs (:data:`NEEDED`), naming a missing grant
    and the fix; None when the login holds it all, when roles.sql was not applied (one
    trusted login), or when the database does not answer (the engine starts anyway)."""
    try:
        found = check_role(dsn, NEEDED["run"])
    except ClusterError:
        return None
    return found.problems[0] if found.problems else None


def denied(exc: BaseException) -> BaseException | None:
    """The "permission denied" (SQLSTATE 42501) in ``exc`` or its causes, or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if getattr(seen, "sqlstate", None) == INSUFFICIENT_PRIVILEGE:
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def denied_line(command: str, dsn: str, exc: BaseException, role: str | None = None) -> str | None:
    """One line for a permission error of ``supervise COMMAND``: the database's words, the
    role (``role``, else :data:`NEEDED`'s) and how to grant it; None when ``exc`` is no
    permission error or ``command`` needs no role of the fleet (``cluster init`` needs the
    database's owner)."""
    found, role = denied(exc), role or NEEDED.get(command)
    if found is None or role is None:
        return None
    login = _login(dsn)
    return (
        f"supervise {command}: the database login {login!r} may not do this "
        f"({one_line(found)}): it needs the {role} role; as the database's owner run "
        f"GRANT {role} TO {login} (see 'supervise cluster roles')"
    )


def _login(dsn: str) -> str:
    """The login a DSN connects as (libpq: ``user``, else ``PGUSER``, else the OS user)."""
    import getpass
    import os

    try:
        user = conninfo_to_dict(dsn).get("user")
    except psycopg.Error:
        user = None
    return str(user or os.environ.get("PGUSER") or getpass.getuser())
