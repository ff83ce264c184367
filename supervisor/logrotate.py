"""Size rotation of a task's append-only logs that carry a first line of their own.

``output.log`` rotates at each check (:meth:`supervisor.taskdir.TaskDir.rotate_output`,
supervisord's ``stdout_logfile_maxbytes`` / ``_backups`` rule). ``stream.jsonl`` follows
the same rule and keys (``max_log_bytes``, ``log_backups``), with two differences its
reader needs: it is rotated only while no run writes it (the wrapper holds it open for a
whole run), and the fresh file starts with a line that carries the totals of the files
rotated away (:data:`supervisor.agents.claude.stream.CARRY`), so a reader that starts
over, after an engine restart, still sums every run.

Crash safety: the fresh file is written whole beside the log (``NAME.new``) before the
renames; a crash between the last two renames leaves ``NAME.new`` without ``NAME``, which
:func:`finish` completes.
"""

from __future__ import annotations

import os
from pathlib import Path

from supervisor.diskio import atomic_write, shift_backups


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
