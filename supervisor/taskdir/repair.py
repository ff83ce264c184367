"""A task folder whose ``manifest.json`` is missing or unreadable: what it is, and the one
repair that is exact.

The event log is the write-ahead record (see
:meth:`supervisor.engine.actions.Actions.apply`): a terminal event (``completed``,
``failed``, ``abandoned``) in ``events.jsonl`` is final, whatever the manifest says or
lacks, so a lost manifest is never a reason to run a task again (issue 10: a deleted
manifest made a finished task run again on restart; a garbage one raised on every
check and the task vanished from ``supervise status``).

- :func:`damage` names what is wrong, or ``None`` (also ``None`` for a claim in progress or
  cut short by a crash: no manifest and nothing logged yet; the engine finishes that claim).
- :func:`rebuild` makes the manifest again from ``spec.json`` (the validated task), the
  ``queued`` event (``session_id``, ``created_at``), the ``launched`` and ``resumed``
  events, the last status event of a run in progress (status, ``retry_count``, waits) and
  the terminal event (status, exit code, ``abandon_reason``, ``verdict``, ``retry_count``,
  ``failure_reason``, ``summary``, ``acceptance``, the agent's report such as its cost,
  times). A later turn (``supervise continue``) or an escalation is not exact: the files are
  left as they are and the task is reported ``damaged``.
- :func:`restorable` says which manifests :func:`rebuild` gets back whole: the engine writes
  those without an fsync (the events that decide them are fsynced first,
  :data:`supervisor.taskdir.events.DURABLE`), so a power cut that empties or loses such a
  manifest, or leaves the previous one, loses nothing the log does not hold.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from supervisor.diskio import keep_aside, read_regular
from supervisor.taskdir import layout
from supervisor.taskdir.events import (
    DURABLE,
    RUNS,
    Event,
    first_of,
    last_of,
    last_terminal,
    named,
)
from supervisor.taskdir.folder import MANIFEST, Manifest, TaskDir, utc_iso
from supervisor.taskdir.states import DAMAGED as DAMAGED  # re-exported: the views' name
from supervisor.taskdir.states import Status
from supervisor.waiting import MANIFEST_MAX
from supervisor.workspace import lifecycle


def damage(task: TaskDir) -> str | None:
    """Why ``task``'s manifest cannot be used, in one line, or ``None`` when it is fine (or
    when the folder is a claim still to finish: no manifest and no event yet)."""
    path = task.file(MANIFEST)
    try:  # non-blocking, regular files only: an agent can put a FIFO in its folder
        Manifest.model_validate_json(read_regular(path, MANIFEST_MAX, follow=False))
        return None
    except FileNotFoundError:
        if first_of(task.events(), Event.QUEUED) is None:
            # a claim in progress or cut short (the engine finishes it): no loss. A power
            # cut during the claim can leave an empty events.jsonl: the queued event is
            # written, and fsynced, before the first manifest.
            return None
        return f"{path} is missing"
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror or exc}"
    except ValueError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"{path} is not a valid manifest ({first})"


def rebuild(
    task: TaskDir, events: list[dict[str, Any]], name: str, model: str, project_dir: str
) -> Manifest | None:
    """The manifest as the event log fixes it, or ``None`` when the log cannot fix it
    exactly (no ``queued`` event with a ``session_id``, a run waiting on a human, or a
    follow-up's later turn: the earlier turns' records, ``turns``, are in no event whole).
    A run in progress comes back in the status its last status event logged, with its
    counters; adoption then finds its agent (or, after a power cut, its absence).

    Args:
        task: the task folder.
        events: its ``events.jsonl`` records, oldest first.
        name, model, project_dir: from ``spec.json`` (the task as validated at claim time,
            the model resolved the way the engine resolves it).
    """
    queued = first_of(events, Event.QUEUED)
    if queued is None or not queued.get("session_id"):
        return None
    if any(e.get("event") == Event.FOLLOWED_UP for e in events):
        return None  # turn 2 or later (supervise continue): left damaged, reported
    end = last_terminal(events)
    launched = named(events, Event.LAUNCHED)
    manifest = Manifest(
        task_id=task.task_id,
        task_name=name,
        model=model,
        project_dir=project_dir,
        session_name=task.task_id,
        session_id=str(queued["session_id"]),
        tmpdir=str(task.path),
        created_at=queued["ts"],
        workspace=lifecycle.report_from_events(events),
    )
    if end is None and not launched:
        return manifest  # queued, never launched
    runs = named(events, *RUNS)
    manifest.started_at = launched[0]["ts"] if launched else None
    manifest.launched_at = runs[-1]["ts"] if runs else None
    manifest.pid = task.read_int(layout.PID)
    if end is None:
        return _in_progress(manifest, events)
    _ended(manifest, end)
    done = task.done_mtime()
    manifest.finished_at = (
        utc_iso(done) if done is not None and manifest.status != Status.ABANDONED else end["ts"]
    )
    if manifest.status == Status.ABANDONED:
        manifest.abandoned_at = end["ts"]
    manifest.signal = task.read_int(layout.SIGNAL)
    manifest.output_tail = task.output_tail()
    return manifest


def _counts(manifest: Manifest, record: dict[str, Any], resumes: int) -> None:
    """The counters a status event carries (absent in logs written before they were)."""
    manifest.retry_count = max(int(record.get("retry_count") or 0), resumes)
    manifest.limit_waits = int(record.get("limit_waits") or 0)
    manifest.transient_waits = int(record.get("transient_waits") or 0)
    manifest.last_checked_at = record["ts"]


def _ended(manifest: Manifest, end: dict[str, Any]) -> None:
    """The terminal event's fields (:meth:`supervisor.engine.actions.Actions.apply` writes
    them; logs written before the ending's record was logged lack the last four)."""
    manifest.status = Status(end["event"])
    _counts(manifest, end, 0)
    manifest.exit_code = end.get("exit_code")
    manifest.abandon_reason = end.get("abandon_reason")
    manifest.verdict = end.get("verdict")
    manifest.failure_reason = end.get("failure_reason")
    manifest.summary = end.get("summary")
    manifest.acceptance = end.get("accepted")
    for key, value in (end.get("agent") or {}).items():
        setattr(manifest, key, value)


def _in_progress(manifest: Manifest, events: list[dict[str, Any]]) -> Manifest | None:
    """A run in progress: the status its last status event logged, or ``None`` while the
    task waits on a human (the escalation's record is in the manifest only)."""
    last = last_of((e for e in events if e.get("status")), DURABLE)
    if last is None or last["status"] == Status.ESCALATED:
        return None
    manifest.status = Status(last["status"])
    _counts(manifest, last, len(named(events, Event.RESUMED)))
    return manifest


def restorable(manifest: Manifest) -> bool:
    """Whether :func:`rebuild` gets ``manifest`` back from the event log as it is: the
    first turn, no escalation (status, record or denials counted by the circuit breaker).
    The engine writes these without an fsync; the others with one."""
    return (
        manifest.turn == 1
        and not manifest.turns
        and manifest.status != Status.ESCALATED
        and manifest.escalation is None
        and not manifest.denials
    )


def set_aside(path: Path) -> Path | None:
    """Rename an unreadable manifest to ``manifest.json.damaged-<epoch s>`` (nothing is ever
    deleted; never over a copy kept before: :func:`keep_aside`); returns the new path, or
    ``None`` when there was nothing to move."""
    return keep_aside(path, layout.DAMAGED)  # never over one kept in the same second


def spec_name(task: TaskDir) -> str | None:
    """The task's ``name`` from ``spec.json`` (for ``supervise status``), or ``None``."""
    with contextlib.suppress(OSError, ValueError, AttributeError, RecursionError):
        return json.loads(read_regular(task.file(layout.SPEC), MANIFEST_MAX)).get("name")
    return None


def needs_fsync(manifest: Manifest) -> bool:
    """Whether a write of ``manifest`` must be fsynced: the event log cannot restore it
    (not :func:`restorable`). The ``durable`` test of the engine's manifest writes."""
    return not restorable(manifest)
