"""``supervise cluster init|check``, ``supervise hosts`` and ``supervise status --cluster``:
the fleet's database (:mod:`supervisor.cluster`), from any machine with only the DSN
(``SUPERVISE_CLUSTER_DSN``, or ``-c PROFILE`` with ``[cluster]``). procrastinate and
psycopg are imported only when one of these commands runs (the ``cluster`` extra).

Exit status: 0 done; 1 the database cannot be reached, refused, or its schema is not the one
this supervise needs (one line each, with the fix); 2 usage (no DSN).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from supervisor.cli import fleet as cli_fleet
from supervisor.cli.common import EXIT_USAGE, err, load_profile, missing_cluster_extra
from supervisor.cluster import DSN_ENV
from supervisor.errors import ConfigError

#: ``status --cluster``'s help line.
STATUS_HELP = f"every host's tasks from the fleet's database (-c, or ${DSN_ENV})"


def _dsn(args: argparse.Namespace) -> str | None:
    """The DSN from ``-c PROFILE`` (its ``[cluster]``) or the environment; None: said why."""
    if getattr(args, "config", None):
        from supervisor.cluster.db import dsn_of

        return dsn_of(load_profile(args.config))
    if os.environ.get(DSN_ENV):
        return os.environ[DSN_ENV]
    err(f"no cluster database: set {DSN_ENV}, or give -c PROFILE with a [cluster] table")
    return None


def _guarded(body: Any) -> Any:
    """Run ``body(args)`` with the extra present and a DSN; ClusterError is one line."""

    def run(args: argparse.Namespace) -> int:
        if missing_cluster_extra():
            return EXIT_USAGE
        try:
            dsn = _dsn(args)
        except ConfigError as exc:
            for line in exc.problems:
                err(line)
            return 1
        if dsn is None:
            return EXIT_USAGE
        from supervisor.cluster.db import ClusterError

        try:
            return int(body(args, dsn))
        except ClusterError as exc:
            err(permission_line(_command(args), dsn, exc) or str(exc))
            return 1

    return run


def _command(args: argparse.Namespace) -> str:
    """The verb a permission error names: ``prune`` for ``cluster prune``, else the
    command (``hosts``, ``status``)."""
    return str(getattr(args, "cluster_command", None) or args.command)


def permission_line(command: str, dsn: str, exc: BaseException) -> str | None:
    """The one line for a permission error (SQLSTATE 42501) of ``supervise COMMAND``,
    naming the role it needs (:func:`supervisor.cluster.roles.denied_line`); None for any
    other error."""
    from supervisor.cluster.roles import denied_line

    return denied_line(command, dsn, exc)


def _init(args: argparse.Namespace, dsn: str) -> int:
    from supervisor.cluster import schema

    result = schema.init(dsn)
    done = ["procrastinate's schema"] if result.procrastinate else []
    done += [f"supervise schema v{v}" for v in result.applied]
    print(f"applied {', '.join(done)}" if done else "already up to date", end="")
    print(f"; schema version {result.version}")
    return 0


def _check(args: argparse.Namespace, dsn: str) -> int:
    from supervisor.cluster import roles, schema
    from supervisor.cluster.db import ClusterError

    role = roles.ROLE_NAMES[args.role]
    try:
        result = schema.check(dsn)
    except ClusterError as exc:  # a login that may not even read the schema's version
        line = roles.denied_line("cluster check", dsn, exc, role)
        if line is None:
            raise
        err(line)
        return 1
    rights = None
    if not result.problems:  # rights on tables that are there, of the version this needs
        rights = roles.check_role(dsn, role)
        result.problems.extend(rights.problems)
    libs = ", ".join(f"{k} {v}" for k, v in schema.versions().items())
    if args.json:
        print(
            json.dumps(
                {
                    "server": result.server,
                    "schema_version": result.version,
                    "needs": schema.SCHEMA_VERSION,
                    "procrastinate": result.procrastinate,
                    "role": role,
                    "rights_checked": bool(rights and rights.checked),
                    "problems": result.problems,
                }
            )
        )
    else:
        print(
            f"connected: PostgreSQL {result.server}; schema version {result.version} "
            f"(this supervise needs {schema.SCHEMA_VERSION}); {libs}"
        )
        if rights is not None and not rights.checked:
            print(f"rights: not checked: no role {role} ('supervise cluster roles --apply')")
        elif not result.problems:
            print(f"rights: the login has what {role} grants")
        for problem in result.problems:
            err(problem)
    return 1 if result.problems else 0


def _prune(args: argparse.Namespace, dsn: str) -> int:
    """``cluster prune --older-than D``: remove (``--dry-run``: count) ended tasks, their
    events, control requests and ended jobs, and retired hosts
    (:mod:`supervisor.cluster.retention`); print what. A bad ``D`` or ``--batch`` is one
    line and exit 2."""
    from supervisor.cluster import retention
    from supervisor.workspace.prune import parse_duration

    try:
        older_than = parse_duration(args.older_than)
        batch = retention.BATCH if args.batch is None else args.batch
        retention.checked(older_than, batch)
    except ValueError as exc:
        err(f"supervise cluster prune: {exc}")
        return EXIT_USAGE
    if args.dry_run:
        done = retention.plan(dsn, older_than)
    else:
        done = retention.prune(dsn, older_than, batch)
    if args.json:
        shown = {"dry_run": args.dry_run, "older_than_s": older_than, **done.as_dict()}
        print(json.dumps(shown))
    else:
        verb = "would remove" if args.dry_run else "removed"
        print(f"{verb} {retention.describe(done)} (ended or gone for over {args.older_than})")
    return 0


def _roles_apply(args: argparse.Namespace, dsn: str) -> int:
    from supervisor.cluster import roles

    roles.apply(dsn)
    print(
        f"roles {', '.join(roles.ROLES)} created or updated; grant them to login roles, "
        "e.g. GRANT supervise_submit TO alice"
    )
    return 0


def _roles(args: argparse.Namespace) -> int:
    """``cluster roles``: print roles.sql; with ``--apply``, run it (needs a DSN)."""
    if args.apply:
        return int(_guarded(_roles_apply)(args))
    from importlib import resources

    print(resources.files("supervisor.cluster").joinpath("roles.sql").read_text("utf-8"), end="")
    return 0


def _hosts(args: argparse.Namespace, dsn: str) -> int:
    from supervisor.cluster import fleet

    rows = fleet.hosts(dsn)
    if args.json:
        print(json.dumps(rows, default=str))
        return 0
    print(
        fleet.table(
            rows,
            (
                "host_id",
                "state",
                "age_s",
                "capacity",
                "running",
                "connections",
                "version",
                "queues",
                "lost_at",
                "stopped_at",
                "last_error",
            ),
        )
    )
    from supervisor.cluster.accountstore import limited

    for line in limited(dsn):  # issue 26: the fleet's account holds
        print(line)
    return 0


def _tasks(args: argparse.Namespace, dsn: str) -> int:
    from supervisor.views import fleet_status

    return fleet_status.run(args, dsn)


def task_warnings(row: dict[str, Any], resolved: Any, profile: Any) -> None:
    """``supervise validate -c PROFILE TASK``: the warning for a task naming ``host`` under a
    profile without ``[cluster]``, and for its thresholds shorter than the agent's heartbeat
    (:mod:`supervisor.heartbeats`) (printed, and added to the row's ``warnings``)."""
    from supervisor.heartbeats import task_warning

    short = task_warning(row["file"], resolved, profile)
    if short:
        row["warnings"].append(short)
        err(short)
    if profile is None or profile.spec.cluster is not None or not resolved.spec.host:
        return
    from supervisor.config.cluster import host_ignored

    row["warnings"].append(host_ignored(row["file"], resolved.spec.host, profile.path))
    err(row["warnings"][-1])


def _prune_options(prune: argparse.ArgumentParser) -> None:
    prune.add_argument(
        "--older-than",
        required=True,
        metavar="D",
        help="ended (or, for a host, gone) for longer than D: 30d, 12h, 45m, or seconds",
    )
    prune.add_argument("--dry-run", action="store_true", help="count, remove nothing")
    prune.add_argument("--batch", type=int, help="rows per transaction (default 500)")


#: ``supervise status --cluster`` (cli.py's ``status`` calls it when the flag is given).
status_cluster = _guarded(_tasks)


def register(sub: Any) -> None:
    """Add ``cluster`` (``init``, ``check``, ``prune``, ``roles``) and ``hosts`` to the
    parser."""
    cluster = sub.add_parser("cluster", help="the fleet's database (several hosts, preview)")
    verbs = cluster.add_subparsers(dest="cluster_command", required=True)
    made = {}
    for name, body, text in (
        ("init", _init, "apply procrastinate's schema and ours (re-runnable)"),
        ("check", _check, "connect, compare the schema version, check the login's rights"),
        ("prune", _prune, "remove ended tasks, their events and jobs, and retired hosts"),
    ):
        verb = made[name] = verbs.add_parser(name, help=text)
        verb.add_argument("-c", "--config", help=f"profile with [cluster] (else ${DSN_ENV})")
        verb.add_argument("--json", action="store_true", help="machine-readable output")
        verb.set_defaults(func=_guarded(body))
    made["check"].add_argument(
        "--role",
        choices=("engine", "operator", "submit"),  # roles.ROLE_NAMES (no psycopg here)
        default="engine",
        help="the rights to check the login for: supervise_engine (default: a host's "
        "login), supervise_operator or supervise_submit",
    )
    _prune_options(made["prune"])
    roles = verbs.add_parser(
        "roles",
        help="print the SQL of the supervise_submit, "
        "supervise_operator and supervise_engine roles "
        "(--apply: run it)",
    )
    roles.add_argument("-c", "--config", help=f"profile with [cluster] (else ${DSN_ENV})")
    roles.add_argument(
        "--apply",
        action="store_true",
        help="run it on the database (as its owner, after 'cluster init')",
    )
    roles.set_defaults(func=_roles)
    hosts = sub.add_parser("hosts", help="the fleet's hosts and their heartbeats")
    hosts.add_argument("-c", "--config", help=f"profile with [cluster] (else ${DSN_ENV})")
    hosts.add_argument("--json", action="store_true", help="the rows as JSON")
    hosts.set_defaults(func=_guarded(_hosts))
    cli_fleet.register(sub)  # stop|resume|approve|deny|show|wait ID on another host
