"""What a live view does to a task, by the same code paths as the CLI verbs (no Textual here).

* :func:`ask`: ``stop``, ``resume``, ``approve``, ``deny`` as ``supervise stop|resume|
  approve|deny`` do: the same refusals (an ended task; approve/deny of a task that is not
  escalated), then a request file through :func:`supervisor.taskdir.control.request`, which the
  running engine takes on its next intake tick. A view does not wait for it: the next
  refresh shows the result.
* :func:`diff_text`: ``supervise diff`` (:func:`supervisor.workspace.review.diff`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from supervisor.taskdir import control, layout
from supervisor.terminal import escape_controls
from supervisor.views.model import Task, read_json


@dataclass(frozen=True)
class Outcome:
    """What :func:`ask` did: ``ok`` (a request was written), ``message`` (one line for
    the operator, terminal-safe), ``path`` (the request file, when written)."""

    ok: bool
    message: str
    path: Path | None = None


def ask(state_dir: Path, task_id: str, verb: str, engine_running: bool) -> Outcome:
    """Leave ``verb`` for ``task_id`` if the CLI would (its checks, on the manifest as it is
    now); ``engine_running`` only words the message (queued for the next ``supervise run``).

    Raises:
        ValueError: an unknown verb (a bug in the caller, not bad input).
    """
    if verb not in control.VERBS:
        raise ValueError(f"unknown verb {verb!r}")
    manifest = read_json(state_dir / layout.TASKS / task_id / layout.MANIFEST)
    if manifest is None or not isinstance(manifest.get("status"), str):
        return Outcome(False, f"task {task_id}: cannot read its manifest; see 'supervise status'")
    why = control.refusal(task_id, manifest["status"], verb)
    if why is not None:
        return Outcome(False, why)
    path = control.request(state_dir, task_id, verb)
    if engine_running:
        return Outcome(True, f"requested '{verb}' for {task_id}", path)
    return Outcome(
        True,
        f"queued '{verb}' for {task_id}; no engine runs, so it happens when 'supervise run' starts",
        path,
    )


def diff_text(tasks_dir: Path, task_id: str) -> str:
    """``supervise diff ID`` as text for a screen: the patch with control characters
    escaped (newlines and tabs kept), or the one-line reason there is none.

    Never raises for bad state (no workspace, shared mode, branch gone, git failed): the
    reason is returned instead, as ``supervise diff`` prints it.
    """
    from supervisor.workspace import review

    try:
        ws = review.load_task(tasks_dir, task_id)
        data = review.diff(ws)
    except (review.ReviewError, OSError) as exc:  # git's failures arrive as ReviewError
        return escape_controls(str(exc))
    text = data.decode("utf-8", errors="surrogateescape")
    note = "" if ws.ended else f"note: task {task_id} has not ended: its committed changes only\n"
    return note + (escape_controls(text, keep="\n\t") or "(no changes)")


def confirm_text(task: Task, verb: str) -> str:
    """The question a view asks before ``verb``; for approve/deny it names the escalation's
    tool and subject (terminal-safe)."""
    name = escape_controls(task.name or task.task_id)
    if verb in ("approve", "deny") and task.escalation:
        tool = escape_controls(task.escalation.get("tool") or "-")
        subject = escape_controls(task.escalation.get("subject") or "-")
        reason = escape_controls(task.escalation.get("reason") or "-")
        return (
            f"{verb.capitalize()} what {name} ({task.task_id}) waits for?\n\n"
            f"tool:    {tool}\nsubject: {subject}\nreason:  {reason}"
        )
    what = {
        "stop": "Stop (abandon, reason 'stopped')",
        "resume": "Resume now",
        "approve": "Approve",
        "deny": "Deny",
    }[verb]
    return f"{what}: {name} ({task.task_id}), now {task.status}?"
