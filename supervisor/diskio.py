"""Writes that readers never see half done, and the timestamps every record uses.

Plain standard library: the status views, ``supervise status`` and the control requests use
these without loading the pydantic models of :mod:`supervisor.taskdir`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path


def utc_iso(timestamp: float | None = None) -> str:
    """ISO-8601 UTC with a ``Z`` suffix and millisecond precision; ``timestamp`` in epoch s."""
    moment = datetime.now(UTC) if timestamp is None else datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(value: str | None) -> float | None:
    """Epoch seconds from :func:`utc_iso` output (``None`` passes through)."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def fsync_dir(path: Path) -> None:
    """fsync a folder (or a file) by path: makes a rename or a new entry in it durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so a reader sees the old or the new file, never a mix.

    Temp file in the same folder, fsync, rename, fsync the folder. On any error the temp
    file is removed and the old file is left intact. Raises ``OSError``.
    ``durable=False`` skips the two fsyncs (still atomic for readers): for writes whose loss
    in a power cut costs nothing, like a check that only refreshes ``last_checked_at``.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)
