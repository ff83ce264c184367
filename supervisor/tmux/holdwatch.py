"""The control session's pane: ``python -I -S holdwatch.py HOLDER_PID SESSION``.

It waits for the process holding the control client (the engine) to end, then SIGKILLs
that control client and ends itself, and its session with it. Standard library only: it
runs by path, isolated, like the wrapper.

Why the kill: tmux 3.3a does not always let an orphaned control client go. When the engine
dies with replies or notifications still queued for the client's stdout (a pipe nobody
reads any more), the server waits for that output to drain before it sends the client
``MSG_EXIT``, which never happens; the client then outlives its session, and a later
``kill-server`` hangs on it (seen with 25 SIGKILLs of a busy engine: 13 clients left).
A killed client closes its socket, and the server frees it whatever it still had queued.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

#: Seconds to look for the control client among the holder's children (it attaches to this
#: session right after tmux starts this pane).
FIND_FOR = 5.0


def start_ticks(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat`` (start time in clock ticks), or ``None`` if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def _client_among(pids: list[str], session: str) -> tuple[int, str] | None:
    """The first of ``pids`` that is this user's control client for ``session`` (its
    command line has ``-C`` and the session name as arguments), with its start ticks."""
    needle = session.encode()
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid != os.getuid():
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        ticks = start_ticks(int(pid))
        if needle in argv and b"-C" in argv and ticks is not None:
            return int(pid), ticks
    return None


def _children(holder: int) -> list[str] | None:
    """The PIDs of the holder's children, or ``None`` once the holder has ended."""
    try:
        tasks = os.listdir(f"/proc/{holder}/task")
    except OSError:
        return None
    children: list[str] = []
    for task in tasks:
        try:
            with open(f"/proc/{holder}/task/{task}/children") as handle:
                children += handle.read().split()
        except OSError:
            continue
    return children


def find_client(holder: int, session: str) -> tuple[int, str] | None:
    """The control client for ``session`` with its start ticks; ``None`` when not found
    within :data:`FIND_FOR` seconds.

    While the holder lives, the client is among its children. A holder killed before this
    pane's Python got to look (a busy machine: the engine SIGKILLed within its first
    commands, ``tests/test_tmux_control.py``) leaves an orphan, re-parented away: then
    every process is looked at once. The client existed before this pane (it asked for
    the session), so a client not found then has ended."""
    end = time.monotonic() + FIND_FOR
    while True:
        children = _children(holder)
        if children is None:
            return _client_among([p for p in os.listdir("/proc") if p.isdigit()], session)
        found = _client_among(children, session)
        if found is not None or time.monotonic() >= end:
            return found
        time.sleep(0.1)


def wait_for_end(pid: int) -> None:
    """Return once process ``pid`` has ended (pidfd; a poll every second without one)."""
    try:
        select.select([os.pidfd_open(pid)], [], [])
        return
    except (AttributeError, OSError):
        pass
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except OSError:
            pass
        time.sleep(1.0)


def main(argv: list[str]) -> int:
    """Wait for the holder, then end its control client if it is still there."""
    holder, session = int(argv[1]), argv[2]
    client = find_client(holder, session)
    wait_for_end(holder)
    if client is not None and start_ticks(client[0]) == client[1]:
        with contextlib.suppress(OSError):
            os.kill(client[0], signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
