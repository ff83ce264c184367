"""Operator requests to a running engine: one small file per request.

``supervise stop|resume|approve|deny ID`` write ``state_dir/control/<ID>.<verb>``
(atomically); the engine's intake job picks requests up on its next tick (every
``intake_interval`` seconds), runs that task's check at once and deletes the request file.
The request goes through the same pure policy and the same locked manifest update as any
other check, so an operator and the engine never lose each other's updates. The cluster
intake leaves ``<ID>.supersede`` the same way (:data:`ENGINE_VERBS`: no operator verb).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from supervisor.diskio import atomic_write, utc_iso
from supervisor.taskdir import layout
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import TERMINAL, Status
from supervisor.taskid import is_task_id, shown

VERBS = ("stop", "resume", "approve", "deny")
#: Requests only the engine's own parts leave, never an operator: ``supersede`` (the
#: cluster intake found the task's row given to a newer generation, issue 15) and
#: ``discard`` (another attempt of the task's group won, issue 26).
ENGINE_VERBS = ("supersede", "discard")
#: The requests that end a task: a worktree being made for it is given up.
ENDING = ("stop", "discard")
#: ``supervise continue ID PROMPT`` (issue 22): its prompt waits in the task folder
#: (:data:`supervisor.taskdir.folder.FOLLOWUP`); the request only wakes the engine.
CONTINUE = "continue"
CONTROL = layout.CONTROL
_NAME_RE = re.compile(r"^([a-z0-9-]+)\.(stop|resume|approve|deny|supersede|discard|continue)$")


def request(state_dir: Path, task_id: str, verb: str) -> Path:
    """Leave a request for the engine; returns the request file.

    Raises:
        ValueError: an unknown verb or a task id that is not a slug.
    """
    if verb not in (*VERBS, *ENGINE_VERBS, CONTINUE) or not is_task_id(task_id):
        raise ValueError(f"bad request {verb!r} for {shown(task_id)!r}")
    folder = state_dir / CONTROL
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{task_id}.{verb}"
    atomic_write(path, f"{utc_iso()}\n".encode())
    return path


def refusal(task_id: str, status: str, verb: str) -> str | None:
    """Why ``verb`` cannot be asked of a task in ``status`` (one line), or ``None``: an
    ended task takes no request, and approve/deny answer only an ``escalated`` one. Shared
    by the CLI verbs and ``supervise serve``'s buttons."""
    if status in TERMINAL:
        return f"task {task_id} already ended: {status}"
    if verb in ("approve", "deny") and status != Status.ESCALATED:
        return f"task {task_id} is {status}, not escalated: nothing to {verb}"
    return None


def pending(state_dir: Path) -> list[tuple[str, str, Path]]:
    """Requests waiting in ``state_dir/control``: ``(task_id, verb, path)``, oldest first;
    none when the folder does not exist. Only regular files are requests: found by attack,
    a folder named ``<id>.stop`` raised ``IsADirectoryError`` from the engine's removal
    of it at every intake run, and the engine hung (nothing launched or ended any more).

    Raises:
        OSError: it cannot be read (a file or a dangling symlink in its place, no
            permission): the engine logs it and goes on (:func:`pending_or_none`).
    """
    try:
        entries = list(os.scandir(state_dir / CONTROL))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        match = _NAME_RE.match(entry.name)
        try:  # a request is a regular file (:func:`request`); a folder, FIFO or link is none
            if match and entry.is_file(follow_symlinks=False):
                found.append((entry.stat().st_mtime, match.group(1), match.group(2), entry.path))
        except FileNotFoundError:
            continue
    return [(task_id, verb, Path(path)) for _, task_id, verb, path in sorted(found)]


def pending_or_none(state_dir: Path) -> tuple[list[tuple[str, str, Path]], str | None]:
    """:func:`pending`, or no request and why when ``state_dir/control`` cannot be read
    (one line naming it and the fix). Found by attack: a file in its place raised in every
    intake run, before any queued task was started: nothing launched any more."""
    try:
        return pending(state_dir), None
    except OSError as exc:
        return [], folder_problem(state_dir, exc, "read")


def folder_problem(state_dir: Path, exc: OSError, doing: str) -> str:
    """The one line for ``state_dir/control`` that cannot be used (``doing``: ``read`` or
    ``write``), naming the folder, the error and the fix."""
    folder = state_dir / CONTROL
    why = exc.strerror or type(exc).__name__
    return (
        f"{folder}: cannot {doing} the requests folder ({why}); no stop, resume or other "
        f"request is taken until it is a folder again (move it aside: mv {folder} "
        f"{folder}.bad)"
    )


def pending_verbs(state_dir: Path) -> dict[str, list[str]]:
    """Task id → verbs of the requests waiting in ``state_dir/control`` (:func:`pending`),
    oldest first: what the views show as asked and not taken yet. None when the folder
    is not one (a file in its place: the engine says so).

    Raises:
        PermissionError: another user's state dir: the CLI's one line
            (:func:`supervisor.folderaccess.denied_line`), never "no tasks".
    """
    try:
        found = pending(state_dir)
    except PermissionError:
        raise
    except OSError:
        found = []
    out: dict[str, list[str]] = {}
    for task_id, verb, _ in found:
        out.setdefault(task_id, []).append(verb)
    return out


def acted(verb: str, before: dict, after: dict) -> bool:
    """Whether the manifest ``after`` shows ``verb`` applied to the task that was
    ``before`` (both manifest dicts): stop ended it; approve/deny answered the escalation;
    resume counted a retry (or the task ended meanwhile). The same test as the CLI verbs'."""
    if verb == "stop":
        return after["status"] in TERMINAL
    if verb in ("approve", "deny"):
        return after["status"] != Status.ESCALATED
    return after.get("retry_count", 0) > before.get("retry_count", 0) or (
        after["status"] in TERMINAL
    )


def applied_line(task_id: str, manifest: dict) -> str:
    """The line a verb prints once applied: ``ID: STATUS (retry_count N)``."""
    return f"{task_id}: {manifest['status']} (retry_count {manifest.get('retry_count', 0)})"


def logged_requests(events: list[dict[str, Any]]) -> set[str]:
    """The ending verbs (``stop``, ``discard``, ...: :data:`ENDING`) whose
    ``<verb>_requested`` line the log holds after its last ending: taken, not yet carried
    out. ``events``: the turn's events, oldest first."""
    ending = {str(Event.requested(verb)): verb for verb in ENDING}
    logged: set[str] = set()
    for event in events:  # only since the last ending (a task resumed after one)
        name = str(event.get("event"))
        logged = set() if name in TERMINAL else logged | {ending.get(name) or ""}
    return logged - {""}
