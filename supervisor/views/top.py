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
MISSING = ("supervise top needs the 'tui' extra (Textual): "
           "pip install 'supervise[tui]'")  # fmt: skip


def register(sub: argparse._SubParsersAction, func: Callable[[argparse.Namespace], int]) -> None:
    """Add ``top`` to the CLI's subcommands; ``func`` runs it (the CLI's ``cmd_top``)."""
    top = sub.add_parser("top", help="live view of every task (needs the 'tui' extra)")
    top.add_argument("-c", "--config", required=True, help="profile TOML file")
    top.set_defaults(func=func)


def textual_missing() -> bool:
    """Whether Textual cannot be imported (the ``tui`` extra is not installed)."""
    return importlib.util.find_spec("textual") is None


def run(profile: LoadedProfile | None) -> int:
    """Run the app on a profile until the operator quits; returns the exit status (1, with
    :data:`MISSING` on stderr, when Textual is not installed; ``profile`` may then be
    ``None``)."""
    if textual_missing() or profile is None:
        print(MISSING, file=sys.stderr)
        return 1
    from supervisor.views.tui import TopApp

    app = TopApp(profile.state_dir, profile.spool_dir, profile.socket_name, title=str(profile.path))
    app.run()
    return 0
