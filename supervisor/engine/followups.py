"""The engine's side of ``supervise continue`` (issue 22): an ended task opened again as a
new turn, from the prompt the CLI left in its folder (:data:`~supervisor.taskdir.folder.FOLLOWUP`).

The prompt file is the request; ``control/<ID>.continue`` only wakes the intake job. Each
step can be redone after a SIGKILL, so a follow-up is neither lost nor doubled:

1. the ``followed_up`` event (write-ahead; not written again when
   the log already opened this turn with the same prompt digest);
2. the manifest: the ended turn appended to ``turns``, ``turn`` + 1, ``queued``, the
   outcome fields cleared, ``retry_count`` 0 (:func:`supervisor.turnlog.open_turn`);
3. the prompt file renamed to :data:`~supervisor.taskdir.folder.TURN_PROMPT` (so a second
   ``continue`` finds the manifest already ``queued`` once it can link a new file);
4. the task queued; it is launched as any queued task (a new deadline from that launch),
   the agent continuing its session (:meth:`supervisor.agents.AgentAdapter.follow_up`).

At start (:func:`recover`) every task folder holding a follow-up prompt is looked at again.
An escalated task is stopped first (an ordinary ``stop`` request: it ends ``abandoned``,
reason ``stopped``) and continued when it has ended (:func:`after_end`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING

from supervisor import policy, turnlog
from supervisor.config import MAX_PROMPT_BYTES
from supervisor.diskio import read_regular
from supervisor.policy.followups import STOP_FIRST, refusal
from supervisor.taskdir import control
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import (
    FOLLOWUP,
    TURN_PROMPT,
    TaskDir,
)
from supervisor.taskdir.states import TERMINAL, Status

if TYPE_CHECKING:
    from supervisor.engine.scheduler import Engine

log = logging.getLogger("supervise.engine")


def take(engine: Engine, task_id: str) -> None:
    """A ``continue`` request for ``task_id``: an ended task is opened again and queued; an
    escalated one is stopped first; any other live or queued one refuses it."""
    task = TaskDir(engine.profile.tasks_dir / task_id)
    runtime = engine.live.get(task_id)
    if runtime is not None and runtime.state.status in STOP_FIRST:
        with contextlib.suppress(OSError):
            task.append_event(Event.CONTINUE_REQUESTED, status=runtime.state.status)
        control.request(engine.profile.state_dir, task_id, "stop")  # then after_end
        return
    queued = any(t.task_id == task_id for t in engine.queue)
    if runtime is not None or queued:
        status = runtime.state.status if runtime is not None else Status.QUEUED
        _refuse(task, f"task {task_id} {refusal(status)}")
        return
    if reopen(task):
        engine.queue.append(task)


def waiting(task: TaskDir) -> bool:
    """Whether a follow-up waits for ``task`` to end (its prompt file is there)."""
    return task.file(FOLLOWUP).exists()


def after_end(engine: Engine, task: TaskDir) -> None:
    """A task just ended: continue it if a follow-up waits for it (an escalated task the
    follow-up stopped)."""
    if task.file(FOLLOWUP).exists() and reopen(task):
        engine.queue.append(task)


def recover(engine: Engine) -> None:
    """At start, after adoption: finish every follow-up a killed engine left (its prompt
    file still there), and stop again an escalated task a follow-up waits on."""
    queued = {t.task_id for t in engine.queue}
    for folder in sorted(engine.profile.tasks_dir.glob(f"*/{FOLLOWUP}")):
        task = TaskDir(folder.parent)
        runtime = engine.live.get(task.task_id)
        if runtime is not None and runtime.state.status in STOP_FIRST:
            control.request(engine.profile.state_dir, task.task_id, "stop")
        elif runtime is None and reopen(task) and task.task_id not in queued:
            engine.queue.append(task)


def reopen(task: TaskDir) -> bool:
    """Open the next turn of ``task`` from its follow-up prompt (steps 1-3 above); whether
    the task must be queued. A follow-up that cannot be taken is removed with a
    :attr:`~supervisor.taskdir.events.Event.CONTINUE_REFUSED` event."""
    try:
        manifest = task.read_manifest()
        raw = read_regular(task.file(FOLLOWUP), MAX_PROMPT_BYTES, follow=False)
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as exc:
        _refuse(task, f"task {task.task_id}: cannot read its follow-up: {exc}")
        return False
    sha = turnlog.digest(raw)
    logged = next((e for e in reversed(task.events()) if e.get("event") == Event.FOLLOWED_UP), None)
    opened = logged is not None and logged.get("prompt_sha256") == sha
    if manifest.status not in TERMINAL:
        if opened and logged is not None and logged.get("turn") == manifest.turn:
            os.replace(task.file(FOLLOWUP), task.file(TURN_PROMPT))  # step 3 was cut short
        else:
            _refuse(task, f"task {task.task_id} {refusal(manifest.status)}")
        return False
    turn = manifest.turn + 1
    decision = policy.continue_turn(policy.TaskState(status=manifest.status), turn)
    prompt = raw.decode("utf-8", errors="replace")
    if not (opened and logged is not None and logged.get("turn") == turn):
        fields = {"turn": turn, "prompt": turnlog.head(prompt), "prompt_sha256": sha}
        task.append_event(
            Event.FOLLOWED_UP, status=decision.state.status, reason=decision.reason, **fields
        )
    task.update_manifest(lambda m: turnlog.open_turn(m, turn, task))
    os.replace(task.file(FOLLOWUP), task.file(TURN_PROMPT))
    log.info("%s: turn %d queued (a follow-up)", task.task_id, turn)
    return True


def _refuse(task: TaskDir, why: str) -> None:
    """Drop a follow-up the engine cannot take, saying why in the log and the events."""
    log.warning("refused a follow-up: %s", why)
    with contextlib.suppress(FileNotFoundError):
        task.file(FOLLOWUP).unlink()
    with contextlib.suppress(OSError):
        task.append_event(Event.CONTINUE_REFUSED, reason=why)
