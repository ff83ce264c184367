"""``supervise run|wait|archive``: run the engine, wait for results, put old tasks away.

Commands::

    supervise run PROFILE [--exit-when-idle] [-v] [--log-file PATH [--log-max-bytes N]
                  [--log-backups K]]               run the engine (one start line logged)
    supervise wait -c PROFILE ID... [--timeout S] [--json]
                                                   return when every named task has ended
    supervise archive -c PROFILE --older-than D [--dry-run] [--json]
                                                   move ended task dirs into monthly tarballs

Exit codes of ``wait`` (``timeout(1)``'s 124 for a timeout): 0 every task ended with verdict
``PASS``; 1 one or more ended otherwise (or its task file was rejected); 124 ``--timeout``
seconds passed first; 2 usage error (argparse, or an id that names no task, spool file or
rejected file). ``run``: 0 on a normal stop, 1 when it cannot start (another engine, an
unsafe spool). ``archive``: 0 done (also nothing to do), 1 an archive could not be written
(nothing removed then) or another ``archive`` runs on the state dir (nothing done), 2 usage
error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor.terminal import escape_controls

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: ``timeout(1)``'s exit status when the time ran out (GNU coreutils manual).
EXIT_TIMEOUT = 124
EXIT_USAGE = 2
#: Seconds between full re-reads while waiting: the net under the inotify events (a missed
#: event costs at most this much).
SAFETY_POLL = 5.0
#: Default size and count of ``--log-file`` rotation (supervisord's ``logfile_maxbytes``
#: and ``logfile_backups`` defaults: 50 MB, 10).
LOG_MAX_BYTES = 50 * 1024 * 1024
LOG_BACKUPS = 10


def _err(message: str) -> None:
    print(escape_controls(message), file=sys.stderr)


def _profile(path: str) -> LoadedProfile:
    from supervisor.cli import _profile as load

    return load(path)


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
    """:func:`supervisor.cluster.schema.engine_preflight`, or the DSN's own problem."""
    from supervisor.errors import ConfigError

    try:
        from supervisor.cluster.db import dsn_of
        from supervisor.cluster.schema import engine_preflight
    except ImportError:
        return "[cluster] needs the 'cluster' extra: pip install 'supervise-agents[cluster]'"
    try:
        cluster = profile.spec.cluster
        assert cluster is not None
        return engine_preflight(dsn_of(profile), cluster.host_id, cluster.heartbeat)
    except ConfigError as exc:
        return "; ".join(exc.problems)


def cmd_run(args: argparse.Namespace) -> int:
    import logging  # only the engine logs; validate and status start faster without it

    from supervisor.engine import EngineBusy, UnsafeSpool, run_profile
    from supervisor.terminal import ControlEscapingFormatter
    from supervisor.tmux import missing_tmux

    if (no_tmux := missing_tmux()) is not None:  # else adoption would wait for it for ever
        _err(f"supervise run: {no_tmux}")
        return 1

    try:
        handler = log_handler(args)
    except OSError as exc:
        _err(f"supervise run: --log-file {args.log_file}: {exc.strerror or exc}; "
             "give a writable path")  # fmt: skip
        return 1
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(ControlEscapingFormatter(fmt))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    # "skipped: maximum number of running instances" is routine (an event asked for a check
    # while one was running; it runs right after) and is counted in engine-stats.json.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    profile = _profile(args.profile)
    if profile.spec.cluster is not None and (refused := _cluster_preflight(profile)):
        _err(f"supervise run: {refused}")
        return 1
    from supervisor import enginelog  # the file 'supervise logs' reads

    if warning := enginelog.attach(
        profile.state_dir, args.log_file, args.log_max_bytes, args.log_backups
    ):
        _err(warning)
    try:
        return run_profile(profile, exit_when_idle=args.exit_when_idle)
    except (EngineBusy, UnsafeSpool) as exc:
        _err(f"supervise run: {exc}")
        return 1


# ---------------------------------------------------------------- wait


def _read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None  # not there yet, or replaced under us: looked at again
    return data if isinstance(data, dict) and isinstance(data.get("status"), str) else None


def locate(profile: LoadedProfile, task_id: str) -> str | None:
    """Where ``task_id`` is: ``"task"`` (a task folder), ``"spool"`` (its file waits in the
    spool or is being claimed), ``"rejected"`` (its file was rejected), or ``None``."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", task_id):  # a slug, never a path
        return None
    if (profile.tasks_dir / task_id).is_dir():
        return "task"
    spool = profile.spool_dir
    if (spool / f"{task_id}.toml").exists() or any(spool.glob(f".claim.{task_id}.*")):
        # the claim may have moved it into its task folder meanwhile
        return "task" if (profile.tasks_dir / task_id).is_dir() else "spool"
    if (spool / "rejected" / f"{task_id}.toml").exists():
        return "rejected"
    return None


def _rejected(profile: LoadedProfile, task_id: str) -> dict[str, Any]:
    """The stand-in for a task whose file the engine rejected: status ``rejected``."""
    error = profile.spool_dir / "rejected" / f"{task_id}.toml.error"
    try:
        text = error.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return {"task_id": task_id, "status": "rejected", "verdict": None, "error": text}


def _look(profile: LoadedProfile, ids: list[str], ended: dict[str, dict[str, Any]]) -> None:
    """Add to ``ended`` every task of ``ids`` that has ended since the last look."""
    from supervisor.states import TERMINAL

    for task_id in ids:
        if task_id in ended:
            continue
        manifest = _read_manifest(profile.tasks_dir / task_id / "manifest.json")
        if manifest is not None and manifest["status"] in TERMINAL:
            ended[task_id] = manifest
        elif manifest is None and locate(profile, task_id) == "rejected":
            ended[task_id] = _rejected(profile, task_id)


class _Events:
    """inotify on the tasks folder, each named task's folder and ``spool/rejected``: any
    rename or write there wakes :meth:`wait`. Folders that appear later are added."""

    def __init__(self, profile: LoadedProfile, ids: list[str]) -> None:
        from inotify_simple import INotify
        from inotify_simple import flags as F

        self.flags = F.MOVED_TO | F.CLOSE_WRITE | F.CREATE | F.MOVED_FROM | F.DELETE
        self.inotify = INotify()
        self.profile, self.ids = profile, set(ids)
        self.watched: set[Path] = set()
        self.refresh()

    def refresh(self) -> None:
        """Watch the folders that exist now (idempotent)."""
        folders = [self.profile.tasks_dir, self.profile.spool_dir / "rejected",
                   self.profile.spool_dir]  # fmt: skip
        folders += [self.profile.tasks_dir / task_id for task_id in self.ids]
        for folder in folders:
            if folder in self.watched:
                continue
            try:
                self.inotify.add_watch(str(folder), self.flags)
            except OSError:
                continue  # not there yet: the next refresh or the safety poll finds it
            self.watched.add(folder)

    def wait(self, seconds: float) -> None:
        """Block until an event or ``seconds`` pass."""
        self.inotify.read(timeout=max(1, int(seconds * 1000)))
        self.refresh()

    def close(self) -> None:
        self.inotify.close()


def cmd_wait(args: argparse.Namespace) -> int:
    from supervisor import engine_probe

    profile = _profile(args.config)
    ids = list(dict.fromkeys(args.task_ids))
    unknown = [task_id for task_id in ids if locate(profile, task_id) is None]
    if unknown:
        _err(f"supervise wait: no task {', '.join(unknown)} in {profile.tasks_dir} nor in "
             f"{profile.spool_dir}; see 'supervise status -c {args.config}'")  # fmt: skip
        return EXIT_USAGE
    ended: dict[str, dict[str, Any]] = {}
    _look(profile, ids, ended)
    if len(ended) < len(ids):
        warning = engine_probe.warning(profile.state_dir, args.config, "the tasks do not move")
        if warning:
            _err(warning)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    events = _Events(profile, ids)
    try:
        while len(ended) < len(ids):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            events.wait(SAFETY_POLL if left is None else min(left, SAFETY_POLL))
            _look(profile, ids, ended)
    finally:
        events.close()
    return _report_wait(args, profile, ids, ended)


def _report_wait(
    args: argparse.Namespace, profile: LoadedProfile, ids: list[str], ended: dict[str, Any]
) -> int:
    """Print the outcome (``--json``: the manifests, in the order named) and return the
    exit status."""
    timed_out = len(ended) < len(ids)
    shown = []
    for task_id in ids:
        manifest = ended.get(task_id)
        if manifest is None:
            manifest = _read_manifest(profile.tasks_dir / task_id / "manifest.json") or {
                "task_id": task_id, "status": "spooled", "verdict": None}  # fmt: skip
        shown.append(manifest)
    if args.json:
        print(json.dumps(shown, indent=2))
    else:
        for m in shown:
            why = m.get("failure_reason") or m.get("abandon_reason") or m.get("error") or ""
            line = f"{m.get('task_id')}: {m.get('status')} {m.get('verdict') or '-'}"
            print(escape_controls(line + (f" ({why})" if why else "")))
    if timed_out:
        _err(f"supervise wait: {len(ids) - len(ended)} task(s) still running after "
             f"{args.timeout:g} s")  # fmt: skip
        return EXIT_TIMEOUT
    return 0 if all(m.get("verdict") == "PASS" for m in shown) else 1


# ---------------------------------------------------------------- archive


def cmd_archive(args: argparse.Namespace) -> int:
    from supervisor import archive
    from supervisor.workspace.prune import parse_duration

    try:
        older_than = parse_duration(args.older_than)
    except ValueError as exc:
        _err(f"supervise archive: --older-than: {exc}")
        return EXIT_USAGE
    profile = _profile(args.config)
    if args.dry_run:
        found, ok = archive.plan(profile.tasks_dir, profile.state_dir, older_than), True
    else:
        try:
            found, ok = archive.run(profile.tasks_dir, profile.state_dir, older_than)
        except archive.ArchiveBusy as exc:
            _err(f"supervise archive: {exc}")
            return 1
        except OSError as exc:
            where = exc.filename or profile.state_dir
            _err(f"supervise archive: cannot open {where}: {exc.strerror or exc}")
            return 1
    rows = [{"task_id": i.task_id, "action": i.action, "reason": i.reason, "month": i.month,
             "result": i.result} for i in found.items]  # fmt: skip
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
            _err(f"supervise archive: {item.task_id}: {item.result}")
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

        safe = [{k: escape_controls(v) if isinstance(v, str) else v for k, v in r.items()}
                for r in rows]  # fmt: skip
        print(tabulate(safe, headers="keys", missingval="-"))
    return 0


# ---------------------------------------------------------------- parser


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of seconds >= 0")
    return value


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
    run.add_argument("--log-max-bytes", type=int, default=LOG_MAX_BYTES,
                     help=f"rotate the log file past this size ({LOG_MAX_BYTES})")  # fmt: skip
    run.add_argument("--log-backups", type=int, default=LOG_BACKUPS,
                     help=f"rotated log files kept ({LOG_BACKUPS})")  # fmt: skip
    run.set_defaults(func=cmd_run)

    wait = sub.add_parser("wait", help="return when every named task has ended")
    wait.add_argument("-c", "--config", required=True, help="profile TOML file")
    wait.add_argument("task_ids", nargs="+", metavar="ID")
    wait.add_argument("--timeout", type=_positive, help="give up after S seconds (exit 124)")
    wait.add_argument("--json", action="store_true", help="print the final manifests as JSON")
    wait.set_defaults(func=cmd_wait)

    archive = sub.add_parser("archive", help="move ended task folders into monthly tarballs")
    archive.add_argument("-c", "--config", required=True, help="profile TOML file")
    archive.add_argument("--older-than", required=True, metavar="D",
                         help="only tasks ended at least D ago (7d, 12h, 30m, 45s)")  # fmt: skip
    archive.add_argument("--dry-run", action="store_true", help="say what would go; change nothing")
    archive.add_argument("--json", action="store_true", help="machine-readable output")
    archive.set_defaults(func=cmd_archive)
