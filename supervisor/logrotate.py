"""Size rotation of a task's append-only logs that carry a first line of their own.

``output.log`` rotates at each check (:meth:`supervisor.taskdir.folder.TaskDir.rotate_output`,
supervisord's ``stdout_logfile_maxbytes`` / ``_backups`` rule). ``stream.jsonl`` follows
the same rule and keys (``max_log_bytes``, ``log_backups``), with two differences its
reader needs: it is rotated only while no run writes it (the wrapper holds it open for a
whole run), and the fresh file starts with a line that carries the totals of the files
rotated away (:data:`supervisor.agents.claude.stream.CARRY`), so a reader that starts
over, after an engine restart, still sums every run.

Cost: a rotation lists the log's folder once and renames only the backups that exist, so
it is O(backups on disk), never O(``log_backups``) (issue 20: ``log_backups = 100000000``
made each rotation loop 100 million times on the engine's one worker thread).

Crash safety: the fresh file is written whole beside the log (``NAME.new``) before the
renames; a crash between the last two renames leaves ``NAME.new`` without ``NAME``, which
:func:`finish` completes.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from supervisor.diskio import atomic_write


def existing_backups(path: Path) -> list[int]:
    """The indexes ``N`` of the ``path.N`` files beside ``path``, highest first (one
    ``scandir`` of the folder; ``N`` a positive decimal without a leading zero)."""
    head = path.name + "."
    found = []
    with os.scandir(path.parent) as entries:
        for entry in entries:
            tail = entry.name[len(head) :] if entry.name.startswith(head) else ""
            if tail.isascii() and tail.isdigit() and not tail.startswith("0"):
                found.append(int(tail))
    return sorted(found, reverse=True)


def shift_backups(path: Path, backups: int) -> None:
    """Make room for a rotation: ``path.N`` becomes ``path.N+1`` while ``N+1 <= backups``,
    every other ``path.N`` is removed, then ``path`` becomes ``path.1`` (supervisord's
    ``_logfile_backups`` rule). ``backups`` >= 1. Costs one rename or unlink per backup on
    disk (:func:`existing_backups`). Raises ``OSError`` (a backup gone meanwhile is skipped)."""
    for index in existing_backups(path):
        older = path.with_name(f"{path.name}.{index}")
        with contextlib.suppress(FileNotFoundError):
            if index >= backups:
                os.unlink(older)
            else:
                os.replace(older, path.with_name(f"{path.name}.{index + 1}"))
    os.replace(path, path.with_name(f"{path.name}.1"))


def _fresh(path: Path) -> Path:
    return path.with_name(path.name + ".new")


def rotate(path: Path, backups: int, first_line: bytes = b"") -> None:
    """``path.N`` shift up (past ``backups`` removed), ``path`` becomes ``path.1`` and a new
    ``path`` holds ``first_line``; with ``backups`` 0 the old content is dropped. Raises
    ``OSError`` (the log is then as it was, or completed by :func:`finish`)."""
    fresh = _fresh(path)
    atomic_write(fresh, first_line)
    if backups > 0:
        shift_backups(path, backups)
    os.replace(fresh, path)


def finish(path: Path) -> bool:
    """Complete a rotation cut short (``NAME.new`` without ``NAME``); returns whether it
    did. Raises ``OSError``."""
    fresh = _fresh(path)
    if path.exists() or not fresh.exists():
        return False
    os.replace(fresh, path)
    return True
