"""The transitions that happen outside a check: a launch, a launch that tmux refused,
adoption after a restart, and an ending the event log already holds.

Pure functions of (state, facts read by the engine, policy); the engine performs the
:class:`Decision` they answer as it performs :func:`supervisor.policy.decide`'s. Rows are
in the state table of :mod:`supervisor.policy`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from supervisor.config import MonitorPolicy
from supervisor.policy.model import (
    TERMINAL,
    Action,
    Decision,
    TaskState,
    bounded,
    first_check,
    with_notify,
)
from supervisor.policy.turns import CONTINUED
from supervisor.taskdir.events import INTENTS as INTENTS  # re-exported by supervisor.policy
from supervisor.taskdir.events import RESUMES, Event, last_terminal
from supervisor.taskdir.events import last_word as last_word  # re-exported by supervisor.policy
from supervisor.taskdir.folder import Manifest, parse_iso
from supervisor.taskdir.states import FailureReason, Status, Verdict


def launched(state: TaskState, now: float, policy: MonitorPolicy) -> Decision:
    """``queued`` -> ``running``: the task's tmux session was created at ``now`` (epoch
    s), which starts its deadline; the first check comes after :func:`first_check`.

    Raises:
        ValueError: ``state`` is not ``queued`` (only a queued task is launched; a live
            one is resumed).
    """
    if state.status != Status.QUEUED:
        raise ValueError(f"only a queued task is launched, not a {state.status} one")
    new = TaskState(status=Status.RUNNING, started_at=now, launched_at=now)
    decision = Decision(
        state=new,
        events=(Event.LAUNCHED,),
        next_check=bounded(first_check(policy), new, now, policy),
        reason="launched in its tmux session",
    )
    return with_notify(decision, policy)


def launch_failed(
    state: TaskState,
    now: float,
    why: str,
    policy: MonitorPolicy,
    failure_reason: str = FailureReason.LAUNCH,
) -> Decision:
    """A task that could not start: ``failure_reason`` ``launch`` (a task just
    :func:`launched` whose tmux session could not be created; ``why`` is tmux's line) or
    ``workspace`` (a queued task whose worktree could not be made; ``why`` is
    :class:`supervisor.workspace.lifecycle.WorkspaceError`'s line). It ends ``failed``
    with the verdict ``FAIL`` at ``now`` (its deadline counted from then); no agent ever
    ran, so there is nothing to stop or retry, and no ``launched_at``."""
    new = dataclasses.replace(
        state,
        status=Status.FAILED,
        failure_reason=failure_reason,
        verdict=Verdict.FAIL,
        exit_code=None,
        launched_at=None,
        stale_since=None,
        gone_since=None,
        resume_at=None,
        started_at=state.started_at if state.started_at is not None else now,
    )
    what = (
        "tmux could not start the session"
        if failure_reason == FailureReason.LAUNCH
        else failure_reason
    )
    decision = Decision(
        state=new,
        actions=(Action.FINISH, Action.CLEANUP, Action.NOTIFY),
        events=(Event.FAILED,),
        reason=" ".join(f"{what}: {why}".split()),
    )
    return with_notify(decision, policy)


def recovered_ending(
    state: TaskState, last: dict[str, Any], events: list[dict[str, Any]], policy: MonitorPolicy
) -> Decision:
    """Complete an ending the event log already holds: ``supervise`` died between the
    terminal event ``last`` (written first) and the manifest write. Same outcome as the
    log says (:func:`logged_ending`); the agent is stopped again for ``abandoned`` and
    ``superseded``, the
    cleanup repeated, and the notifier run only if ``events`` show it has not run for it.
    A ``state`` still ``queued`` or ``blocked`` never launched: it only finishes (and
    notifies), as its first decision did (:func:`supervisor.policy.plans.stopped`).

    Raises:
        ValueError: ``last`` is not a terminal event.
    """
    status = last.get("event")
    if status not in TERMINAL:
        raise ValueError(f"not a terminal event: {status!r}")
    new = dataclasses.replace(
        state,
        status=status,
        exit_code=last.get("exit_code"),
        abandon_reason=last.get("abandon_reason"),
        resume_at=None,
    )
    new = logged_ending(new, [last])
    notified = any(
        e.get("event") == Event.NOTIFIED and e.get("notified_event") == status for e in events
    )
    if state.status in (Status.QUEUED, Status.BLOCKED):  # never launched: it only finishes
        actions: tuple[Action, ...] = (Action.FINISH,)
    elif status in (Status.ABANDONED, Status.SUPERSEDED):
        actions = (Action.STOP_AGENT, Action.FINISH, Action.CLEANUP)
    else:
        actions = (Action.FINISH, Action.CLEANUP)
    actions += () if notified else (Action.NOTIFY,)
    decision = Decision(
        state=new,
        actions=actions,
        events=(status,),
        reason=str(last.get("reason") or f"{status}, as the event log records"),
    )
    if notified:
        return decision
    return with_notify(decision, policy)


def escalation_state(manifest: Manifest, status: str) -> dict[str, Any]:
    """The policy's escalation fields (``escalation`` reason, ``paused``) from the
    manifest's declared ``escalation`` object, for adoption after a restart."""
    record = manifest.escalation if status == Status.ESCALATED else None
    if not record:
        return {"escalation": None, "paused": False}
    return {
        "escalation": str(record.get("reason") or Status.ESCALATED),
        "paused": bool(record.get("paused")),
    }


def adopted(
    manifest: Manifest, events: list[dict[str, Any]], launch_written: float | None = None
) -> TaskState:
    """The state of a non-terminal task found after a restart, from its manifest and its
    event log (which runs ahead of the manifest: its last word is trusted).

    - ``queued`` with a session: it was launched, and we died before recording it; it is
      ``running`` since its ``launched`` event, else since ``launch_written`` (the mtime
      of its ``launch.json``, epoch s).
    - ``retry_count`` is the larger of the manifest's and the ``resumed`` events' count,
      so a crash between the event and the manifest write neither loses nor invents one.
    - a last ``resumed`` (or ``resume_redone``) event: ``running`` since that event, no
      backoff left.
    - a last ``continued`` event: ``running`` in the same run (no second continue).
    - a last intent (crashed, hung, waiting) the manifest does not show: that status,
      resuming without more backoff (the agent's exit since answers our stop).
    """
    started = parse_iso(manifest.started_at)
    if manifest.status == Status.QUEUED:
        logged = [parse_iso(e["ts"]) for e in events if e.get("event") == Event.LAUNCHED]
        started = logged[0] if logged else launch_written
    status: str = Status.RUNNING if manifest.status == Status.QUEUED else manifest.status
    launched_at = parse_iso(manifest.launched_at) or started
    resume_at = parse_iso(manifest.resume_at)
    last = last_word(events)
    if last is not None and last["event"] in RESUMES:  # died after deciding to resume
        status, launched_at, resume_at = Status.RUNNING, parse_iso(last["ts"]), None
    elif last is not None and last["event"] == CONTINUED:  # the same run goes on
        status, resume_at = Status.RUNNING, None
    elif last is not None and last["event"] in INTENTS and status != last["event"]:
        status, resume_at = last["event"], None
    resumes = sum(1 for e in events if e.get("event") == Event.RESUMED)
    return TaskState(
        status=status,
        started_at=started,
        launched_at=launched_at,
        retry_count=max(manifest.retry_count, resumes),
        resume_at=resume_at,
        **escalation_state(manifest, status),
        limit_waits=manifest.limit_waits,
        transient_waits=manifest.transient_waits,
    )


def resume_redone(state: TaskState, now: float) -> TaskState:
    """The resume a crash of ``supervise`` cut short (its ``resumed`` event written, the
    agent never started) is performed again at ``now`` (epoch s): the run starts now, so
    its output age, start timeout and grace period count from ``now``, not from the
    decision before the crash (seen in CI's chaos test: a resume redone 4.6 s after its
    decision was judged stale at once, and the task abandoned). Not a retry: it was counted
    when decided."""
    return dataclasses.replace(
        state, launched_at=now, active_since=None, stale_since=None, gone_since=None
    )


def logged_ending(state: TaskState, events: list[dict[str, Any]]) -> TaskState:
    """A terminal ``state`` as the event log already records it: the log's terminal event is
    final (written first, ahead of the manifest), so a decision taken again after a failed
    manifest write never records another reason, exit code or verdict than the event."""
    last = last_terminal(events)
    if last is None or state.status not in TERMINAL:
        return state
    status, reason = last["event"], last.get("abandon_reason")
    verdict = last.get("verdict")  # absent in logs written before it was recorded
    if verdict is None:
        derived = {Status.COMPLETED: Verdict.PASS, Status.FAILED: Verdict.FAIL}
        verdict = (
            state.verdict if status == state.status else derived.get(status, Verdict.ABANDONED)
        )
    same = status == state.status
    return dataclasses.replace(
        state,
        status=status,
        abandon_reason=reason,
        exit_code=last.get("exit_code", state.exit_code),
        verdict=verdict,
        failure_reason=last.get("failure_reason", state.failure_reason if same else None),
    )
