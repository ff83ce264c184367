"""The outcomes the policy's steps share: resume, abandon, fail over to crashed/hung,
the waits (usage limit, transient failure), the acceptance check, an operator's answer
to an escalation, and the hold while the state filesystem is full.

Pure functions of (state, signals, policy); the rows they build are in the state table
of :mod:`supervisor.policy`.
"""

from __future__ import annotations

import dataclasses

from supervisor.config import MonitorPolicy
from supervisor.policy.model import (
    DISK_RECHECK,
    MIN_CHECK,
    Action,
    Decision,
    Signals,
    TaskState,
    backoff,
    bounded,
    first_check,
)
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import AbandonReason, Status, Verdict


def hold_disk_full(state: TaskState, policy: MonitorPolicy) -> Decision:
    """The state filesystem is full: the wrapper cannot write ``exit_code``/``done`` (it
    keeps them in tmux), the capture cannot grow ``output.log`` and no event can be
    recorded. A missing done-file or silent output then proves nothing, and a resume could
    not write its ``launch.json``: hold every decision, deadline and operator requests
    included (they could not be recorded either). The grace and settle clocks restart once
    there is room, so the time spent full is never counted as silence or absence."""
    new = dataclasses.replace(state, stale_since=None, gone_since=None)
    return Decision(
        state=new,
        next_check=max(MIN_CHECK, min(policy.base_interval, DISK_RECHECK)),
        reason="state filesystem full; holding decisions until it has room",
    )


def resume(
    state: TaskState,
    now: float,
    policy: MonitorPolicy,
    stop_first: bool,
    by: str,
    counts: bool = True,
) -> Decision:
    """Back to ``running``; the engine relaunches ``resume_command``. ``counts``: the resume
    is a retry (``retry_count + 1``); a usage-limit wait is not."""
    new = dataclasses.replace(
        state,
        status=Status.RUNNING,
        retry_count=state.retry_count + (1 if counts else 0),
        launched_at=now,
        active_since=None,
        stale_since=None,
        gone_since=None,
        resume_at=None,
        escalation=None,
        paused=False,
        agent_kept=False,
    )
    what = f"resume number {new.retry_count}" if counts else "resume (not a retry)"
    return Decision(
        state=new,
        actions=(Action.STOP_AGENT, Action.RESUME) if stop_first else (Action.RESUME,),
        events=(Event.RESUMED,),
        next_check=bounded(first_check(policy), new, now, policy),
        reason=f"{what}, asked by {by}",
    )


def verifying(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    """The agent exited 0 and the acceptance check decides the verdict."""
    if signals.stop_requested:
        why = "stopped by the operator during the acceptance check"
        return abandon(state, AbandonReason.STOPPED, why)
    if signals.acceptance is not None:
        verdict = Verdict.PASS if signals.acceptance else Verdict.FAIL
        new = dataclasses.replace(state, status=Status.COMPLETED, verdict=verdict)
        return Decision(
            state=new,
            actions=(Action.FINISH, Action.NOTIFY),
            events=(Event.COMPLETED,),
            reason=f"acceptance check {'passed' if signals.acceptance else 'failed'}",
        )
    if signals.acceptance_running:
        return Decision(state=state, next_check=policy.base_interval, reason="acceptance running")
    return Decision(
        state=state,
        actions=(Action.ACCEPT,),
        next_check=policy.base_interval,
        reason="acceptance check not running (supervise restarted?); starting it again",
    )


def waiting(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    """Waiting out a usage limit or a transient failure. The agent was stopped on purpose
    (or had already ended), so its exit, done-file or silence mean nothing now; only the
    deadline and the operator count."""
    now = signals.now
    if state.started_at is not None and now - state.started_at >= policy.deadline:
        return abandon(state, AbandonReason.DEADLINE, f"deadline of {policy.deadline:g} s passed")
    if signals.stop_requested:
        return abandon(state, AbandonReason.STOPPED, "stopped by the operator (supervise stop)")
    if signals.resume_requested:
        return resume(state, now, policy, stop_first=True, by="the operator (supervise resume)")
    if state.resume_at is not None and now < state.resume_at:
        return Decision(
            state=state,
            next_check=bounded(state.resume_at - now, state, now, policy),
            reason=f"waiting; resuming in {state.resume_at - now:.1f} s",
        )
    # A wait that kept its agent (a usage limit in the TUI) replaces it with the resume.
    by = "the end of the wait"
    return resume(state, now, policy, stop_first=state.agent_kept, by=by, counts=False)


def wait_limit(
    state: TaskState, signals: Signals, policy: MonitorPolicy, keep: bool = False
) -> Decision:
    """A usage or rate limit: stop the agent and resume at the reset time (or after a
    backoff when none was given). Never counts against ``max_retries``. ``keep``: the
    agent is left running (an interactive CLI that may continue by itself at the reset,
    :func:`supervisor.policy.turns.keeps_agent`); the end of the wait stops it."""
    now = signals.now
    if signals.limit_resume_at is not None and signals.limit_resume_at > now:
        resume_at, how = signals.limit_resume_at, "at the reset time"
    else:
        wait = backoff(state.limit_waits, policy)
        resume_at, how = now + wait, f"after a {wait:g} s backoff (no reset time given)"
    new = dataclasses.replace(
        state,
        status=Status.WAITING,
        resume_at=resume_at,
        limit_waits=state.limit_waits + 1,
        stale_since=None,
        gone_since=None,
        agent_kept=keep,
    )
    return Decision(
        state=new,
        actions=(Action.NOTIFY,) if keep else (Action.STOP_AGENT, Action.NOTIFY),
        events=(Event.WAITING,),
        next_check=bounded(resume_at - now, new, now, policy),
        reason=f"{signals.limit_reason or 'usage limit'}; resuming {how}",
        quiet=(Event.WAITING,) if same_wait(state, now, policy) else (),
    )


def same_wait(state: TaskState, now: float, policy: MonitorPolicy) -> bool:
    """A wait at ``now`` is a limit already notified coming back (issue 14: ``waiting`` is
    notified once per limit, not per retry cycle): the task has waited before
    (``limit_waits`` or ``transient_waits``, both kept in the manifest, so this holds across
    an engine restart) and the run it ends started less than ``max_interval`` seconds ago
    (the backoff cap; a run that lasted longer got past that limit, the next one is new)."""
    launched = state.launched_at if state.launched_at is not None else now
    waited = state.limit_waits + state.transient_waits > 0
    return waited and now - launched < policy.max_interval


def wait_transient(
    state: TaskState,
    signals: Signals,
    policy: MonitorPolicy,
    stop: bool = False,
    why: str | None = None,
) -> Decision:
    """The run ended on a transient API or network failure after the agent's own retries:
    wait a backoff (``min(base * 2**n, max)`` over the transient waits so far), then resume
    the same session. Never counts against ``max_retries``; the deadline still applies.
    ``stop``: the agent outlives its failed turn (an interactive TUI at its prompt) and is
    stopped first; ``why``: what told us, for the reason line (default: the exit code)."""
    now = signals.now
    wait = backoff(state.transient_waits, policy)
    new = dataclasses.replace(
        state,
        status=Status.WAITING,
        resume_at=now + wait,
        transient_waits=state.transient_waits + 1,
        stale_since=None,
        gone_since=None,
    )
    what = why or f"transient API or network failure (exit {signals.exit_code})"
    return Decision(
        state=new,
        actions=(Action.STOP_AGENT, Action.NOTIFY) if stop else (Action.NOTIFY,),
        events=(Event.WAITING,),
        next_check=bounded(wait, new, now, policy),
        reason=f"{what}; resuming the same session after a {wait:g} s backoff",
        quiet=(Event.WAITING,) if same_wait(state, now, policy) else (),
    )


def answered(state: TaskState, signals: Signals, now: float, policy: MonitorPolicy) -> Decision:
    """An operator answered an escalation with ``supervise approve`` or ``deny``."""
    approve = signals.approve_requested
    if state.paused and not approve:
        return abandon(state, AbandonReason.DENIED, "the operator denied the paused escalation")
    # The same run goes on: launched_at (and so the PID-reuse guard) stays; only output age
    # counts afresh, since the agent was silent while it waited for the human.
    new = dataclasses.replace(
        state,
        status=Status.RUNNING,
        escalation=None,
        paused=False,
        active_since=now,
        stale_since=None,
    )
    if state.paused:
        actions: tuple[Action, ...] = (Action.CONTINUE_AGENT,)
    else:
        actions = (Action.ANSWER_APPROVE,) if approve else (Action.ANSWER_DENY,)
    return Decision(
        state=new,
        actions=actions,
        events=(Event.APPROVED if approve else Event.DENIED,),
        next_check=bounded(first_check(policy), new, now, policy),
        reason=f"the operator {'approved' if approve else 'denied'} the escalation",
    )


def abandon(state: TaskState, reason: str, why: str) -> Decision:
    """End the task ``abandoned`` with ``reason`` (``deadline``, ``stopped``, ``denied``,
    ``max_retries``, ``tmux_lost``): stop the agent, finish, clean up, notify. The verdict
    is ``ESCALATE`` when it ended waiting for a human (not denied by one), ``TIMEOUT`` at
    the deadline, else ``ABANDONED``."""
    if state.status == Status.ESCALATED and reason != AbandonReason.DENIED:
        verdict = Verdict.ESCALATE
    else:
        verdict = Verdict.TIMEOUT if reason == AbandonReason.DEADLINE else Verdict.ABANDONED
    new = dataclasses.replace(
        state,
        status=Status.ABANDONED,
        abandon_reason=reason,
        resume_at=None,
        stale_since=None,
        verdict=verdict,
    )
    return Decision(
        state=new,
        actions=(Action.STOP_AGENT, Action.FINISH, Action.CLEANUP, Action.NOTIFY),
        events=(Event.ABANDONED,),
        reason=why,
    )


#: The one line a superseded copy's decision (and so its manifest summary) gives.
SUPERSEDED_WHY = (
    "superseded: the fleet's database gives this task to a newer generation (another host "
    "or a restart); this host's copy was stopped and is never resumed"
)


def supersede(state: TaskState) -> Decision:
    """This host's copy of a cluster task lost its claim (issue 15): stop the agent (the
    bounded stop of an operator's ``stop``: SIGTERM, SIGKILL at the deadline), finish,
    clean up; the task ends ``superseded`` with verdict ``ABANDONED``. No acceptance and no
    resume: the task's outcome belongs to the newer generation. A copy still ``queued`` or
    ``blocked`` has no agent: it only finishes (a blocked one asked for a stop and a
    cleanup before, found by attack)."""
    new = dataclasses.replace(
        state,
        status=Status.SUPERSEDED,
        verdict=Verdict.ABANDONED,
        resume_at=None,
        stale_since=None,
        gone_since=None,
        escalation=None,
        paused=False,
    )
    if state.status in (Status.QUEUED, Status.BLOCKED):
        actions: tuple[Action, ...] = (Action.FINISH,)
    else:
        actions = (Action.STOP_AGENT, Action.FINISH, Action.CLEANUP)
    return Decision(state=new, actions=actions, events=(Event.SUPERSEDED,), reason=SUPERSEDED_WHY)


def fail_over(
    state: TaskState, status: str, now: float, policy: MonitorPolicy, why: str
) -> Decision:
    """A failed run (``status`` ``crashed`` or ``hung``): resume after one backoff, or
    abandon once ``max_retries`` resumes were spent (``tmux_lost`` if the session was
    gone). A hung agent is stopped first."""
    if state.retry_count >= policy.max_retries:
        reason = AbandonReason.TMUX_LOST if state.lost_session else AbandonReason.MAX_RETRIES
        return abandon(state, reason, f"{why}; {state.retry_count} resumes already")
    wait = backoff(state.retry_count, policy)
    new = dataclasses.replace(
        state, status=status, resume_at=now + wait, stale_since=None, gone_since=None
    )
    actions = (Action.STOP_AGENT,) if status == Status.HUNG else ()
    return Decision(
        state=new,
        actions=actions,
        events=(status,),
        next_check=bounded(wait, new, now, policy),
        reason=f"{why}; resuming in {wait:g} s",
    )
