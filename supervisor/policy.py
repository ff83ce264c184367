"""The monitor's decision logic: a pure function from (state, signals, policy) to a decision.

No I/O happens here; :mod:`supervisor.engine` observes the signals and performs the actions.
Every check runs the seed monitor's three layers in order (seed 000, "Pitfall 1": the
done-file is always first, so a finished task is never resumed):

1. **done-file**: the wrapper writes ``done`` only when the agent exited on its own; the
   exit code decides ``completed`` (0) or ``failed`` (anything else).
2. **liveness**: the agent's PID is gone (or a zombie), or it never wrote one and its tmux
   session is gone, and there is no done-file: a crash. When the wrapper recorded a signal
   death or a resume exit code, that is final at once; otherwise the crash is declared
   only after :data:`EXIT_SETTLE` seconds without a done-file, so a normal exit is never
   misread while the wrapper writes ``exit_code`` and then ``done``.
3. **output staleness**: ``output.log`` older than ``stale_threshold`` starts a grace
   period; the first stale check never acts. Still stale after ``grace_period``: a hang.
   Fresh output in between cancels the grace period.

The deadline (``deadline`` seconds after ``started_at``) is checked after layer 1.

State table (like supervisord's process states; "stop" = stop the agent's process group,
"end" = finish + cleanup + notify)::

    from          condition                                 to          actions
    ------------  ----------------------------------------  ----------  --------------------
    running       done-file, exit code 0                    completed   end
    running       done-file, exit code != 0                 failed      end
    any live      deadline passed (no done-file)            abandoned   stop, end
    any           operator: supervise stop                  abandoned   stop, end
    any live      operator: supervise resume                running     stop, resume (retries + 1)
    running       agent gone > EXIT_SETTLE s, no done-file  crashed     wait backoff
    running       output stale, grace_period elapsed        hung        stop, wait backoff
    crashed/hung  retry_count >= max_retries                abandoned   stop, end
                  (reason tmux_lost if the session was gone, else max_retries)
    crashed/hung  backoff elapsed                           running     resume (retries + 1)
    running       fresh output during the grace period      running     grace cancelled
    running       done-file exit 0, [acceptance] declared   verifying   cleanup, accept
    verifying     acceptance result                         completed   end (verdict PASS/FAIL)
    running       usage/rate limit (429/529, limit text)    waiting     stop, wait resume_at
    running       done-file, run ended on a transient API   waiting     wait backoff
                  or network failure (5xx, refused, DNS)
    waiting       resume_at reached                         running     resume (retries unchanged)
    hung          done-file (the agent answered our stop)   (ignored)   the stop's intent wins
    running       permission escalated / circuit breaker    escalated   notify (pause if no request)
    escalated     operator: supervise approve               running     answer allow / continue
    escalated     operator: supervise deny                  running     answer deny
                  (a paused breaker escalation: abandoned, reason denied)
    running       interactive turn ended (Stop hook)        running     end the TUI session (/exit)
    any live      state filesystem full (ENOSPC)            unchanged   none: held until it has room

An escalated task is never judged stale (it waits for a human); a waiting task is neither
stale nor crashed (its agent was stopped on purpose). The deadline applies to both.

A stop that ``supervise`` causes is never the task's own ending: the intent (hung, crashed,
waiting, an operator's resume) is recorded in the state, and in ``events.jsonl``, before the
agent is signalled. Claude Code traps SIGTERM and exits 143 by itself, and exits 129 on
SIGHUP (measured, ``../shared/notes/real-world-facts.md``), so its wrapper then writes a
done-file: in those states the done-file is the answer to our stop, not a result.

A ``failed`` ending carries a ``failure_reason`` (:mod:`supervisor.failures`): ``auth``,
``billing``, ``invalid_request``, ``agent_error``, or ``exit_code`` when the agent said
nothing more than its exit code.
Every terminal state carries a ``verdict`` (seed 003): ``PASS`` (completed, acceptance
passed or none declared), ``FAIL`` (failed, or acceptance failed), ``ESCALATE`` (ended
while escalated), ``TIMEOUT`` (deadline) or ``ABANDONED``.

Backoff before resume number ``n + 1`` is ``min(base_interval * 2**n, max_interval)``
seconds where ``n`` is the ``retry_count`` so far (seed 000, Pattern 1). Retries count over
the task's whole life: fresh output never resets them (a bug in the seed's history).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from supervisor.config import MonitorPolicy
from supervisor.failures import TRANSIENT
from supervisor.states import TERMINAL, Status

#: Seconds to wait, after the agent's PID is seen gone, for the wrapper to write the
#: done-file before calling it a crash (the wrapper writes ``exit_code`` then ``done``
#: within milliseconds of the agent's exit).
EXIT_SETTLE = 2.0
#: Seconds a launched task may go without a ``pid`` file before it counts as crashed.
START_TIMEOUT = 30.0
#: Seconds past the stale threshold at which a healthy task is looked at again.
STALE_SLACK = 0.01
#: Lower bound for the delay until the next check, in seconds.
MIN_CHECK = 0.05
#: Seconds between checks while the state filesystem is full (at most; base_interval if less).
DISK_RECHECK = 5.0


class Action(StrEnum):
    """What the engine must do, in this order."""

    STOP_AGENT = "stop_agent"  # SIGTERM the agent's process group, bounded wait, SIGKILL
    RESUME = "resume"  # relaunch with resume_command in the same tmux session
    FINISH = "finish"  # record finished_at / exit_code / output_tail
    CLEANUP = "cleanup"  # pipe-pane off, kill the tmux session
    NOTIFY = "notify"  # run the notifier for this decision's events (policy.notify_on)
    PAUSE_AGENT = "pause_agent"  # SIGSTOP the agent's process group (an escalation)
    CONTINUE_AGENT = "continue_agent"  # SIGCONT it (the escalation was approved)
    ANSWER_APPROVE = "answer_approve"  # allow the permission request waiting on a human
    ANSWER_DENY = "answer_deny"  # deny it
    ACCEPT = "accept"  # run the [acceptance] check (off the engine's worker thread)
    END_SESSION = "end_session"  # ask an interactive agent to exit (/exit)


@dataclass(frozen=True)
class TaskState:
    """What the policy remembers about a task between checks (all times epoch seconds).

    Attributes:
        status: a :class:`supervisor.states.Status`.
        started_at: first launch time; the deadline counts from here.
        launched_at: the latest launch or resume; output age is never older than this.
        retry_count: resumes so far, over the task's whole life.
        stale_since: when output was first seen stale (grace period running), else None.
        gone_since: when the agent was first seen gone without a done-file, else None.
        resume_at: when a crashed/hung task is due to resume, else None.
        abandon_reason: set with status ``abandoned``: ``deadline``, ``max_retries``,
            ``tmux_lost`` (``max_retries`` when the last failure was a lost tmux session)
            or ``stopped``.
        exit_code: set with a terminal status when known.
        lost_session: the latest crash found the tmux session gone (the server died or
            the session was killed); abandoning then says ``tmux_lost``.
        escalation: why the task waits for a human (status ``escalated``), else None.
        paused: the escalation paused the agent (SIGSTOP) rather than holding a request.
        limit_waits: usage/rate-limit waits so far (they never count as retries).
        verdict: set with a terminal status: PASS, FAIL, ESCALATE, TIMEOUT or ABANDONED.
        active_since: when the agent last became active again without a new run (an
            answered escalation); output age never counts from before it. The run itself
            is the same, so ``launched_at`` does not move.
        transient_waits: waits after transient API or network failures so far (never
            retries; they set the backoff of the next such wait).
        failure_reason: set with status ``failed``: a :class:`supervisor.states.FailureReason`.
    """

    status: Status
    started_at: float | None = None
    launched_at: float | None = None
    retry_count: int = 0
    stale_since: float | None = None
    gone_since: float | None = None
    resume_at: float | None = None
    abandon_reason: str | None = None
    exit_code: int | None = None
    lost_session: bool = False
    escalation: str | None = None
    paused: bool = False
    limit_waits: int = 0
    verdict: str | None = None
    active_since: float | None = None
    transient_waits: int = 0
    failure_reason: str | None = None


@dataclass(frozen=True)
class Signals:
    """Facts observed by the engine for one check.

    Attributes:
        now: epoch seconds of the observation.
        done: the done-file exists.
        exit_code: content of ``exit_code``, if written.
        agent_alive: ``True``/``False`` from the PID check (zombie = dead, PID reuse guarded
            with create_time); ``None`` when no ``pid`` file exists yet.
        output_mtime: mtime of ``output.log`` (epoch s), ``None`` when absent.
        stop_requested: an operator ran ``supervise stop`` for this task.
        resume_requested: an operator ran ``supervise resume`` for this task.
        signal: content of ``signal``: the wrapper saw the agent killed by this signal.
        session_alive: the task's tmux session exists (``None``: not looked at). A missing
            session with no ``pid`` file means the agent cannot start any more.
        escalate: a permission request or the circuit breaker needs a human: why.
        escalate_pause: that escalation holds no blocked request, so pause the agent.
        approve_requested / deny_requested: an operator ran ``supervise approve|deny``.
        limit: the current run hit a usage or rate limit (429/529 or the CLI's limit text).
        limit_resume_at: when the limit resets (epoch s), ``None`` if no time was given.
        limit_reason: the text that told us, for the log.
        has_acceptance: the task declares ``[acceptance]``.
        acceptance: the acceptance result (``True`` pass, ``False`` fail), ``None`` if none.
        acceptance_running: the acceptance check is running now.
        turn_ended: an interactive agent finished its turn (Stop hook) and idles.
        failure: the class of the run's error ending as the agent reported it
            (e.g. :func:`supervisor.agents.claude.failures.classify`): ``transient`` or a
            failure reason; ``None`` when it reported none.
        state_disk_full: the state filesystem has no room (ENOSPC, see
            :mod:`supervisor.statefs`): run files may be missing or stale for want of space.
    """

    now: float
    done: bool = False
    exit_code: int | None = None
    agent_alive: bool | None = None
    output_mtime: float | None = None
    stop_requested: bool = False
    resume_requested: bool = False
    session_alive: bool | None = None
    signal: int | None = None
    escalate: str | None = None
    escalate_pause: bool = False
    approve_requested: bool = False
    deny_requested: bool = False
    limit: bool = False
    limit_resume_at: float | None = None
    limit_reason: str = ""
    has_acceptance: bool = False
    acceptance: bool | None = None
    acceptance_running: bool = False
    turn_ended: bool = False
    failure: str | None = None
    state_disk_full: bool = False


@dataclass(frozen=True)
class Decision:
    """The policy's answer.

    Attributes:
        state: the next state.
        actions: what the engine must do, in order.
        events: transition names to append to ``events.jsonl`` (may be empty).
        next_check: seconds until the next check (never past the deadline).
        reason: one human-readable line explaining the decision.
    """

    state: TaskState
    actions: tuple[Action, ...] = ()
    events: tuple[str, ...] = ()
    next_check: float = 1.0
    reason: str = ""


def first_check(policy: MonitorPolicy) -> float:
    """Seconds from a launch or resume to the first check: never later than the moment a
    silent agent's output would turn stale (a hang at start is caught in time too)."""
    return min(policy.base_interval, policy.stale_after + STALE_SLACK)


def backoff(retry_count: int, policy: MonitorPolicy) -> float:
    """Seconds to wait before the next resume: ``min(base * 2**retry_count, max)``."""
    exponent = min(retry_count, 62)  # 2**62 s is past any deadline; avoids float overflow
    return min(policy.base_interval * (2.0**exponent), policy.max_interval)


def _bounded(delay: float, state: TaskState, now: float, policy: MonitorPolicy) -> float:
    if state.started_at is not None:
        delay = min(delay, state.started_at + policy.deadline - now)
    return max(MIN_CHECK, delay)


def decide(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    """Map the current state and observed signals to the next state and actions.

    Pure: no I/O, no clock; ``signals.now`` is the only notion of time.

    Args:
        state: the task's state after the previous check.
        signals: what the engine observed just now.
        policy: the task's effective monitor policy (seconds).

    Returns:
        A :class:`Decision`. For a terminal ``state`` it is a no-op. ``Action.NOTIFY`` is
        last in ``actions`` exactly when one of its ``events`` is in ``policy.notify_on``.
    """
    decision = _decide(state, signals, policy)
    actions = tuple(a for a in decision.actions if a is not Action.NOTIFY)
    if any(event in policy.notify_on for event in decision.events):
        actions += (Action.NOTIFY,)
    if actions != decision.actions:
        decision = dataclasses.replace(decision, actions=actions)
    return decision


def _decide(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    now = signals.now
    replace = dataclasses.replace
    if state.status == "queued" and signals.stop_requested:
        new = replace(state, status="abandoned", abandon_reason="stopped", verdict="ABANDONED")
        return Decision(
            state=new,
            actions=(Action.FINISH,),
            events=("abandoned",),
            reason="stopped by the operator before it started",
        )
    if state.status in TERMINAL or state.status == "queued":
        return Decision(state=state, next_check=policy.base_interval, reason="nothing to do")
    if signals.state_disk_full:
        return _hold_disk_full(state, policy)
    if state.status == "verifying":
        return _verifying(state, signals, policy)
    if state.status == "waiting":
        return _waiting(state, signals, policy)

    # Layer 1: the done-file always wins (a run that ended on a usage limit or a transient
    # failure is not an end: it waits, below, after the deadline and the operator have had
    # their say). Once a task is hung, we stopped its agent, and a done-file is the agent's
    # answer to that stop (the real CLI exits 143 on SIGTERM), whatever its code: the
    # recorded intent (resume) wins. A crash is only declared when no done-file came.
    code = signals.exit_code if signals.exit_code is not None else -1
    own_run = state.status != "hung"
    limited_end = code != 0 and signals.limit and state.status == "running"
    transient_end = code != 0 and signals.failure == TRANSIENT and state.status == "running"
    if signals.done and own_run and not limited_end and not transient_end:
        if code == 0 and signals.has_acceptance:
            new = replace(
                state, status="verifying", exit_code=0, stale_since=None, gone_since=None,
                resume_at=None, escalation=None, paused=False,
            )  # fmt: skip
            return Decision(
                state=new,
                actions=(Action.CLEANUP, Action.ACCEPT),
                events=("verifying",),
                next_check=policy.base_interval,
                reason="done-file with exit code 0; running the acceptance check",
            )
        status = "completed" if code == 0 else "failed"
        failure = None if code == 0 else (signals.failure or "exit_code")
        new = replace(
            state, status=status, exit_code=code, stale_since=None, gone_since=None,
            resume_at=None, escalation=None, paused=False,
            verdict="PASS" if code == 0 else "FAIL", failure_reason=failure,
        )  # fmt: skip
        why = f"done-file with exit code {code}" + (f" ({failure})" if failure else "")
        return Decision(
            state=new,
            actions=(Action.FINISH, Action.CLEANUP, Action.NOTIFY),
            events=(status,),
            reason=why,
        )

    # Deadline, counted from the first launch; then the operator's requests.
    if state.started_at is not None and now - state.started_at >= policy.deadline:
        return _abandon(state, "deadline", f"deadline of {policy.deadline:g} s passed")
    if signals.stop_requested:
        return _abandon(state, "stopped", "stopped by the operator (supervise stop)")
    if state.status == "escalated" and (signals.approve_requested or signals.deny_requested):
        return _answered(state, signals, now, policy)
    if signals.resume_requested:
        return _resume(state, now, policy, stop_first=True, by="the operator (supervise resume)")

    if state.status in ("crashed", "hung"):
        if state.retry_count >= policy.max_retries:  # e.g. max_retries lowered on a restart
            reason = "tmux_lost" if state.lost_session else "max_retries"
            return _abandon(state, reason, f"{state.retry_count} resumes already")
        if state.resume_at is not None and now < state.resume_at:
            return Decision(
                state=state,
                next_check=_bounded(state.resume_at - now, state, now, policy),
                reason=f"waiting {state.resume_at - now:.2f} s of backoff before resuming",
            )
        return _resume(state, now, policy, stop_first=False, by="the backoff")

    if state.status == "running" and signals.limit:
        return _wait_limit(state, signals, policy)
    if transient_end and signals.done:
        return _wait_transient(state, signals, policy)
    if state.status == "running" and signals.escalate:
        new = replace(
            state, status="escalated", escalation=signals.escalate,
            paused=signals.escalate_pause, stale_since=None,
        )  # fmt: skip
        return Decision(
            state=new,
            actions=(Action.PAUSE_AGENT, Action.NOTIFY) if new.paused else (Action.NOTIFY,),
            events=("escalated",),
            next_check=_bounded(policy.base_interval, new, now, policy),
            reason=f"needs a human: {signals.escalate}",
        )
    if state.status == "running" and signals.turn_ended and signals.agent_alive:
        return Decision(
            state=state,
            actions=(Action.END_SESSION,),
            next_check=_bounded(min(policy.base_interval, 1.0), state, now, policy),
            reason="the interactive agent finished its turn; asking it to exit",
        )

    # Layer 2: liveness.
    launched = state.launched_at if state.launched_at is not None else now
    agent_gone = signals.agent_alive is False or (
        signals.agent_alive is None
        and (signals.session_alive is False or now - launched >= START_TIMEOUT)
    )
    if agent_gone and (
        signals.signal is not None
        or (signals.exit_code is not None and signals.exit_code in policy.resume_exit_codes)
    ):
        # The wrapper recorded an end that never gets a done-file (a signal death, a resume
        # exit code): nothing more is coming, so no settle time is needed.
        lost = signals.session_alive is False
        state = replace(state, lost_session=lost)
        if lost:
            why = "tmux session lost"
        elif signals.signal is not None:
            why = f"agent killed by signal {signals.signal}"
        else:
            why = f"agent exited with resume exit code {signals.exit_code}"
        return _fail_over(state, "crashed", now, policy, why)
    if agent_gone:
        if state.gone_since is None:
            new = replace(state, gone_since=now)
            return Decision(
                state=new,
                next_check=_bounded(EXIT_SETTLE, new, now, policy),
                reason="agent gone; waiting for the done-file to settle",
            )
        if now - state.gone_since >= EXIT_SETTLE:
            lost = signals.session_alive is False
            why = "tmux session lost" if lost else "agent gone without a done-file"
            state = replace(state, lost_session=lost)
            return _fail_over(state, "crashed", now, policy, why)
        return Decision(
            state=state,
            next_check=_bounded(state.gone_since + EXIT_SETTLE - now, state, now, policy),
            reason="agent gone; still settling",
        )
    if state.gone_since is not None:
        state = replace(state, gone_since=None)
    if state.status == "escalated":
        return Decision(
            state=state,
            next_check=_bounded(policy.base_interval, state, now, policy),
            reason=f"escalated, waiting for a human: {state.escalation}",
        )

    # Layer 3: output staleness, with a grace period.
    last_output = max(signals.output_mtime or launched, launched, state.active_since or launched)
    age = now - last_output
    if age > policy.stale_after:
        if state.stale_since is None:
            new = replace(state, stale_since=now)
            return Decision(
                state=new,
                events=("stale",),
                next_check=_bounded(
                    min(policy.base_interval, max(policy.grace_period, MIN_CHECK)), new, now, policy
                ),
                reason=f"output stale for {age:.1f} s; grace period of {policy.grace_period:g} s",
            )
        if now - state.stale_since >= policy.grace_period:
            state = replace(state, lost_session=False)
            return _fail_over(
                state, "hung", now, policy, f"output stale for {age:.1f} s after the grace period"
            )
        remaining = state.stale_since + policy.grace_period - now
        return Decision(
            state=state,
            next_check=_bounded(min(policy.base_interval, remaining), state, now, policy),
            reason=f"output stale; {remaining:.1f} s of grace left",
        )
    events: tuple[str, ...] = ()
    if state.stale_since is not None:
        state = replace(state, stale_since=None)
        events = ("fresh",)
    # Look again no later than the moment the output would turn stale, so a hang is acted
    # on within stale_threshold + grace_period (+ scheduling slack), whatever base_interval.
    until_stale = last_output + policy.stale_after - now + STALE_SLACK
    return Decision(
        state=state,
        events=events,
        next_check=_bounded(min(policy.base_interval, until_stale), state, now, policy),
        reason="healthy",
    )


def _hold_disk_full(state: TaskState, policy: MonitorPolicy) -> Decision:
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


def _resume(
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
        status="running",
        retry_count=state.retry_count + (1 if counts else 0),
        launched_at=now,
        active_since=None,
        stale_since=None,
        gone_since=None,
        resume_at=None,
        escalation=None,
        paused=False,
    )
    what = f"resume number {new.retry_count}" if counts else "resume (not a retry)"
    return Decision(
        state=new,
        actions=(Action.STOP_AGENT, Action.RESUME) if stop_first else (Action.RESUME,),
        events=("resumed",),
        next_check=_bounded(first_check(policy), new, now, policy),
        reason=f"{what}, asked by {by}",
    )


def _verifying(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    """The agent exited 0 and the acceptance check decides the verdict."""
    if signals.stop_requested:
        return _abandon(state, "stopped", "stopped by the operator during the acceptance check")
    if signals.acceptance is not None:
        verdict = "PASS" if signals.acceptance else "FAIL"
        new = dataclasses.replace(state, status="completed", verdict=verdict)
        return Decision(
            state=new,
            actions=(Action.FINISH, Action.NOTIFY),
            events=("completed",),
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


def _waiting(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    """Waiting out a usage limit or a transient failure. The agent was stopped on purpose
    (or had already ended), so its exit, done-file or silence mean nothing now; only the
    deadline and the operator count."""
    now = signals.now
    if state.started_at is not None and now - state.started_at >= policy.deadline:
        return _abandon(state, "deadline", f"deadline of {policy.deadline:g} s passed")
    if signals.stop_requested:
        return _abandon(state, "stopped", "stopped by the operator (supervise stop)")
    if signals.resume_requested:
        return _resume(state, now, policy, stop_first=True, by="the operator (supervise resume)")
    if state.resume_at is not None and now < state.resume_at:
        return Decision(
            state=state,
            next_check=_bounded(state.resume_at - now, state, now, policy),
            reason=f"waiting; resuming in {state.resume_at - now:.1f} s",
        )
    return _resume(state, now, policy, stop_first=False, by="the end of the wait", counts=False)


def _wait_limit(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    """A usage or rate limit: stop the agent and resume at the reset time (or after a
    backoff when none was given). Never counts against ``max_retries``."""
    now = signals.now
    if signals.limit_resume_at is not None and signals.limit_resume_at > now:
        resume_at, how = signals.limit_resume_at, "at the reset time"
    else:
        wait = backoff(state.limit_waits, policy)
        resume_at, how = now + wait, f"after a {wait:g} s backoff (no reset time given)"
    new = dataclasses.replace(
        state,
        status="waiting",
        resume_at=resume_at,
        limit_waits=state.limit_waits + 1,
        stale_since=None,
        gone_since=None,
    )
    return Decision(
        state=new,
        actions=(Action.STOP_AGENT, Action.NOTIFY),
        events=("waiting",),
        next_check=_bounded(resume_at - now, new, now, policy),
        reason=f"{signals.limit_reason or 'usage limit'}; resuming {how}",
    )


def _wait_transient(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    """The run ended on a transient API or network failure after the agent's own retries:
    wait a backoff (``min(base * 2**n, max)`` over the transient waits so far), then resume
    the same session. Never counts against ``max_retries``; the deadline still applies."""
    now = signals.now
    wait = backoff(state.transient_waits, policy)
    new = dataclasses.replace(
        state,
        status="waiting",
        resume_at=now + wait,
        transient_waits=state.transient_waits + 1,
        stale_since=None,
        gone_since=None,
    )
    return Decision(
        state=new,
        actions=(Action.NOTIFY,),
        events=("waiting",),
        next_check=_bounded(wait, new, now, policy),
        reason=f"transient API or network failure (exit {signals.exit_code}); resuming the "
        f"same session after a {wait:g} s backoff",
    )


def _answered(state: TaskState, signals: Signals, now: float, policy: MonitorPolicy) -> Decision:
    """An operator answered an escalation with ``supervise approve`` or ``deny``."""
    approve = signals.approve_requested
    if state.paused and not approve:
        return _abandon(state, "denied", "the operator denied the paused escalation")
    # The same run goes on: launched_at (and so the PID-reuse guard) stays; only output age
    # counts afresh, since the agent was silent while it waited for the human.
    new = dataclasses.replace(
        state, status="running", escalation=None, paused=False, active_since=now, stale_since=None
    )
    if state.paused:
        actions: tuple[Action, ...] = (Action.CONTINUE_AGENT,)
    else:
        actions = (Action.ANSWER_APPROVE,) if approve else (Action.ANSWER_DENY,)
    return Decision(
        state=new,
        actions=actions,
        events=("approved" if approve else "denied",),
        next_check=_bounded(first_check(policy), new, now, policy),
        reason=f"the operator {'approved' if approve else 'denied'} the escalation",
    )


def _abandon(state: TaskState, reason: str, why: str) -> Decision:
    if state.status == "escalated" and reason != "denied":
        verdict = "ESCALATE"
    else:
        verdict = "TIMEOUT" if reason == "deadline" else "ABANDONED"
    new = dataclasses.replace(
        state, status="abandoned", abandon_reason=reason, resume_at=None, stale_since=None,
        verdict=verdict,
    )  # fmt: skip
    return Decision(
        state=new,
        actions=(Action.STOP_AGENT, Action.FINISH, Action.CLEANUP, Action.NOTIFY),
        events=("abandoned",),
        reason=why,
    )


def _fail_over(
    state: TaskState, status: str, now: float, policy: MonitorPolicy, why: str
) -> Decision:
    if state.retry_count >= policy.max_retries:
        reason = "tmux_lost" if state.lost_session else "max_retries"
        return _abandon(state, reason, f"{why}; {state.retry_count} resumes already")
    wait = backoff(state.retry_count, policy)
    new = dataclasses.replace(
        state, status=status, resume_at=now + wait, stale_since=None, gone_since=None
    )
    actions = (Action.STOP_AGENT,) if status == "hung" else ()
    return Decision(
        state=new,
        actions=actions,
        events=(status,),
        next_check=_bounded(wait, new, now, policy),
        reason=f"{why}; resuming in {wait:g} s",
    )


def logged_ending(state: TaskState, events: list[dict[str, Any]]) -> TaskState:
    """A terminal ``state`` as the event log already records it: the log's terminal event is
    final (written first, ahead of the manifest), so a decision taken again after a failed
    manifest write never records another reason, exit code or verdict than the event."""
    last = next((e for e in reversed(events) if e.get("event") in TERMINAL), None)
    if last is None or state.status not in TERMINAL:
        return state
    status, reason = last["event"], last.get("abandon_reason")
    verdict = last.get("verdict")  # absent in logs written before it was recorded
    if verdict is None:
        derived = {"completed": "PASS", "failed": "FAIL"}
        verdict = state.verdict if status == state.status else derived.get(status, "ABANDONED")
    same = status == state.status
    return dataclasses.replace(
        state,
        status=status,
        abandon_reason=reason,
        exit_code=last.get("exit_code", state.exit_code),
        verdict=verdict,
        failure_reason=last.get("failure_reason", state.failure_reason if same else None),
    )
