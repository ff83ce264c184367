"""``supervise run|wait|archive``: run the engine, wait for results, put old tasks away.

Commands::

    supervise run PROFILE [--exit-when-idle] [-v] [--log-file PATH [--log-max-bytes N]
                  [--log-backups K]]               run the engine (one start line logged)
    supervise wait -c PROFILE ID... [--timeout S] [--terminal-only] [--json [--brief]]
                                                   return when every named task has ended,
                                                   or one needs you (supervisor/waiting.py)
    supervise archive -c PROFILE --older-than D [--dry-run] [--json]
                                                   move ended task dirs into monthly tarballs

Exit codes of ``wait`` (:mod:`supervisor.waiting`): 0 every task ended with verdict
``PASS``; 1 one or more ended otherwise (or its task file was rejected); 10 one or more
need you (escalated; wins over 0 and 1); 124 ``--timeout`` seconds passed first (as
``timeout(1)``); 2 usage error (argparse, or an id that names no task, spool file or
rejected file). ``run``: 0 on a normal stop, 1 when it cannot start (another engine, an
unsafe spool). ``archive``: 0 done (also nothing to do), 1 an archive could not be written
(nothing removed then) or another ``archive`` runs on the state dir (nothing done), 2 usage
error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor.cli.common import (
    EXIT_NEEDS_YOU,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    err,
    load_profile,
    seconds,
)
from supervisor.terminal import escape_controls
from supervisor.waitbrief import BRIEF_HELP, brief

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile
    from supervisor.engine.intake import IntakeFactory

#: Default size and count of ``--log-file`` rotation (supervisord's ``logfile_maxbytes``
#: and ``logfile_backups`` defaults: 50 MB, 10).
LOG_MAX_BYTES = 50 * 1024 * 1024
LOG_BACKUPS = 10


# ---------------------------------------------------------------- run


def log_handler(args: argparse.Namespace) -> Any:
    """The engine log's handler: stderr, or ``--log-file`` rotated by size with the
    standard library's :class:`logging.handlers.RotatingFileHandler` (``--log-max-bytes``
    bytes, ``--log-backups`` files ``PATH.1`` ... kept). Raises ``OSError`` when the file
    cannot be opened."""
    import logging
    import logging.handlers

    if args.log_file is None:
        return logging.StreamHandler()
    path = Path(args.log_file).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return logging.handlers.RotatingFileHandler(
        path, maxBytes=args.log_max_bytes, backupCount=args.log_backups, encoding="utf-8"
    )


def _cluster_preflight(profile: LoadedProfile) -> str | None:
    """:func:`supervisor.cluster.schema.engine_preflight`, then the login's rights
    (:func:`supervisor.cluster.roles.engine_role_problem`), or the DSN's own problem."""
    from supervisor.errors import ConfigError

    try:
        from supervisor.cluster.db import dsn_of
        from supervisor.cluster.roles import engine_role_problem
        from supervisor.cluster.schema import engine_preflight
    except ImportError:
        return "[cluster] needs the 'cluster' extra: pip install 'supervise-agents[cluster]'"
    try:
        cluster = profile.spec.cluster
        assert cluster is not None
        dsn = dsn_of(profile)
        problem = engine_preflight(dsn, cluster.host_id, cluster.heartbeat)
        return problem or engine_role_problem(dsn)
    except ConfigError as exc:
        return "; ".join(exc.problems)


def intake_for(profile: LoadedProfile) -> IntakeFactory:
    """The engine's source of tasks for ``profile``, handed to the engine by ``run``: the
    spool folder's, or with ``[cluster]`` the fleet's database beside it
    (:class:`supervisor.cluster.intake.ClusterIntake`, imported only then, so a single host
    never loads procrastinate or psycopg). The engine never imports ``supervisor/cluster/``.
    """
    from supervisor.engine.intake import spool_intake

    if profile.spec.cluster is None:
        return spool_intake
    from supervisor.cluster.intake import ClusterIntake

    return ClusterIntake


def cmd_run(args: argparse.Namespace) -> int:
    import logging  # only the engine logs; validate and status start faster without it

    from supervisor.engine.intake import UnsafeSpool
    from supervisor.engine.scheduler import run_profile
    from supervisor.statelock import EngineBusy
    from supervisor.terminal import ControlEscapingFormatter
    from supervisor.tmux import missing_tmux

    if (no_tmux := missing_tmux()) is not None:  # else adoption would wait for it for ever
        err(f"supervise run: {no_tmux}")
        return 1

    try:
        handler = log_handler(args)
    except OSError as exc:
        err(
            f"supervise run: --log-file {args.log_file}: {exc.strerror or exc}; "
            "give a writable path"
        )
        return 1
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(ControlEscapingFormatter(fmt))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    # "skipped: maximum number of running instances" is routine (an event asked for a check
    # while one was running; it runs right after) and is counted in engine-stats.json.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    profile = load_profile(args.profile)
    if profile.spec.cluster is not None and (refused := _cluster_preflight(profile)):
        err(f"supervise run: {refused}")
        return 1
    from supervisor.cli import enginelog  # the file 'supervise logs' reads

    if warning := enginelog.attach(
        profile.state_dir, args.log_file, args.log_max_bytes, args.log_backups
    ):
        err(warning)
    from supervisor.engine.watch import WatchUnavailable

    try:
        return run_profile(profile, args.exit_when_idle, intake_for(profile))
    except (EngineBusy, UnsafeSpool, WatchUnavailable) as exc:
        err(f"supervise run: {exc}")
        return 1


# ---------------------------------------------------------------- wait


def cmd_wait(args: argparse.Namespace) -> int:
    """``supervise wait``: :func:`supervisor.waiting.wait_tasks`, printed."""
    from supervisor import engine_probe, waiting

    profile = load_profile(args.config)

    def warn() -> None:
        warning = engine_probe.warning(profile.state_dir, args.config, "the tasks do not move")
        if warning:
            err(warning)

    try:
        outcome = waiting.wait_tasks(
            profile, args.task_ids, args.timeout, terminal_only=args.terminal_only, on_block=warn
        )
    except waiting.UnknownTasks as exc:
        err(f"supervise wait: {exc}")
        return EXIT_USAGE
    if args.json or args.brief:
        shown = [brief(entry) for entry in outcome.shown] if args.brief else outcome.shown
        print(json.dumps(shown, indent=2))
    else:
        print("\n".join(outcome.lines()))
    if outcome.code == EXIT_NEEDS_YOU:
        err(
            f"supervise wait: {len(outcome.needs_you)} task(s) need you: answer with "
            f"'supervise approve|deny -c {args.config} ID'"
        )
    elif outcome.code == EXIT_TIMEOUT:
        err(
            f"supervise wait: {len(outcome.pending)} task(s) still running after {args.timeout:g} s"
        )
    return outcome.code


# ---------------------------------------------------------------- archive


def cmd_archive(args: argparse.Namespace) -> int:
    from supervisor import archive
    from supervisor.workspace.prune import parse_duration

    try:
        older_than = parse_duration(args.older_than)
    except ValueError as exc:
        err(f"supervise archive: --older-than: {exc}")
        return EXIT_USAGE
    profile = load_profile(args.config)
    if args.dry_run:
        found, ok = archive.plan(profile.tasks_dir, profile.state_dir, older_than), True
    else:
        try:
            found, ok = archive.run(profile.tasks_dir, profile.state_dir, older_than)
        except archive.ArchiveBusy as exc:
            err(f"supervise archive: {exc}")
            return 1
        except OSError as exc:
            where = exc.filename or profile.state_dir
            err(f"supervise archive: cannot open {where}: {exc.strerror or exc}")
            return 1
    rows = [
        {
            "task_id": i.task_id,
            "action": i.action,
            "reason": i.reason,
            "month": i.month,
            "result": i.result,
        }
        for i in found.items
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"no tasks in {profile.tasks_dir}")
    else:
        from tabulate import tabulate

        safe = [{k: escape_controls(str(v)) for k, v in row.items()} for row in rows]
        print(tabulate(safe, headers="keys"))
    for item in found.items:
        if item.result.startswith("error"):
            err(f"supervise archive: {item.task_id}: {item.result}")
    return 0 if ok else 1


def print_archived(profile: LoadedProfile, as_json: bool) -> int:
    """``supervise status --archived``: the tasks in ``state_dir/archive/`` (exit 0)."""
    from supervisor import archive

    rows = archive.archived_rows(profile.state_dir)
    if as_json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"no archived tasks in {profile.state_dir / archive.ARCHIVE}")
    else:
        from tabulate import tabulate

        safe = [
            {k: escape_controls(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows
        ]
        print(tabulate(safe, headers="keys", missingval="-"))
    return 0


# ---------------------------------------------------------------- parser


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``run``, ``wait`` and ``archive`` to the ``supervise`` parser."""
    run = sub.add_parser("run", help="run the engine on a profile until stopped")
    run.add_argument("profile", help="profile TOML file")
    run.add_argument(
        "--exit-when-idle",
        action="store_true",
        help="exit 0 once the spool is empty and no task is queued or running",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    run.add_argument("--log-file", help="log to this file instead of stderr, rotated by size")
    run.add_argument(
        "--log-max-bytes",
        type=int,
        default=LOG_MAX_BYTES,
        help=f"rotate the log file past this size ({LOG_MAX_BYTES})",
    )
    run.add_argument(
        "--log-backups",
        type=int,
        default=LOG_BACKUPS,
        help=f"rotated log files kept ({LOG_BACKUPS})",
    )
    run.set_defaults(func=cmd_run)

    wait = sub.add_parser(
        "wait", help="return when every named task has ended, or one needs you (exit 10)"
    )
    wait.add_argument("-c", "--config", required=True, help="profile TOML file")
    wait.add_argument("task_ids", nargs="+", metavar="ID")
    wait.add_argument("--timeout", type=seconds, help="give up after S seconds (exit 124)")
    wait.add_argument(
        "--terminal-only",
        action="store_true",
        help="wait through escalations: return only when every task ended",
    )
    wait.add_argument(
        "--json",
        action="store_true",
        help="print the final manifests, or what each task needs, as JSON",
    )
    wait.add_argument("--brief", action="store_true", help=BRIEF_HELP)
    wait.set_defaults(func=cmd_wait)

    archive = sub.add_parser("archive", help="move ended task folders into monthly tarballs")
    archive.add_argument("-c", "--config", required=True, help="profile TOML file")
    archive.add_argument(
        "--older-than",
        required=True,
        metavar="D",
        help="only tasks ended at least D ago (7d, 12h, 30m, 45s)",
    )
    archive.add_argument("--dry-run", action="store_true", help="say what would go; change nothing")
    archive.add_argument("--json", action="store_true", help="machine-readable output")
    archive.set_defaults(func=cmd_archive)
