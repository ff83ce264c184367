"""``supervise tail -c PROFILE ID [-n N] [-f] [--raw]``: a task's output, rendered.

Without ``--raw`` the output is rendered for the task's agent kind
(:mod:`supervisor.agents.readable`: Claude Code's stream-json as text, tool calls and
results one line each; a generic agent's output as it is). ``--raw`` prints the lines of
``output.log`` as they are (escaped, never cut, as ``tail`` always did). Both read the
log's end only, never block on a file that is not a regular one (a FIFO), and take the
end of ``output.log.1`` too when the fresh log is short.

``-f`` follows until the task ends: whole lines as they arrive (a partial last line waits
for its newline), across a rotation of ``output.log``. Exit codes: 0 printed, 1 no such
task, 2 usage (``cli.py``'s table).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

from supervisor.taskdir import layout

#: Seconds between looks at ``output.log`` while following.
FOLLOW_EVERY = 0.25
#: The most lines ``-n`` may ask for (a tail reads a bounded end of the log anyway).
MAX_LINES = 1_000_000


def line_count(text: str) -> int:
    """``-n``'s value: a whole number from 1 to :data:`MAX_LINES` (argparse's usage error,
    exit 2, otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_LINES:
        raise argparse.ArgumentTypeError(f"{value} is out of range: use 1 to {MAX_LINES}")
    return value


def add_arguments(tail: argparse.ArgumentParser) -> None:
    """``-n``, ``-f`` and ``--raw`` on the ``tail`` parser (``-c`` and the id are
    cli.py's)."""
    tail.add_argument("-n", "--lines", type=line_count, default=20, help="lines to print (20)")
    tail.add_argument("-f", "--follow", action="store_true", help="follow until the task ends")
    tail.add_argument(
        "--raw", action="store_true", help="output.log as it is (Claude Code's stream-json)"
    )


def run(folder: Path, args: argparse.Namespace) -> int:
    """Print the task's tail (and follow it with ``-f``); returns the exit status."""
    from supervisor.agents import readable

    if isinstance(sys.stdout, io.TextIOWrapper):
        # The rendering adds "…", "·" and "⎿": a terminal whose locale cannot show them
        # gets escapes, never a UnicodeEncodeError.
        sys.stdout.reconfigure(errors="backslashreplace")
    kind = readable.RAW if args.raw else readable.agent_kind(folder)
    follower = readable.Follower(folder, kind)  # where the tail ends, the follow starts
    lines = readable.tail_lines(folder, args.lines, kind, follower.offset, follower.renderer)
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()
    if not args.follow:
        follower.close()
        return 0
    while True:
        text = follower.read()
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
        elif _ended(folder):
            sys.stdout.write(follower.close())
            return 0
        else:
            time.sleep(FOLLOW_EVERY)


def _ended(folder: Path) -> bool:
    """The task is terminal (an unreadable manifest: it is not, keep following)."""
    from supervisor.taskdir.states import TERMINAL
    from supervisor.views.model import read_json  # psutil: only when following

    manifest = read_json(folder / layout.MANIFEST)
    return isinstance(manifest, dict) and manifest.get("status") in TERMINAL
