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
  events and the terminal event (status, exit code, ``abandon_reason``, ``verdict``,
  ``retry_count``, times), when the log ended the task or never launched it. Anything else
  (a run in progress) is not exact: the files are left as they are and the task is reported
  ``damaged``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from supervisor.diskio import read_regular
from supervisor.taskdir import layout
from supervisor.taskdir.events import RUNS, Event, first_of, last_terminal, named
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
        if not task.file(layout.EVENTS).exists():
            return None  # a claim in progress or cut short (the engine finishes it): no loss
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
    exactly (no ``queued`` event with a ``session_id``, a run started and not ended, or a
    follow-up's later turn: the earlier turns' records, ``turns``, are in no event whole).

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
    if end is None and launched:
        return None  # a run in progress: its state is not in the log alone
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
    if end is None:
        return manifest  # queued, never launched
    runs = named(events, *RUNS)
    manifest.status = Status(end["event"])
    manifest.started_at = launched[0]["ts"] if launched else None
    manifest.launched_at = runs[-1]["ts"] if runs else None
    manifest.retry_count = int(end.get("retry_count") or 0)
    manifest.exit_code = end.get("exit_code")
    manifest.abandon_reason = end.get("abandon_reason")
    manifest.verdict = end.get("verdict")
    manifest.last_checked_at = end["ts"]
    done = task.done_mtime()
    manifest.finished_at = (
        utc_iso(done) if done is not None and manifest.status != Status.ABANDONED else end["ts"]
    )
    if manifest.status == Status.ABANDONED:
        manifest.abandoned_at = end["ts"]
    manifest.signal = task.read_int(layout.SIGNAL)
    manifest.output_tail = task.output_tail()
    manifest.pid = task.read_int(layout.PID)
    return manifest


def set_aside(path: Path) -> Path | None:
    """Rename an unreadable manifest to ``manifest.json.damaged-<epoch s>`` (nothing is ever
    deleted); returns the new path, or ``None`` when there was nothing to move."""
    target = path.with_name(f"{path.name}{layout.DAMAGED}{int(time.time())}")
    try:
        os.rename(path, target)
    except FileNotFoundError:
        return None
    return target


def spec_name(task: TaskDir) -> str | None:
    """The task's ``name`` from ``spec.json`` (for ``supervise status``), or ``None``."""
    with contextlib.suppress(OSError, ValueError, AttributeError, RecursionError):
        return json.loads(read_regular(task.file(layout.SPEC), MANIFEST_MAX)).get("name")
    return None
