"""Where the engine log of a state dir is, and reading it back (``supervise logs``).

``supervise run`` always logs to a file so that ``supervise logs`` can find it: the one
given with ``--log-file``, else ``state_dir/engine.log`` (:data:`ENGINE_LOG`, beside the
stderr stream it wrote before, which a systemd unit sends to the journal). Both are rotated
by size with the standard library's ``RotatingFileHandler`` (``PATH.1`` ... ``PATH.K``).
The file in use is recorded in ``state_dir/engine-log.json`` (:data:`POINTER`,
``{"path": ...}``), written at start by an engine that found no other engine on the state
dir, so a ``--log-file`` outside the state dir is found as well.

Only the standard library is imported: ``logs`` starts fast and needs no engine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import logging.handlers
import os
from pathlib import Path

from supervisor.diskio import atomic_write, open_regular, read_end_rotated
from supervisor.taskdir import layout

#: The engine log's file in the state dir when ``supervise run`` has no ``--log-file``.
ENGINE_LOG = layout.ENGINE_LOG
#: The state dir's record of the log file the last engine wrote: ``{"path": "/abs/file"}``.
POINTER = layout.ENGINE_LOG_POINTER
#: Largest chunk read from a log at once, in bytes (a follower loops; a tail reads no more).
CHUNK = 1024 * 1024


def default_path(state_dir: Path) -> Path:
    """``state_dir/engine.log``: the log of an engine started without ``--log-file``."""
    return state_dir / ENGINE_LOG


def record(state_dir: Path, path: Path) -> None:
    """Write ``state_dir/engine-log.json`` naming ``path`` (made absolute). Raises
    ``OSError`` when the state dir cannot be written."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    data = json.dumps({"path": str(path.expanduser().absolute())}).encode()
    atomic_write(state_dir / POINTER, data, durable=False)


def located(state_dir: Path) -> Path:
    """The engine log of ``state_dir``: the path ``engine-log.json`` names, else
    :func:`default_path` (also when the record is unreadable or not an object with a
    string ``path``)."""
    try:
        data = json.loads((state_dir / POINTER).read_bytes())
    except (OSError, ValueError):
        return default_path(state_dir)
    path = data.get("path") if isinstance(data, dict) else None
    if not isinstance(path, str) or not path or "\0" in path:
        return default_path(state_dir)
    return Path(path)


def tail(path: Path, lines: int, max_bytes: int = CHUNK) -> list[str]:
    """The last ``lines`` lines of the log at ``path``, taken across ``path.1`` when the
    current file holds fewer (a rotation just happened); at most ``max_bytes`` read in all.
    Bytes that are not UTF-8 decode as U+FFFD. A missing file gives ``[]``."""
    if lines <= 0:
        return []
    data = read_end_rotated(path, lines, max_bytes)
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]


class Follower:
    """What is appended to a log file from now on, across rotations (``tail -F``).

    :meth:`read` returns the new bytes. When the name ``path`` comes to point at another
    file (``RotatingFileHandler`` renamed the old one to ``path.1`` and opened a new one) or
    the file shrank (truncated), the rest of the old file is read first, then the new file
    from its start. A path that is missing or not a regular file yields nothing until it is.
    """

    def __init__(self, path: Path, from_end: bool = True) -> None:
        self.path = path
        self.fd = open_regular(path)
        if self.fd is not None and from_end:
            os.lseek(self.fd, 0, os.SEEK_END)

    def _drain(self) -> bytes:
        if self.fd is None:
            return b""
        parts = []
        while chunk := os.read(self.fd, CHUNK):
            parts.append(chunk)
        return b"".join(parts)

    def read(self) -> bytes:
        """The bytes appended since the last call (``b""`` when none)."""
        data = self._drain()
        try:
            now = os.stat(self.path)
        except OSError:
            return data  # between the rename and the new file: the next call finds it
        if self.fd is None or self._replaced(now):
            self.close()
            self.fd = open_regular(self.path)
            data += self._drain()
        return data

    def _replaced(self, now: os.stat_result) -> bool:
        assert self.fd is not None
        held = os.fstat(self.fd)
        moved = (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino)
        return moved or held.st_size < os.lseek(self.fd, 0, os.SEEK_CUR)

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


class QuietFileHandler(logging.handlers.RotatingFileHandler):
    """The default file log: a record it cannot write (a full or read-only state
    filesystem) is dropped silently, since stderr carries the same line; the standard
    handler would print a traceback to stderr for every such record."""

    def handleError(self, record: logging.LogRecord) -> None:
        return None


def attach(state_dir: Path, log_file: str | None, max_bytes: int, backups: int) -> str | None:
    """Set up the engine's file log once the profile is known: without ``--log-file``
    (``log_file`` ``None``) add a rotating handler on :func:`default_path` to the root
    logger (with the formatter of its first handler); then, unless an engine already holds
    ``state_dir`` (it keeps its own record), :func:`record` the file in use. Returns a
    warning line when the default file cannot be opened (the engine then logs to stderr
    only), else ``None``."""
    from supervisor.statelock import engine_running

    path = Path(log_file).expanduser() if log_file is not None else default_path(state_dir)
    if log_file is None:
        try:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            handler = QuietFileHandler(
                path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
            )
        except OSError as exc:
            return (
                f"warning: cannot write the engine log {path}: {exc.strerror or exc}; "
                "logging to stderr only ('supervise logs' will not show it)"
            )
        root = logging.getLogger()
        if root.handlers:
            handler.setFormatter(root.handlers[0].formatter)
        root.addHandler(handler)
    if not engine_running(state_dir):
        with contextlib.suppress(OSError):
            record(state_dir, path)
    return None
