"""``supervise cost``: what the tasks of one or more profiles spent, per day, profile, account
and task (issue 26), from their manifests (:mod:`supervisor.costs` owns how a task's total is
made and split over days).

    supervise cost -c PROFILE [-c PROFILE...] [--since WHEN] [--until WHEN | --days N]
                   [--by day|profile|account|task|all] [--archived] [--top N] [--json]

``WHEN`` is a duration back from now (``7d``, ``12h``, ``30m``: the project's duration
parser, :func:`supervisor.workspace.prune.parse_duration`), a local date (``2026-11-20``:
its midnight) or an ISO 8601 time. ``--days N``: today and the N-1 days before (from local
midnight). Days are the local time zone's, named in the output. ``--json`` prints
:func:`supervisor.costs.report`'s object plus ``budgets`` (per profile with ``[budget]
daily_usd``: ``profile``, ``daily_usd``, ``today_usd``, ``reached``). A manifest that cannot
be read is not counted and is named once (stderr; ``unreadable`` in JSON), never a traceback.
Exit 0; 2 for a bad option; 1 for a profile that cannot be loaded.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from typing import Any

from supervisor import costs
from supervisor.cli.common import EXIT_USAGE, err, load_profile
from supervisor.terminal import escape_controls

#: Task rows printed by default (``--top``); ``--json`` gives them all.
TOP = 20


def parse_when(text: str, now: float) -> float:
    """Epoch s of ``--since``/``--until``: a duration back from ``now``, a local date or an
    ISO 8601 time (local when it names no zone).

    Raises:
        ValueError: none of these, or a time outside the calendar (the message says which).
    """
    from supervisor.workspace.prune import parse_duration

    try:
        when = now - parse_duration(text)
    except ValueError:
        try:
            when = datetime.fromisoformat(text).timestamp()
        except (ValueError, OverflowError, OSError):
            raise ValueError(
                f"{text!r} is neither a duration (7d, 12h, 30m) nor a date (2026-11-20) "
                "nor an ISO 8601 time"
            ) from None
    try:
        datetime.fromtimestamp(when)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{text!r} reaches outside the calendar; give a nearer time") from None
    return when


def window(args: argparse.Namespace, now: float) -> costs.Window:
    """The report's :class:`supervisor.costs.Window` from the options.

    Raises:
        ValueError: a bad value, or ``--days`` with ``--since``/``--until``.
    """
    if args.days is not None:
        if args.since or args.until:
            raise ValueError("--days cannot be used with --since or --until")
        return costs.Window(costs.days_back(now, args.days), None)
    since = parse_when(args.since, now) if args.since else None
    until = parse_when(args.until, now) if args.until else None
    return costs.Window(since, until)


def _names(paths: list[str]) -> list[str]:
    """Each profile's name in the report: its file's stem, or its path when two share one."""
    stems = [str(p).rsplit("/", 1)[-1].removesuffix(".toml") for p in paths]
    return [s if stems.count(s) == 1 else str(p) for s, p in zip(stems, paths, strict=True)]


def cmd_cost(args: argparse.Namespace) -> int:
    """``supervise cost``."""
    now = time.time()
    if args.top < 0:
        err(f"supervise cost: --top {args.top}: give 0 or more")
        return EXIT_USAGE
    try:
        span = window(args, now)
    except ValueError as exc:
        err(f"supervise cost: {exc}")
        return EXIT_USAGE
    names = _names(args.config)
    profiles = [(n, load_profile(p)) for n, p in zip(names, args.config, strict=True)]
    result = costs.profiles_report(profiles, span, now, args.archived)
    for bad in result["unreadable"]:
        err(
            f"supervise cost: {escape_controls(bad['path'])}: unreadable, not counted "
            f"({escape_controls(bad['error'])}); `supervise show` or repair it"
        )
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print_report(result, args.by, args.top)
    return 0


def print_report(result: dict[str, Any], by: str, top: int) -> None:
    """The report as text: a head line, then each section asked for as a table."""
    from tabulate import tabulate

    span = f"from {result['since'] or 'the start'} to {result['until'] or 'now'}"
    print(f"spend {span}; days in local time, {result['timezone']}")
    unread = len(result["unreadable"])
    print(
        f"total ${result['total_usd']:.2f} over {result['tasks_with_cost']} of "
        f"{result['tasks']} task(s)" + (f"; {unread} unreadable, not counted" if unread else "")
    )
    for budget in result["budgets"]:
        state = "reached: launches wait" if budget["reached"] else "not reached"
        print(
            f"daily budget of {escape_controls(budget['profile'])}: "
            f"${budget['today_usd']:.2f} of ${budget['daily_usd']:.2f} today ({state})"
        )
    for section in costs.SECTIONS if by == "all" else (by,):
        rows = result[f"by_{section}"]
        shown = rows[:top] if section == "task" else rows
        title = f"by {section}" + (f" (top {len(shown)} of {len(rows)})" if shown != rows else "")
        print(f"\n{title}")
        if not rows:
            print("  nothing spent")
            continue
        print(tabulate([_cells(r, section) for r in shown], headers="keys", disable_numparse=True))


def _cells(row: dict[str, Any], section: str) -> dict[str, str]:
    if section == "task":
        keys = ("task_id", "task_name", "profile", "account", "status", "turns", "last_day")
        cells = {k: escape_controls(str(row[k] if row[k] is not None else "-")) for k in keys}
        return {**cells, "usd": f"${row['usd']:.4f}"}
    return {
        section: escape_controls(str(row[section])),
        "usd": f"${row['usd']:.4f}",
        "tasks": str(row["tasks"]),
    }


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cost`` to ``supervise``'s subcommands."""
    cost = sub.add_parser("cost", help="spend per day, profile, account and task")
    cost.add_argument(
        "-c", "--config", action="append", required=True, help="profile TOML file (repeatable)"
    )
    cost.add_argument("--since", metavar="WHEN", help="from WHEN: 7d, 12h, 2026-11-20, ISO time")
    cost.add_argument("--until", metavar="WHEN", help="up to WHEN (same forms)")
    cost.add_argument("--days", type=int, metavar="N", help="today and the N-1 days before")
    cost.add_argument(
        "--by", choices=(*costs.SECTIONS, "all"), default="all", help="one section (default all)"
    )
    cost.add_argument("--archived", action="store_true", help="also the archived tasks")
    cost.add_argument("--top", type=int, default=TOP, metavar="N", help="task rows shown")
    cost.add_argument("--json", action="store_true", help="machine-readable output")
    cost.set_defaults(func=cmd_cost)
