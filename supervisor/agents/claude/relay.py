"""The hook command Claude Code runs for a supervised task: a relay, not a decision maker.

Run as ``python3 -I -S relay.py TASK_DIR EVENT [WAIT_SECONDS]`` (by file path, so no package
is imported) from the per-task ``--settings`` file that :mod:`supervisor.agents.claude.hooks`
generates; standard library only, so it starts in a few tens of milliseconds.

1. The hook's JSON input (stdin; Claude Code hooks reference: ``session_id``,
   ``transcript_path``, ``hook_event_name`` and per-event fields) is written atomically to
   ``TASK_DIR/hook-<time_ns>-<pid>-<EVENT>.json``. The engine watches the task folder
   (inotify), so every hook triggers an immediate check.
2. For ``PermissionRequest`` the relay then waits (up to ``WAIT_SECONDS``) for the engine's
   ruling in ``hook-....answer``, prints it to stdout (the decision JSON Claude Code reads)
   and removes it. An escalated request simply waits here until a human answers with
   ``supervise approve|deny``; the agent is paused meanwhile, its session intact. With no
   answer in time it prints nothing, and Claude Code falls back to its own default (it
   denies, in ``-p`` mode).

Exit status: 0 always (a hook error must never be mistaken for a block by Claude Code).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

#: Largest hook input kept, in bytes (tool inputs can be whole files).
MAX_INPUT = 4 * 1024 * 1024
#: Seconds between looks for the engine's answer.
POLL = 0.05


def _write_atomic(path: str, data: bytes) -> None:
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def main(args: list[str]) -> int:
    """Entry point; ``args`` is ``[TASK_DIR, EVENT, WAIT_SECONDS?]``."""
    if len(args) < 2:
        print("usage: relay.py TASK_DIR EVENT [WAIT_SECONDS]", file=sys.stderr)
        return 0
    task_dir, event = args[0], args[1]
    wait = float(args[2]) if len(args) > 2 else 600.0
    data = sys.stdin.buffer.read(MAX_INPUT)
    base = os.path.join(task_dir, f"hook-{time.time_ns():020d}-{os.getpid()}-{event}")
    try:
        _write_atomic(base + ".json", data)
    except OSError as exc:
        print(f"supervise hook: cannot record {event}: {exc}", file=sys.stderr)
        return 0
    if event != "PermissionRequest":
        return 0
    answer = base + ".answer"
    end = time.monotonic() + wait
    while time.monotonic() < end:
        try:
            with open(answer, "rb") as handle:
                ruling = handle.read()
        except FileNotFoundError:
            time.sleep(POLL)
            continue
        sys.stdout.buffer.write(ruling)
        sys.stdout.flush()
        with contextlib.suppress(OSError):
            os.unlink(answer)
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
