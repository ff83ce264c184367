"""What every tmux path shares: the executable (:func:`tmux_binary`, its one lookup), the
errors, the per-call timeout and the shape of a reply (:class:`TmuxResult`)."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from supervisor.errors import ConfigError, SuperviseError

#: Seconds one tmux call may take before :class:`TmuxTimeout` is raised (a client process
#: is killed; a control-mode call gives up and closes the control client). A healthy client
#: process answers in 2.5–17 ms here (DESIGN.md), ``new-session`` with its chained commands
#: in under 100 ms on a loaded 2-core machine; 5 s leaves room for a machine under heavy
#: swap while bounding how long one check can wait on tmux.
TMUX_TIMEOUT = 5.0

#: The environment variable naming the tmux executable (the wrapper reads it too).
TMUX_ENV = "SUPERVISE_TMUX"

#: What a tmux client prints when the server it reached exits before answering (tmux
#: ``client.c``, ``CLIENT_EXIT_LOST_SERVER``). With ``exit-empty`` on (tmux's default) a
#: server exits once its last session is gone, and a ``new-session`` that connects in that
#: moment gets this line with nothing created: measured 20 to 29 of 300 tries of
#: ``kill-session`` beside ``new-session`` on tmux 3.3a, and once in CI's 300-task fleet
#: test. A second try starts a new server.
LOST_SERVER = "server exited unexpectedly"
#: How many times :func:`retry_lost_server` runs a start, and the pause between (seconds).
LOST_SERVER_TRIES = 4
LOST_SERVER_PAUSE = 0.02

log = logging.getLogger("supervisor.tmux")
T = TypeVar("T")


class TmuxError(SuperviseError, RuntimeError):
    """A tmux command failed; the message carries tmux's stderr."""


class TmuxTimeout(TmuxError):
    """A tmux call did not answer within its timeout (:data:`TMUX_TIMEOUT`). Whether the
    command took effect is unknown: callers look again later."""


@dataclass(frozen=True)
class TmuxResult:
    """What one tmux command returned: exit status and output lines (trailing empty lines
    dropped; bytes that are not UTF-8 shown as backslash escapes)."""

    returncode: int
    stdout: list[str]
    stderr: list[str]


def retry_lost_server(start: Callable[[], T], what: str) -> T:
    """``start()``, run again (up to :data:`LOST_SERVER_TRIES` times in all) while it
    raises a :class:`TmuxError` carrying :data:`LOST_SERVER`: only for a command that starts
    a server when none runs (``new-session``), where that error means nothing was made.

    Raises:
        TmuxError: the last try's error, or any other tmux error at once.
    """
    for attempt in range(1, LOST_SERVER_TRIES):
        try:
            return start()
        except TmuxError as exc:
            if isinstance(exc, TmuxTimeout) or LOST_SERVER not in str(exc):
                raise
            log.info("%s: the tmux server exited as it was reached; trying again", what)
            time.sleep(LOST_SERVER_PAUSE * attempt)
    return start()


def tmux_binary() -> str:
    """The tmux executable: ``$SUPERVISE_TMUX`` when set (the wrapper reads the same
    variable), else ``tmux`` found on ``PATH``."""
    return os.environ.get(TMUX_ENV) or shutil.which("tmux") or "tmux"


def missing_tmux() -> str | None:
    """One line saying why no tmux can be run (``$SUPERVISE_TMUX`` names no executable
    file, or none is on ``PATH``) with the fix, or ``None`` when it can. Read by
    ``supervise run`` before it starts (else the engine would retry adoption for ever) and
    by ``supervise validate`` for a profile."""
    named = os.environ.get(TMUX_ENV)
    if named:
        if shutil.which(named) is None:
            return (
                f"{TMUX_ENV}={named} is not an executable file; set it to tmux's path "
                f"(e.g. {shutil.which('tmux') or '/usr/bin/tmux'}) or unset it"
            )
        return None
    if shutil.which("tmux") is None:
        return (
            f"tmux is not found on PATH ({os.environ.get('PATH', '')}); supervise runs every "
            f"agent in tmux. Fix: install tmux (apt install tmux, brew install tmux), or set "
            f"{TMUX_ENV} to its path"
        )
    return None


def require_tmux(profile_path: Path) -> None:
    """``supervise validate``'s check of a profile: tmux can be run here.

    Raises:
        ConfigError: one problem line, ``PROFILE: <why>`` (:func:`missing_tmux`).
    """
    problem = missing_tmux()
    if problem is not None:
        raise ConfigError([f"{profile_path}: {problem}"])


def decode_lines(data: bytes) -> list[str]:
    """``data`` split at newlines, decoded as UTF-8 (other bytes as backslash escapes)."""
    return data.decode("utf-8", "backslashreplace").split("\n")
