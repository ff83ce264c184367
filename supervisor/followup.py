"""``supervise continue ID PROMPT`` (issue 22): the caller's side of a follow-up.

:func:`request_continue` checks that the task can go on (one refusal line each: not in
this state dir or archived, a fleet profile, an empty or oversized prompt, an agent kind
that cannot resume, a worktree merged or discarded, a task still running), puts the prompt
in the task folder with ``link(2)`` (:data:`supervisor.taskdir.folder.FOLLOWUP`: of two follow-ups
at once exactly one is taken, the other refuses), wakes the engine
(``control/<ID>.continue``) and waits up to ``wait_s`` seconds for the new turn to be
recorded. The engine's side is :mod:`supervisor.engine.followups`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from supervisor import archive, engine_probe, taskid
from supervisor.config import MAX_PROMPT_BYTES, LoadedProfile
from supervisor.config.argsize import prompt_problems
from supervisor.errors import SuperviseError
from supervisor.policy.followups import STOP_FIRST, refusal
from supervisor.taskdir import control, layout
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import FOLLOWUP, Manifest, TaskDir
from supervisor.taskdir.states import Status
from supervisor.waiting import read_manifest
from supervisor.workspace.journal import MERGED

#: Events after which the task's worktree holds nothing to continue in.
_GONE = (MERGED, Event.DISCARDED)
#: Seconds between looks at the manifest while waiting.
POLL = 0.1
#: Seconds more a follow-up of an escalated task waits: it is stopped first (SIGTERM, then
#: SIGKILL and the sweep of what it left, ``2 x supervisor.engine.stopping.STOP_TIMEOUT`` each),
#: which alone can take longer than the default ``--wait``; the engine's stop bound
#: (:data:`supervisor.engine.shutdown.STOP_BOUND`) covers it.
STOP_WAIT = 30.0


class FollowUpRefused(SuperviseError):
    """A follow-up that cannot be asked: ``str(exc)`` is the one line to show."""


def request_continue(profile: LoadedProfile, task_id: str, prompt: str, wait_s: float) -> dict:
    """Continue task ``task_id``'s conversation with ``prompt`` as its next turn.

    Returns ``{"task_id", "verb": "continue", "result", "status", "retry_count", "turn"}``
    where ``result`` is ``applied`` (the engine recorded the new turn within ``wait_s``
    seconds; :data:`STOP_WAIT` seconds more for an escalated task, which is stopped
    first), ``queued`` (no engine runs: it happens when one starts) or ``not_applied``.

    Raises:
        FollowUpRefused: the one line saying why the task cannot be continued.
    """
    task = _task(profile, task_id)
    manifest = _checked(profile, task, prompt)
    _leave_prompt(task, prompt, profile.state_dir)
    try:  # read again: a follow-up taken meanwhile has queued the task (see the module doc)
        manifest = _checked(profile, task, prompt)
    except FollowUpRefused:
        with contextlib.suppress(FileNotFoundError):
            task.file(FOLLOWUP).unlink()
        raise
    control.request(profile.state_dir, task_id, control.CONTINUE)
    if not engine_probe.engine(profile.state_dir).lock_held:
        return _result(task_id, "queued", manifest)
    if manifest.status in STOP_FIRST:  # the stop comes first: wait for it too
        wait_s += STOP_WAIT
    return _wait(task, manifest, wait_s)


def _task(profile: LoadedProfile, task_id: str) -> TaskDir:
    """The task's folder, or the line saying where it is (archived) or that it is not."""
    if not taskid.is_task_id(task_id):
        raise FollowUpRefused(taskid.refusal(task_id))
    if profile.spec.cluster is not None:
        raise FollowUpRefused(
            f"task {task_id}: 'continue' does not work for a [cluster] profile yet (the "
            "fleet cannot move a conversation between hosts); continue it with 'claude "
            "--resume' on its host"
        )
    task = TaskDir(profile.tasks_dir / task_id)
    if task.has_manifest():
        return task
    for row in archive.archived_rows(profile.state_dir):
        if row.get("task_id") == task_id:
            where = profile.state_dir / archive.ARCHIVE / str(row["archive"])
            raise FollowUpRefused(
                f"task {task_id} is archived in {where}; an archived task cannot be continued"
            )
    raise FollowUpRefused(f"no task {task_id!r} in {profile.tasks_dir}; see 'supervise status'")


def _checked(profile: LoadedProfile, task: TaskDir, prompt: str) -> Manifest:
    """The task's manifest when it can take ``prompt`` as a follow-up, else the refusal."""
    task_id = task.task_id
    if not prompt.strip():
        raise FollowUpRefused(f"task {task_id}: the follow-up prompt is empty; give the text")
    size = len(prompt.encode("utf-8", errors="surrogateescape"))
    if size > MAX_PROMPT_BYTES:
        raise FollowUpRefused(
            f"task {task_id}: the follow-up prompt is {size} bytes, over the "
            f"{MAX_PROMPT_BYTES} a prompt may have; shorten it"
        )
    agent = profile.spec.agent
    problems = prompt_problems(agent, prompt, "the follow-up prompt", str(profile.path))
    if problems:
        raise FollowUpRefused(problems[0])
    try:
        manifest = task.read_manifest()
    except (OSError, ValueError) as exc:
        raise FollowUpRefused(f"{task.file(layout.MANIFEST)}: cannot read it ({exc})") from exc
    if manifest.status == Status.SUPERSEDED:
        raise FollowUpRefused(f"task {task_id} was superseded by the fleet: nothing to continue")
    why = refusal(manifest.status)
    if why is not None:
        raise FollowUpRefused(f"task {task_id} {why}")
    if agent.kind == "generic" and not agent.resume_command:
        raise FollowUpRefused(
            f"task {task_id}: the agent of {profile.path} cannot resume a conversation "
            "([agent] resume_command is not set); set it to continue tasks"
        )
    if agent.kind == "claude" and not (manifest.claude or {}).get("session_id"):
        raise FollowUpRefused(
            f"task {task_id}: Claude Code never started a session for it (no session id "
            "in its manifest), so there is none to continue; submit a new task"
        )
    _workspace_kept(task, manifest)
    return manifest


def _workspace_kept(task: TaskDir, manifest: Manifest) -> None:
    """Refuse when the task's worktree was merged, discarded or removed."""
    report = manifest.workspace
    if report is None or report.mode != "worktree":
        return
    gone = next((e["event"] for e in task.events() if e.get("event") in _GONE), None)
    if gone is None and report.removed:
        gone = "removed"
    if gone is not None:
        raise FollowUpRefused(
            f"task {task.task_id}: its worktree was {gone}; a follow-up needs it, so "
            "submit a new task instead"
        )


def _leave_prompt(task: TaskDir, prompt: str, state_dir: Path) -> None:
    """Write the prompt beside the task, then link it in as :data:`FOLLOWUP` (never
    replacing one: a second follow-up at once is refused, and the engine woken for the
    one waiting, whose caller may have died before asking)."""
    fd, tmp = tempfile.mkstemp(prefix=".followup-", dir=task.path)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(prompt.encode("utf-8", errors="surrogateescape"))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, task.file(FOLLOWUP))
        except FileExistsError:
            # Wake the engine for it: its caller may have been killed before asking.
            control.request(state_dir, task.task_id, control.CONTINUE)
            raise FollowUpRefused(
                f"task {task.task_id}: another follow-up waits for the engine already; "
                "wait for it ('supervise wait') and continue again"
            ) from None
        except OSError as exc:
            raise FollowUpRefused(f"{task.file(FOLLOWUP)}: cannot write it ({exc})") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _wait(task: TaskDir, before: Manifest, wait_s: float) -> dict:
    """Until the manifest shows the next turn (applied), the engine refused the follow-up
    (its prompt file gone, no new turn), or ``wait_s`` seconds passed."""
    deadline = time.monotonic() + wait_s
    while True:
        after = read_manifest(task.file(layout.MANIFEST))  # None: being replaced; again
        if after is not None and int(after.get("turn", 1)) > before.turn:
            return _result(task.task_id, "applied", after)
        if not task.file(FOLLOWUP).exists():
            refused = _refused_line(task)
            if refused is not None:
                raise FollowUpRefused(refused)
        if time.monotonic() >= deadline:
            return _result(task.task_id, "not_applied", before)
        time.sleep(POLL)


def _refused_line(task: TaskDir) -> str | None:
    """The engine's reason when the last word of the log on this follow-up is a refusal."""
    for event in reversed(task.events()):
        if event.get("event") == Event.CONTINUE_REFUSED:
            return str(event.get("reason") or "the engine refused the follow-up")
        if event.get("event") in (Event.FOLLOWED_UP, Event.CONTINUE_REQUESTED):
            return None
    return None


def _result(task_id: str, result: str, manifest: Manifest | dict[str, Any]) -> dict:
    data = manifest if isinstance(manifest, dict) else manifest.model_dump(mode="json")
    return {
        "task_id": task_id,
        "verb": control.CONTINUE,
        "result": result,
        "status": data.get("status"),
        "retry_count": data.get("retry_count", 0),
        "turn": data.get("turn", 1),
    }
