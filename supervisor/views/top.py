"""``supervise top -c PROFILE``: the live terminal view (:mod:`.tui`), from the ``tui`` extra.

The core install has no Textual: without it ``top`` prints one line naming the extra and
how to install it, and exits 1. Textual is imported only here, when ``top`` runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: The line printed when Textual is missing.
MISSING = "supervise top needs the 'tui' extra (Textual): pip install 'supervise-agents[tui]'"


def register(sub: argparse._SubParsersAction, func: Callable[[argparse.Namespace], int]) -> None:
    """Add ``top`` to the CLI's subcommands; ``func`` runs it (the CLI's ``cmd_top``)."""
    top = sub.add_parser("top", help="live view of every task (needs the 'tui' extra)")
    top.add_argument("-c", "--config", required=True, help="profile TOML file")
    top.add_argument(
        "--status",
        action="append",
        metavar="S[,S...]",
        help="show only tasks of these statuses or groups (needs_you, waiting, "
        "running, recovering, failed, queued, done); repeatable",
    )
    top.add_argument(
        "--filter",
        default="",
        metavar="TEXT",
        help="show only tasks whose id, name or status holds every word of TEXT "
        "(the '/' key edits it)",
    )
    top.set_defaults(func=func)


def textual_missing() -> bool:
    """Whether Textual cannot be imported (the ``tui`` extra is not installed)."""
    return importlib.util.find_spec("textual") is None


def run(profile: LoadedProfile | None, args: argparse.Namespace | None = None) -> int:
    """Run the app on a profile until the operator quits; returns the exit status (1, with
    :data:`MISSING` on stderr, when Textual is not installed; ``profile`` may then be
    ``None``; 2, with one line naming the value, for a ``--status`` that is no status or
    group). ``args``: the parsed ``top`` options (``--status``, ``--filter``)."""
    if textual_missing() or profile is None:
        print(MISSING, file=sys.stderr)
        return 1
    from supervisor.views.taskfilter import FilterError, TaskFilter, parse_statuses

    try:
        statuses = parse_statuses(getattr(args, "status", None))
    except FilterError as exc:
        print(f"supervise top: {exc}", file=sys.stderr)
        return 2
    from supervisor.views.tui import TopApp

    shown = TaskFilter(statuses, getattr(args, "filter", "") or "")
    app = TopApp(
        profile.state_dir,
        profile.spool_dir,
        profile.socket_name,
        title=str(profile.path),
        task_filter=shown,
        fleet_host=profile.spec.cluster is not None,
    )
    app.run()
    return 0
