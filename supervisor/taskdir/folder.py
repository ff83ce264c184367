"""The task directory: layout, the ``manifest.json`` model, atomic writes and the event log.

Layout of ``state_dir/tasks/<task_id>/`` (names kept from the seed skill so existing
orchestrators keep working)::

    task.toml      the claimed spool file, moved here unchanged
    prompt         the prompt text, byte for byte
    followup.prompt  a follow-up's prompt waiting for the engine (``supervise continue``)
    turn.prompt    the current turn's prompt once a follow-up opened turn 2 or later
    argv           the agent argv for the wrapper, NUL-separated (rewritten before a resume)
    env.json       extra environment for the agent (profile [agent.env] + task [env])
    pid            the agent's own PID (written by the wrapper before exec)
    exit_code      the agent's exit code (written by the wrapper when it ends)
    signal         the signal number, only when the agent was killed by a signal
    done           written last by the wrapper: its presence means the agent run is over
    output.log     all pane output via tmux pipe-pane, ANSI escapes stripped
    manifest.json  the machine-readable state (always valid JSON: tmp + fsync + rename)
    events.jsonl   one JSON object per transition, append-only

The manifest is the contract with the orchestrator; its JSON Schema is in ``schemas/``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from supervisor.diskio import (  # noqa: F401  (also imported from here with TaskDir)
    NotRegularFile,
    atomic_write,
    fsync_dir,
    parse_iso,
    read_end,
    read_end_rotated,
    read_regular,
    utc_iso,
)
from supervisor.logrotate import shift_backups
from supervisor.taskdir.states import FailureReason, Status, Verdict
from supervisor.workspace.model import WorkspaceReport

MANIFEST = "manifest.json"
EVENTS = "events.jsonl"

#: The event written before the notifier runs for one of a task's events (write-ahead), and
#: the one written after it: a ``notifying`` with no ``notified`` after it is a notification
#: a killed engine left unsent (:mod:`supervisor.engine.recovery` sends it again).
NOTIFYING = "notifying"
NOTIFIED = "notified"
OUTPUT = "output.log"
TAIL_LINES = 100
#: ``supervise continue`` (issue 22): the prompt of a follow-up that waits for the engine.
#: Created with ``link(2)`` (never replaced), so of two follow-ups at once exactly one is
#: taken; the engine renames it to :data:`TURN_PROMPT` once the new turn is recorded.
FOLLOWUP = "followup.prompt"
#: The prompt of the task's current turn when it is a follow-up (turn 2 and later); the
#: first turn's prompt stays in ``prompt``.
TURN_PROMPT = "turn.prompt"
#: The event that opens a new turn of an ended (or escalated, then stopped) task: the
#: events after the last one of these are the current turn's (:meth:`TaskDir.turn_events`).
FOLLOWED_UP = "followed_up"
#: The event of a follow-up the engine could not take (the task was live, or its prompt
#: could not be read): the prompt file is removed and ``supervise continue`` shows why.
CONTINUE_REFUSED = "continue_refused"


def _inline_enum(values: type[StrEnum]) -> WithJsonSchema:
    """The JSON Schema of a :mod:`supervisor.taskdir.states` enum written inline (``enum`` and
    ``type`` on the property itself, no ``$defs``), so ``schemas/manifest.schema.json`` keeps
    its plain shape while its values come from the one definition."""
    return WithJsonSchema({"enum": [member.value for member in values], "type": "string"})


class TurnRecord(BaseModel):
    """One earlier turn of a task, kept in the manifest's ``turns`` when ``supervise
    continue`` opens the next one (issue 22): its prompt (first line, at most 200
    characters, and the SHA-256 of the whole prompt), outcome and times (ISO-8601 UTC),
    ``cost_usd`` (Claude Code's ``total_cost_usd`` as reported at the turn's end: the
    session's running total) and ``summary``."""

    model_config = ConfigDict(extra="allow")

    turn: int
    prompt: str
    prompt_sha256: str
    status: Annotated[Status, _inline_enum(Status)]
    verdict: Annotated[Verdict, _inline_enum(Verdict)] | None = None
    failure_reason: str | None = None
    abandon_reason: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    retry_count: int = 0
    cost_usd: float | None = None
    summary: str | None = None


class Manifest(BaseModel):
    """``manifest.json``: what the orchestrator reads.

    Seed fields: ``task_name``, ``model`` (the resolved id), ``project_dir``,
    ``session_name``, ``pid``, ``tmpdir`` (the task directory), ``started_at``, ``status``,
    ``finished_at``, ``exit_code``, ``output_tail`` (last 100 lines of ``output.log``),
    ``retry_count``, ``last_checked_at``, ``abandoned_at``. New: ``task_id``, ``session_id``
    (the UUID passed as ``{session_id}``), ``abandon_reason``, ``created_at``, ``signal``
    (set when the agent was killed by a signal), ``launched_at`` (latest launch or resume),
    ``resume_at`` (when a crashed, hung or waiting task is due to resume), ``verdict`` and
    ``summary`` (set at the end: seed 003's verdict and one paragraph on the outcome),
    ``failure_reason`` (with status ``failed``: ``auth``, ``billing``, ``invalid_request``,
    ``agent_error``, ``exit_code`` or ``launch``; see :mod:`supervisor.failures`) and
    ``transient_waits`` (waits after transient API or network failures, never retries).
    Claude Code tasks also carry ``claude`` (session id, final result text, is_error,
    num_turns, total_cost_usd, api_retries, api_errors, transcript_path), ``denials``
    (the circuit breaker's count), ``escalation`` (what waits for a human) and
    ``limit_waits``; an acceptance check adds ``acceptance``; ``workspace``
    (:class:`~supervisor.workspace.model.WorkspaceReport`) says where the task worked.
    ``turn`` is 1 for the first run of the task's prompt and counts each ``supervise
    continue``; ``turns`` keeps each earlier turn's outcome (:class:`TurnRecord`).
    All timestamps are ISO-8601 UTC strings.
    """

    # validate_assignment: the engine assigns statuses as plain strings (the policy's);
    # they become the enum members the schema declares, and a wrong one raises at once.
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    task_id: str
    task_name: str
    status: Annotated[Status, _inline_enum(Status)] = Field(Status.QUEUED, title="Status")
    model: str
    project_dir: str
    session_name: str
    session_id: str
    tmpdir: str
    pid: int | None = None
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    output_tail: str | None = None
    retry_count: int = 0
    last_checked_at: str | None = None
    abandoned_at: str | None = None
    abandon_reason: str | None = None
    launched_at: str | None = None
    resume_at: str | None = None
    verdict: Annotated[Verdict, _inline_enum(Verdict)] | None = Field(None, title="Verdict")
    summary: str | None = None
    claude: dict[str, Any] | None = None
    escalation: dict[str, Any] | None = None
    denials: int = 0
    limit_waits: int = 0
    transient_waits: int = 0
    failure_reason: Annotated[FailureReason, _inline_enum(FailureReason)] | None = Field(
        None, title="Failure Reason"
    )
    acceptance: dict[str, Any] | None = None
    workspace: WorkspaceReport | None = None
    turn: int = 1
    turns: list[TurnRecord] = Field(default_factory=list)


#: Serializes appends to event logs within the engine, so a short write can be truncated
#: without cutting another thread's line.
_APPEND_LOCK = threading.Lock()


def _append_line(fd: int, line: bytes) -> None:
    """Append ``line`` (ending in ``"\n"``) to the file open on ``fd`` whole, or not at
    all: see :meth:`TaskDir.append_event`. Raises ``OSError``."""
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        line = b"\n" + line  # a torn tail: close it (keeping its bytes) before ours
    written = 0
    try:
        written = os.write(fd, line)
    finally:
        if written != len(line):  # a short write, or an error after part of the line
            os.ftruncate(fd, size)
    if written != len(line):
        raise OSError(errno.ENOSPC, f"short write to {EVENTS} ({written} of {len(line)} bytes)")


class TaskDir:
    """One task's folder; all reads and writes of its files go through here.

    Args:
        path: ``state_dir/tasks/<task_id>``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = FileLock(str(path / ".manifest.lock"), timeout=30)

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

    def write_manifest(self, manifest: Manifest) -> None:
        """Atomically replace ``manifest.json`` under the task's file lock."""
        with self._lock:
            self._write(manifest)

    def _write(self, manifest: Manifest, durable: bool = True) -> None:
        payload = manifest.model_dump_json(indent=2).encode() + b"\n"
        atomic_write(self.file(MANIFEST), payload, durable=durable)

    def update_manifest(
        self,
        change: Callable[[Manifest], None],
        durable: bool = True,
        fallback: Manifest | None = None,
    ) -> Manifest:
        """Read, apply ``change`` in place, write back: one locked read-modify-write.

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
                with contextlib.suppress(FileNotFoundError):
                    os.rename(path, path.with_name(f"{MANIFEST}.damaged-{int(time.time())}"))
                manifest = fallback.model_copy(deep=True)
            change(manifest)
            self._write(manifest, durable)
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
        """
        record = {"ts": utc_iso(at), "event": event, **fields}
        # ASCII-only JSON: a name with lone surrogates (a non-UTF-8 file name) or U+2028
        # cannot break the line or the encoding.
        line = (json.dumps(record, ensure_ascii=True, default=str) + "\n").encode()
        with _APPEND_LOCK:
            fd = os.open(self.file(EVENTS), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO would block once full
                    raise NotRegularFile(self.file(EVENTS), os.fstat(fd).st_mode)
                _append_line(fd, line)
            finally:
                os.close(fd)
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
        """The current turn's events: those after the last :data:`FOLLOWED_UP` (all of
        them in the first turn). An earlier turn's ending is no word on this one."""
        events = self.events()
        starts = [i for i, e in enumerate(events) if e.get("event") == FOLLOWED_UP]
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
        return self.file("done").exists()

    def clear_run_files(self) -> None:
        """Remove ``pid``/``exit_code``/``signal``/``done``/``launch_error`` before a
        (re)launch."""
        for name in ("pid", "exit_code", "signal", "done", "launch_error"):
            with contextlib.suppress(FileNotFoundError):
                self.file(name).unlink()

    def done_mtime(self) -> float | None:
        """When the wrapper wrote the done-file (epoch s), or ``None``: the true end time
        even when ``supervise`` was down at that moment."""
        try:
            return self.file("done").stat().st_mtime
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
        for name in (OUTPUT, f"{OUTPUT}.1"):
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
