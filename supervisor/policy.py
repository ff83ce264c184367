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

Backoff before resume number ``n + 1`` is ``min(base_interval * 2**n, max_interval)``
seconds where ``n`` is the ``retry_count`` so far (seed 000, Pattern 1). Retries count over
the task's whole life: fresh output never resets them (a bug in the seed's history).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from supervisor.config import MonitorPolicy

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


class Action(StrEnum):
    """What the engine must do, in this order."""

    STOP_AGENT = "stop_agent"  # SIGTERM the agent's process group, bounded wait, SIGKILL
    RESUME = "resume"  # relaunch with resume_command in the same tmux session
    FINISH = "finish"  # record finished_at / exit_code / output_tail
    CLEANUP = "cleanup"  # pipe-pane off, kill the tmux session
    NOTIFY = "notify"  # run the notifier for this decision's events (policy.notify_on)


@dataclass(frozen=True)
class TaskState:
    """What the policy remembers about a task between checks (all times epoch seconds).

    Attributes:
        status: a :data:`supervisor.taskdir.Status`.
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
    """

    status: str
    started_at: float | None = None
    launched_at: float | None = None
    retry_count: int = 0
    stale_since: float | None = None
    gone_since: float | None = None
    resume_at: float | None = None
    abandon_reason: str | None = None
    exit_code: int | None = None
    lost_session: bool = False


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


TERMINAL = frozenset({"completed", "failed", "abandoned"})


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
        new = replace(state, status="abandoned", abandon_reason="stopped")
        return Decision(
            state=new,
            actions=(Action.FINISH,),
            events=("abandoned",),
            reason="stopped by the operator before it started",
        )
    if state.status in TERMINAL or state.status == "queued":
        return Decision(state=state, next_check=policy.base_interval, reason="nothing to do")

    # Layer 1: the done-file always wins.
    if signals.done:
        code = signals.exit_code if signals.exit_code is not None else -1
        status = "completed" if code == 0 else "failed"
        new = replace(
            state, status=status, exit_code=code, stale_since=None, gone_since=None, resume_at=None
        )
        return Decision(
            state=new,
            actions=(Action.FINISH, Action.CLEANUP, Action.NOTIFY),
            events=(status,),
            reason=f"done-file with exit code {code}",
        )

    # Deadline, counted from the first launch; then the operator's requests.
    if state.started_at is not None and now - state.started_at >= policy.deadline:
        return _abandon(state, "deadline", f"deadline of {policy.deadline:g} s passed")
    if signals.stop_requested:
        return _abandon(state, "stopped", "stopped by the operator (supervise stop)")
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

    # Layer 3: output staleness, with a grace period.
    last_output = max(signals.output_mtime or launched, launched)
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


def _resume(
    state: TaskState, now: float, policy: MonitorPolicy, stop_first: bool, by: str
) -> Decision:
    """Back to ``running`` with one more retry; the engine relaunches ``resume_command``."""
    new = dataclasses.replace(
        state,
        status="running",
        retry_count=state.retry_count + 1,
        launched_at=now,
        stale_since=None,
        gone_since=None,
        resume_at=None,
    )
    return Decision(
        state=new,
        actions=(Action.STOP_AGENT, Action.RESUME) if stop_first else (Action.RESUME,),
        events=("resumed",),
        next_check=_bounded(first_check(policy), new, now, policy),
        reason=f"resume number {new.retry_count}, asked by {by}",
    )


def _abandon(state: TaskState, reason: str, why: str) -> Decision:
    new = dataclasses.replace(
        state, status="abandoned", abandon_reason=reason, resume_at=None, stale_since=None
    )
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
