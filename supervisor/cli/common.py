"""What every ``supervise`` verb module shares: loading the profile, the one error line, the
exit statuses, and the small argument checks several verbs use. No verb module imports
:mod:`supervisor.cli.app` (the parser); each imports this one instead.

Standard library and light ``supervisor`` modules only: every command imports it at start,
and ``import supervisor.cli`` must not load pydantic (the profile is loaded on first use).

Exit statuses (the table in :mod:`supervisor.cli.app` and README "Exit codes"):
``0`` done; ``1`` refused, failed or invalid input; :data:`EXIT_USAGE` (2) a usage error;
:data:`EXIT_QUEUED` (3) and :data:`EXIT_NOT_APPLIED` (4) a request's outcomes
(:mod:`supervisor.requests` owns them: the MCP tools use them too);
:data:`EXIT_NOT_STOPPED` (4) ``shutdown`` left the engine running; :data:`EXIT_NEEDS_YOU`
(10) and :data:`EXIT_TIMEOUT` (124) ``wait``'s (:mod:`supervisor.waiting` owns them);
:data:`EXIT_INTERRUPTED` (130) Ctrl-C; :data:`EXIT_BROKEN_PIPE` (141) the reader left early.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor.requests import EXIT_NOT_APPLIED, EXIT_QUEUED
from supervisor.terminal import escape_controls
from supervisor.waiting import EXIT_NEEDS_YOU, EXIT_TIMEOUT, EXIT_USAGE

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: Builds the whole ``supervise`` parser: :func:`supervisor.cli.app.build_parser`, handed to
#: the verbs that need all of it (``completion``, ``submit --wait``), which never import it.
Parser = Callable[[], argparse.ArgumentParser]

#: ``shutdown --wait S``: the engine was still running after S seconds.
EXIT_NOT_STOPPED = 4
#: Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: ``supervise ... | head`` left early: 128 + SIGPIPE, as a program killed by it.
EXIT_BROKEN_PIPE = 141

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_NEEDS_YOU",
    "EXIT_NOT_APPLIED",
    "EXIT_NOT_STOPPED",
    "EXIT_QUEUED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "Parser",
    "err",
    "load_profile",
    "missing_cluster_extra",
    "private_folders",
    "seconds",
    "warn_no_engine",
]


def err(message: str) -> None:
    """One line to stderr; control characters from task files or names shown escaped
    (:func:`supervisor.terminal.escape_controls`)."""
    print(escape_controls(message), file=sys.stderr)


def load_profile(path: str | Path) -> LoadedProfile:
    """The validated profile at ``path`` (:func:`supervisor.config.load_profile`, imported
    here on first use so the CLI starts without pydantic).

    Raises:
        ConfigError: one line per problem (:func:`supervisor.cli.app.main` prints them,
            exit 1).
    """
    from supervisor.config import load_profile as load

    return load(path)


def warn_no_engine(profile: LoadedProfile, what: str) -> None:
    """One stderr line when no live engine holds the profile's state dir
    (:func:`supervisor.engine_probe.warning`); ``what`` says what waits meanwhile."""
    from supervisor import engine_probe

    warning = engine_probe.warning(profile.state_dir, profile.path, what)
    if warning:
        err(warning)


def missing_cluster_extra() -> bool:
    """True, after one line on stderr naming the fix, when the ``cluster`` extra
    (procrastinate and psycopg) is not installed; the caller then exits
    :data:`EXIT_USAGE`."""
    import importlib.util

    if importlib.util.find_spec("procrastinate") and importlib.util.find_spec("psycopg"):
        return False
    err("the cluster commands need the 'cluster' extra: pip install 'supervise-agents[cluster]'")
    return True


def seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds >= 0 (never NaN or infinity).

    Raises:
        argparse.ArgumentTypeError: not a number, negative, NaN or infinite.
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of seconds >= 0")
    return value


def private_folders(folder: Path) -> None:
    """``folder/spool`` and ``folder/state`` with mode 0700 whatever the umask (the engine
    refuses a spool others can write to); for ``supervise init`` and ``init --claude``.

    Raises:
        OSError: a folder cannot be made or its mode set.
    """
    for name in ("spool", "state"):
        (folder / name).mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder / name, 0o700)  # mkdir's mode is masked by the umask
