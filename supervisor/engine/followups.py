"""The engine's side of ``supervise continue`` (issue 22): an ended task opened again as a
new turn, from the prompt the CLI left in its folder (:data:`~supervisor.taskdir.FOLLOWUP`).

The prompt file is the request; ``control/<ID>.continue`` only wakes the intake job. Each
step can be redone after a SIGKILL, so a follow-up is neither lost nor doubled:

1. the :data:`~supervisor.taskdir.FOLLOWED_UP` event (write-ahead; not written again when
   the log already opened this turn with the same prompt digest);
2. the manifest: the ended turn appended to ``turns``, ``turn`` + 1, ``queued``, the
   outcome fields cleared, ``retry_count`` 0 (:func:`open_turn`);
3. the prompt file renamed to :data:`~supervisor.taskdir.TURN_PROMPT` (so a second
   ``continue`` finds the manifest already ``queued`` once it can link a new file);
4. the task queued; it is launched as any queued task (a new deadline from that launch),
   the agent continuing its session (:meth:`supervisor.agents.AgentAdapter.follow_up`).

At start (:func:`recover`) every task folder holding a follow-up prompt is looked at again.
An escalated task is stopped first (an ordinary ``stop`` request: it ends ``abandoned``,
reason ``stopped``) and continued when it has ended (:func:`after_end`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from typing import TYPE_CHECKING

from supervisor import control, policy
from supervisor.config import MAX_PROMPT_BYTES
from supervisor.diskio import read_regular
from supervisor.policy.followups import STOP_FIRST, refusal
from supervisor.states import TERMINAL
from supervisor.taskdir import (
    CONTINUE_REFUSED,
    FOLLOWED_UP,
    FOLLOWUP,
    TURN_PROMPT,
    Manifest,
    TaskDir,
    TurnRecord,
)

if TYPE_CHECKING:
    from supervisor.engine.scheduler import Engine

log = logging.getLogger("supervise.engine")

#: The manifest fields of an ended turn's outcome, cleared when the next turn opens.
CLEARED = (
    "finished_at",
    "exit_code",
    "signal",
    "abandoned_at",
    "abandon_reason",
    "resume_at",
    "verdict",
    "summary",
    "escalation",
    "failure_reason",
    "acceptance",
    "pid",
    "launched_at",
    "started_at",
)
#: Characters of a turn's prompt kept in ``turns[].prompt`` and the event (its first line).
PROMPT_HEAD = 200


def digest(prompt: bytes) -> str:
    """The SHA-256 (hex) of a prompt: how a turn's event names its prompt."""
    return hashlib.sha256(prompt).hexdigest()


def head(prompt: str) -> str:
    """The first line of ``prompt``, at most :data:`PROMPT_HEAD` characters."""
    lines = prompt.strip().splitlines()
    return lines[0][:PROMPT_HEAD] if lines else ""


def take(engine: Engine, task_id: str) -> None:
    """A ``continue`` request for ``task_id``: an ended task is opened again and queued; an
    escalated one is stopped first; any other live or queued one refuses it."""
    task = TaskDir(engine.profile.tasks_dir / task_id)
    runtime = engine.live.get(task_id)
    if runtime is not None and runtime.state.status in STOP_FIRST:
        with contextlib.suppress(OSError):
            task.append_event(f"{control.CONTINUE}_requested", status=runtime.state.status)
        control.request(engine.profile.state_dir, task_id, "stop")  # then after_end
        return
    queued = any(t.task_id == task_id for t in engine.queue)
    if runtime is not None or queued:
        status = runtime.state.status if runtime is not None else "queued"
        _refuse(task, f"task {task_id} {refusal(status)}")
        return
    if reopen(task):
        engine.queue.append(task)


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
    :data:`~supervisor.taskdir.CONTINUE_REFUSED` event."""
    try:
        manifest = task.read_manifest()
        raw = read_regular(task.file(FOLLOWUP), MAX_PROMPT_BYTES, follow=False)
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as exc:
        _refuse(task, f"task {task.task_id}: cannot read its follow-up: {exc}")
        return False
    sha = digest(raw)
    logged = next((e for e in reversed(task.events()) if e.get("event") == FOLLOWED_UP), None)
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
        fields = {"turn": turn, "prompt": head(prompt), "prompt_sha256": sha}
        task.append_event(
            FOLLOWED_UP, status=decision.state.status, reason=decision.reason, **fields
        )
    task.update_manifest(lambda m: open_turn(m, turn, task))
    os.replace(task.file(FOLLOWUP), task.file(TURN_PROMPT))
    log.info("%s: turn %d queued (a follow-up)", task.task_id, turn)
    return True


def open_turn(manifest: Manifest, turn: int, task: TaskDir) -> None:
    """In place: the ended turn into ``turns``, then turn ``turn`` ``queued`` with no
    outcome yet. The prompt recorded is the ended turn's own."""
    name = TURN_PROMPT if manifest.turn > 1 else "prompt"
    try:
        raw = read_regular(task.file(name), MAX_PROMPT_BYTES, follow=False)
    except (OSError, ValueError):
        raw = b""
    cost = (manifest.claude or {}).get("total_cost_usd")
    manifest.turns.append(
        TurnRecord(
            turn=manifest.turn,
            prompt=head(raw.decode("utf-8", errors="replace")),
            prompt_sha256=digest(raw),
            status=manifest.status,
            verdict=manifest.verdict,
            failure_reason=manifest.failure_reason,
            abandon_reason=manifest.abandon_reason,
            started_at=manifest.started_at,
            finished_at=manifest.finished_at,
            retry_count=manifest.retry_count,
            cost_usd=cost if isinstance(cost, int | float) else None,
            summary=manifest.summary,
        )
    )
    manifest.turn = turn
    manifest.status = "queued"
    for name in CLEARED:
        setattr(manifest, name, None)
    manifest.retry_count = manifest.limit_waits = manifest.transient_waits = 0


def _refuse(task: TaskDir, why: str) -> None:
    """Drop a follow-up the engine cannot take, saying why in the log and the events."""
    log.warning("refused a follow-up: %s", why)
    with contextlib.suppress(FileNotFoundError):
        task.file(FOLLOWUP).unlink()
    with contextlib.suppress(OSError):
        task.append_event(CONTINUE_REFUSED, reason=why)
