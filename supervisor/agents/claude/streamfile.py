"""Reading ``stream.jsonl`` by whole lines, and when it last showed progress (headless mode).

The wrapper writes the file (:mod:`supervisor.streamcopy`): the CLI's lines, its content
deltas folded into ``supervise_fold`` lines, keep-alives dropped. :class:`StreamReader`
reads what was added since the last check, at most :data:`READ_CHUNK` bytes per check, and
keeps the progress stamp the adapter reports as ``AgentView.output_mtime`` in headless mode
(issue 21): the file's mtime at the read that found a line of progress (:func:`is_progress`).
The engine turns that stamp into "when it saw it change" (:func:`supervisor.engine.clock.
output_seen`), as it did with ``output.log``'s mtime, which no longer counts in headless
mode: a stall whose pane changes (the CLI's stderr, a ping) is still stale.

A line longer than :data:`READ_CHUNK` (a Write of a 10 MB file in one ``assistant`` line)
used to stop the reader for good (no newline in the chunk, the offset never moved): it is
now skipped, a chunk per check, and counts as progress (the agent wrote it).
"""

from __future__ import annotations

import json
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor import logrotate
from supervisor.agents.claude.hooks import STREAM
from supervisor.agents.claude.stream import CARRY, StreamState
from supervisor.streamcopy import KEEPALIVES, LAUNCH_MARK, STREAM_EVENT
from supervisor.taskdir.folder import TaskDir
from supervisor.taskdir.layout import EXIT_CODE

log = logging.getLogger(__name__)

#: Largest chunk of ``stream.jsonl`` read per check, in bytes.
READ_CHUNK = 8 * 1024 * 1024
#: Lines of the supervisor's own (launch marker, rotation carry): no progress of the agent.
OWN_LINES = frozenset({LAUNCH_MARK, CARRY})


def is_progress(obj: dict[str, Any] | None) -> bool:
    """Whether one line of ``stream.jsonl`` shows the agent working: every line the agent
    printed (messages, tool results, its ``tool_progress`` heartbeats, API retries, folded
    content deltas, a stray print: ``obj`` ``None``) but keep-alives (a ``stream_event``
    ``ping``: the API is connected, not producing) and the supervisor's own lines."""
    if obj is None:
        return True
    kind = obj.get("type")
    if kind in OWN_LINES:
        return False
    if kind == STREAM_EVENT:
        event = obj.get("event")
        return not (isinstance(event, dict) and event.get("type") in KEEPALIVES)
    return True


@dataclass
class StreamReader:
    """Where the reading of ``stream.jsonl`` stands.

    Attributes:
        offset: bytes read (the start of the first line not read yet).
        skipping: inside a line longer than :data:`READ_CHUNK`, skipped up to its newline.
        progress_at: the file's mtime (epoch s, wall clock) at the read that found the
            latest progress; ``None`` before any.
        mtime: the file's mtime at the latest read.
    """

    offset: int = 0
    skipping: bool = False
    progress_at: float | None = None
    mtime: float = 0.0

    def read(self, path: Path, size: int, chunk: int = READ_CHUNK) -> list[bytes]:
        """The whole lines between :attr:`offset` and ``size`` (bytes; at most ``chunk`` of
        them); moves :attr:`offset` past them. A partial last line waits for its newline;
        one that fills a whole chunk is skipped (:attr:`skipping`). Opens with
        ``O_NONBLOCK`` and reads nothing but a regular file. Raises ``OSError``."""
        if size <= self.offset:
            return []
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return []
            data = os.pread(fd, min(chunk, size - self.offset), self.offset)
        finally:
            os.close(fd)
        self.mtime = info.st_mtime
        if self.skipping:
            data = self._skip(data)
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) >= chunk:  # one line fills the chunk: it cannot be read whole
                log.warning("%s: skipping a line longer than %d bytes", path, chunk)
                self.skipping = True
                self._skip(data)
            return []
        self.offset += end + 1
        return data[: end + 1].splitlines()

    def _skip(self, data: bytes) -> bytes:
        """Skip ``data`` up to the end of the long line; returns what follows it."""
        self.progress_at = self.mtime  # the agent wrote that line: it worked
        end = data.find(b"\n")
        if end < 0:
            self.offset += len(data)
            return b""
        self.offset += end + 1
        self.skipping = False
        return data[end + 1 :]

    def saw(self, obj: dict[str, Any] | None) -> None:
        """Note one line of the latest read (``obj``: its JSON object, ``None`` when it is
        none)."""
        if is_progress(obj):
            self.progress_at = self.mtime

    def stamp(self) -> float:
        """The progress stamp for ``AgentView.output_mtime`` (epoch s). ``0.0`` before any
        progress: the policy counts from the launch then, never from ``output.log``."""
        return self.progress_at if self.progress_at is not None else 0.0


def rotate_stream(task: TaskDir, stream: StreamState, backups: int) -> int | None:
    """Rotate the task's ``stream.jsonl`` (:mod:`supervisor.logrotate`, ``backups`` kept)
    once the caller has read it to its end, past ``max_log_bytes``, and no run writes it:
    the wrapper has written ``exit_code``, which it does only after its copy of the stream
    ended. The fresh file starts with the carry line (``stream``'s totals). Returns the
    reader's new offset (the carry line's length, in bytes: the reader keeps its state and
    skips that line), or ``None`` when nothing was rotated (a run writes it; an
    ``OSError``, logged)."""
    if not task.file(EXIT_CODE).exists():
        return None
    line = json.dumps(stream.carry()).encode() + b"\n"
    path = task.file(STREAM)
    try:
        logrotate.rotate(path, backups, line)
    except OSError as exc:
        log.warning("%s: cannot rotate %s: %s", task.task_id, path, exc)
        return None
    return len(line)
