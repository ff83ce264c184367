"""The task directory (:class:`TaskDir`): atomic manifest writes, the event log and the
wrapper's run files. The file names are :mod:`supervisor.taskdir.layout`'s; the manifest's
model is :mod:`supervisor.taskdir.manifest`'s (both also importable from here).

The manifest is the contract with the orchestrator; its JSON Schema is in ``schemas/``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from supervisor.diskio import (  # noqa: F401  (also imported from here with TaskDir)
    NotRegularFile,
    atomic_write,
    fsync_dir,
    keep_aside,
    parse_iso,
    read_end,
    read_end_rotated,
    read_regular,
    utc_iso,
)
from supervisor.logrotate import shift_backups
from supervisor.taskdir.events import DURABLE, Event
from supervisor.taskdir.layout import (  # noqa: F401  (also imported from here)
    DAMAGED,
    DONE,
    EVENTS,
    FOLLOWUP,
    LAUNCH_ERROR,
    MANIFEST,
    MANIFEST_LOCK,
    OUTPUT,
    OUTPUT_ROTATED,
    RUN_FILES,
    TURN_PROMPT,
)
from supervisor.taskdir.manifest import Manifest, TurnRecord  # noqa: F401  (also from here)

TAIL_LINES = 100


#: Serializes appends to event logs within the engine, so a short write can be truncated
#: without cutting another thread's line.
_APPEND_LOCK = threading.Lock()


def _append_line(fd: int, line: bytes, sync: bool) -> None:
    """Append ``line`` (ending in ``"\n"``) to the file open on ``fd`` whole, or not at
    all, and with ``sync`` on the disk (``fdatasync``): see :meth:`TaskDir.append_event`.
    A failed ``fdatasync`` (EIO, ENOSPC) takes the line back: the caller holds the decision
    and takes it again, so it is never logged twice. Raises ``OSError``."""
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        line = b"\n" + line  # a torn tail: close it (keeping its bytes) before ours
    written, synced = 0, not sync
    try:
        written = os.write(fd, line)
        if written == len(line) and sync:
            os.fdatasync(fd)
            synced = True
    finally:
        if written != len(line) or not synced:  # short, or an error after part of it
            os.ftruncate(fd, size)
    if written != len(line):
        raise OSError(errno.ENOSPC, f"short write to {EVENTS} ({written} of {len(line)} bytes)")


def _open_log(path: Path) -> tuple[int, bool]:
    """An append descriptor on ``events.jsonl`` and whether this call created the file.
    Raises ``OSError``."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600), True
    except FileExistsError:
        return os.open(path, flags), False


class TaskDir:
    """One task's folder; all reads and writes of its files go through here.

    Args:
        path: ``state_dir/tasks/<task_id>``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = FileLock(str(path / MANIFEST_LOCK), timeout=30)

    @property
    def task_id(self) -> str:
        return self.path.name

    def file(self, name: str) -> Path:
        return self.path / name

    # -- manifest -----------------------------------------------------------------
    def read_manifest(self) -> Manifest:
        """Parse ``manifest.json``. Raises ``OSError`` or ``pydantic.ValidationError``."""
        return Manifest.model_validate_json(self.file(MANIFEST).read_bytes())

    def has_manifest(self) -> bool:
        return self.file(MANIFEST).exists()

    def write_manifest(self, manifest: Manifest, durable: bool = True) -> None:
        """Atomically replace ``manifest.json`` under the task's file lock; ``durable``: as
        :meth:`update_manifest`'s."""
        with self._lock:
            self._write(manifest, durable)

    def _write(self, manifest: Manifest, durable: bool = True) -> None:
        payload = manifest.model_dump_json(indent=2).encode() + b"\n"
        atomic_write(self.file(MANIFEST), payload, durable=durable)

    def update_manifest(
        self,
        change: Callable[[Manifest], None],
        durable: bool | Callable[[Manifest], bool] = True,
        fallback: Manifest | None = None,
    ) -> Manifest:
        """Read, apply ``change`` in place, write back: one locked read-modify-write.

        ``durable``: fsync the new file and the folder (:func:`atomic_write`), or a test of
        the changed manifest that says so. Without it the write is still atomic for readers,
        but a power cut may leave the previous file, an empty one or none: only for a
        manifest that the event log, fsynced first, restores
        (:func:`supervisor.taskdir.repair.restorable`).

        Using the lock for the whole cycle means an operator command (``supervise stop``)
        and the engine never lose each other's updates.

        ``fallback``: the writer's own last copy, used when the file is missing or not a
        valid manifest (deleted or overwritten under a running engine); an unreadable file
        is first renamed to ``manifest.json.damaged-<epoch s>``, never deleted. Without it
        such a file raises ``OSError`` or ``ValueError`` (pydantic's ``ValidationError``).
        """
        with self._lock:
            try:
                manifest = self.read_manifest()
            except (FileNotFoundError, ValueError):
                if fallback is None:
                    raise
                path = self.file(MANIFEST)
                keep_aside(path, DAMAGED)  # never over one kept in the same second
                manifest = fallback.model_copy(deep=True)
            change(manifest)
            self._write(manifest, durable(manifest) if callable(durable) else durable)
            return manifest

    # -- events -------------------------------------------------------------------
    def append_event(self, event: str, at: float | None = None, **fields: Any) -> dict[str, Any]:
        """Append one JSON line ``{"ts", "event", **fields}`` to ``events.jsonl``.

        ``at`` (epoch s) stamps the event with the time the engine observed what caused it
        (default: now), so intervals between events are the policy's own.

        Whole lines or nothing: one ``write`` of one line on an ``O_APPEND`` descriptor,
        under a per-process lock (every writer of ``events.jsonl`` runs in the engine). A
        short write (the disk filled up mid-line) is truncated back to the previous size,
        and a torn tail left by a crash or power cut gets a ``"\n"`` in front of the new
        line, so the fragment stays a line of its own that :meth:`events` skips and the new
        event is never glued to it. Raises ``OSError`` (e.g. ``ENOSPC``) when the line could
        not be written whole; the file is then as it was.

        Durability: an event of :data:`supervisor.taskdir.events.DURABLE` (a state change)
        is on the disk when this returns (``fdatasync``, fsync(2): it also writes the new
        size); the log's creation is made durable by an fsync of the folder. Other events
        reach the disk with the next synced one or the kernel's writeback.
        """
        record = {"ts": utc_iso(at), "event": event, **fields}
        # ASCII-only JSON: a name with lone surrogates (a non-UTF-8 file name) or U+2028
        # cannot break the line or the encoding.
        line = (json.dumps(record, ensure_ascii=True, default=str) + "\n").encode()
        with _APPEND_LOCK:
            fd, created = _open_log(self.file(EVENTS))
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO would block once full
                    raise NotRegularFile(self.file(EVENTS), os.fstat(fd).st_mode)
                _append_line(fd, line, sync=event in DURABLE)
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.path)
        return record

    def events(self) -> list[dict[str, Any]]:
        """All events, oldest first (a torn last line, or one nested too deep, is skipped;
        none when the log is missing or no regular file)."""
        try:  # non-blocking, a regular file only: an agent can write into its folder
            data = read_regular(self.file(EVENTS), follow=False)
        except (FileNotFoundError, NotRegularFile):  # a FIFO or a folder put in its place
            return []
        out = []
        for line in data.decode("utf-8", errors="replace").split("\n"):
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except (ValueError, RecursionError):  # torn, or nested too deep
                continue
        return out

    def turn_events(self) -> list[dict[str, Any]]:
        """The current turn's events: those after the last :attr:`Event.FOLLOWED_UP` (all
        of them in the first turn). An earlier turn's ending is no word on this one."""
        events = self.events()
        starts = [i for i, e in enumerate(events) if e.get("event") == Event.FOLLOWED_UP]
        return events[starts[-1] :] if starts else events

    # -- wrapper files ------------------------------------------------------------
    def read_int(self, name: str) -> int | None:
        """An integer file written by the wrapper (``pid``, ``exit_code``), or ``None``."""
        try:
            return int(self.file(name).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def done(self) -> bool:
        """Layer 1 of the seed monitor: the done-file exists."""
        return self.file(DONE).exists()

    def clear_run_files(self) -> None:
        """Remove ``pid``/``exit_code``/``signal``/``done``/``launch_error`` before a
        (re)launch."""
        for name in (*RUN_FILES, LAUNCH_ERROR):
            with contextlib.suppress(FileNotFoundError):
                self.file(name).unlink()

    def done_mtime(self) -> float | None:
        """When the wrapper wrote the done-file (epoch s), or ``None``: the true end time
        even when ``supervise`` was down at that moment."""
        try:
            return self.file(DONE).stat().st_mtime
        except FileNotFoundError:
            return None

    def rotate_output(self, max_bytes: int, backups: int) -> bool:
        """Rotate ``output.log`` once it exceeds ``max_bytes``: ``output.log.N`` shift up,
        ``output.log`` becomes ``output.log.1`` (the capture process keeps writing into it
        until it is re-piped), and files past ``backups`` are removed (supervisord's
        ``stdout_logfile_maxbytes`` / ``_backups`` rule). Returns whether it rotated.
        """
        path = self.file(OUTPUT)
        try:
            if path.stat().st_size <= max_bytes:
                return False
        except FileNotFoundError:
            return False
        if backups <= 0:
            os.truncate(path, 0)
            return False
        shift_backups(path, backups)
        return True

    def output_mtime(self) -> float | None:
        """Newest mtime of ``output.log`` and ``output.log.1`` (epoch s), ``None`` if neither
        exists. Right after a rotation the fresh file may not exist yet while the rotated one
        was written a moment ago: a busy agent must not look stale."""
        times = []
        for name in (OUTPUT, OUTPUT_ROTATED):
            with contextlib.suppress(FileNotFoundError):
                times.append(self.file(name).stat().st_mtime)
        return max(times) if times else None

    def output_tail(self, lines: int = TAIL_LINES, max_bytes: int = 256 * 1024) -> str:
        """The last ``lines`` lines of the agent's output (reads at most ``max_bytes``).

        Taken across ``output.log.1`` and ``output.log``: a rotation just before the end
        leaves the fresh ``output.log`` short or not yet created, and the lines before it
        are at the end of ``output.log.1``.
        """
        data = read_end_rotated(self.file(OUTPUT), lines, max_bytes)
        text = data.decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])
