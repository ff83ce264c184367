"""The one TaskState -> Manifest projection: what a decision's state writes into a task's
``manifest.json``.

Two writers use it, through :meth:`supervisor.taskdir.folder.TaskDir.update_manifest`: a
launch (:func:`supervisor.engine.launch.record_launch`, :func:`launched`) and every other
decision (:meth:`supervisor.engine.actions.Actions.apply`, :func:`decided`). Both write the
policy's state through :func:`state_fields`, so a field of :class:`supervisor.policy.TaskState`
reaches the manifest in one place. Times are epoch seconds in the state and ISO 8601 UTC
(:func:`supervisor.taskdir.folder.utc_iso`) in the manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from supervisor import policy
from supervisor.engine import acceptance
from supervisor.engine.runtime import Runtime
from supervisor.taskdir import layout
from supervisor.taskdir.folder import Manifest, utc_iso
from supervisor.taskdir.states import Status


@dataclass(frozen=True)
class Applied:
    """What :meth:`supervisor.engine.actions.Actions.apply` fixed before the actions ran,
    for the manifest write that follows them (perhaps after a stop, see
    :mod:`supervisor.engine.stopping`): the state before and after, whether the decision
    ends the run (``finished``), what that ending records (exit code, end time as
    ISO 8601 UTC, the output's tail), and the notifications of the turn's log announced
    and never sent (``announced``: an ending completed again after a kill)."""

    previous: policy.TaskState
    state: policy.TaskState
    finished: bool
    exit_code: int | None
    finished_at: str | None
    tail: str | None
    announced: frozenset[str] = frozenset()


def state_fields(
    m: Manifest, state: policy.TaskState, now: float, pid: int | None, new_run: bool
) -> None:
    """Write ``state`` into ``m`` in place, checked at ``now`` (epoch seconds).

    ``started_at`` is the state's when the manifest has none (a lost launch write) or still
    says ``queued`` (a launch: a follow-up's new turn starts its deadline there); a running
    task keeps its own. ``pid`` replaces the manifest's when known, or always on a
    ``new_run`` (a launch or a resume: the old run's PID is gone). An ``abandoned`` state
    stamps ``abandoned_at`` with ``now``.
    """
    starting = m.status == Status.QUEUED
    m.status = state.status  # type: ignore[assignment]
    m.retry_count = state.retry_count
    m.last_checked_at = utc_iso(now)
    if state.started_at is not None and (m.started_at is None or starting):
        m.started_at = utc_iso(state.started_at)
    m.pid = pid if pid is not None or new_run else m.pid
    m.resume_at = utc_iso(state.resume_at) if state.resume_at else None
    if state.launched_at:
        m.launched_at = utc_iso(state.launched_at)
    m.limit_waits = state.limit_waits
    m.transient_waits = state.transient_waits
    if state.status == Status.ABANDONED:
        m.abandoned_at = utc_iso(now)
        m.abandon_reason = state.abandon_reason


def shown(state: policy.TaskState) -> tuple[object, ...]:
    """The fields of ``state`` that :func:`state_fields` writes into the manifest: two
    states with the same ``shown`` write the same manifest (the policy's own memory, such
    as ``stale_since``, is not in it)."""
    return (
        state.status,
        state.retry_count,
        state.started_at,
        state.launched_at,
        state.resume_at,
        state.limit_waits,
        state.transient_waits,
        state.abandon_reason,
    )


def launched(state: policy.TaskState, now: float) -> Callable[[Manifest], None]:
    """The change of a launch (:func:`supervisor.policy.launched`'s ``state`` at ``now``):
    the state's fields, no PID until the wrapper writes one."""

    def change(m: Manifest) -> None:
        state_fields(m, state, now, pid=None, new_run=True)

    return change


def ending_record(
    runtime: Runtime, decision: policy.Decision, state: policy.TaskState
) -> dict[str, Any]:
    """What an ending writes into the manifest beyond the state's fields, for its terminal
    event (the write-ahead record :func:`supervisor.taskdir.repair.rebuild` restores a lost
    manifest from): ``failure_reason``, ``summary``, ``accepted`` (the acceptance result, or
    ``None``) and ``agent`` (the adapter's report: for Claude Code its cost and turns)."""
    task = runtime.task
    report = runtime.agent.report() if runtime.agent is not None else {}
    accepted = acceptance.read(task) if runtime.resolved.acceptance else None
    result_text = runtime.agent.result_text() if runtime.agent is not None else None
    why = "" if state.status == Status.COMPLETED else decision.reason
    return {
        "failure_reason": state.failure_reason,
        "summary": acceptance.summary(result_text, accepted, why),
        "accepted": accepted,
        "agent": report,
    }


def decided(
    runtime: Runtime,
    decision: policy.Decision,
    now: float,
    applied: Applied,
    pid: int | None,
    report: dict[str, Any],
) -> Callable[[Manifest], None]:
    """The change of any other decision: the state's fields (:func:`state_fields`), the
    agent adapter's ``report`` (its manifest fields) and, on an ending, the exit code,
    signal, tail, verdict, failure reason, acceptance result and summary."""
    task, state, finished = runtime.task, applied.state, applied.finished
    accepted = acceptance.read(task) if finished and runtime.resolved.acceptance else None
    summary = None
    if finished:
        result_text = runtime.agent.result_text() if runtime.agent is not None else None
        why = "" if state.status == Status.COMPLETED else decision.reason
        summary = acceptance.summary(result_text, accepted, why)
    resumed = policy.Action.RESUME in decision.actions

    def change(m: Manifest) -> None:
        state_fields(m, state, now, pid, new_run=resumed)
        for key, value in report.items():
            setattr(m, key, value)
        if finished:
            m.failure_reason = state.failure_reason  # type: ignore[assignment]
            m.finished_at = applied.finished_at
            m.exit_code = applied.exit_code
            m.signal = task.read_int(layout.SIGNAL)
            m.output_tail = applied.tail
            m.verdict = state.verdict  # type: ignore[assignment]
            m.summary = summary
            if accepted is not None:
                m.acceptance = accepted

    return change


def reported(manifest: Manifest, report: dict[str, Any]) -> bool:
    """Whether ``manifest`` already holds the agent adapter's ``report`` (its fields as
    :func:`decided` would set them): a check that brings nothing else writes nothing.
    A value that cannot be compared counts as new (a write too many, never one lost)."""
    for key, value in report.items():
        current = getattr(manifest, key, None)
        if isinstance(current, BaseModel):
            current = current.model_dump(mode="json", exclude_unset=False)
        if current != value:
            return False
    return True
