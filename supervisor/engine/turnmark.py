"""Where a follow-up's turn starts in a task's output (issue 22, found by the Brain's trial).

``supervise continue`` runs turn N in the same pane, so ``output.log`` holds every turn one
after the other; without a mark a reader (``tail``, ``tail -f``, the web output box, all
through :mod:`supervisor.agents.readable`) cannot tell where turn 2 begins nor what it was
asked. Before the engine launches turn N >= 2 (:func:`supervisor.engine.launch.start`) it
appends one line to ``output.log``::

    --- turn 2: Now write the curl version into NOTES.md. ---

the prompt's first line, control characters escaped (:mod:`supervisor.terminal`) and at
most :data:`MARK_CHARS` characters. The line is plain text, so both renderers show it as it
is (a stream-json renderer passes a line that is not JSON through), and ``tail --raw`` too.
It goes in with one ``O_APPEND`` write, so it never interleaves with the capture's lines.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from supervisor.taskdir.folder import OUTPUT
from supervisor.terminal import escape_controls

#: The most characters of the prompt shown in a turn's mark (the rest ends in ``…``).
MARK_CHARS = 120
#: Bytes at the end of ``output.log`` read to see whether the mark is there already.
_LOOK_BACK = 4096


def turn_line(turn: int, prompt: str) -> str:
    """The mark of turn ``turn`` (a follow-up) whose prompt is ``prompt``: its first
    non-blank line, escaped and cut to :data:`MARK_CHARS` characters; no newline. Pure."""
    lines = prompt.strip().splitlines()
    first = escape_controls(lines[0].strip()) if lines else ""
    if len(first) > MARK_CHARS:
        first = first[: MARK_CHARS - 1] + "…"
    return f"--- turn {turn}: {first} ---" if first else f"--- turn {turn} ---"


def mark_turn(folder: Path, turn: int, prompt: str) -> bool:
    """Append :func:`turn_line` to ``folder/output.log`` (created 0600 when missing) unless
    its last line is that mark already (a launch tried again after an engine restart).
    Returns whether it wrote. Never follows a symlink, never blocks on a FIFO, writes only
    into a regular file.

    Raises:
        OSError: the file cannot be opened or written (ENOSPC, EACCES, ELOOP for a
            symlink, ENXIO for a FIFO): the caller logs it, the turn runs unmarked.
    """
    line = turn_line(turn, prompt).encode("utf-8", errors="replace")
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(folder / OUTPUT, flags, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{folder / OUTPUT} is not a regular file")
        start = max(0, info.st_size - _LOOK_BACK)
        tail = os.pread(fd, info.st_size - start, start)
        if tail.rstrip(b"\n").rsplit(b"\n", 1)[-1] == line:
            return False
        # A newline first when the file ends inside a line (the agent's last words).
        lead = b"\n" if tail and not tail.endswith(b"\n") else b""
        os.write(fd, lead + line + b"\n")
        return True
    finally:
        os.close(fd)
