"""One check: :func:`decide`, in named steps taken in the order of the state table.

Each step answers a :class:`Decision` when its rows apply, else ``None`` and the next step
looks. The order is the rule (seed 000, "Pitfall 1"): the done-file first, then the
deadline and the operator, then the backoff of a failed run, the agent's own facts, and
only then liveness and output staleness. Rows are in the docstring of
:mod:`supervisor.policy`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from supervisor.config import MonitorPolicy
from supervisor.policy.attempts import discard
from supervisor.policy.budget import within_budget
from supervisor.policy.model import (
    EXIT_SETTLE,
    MIN_CHECK,
    STALE_SLACK,
    START_TIMEOUT,
    TERMINAL,
    Action,
    Decision,
    Signals,
    TaskState,
    bounded,
    with_notify,
)
from supervisor.policy.outcomes import (
    abandon,
    answered,
    fail_over,
    hold_disk_full,
    resume,
    supersede,
    verifying,
    wait_limit,
    wait_transient,
    waiting,
)
from supervisor.policy.tools import tool_in_flight
from supervisor.policy.turns import continued, failed_turn, keeps_agent, on_failed_turn
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import TRANSIENT, AbandonReason, FailureReason, Status, Verdict

Step = Callable[[TaskState, Signals, MonitorPolicy], Decision | None]


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
    decision = within_budget(state, signals, policy, _decide(state, signals, policy))
    return with_notify(with_rulings(state, signals, decision), policy)


#: Decisions after which a waiting permission request can no longer be answered now.
_ENDS_THE_RUN = frozenset({Action.STOP_AGENT, Action.RESUME, Action.FINISH, Action.CLEANUP})


def with_rulings(state: TaskState, signals: Signals, decision: Decision) -> Decision:
    """``decision`` with :attr:`Action.RULE_REQUESTS` first when the agent waits on
    permission requests and their rulings are to be carried out: the task was ``running``
    and stays ``running`` (or one of the requests escalates it), and the decision neither
    ends nor stops the run. Otherwise the requests stay where they are, for a later check
    (a stop, a limit, a hold while the state filesystem is full)."""
    if not signals.requests or state.status != Status.RUNNING or signals.state_disk_full:
        return decision
    if decision.state.status not in (Status.RUNNING, Status.ESCALATED):
        return decision
    if _ENDS_THE_RUN.intersection(decision.actions):
        return decision
    return dataclasses.replace(decision, actions=(Action.RULE_REQUESTS, *decision.actions))


def _decide(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    ending = signals.superseded or signals.discarded
    if state.status in TERMINAL or (state.status == Status.QUEUED and not ending):
        return _not_live(state, signals, policy)
    if signals.state_disk_full:
        return hold_disk_full(state, policy)
    if signals.superseded:  # before the done-file: the task is no longer this host's
        return supersede(state)
    if signals.discarded:  # before the done-file: another attempt of its group won
        return discard(state)
    if state.status == Status.VERIFYING:
        return verifying(state, signals, policy)
    if state.status == Status.WAITING:
        return continued(state, signals, policy) or waiting(state, signals, policy)
    steps: tuple[Step, ...] = (_layer_done, _operator, _recovering, _agent_facts, _liveness)
    for step in steps:
        decision = step(state, signals, policy)
        if decision is not None:
            return decision
    if state.gone_since is not None:  # the agent is back (or was never gone for long)
        state = dataclasses.replace(state, gone_since=None)
    if state.status == Status.ESCALATED:
        return Decision(
            state=state,
            next_check=bounded(policy.base_interval, state, signals.now, policy),
            reason=f"escalated, waiting for a human: {state.escalation}",
        )
    return tool_in_flight(state, signals, policy) or _staleness(state, signals, policy)


def _not_live(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    """A queued or terminal task: nothing happens, except that a queued task can be
    stopped before it starts."""
    if state.status == Status.QUEUED and signals.stop_requested:
        new = dataclasses.replace(
            state,
            status=Status.ABANDONED,
            abandon_reason=AbandonReason.STOPPED,
            verdict=Verdict.ABANDONED,
        )
        return Decision(
            state=new,
            actions=(Action.FINISH,),
            events=(Event.ABANDONED,),
            reason="stopped by the operator before it started",
        )
    return Decision(state=state, next_check=policy.base_interval, reason="nothing to do")


def _ended_on_transient(state: TaskState, signals: Signals) -> bool:
    """The run ended with an error the agent classed transient (API or network): a wait."""
    code = signals.exit_code if signals.exit_code is not None else -1
    return code != 0 and signals.failure == TRANSIENT and state.status == Status.RUNNING


def _layer_done(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision | None:
    """Layer 1: the done-file always wins. A run that ended on a usage limit or a
    transient failure is not an end: it waits (:func:`_agent_facts`), after the deadline
    and the operator have had their say. Once a task is hung we stopped its agent, and a
    done-file is the agent's answer to that stop (the real CLI exits 143 on SIGTERM),
    whatever its code: the recorded intent (resume) wins."""
    code = signals.exit_code if signals.exit_code is not None else -1
    # A turn that failed in the TUI ended the run even when /exit then exits 0 (issue 21).
    turn_failed = failed_turn(signals) or (signals.turn_failure is not None and signals.limit)
    limited_end = (code != 0 or turn_failed) and signals.limit and state.status == Status.RUNNING
    if not signals.done or state.status == Status.HUNG or limited_end:
        return None
    if _ended_on_transient(state, signals):
        return None
    if turn_failed and state.status == Status.RUNNING:
        # transient: a wait (_agent_facts); permanent: failed with its reason, now
        return None if signals.failure == TRANSIENT else on_failed_turn(state, signals, policy)
    if code == 0 and signals.has_acceptance:
        new = dataclasses.replace(
            state,
            status=Status.VERIFYING,
            exit_code=0,
            stale_since=None,
            gone_since=None,
            resume_at=None,
            escalation=None,
            paused=False,
        )
        return Decision(
            state=new,
            actions=(Action.CLEANUP, Action.ACCEPT),
            events=(Event.VERIFYING,),
            next_check=policy.base_interval,
            reason="done-file with exit code 0; running the acceptance check",
        )
    status = Status.COMPLETED if code == 0 else Status.FAILED
    failure = None if code == 0 else (signals.failure or FailureReason.EXIT_CODE)
    new = dataclasses.replace(
        state,
        status=status,
        exit_code=code,
        stale_since=None,
        gone_since=None,
        resume_at=None,
        escalation=None,
        paused=False,
        verdict=Verdict.PASS if code == 0 else Verdict.FAIL,
        failure_reason=failure,
    )
    named = failure is not None and failure != FailureReason.EXIT_CODE
    why = f"done-file with exit code {code}" + (f"; failure reason: {failure}" if named else "")
    if (
        failure == FailureReason.LAUNCH and signals.launch_error
    ):  # the cause, not only output_tail's
        why += f" ({signals.launch_error})"
    return Decision(
        state=new,
        actions=(Action.FINISH, Action.CLEANUP, Action.NOTIFY),
        events=(status,),
        reason=why,
    )


def _operator(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision | None:
    """The deadline (counted from the first launch), then the operator's requests: stop,
    an answer to an escalation (approve/deny), resume."""
    now = signals.now
    if state.started_at is not None and now - state.started_at >= policy.deadline:
        return abandon(state, AbandonReason.DEADLINE, f"deadline of {policy.deadline:g} s passed")
    if signals.stop_requested:
        return abandon(state, AbandonReason.STOPPED, "stopped by the operator (supervise stop)")
    if state.status == Status.ESCALATED and (signals.approve_requested or signals.deny_requested):
        return answered(state, signals, now, policy)
    if signals.resume_requested:
        return resume(state, now, policy, stop_first=True, by="the operator (supervise resume)")
    return None


def _recovering(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision | None:
    """A crashed or hung task waits out its backoff, then resumes (or is abandoned when
    ``max_retries`` was lowered below its retries, e.g. on a restart)."""
    if state.status not in (Status.CRASHED, Status.HUNG):
        return None
    now = signals.now
    if state.retry_count >= policy.max_retries:
        reason = AbandonReason.TMUX_LOST if state.lost_session else AbandonReason.MAX_RETRIES
        return abandon(state, reason, f"{state.retry_count} resumes already")
    if state.resume_at is not None and now < state.resume_at:
        return Decision(
            state=state,
            next_check=bounded(state.resume_at - now, state, now, policy),
            reason=f"waiting {state.resume_at - now:.2f} s of backoff before resuming",
        )
    return resume(state, now, policy, stop_first=False, by="the backoff")


def _agent_facts(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision | None:
    """What the agent itself told us: a usage limit, a transient failure that ended the
    run, an escalation (a permission request, the circuit breaker), an ended turn."""
    now = signals.now
    if state.status == Status.RUNNING and signals.limit:
        return wait_limit(state, signals, policy, keep=keeps_agent(signals))
    if _ended_on_transient(state, signals) and signals.done:
        return wait_transient(state, signals, policy)
    failed = on_failed_turn(state, signals, policy)
    if failed is not None:
        return failed
    if state.status == Status.RUNNING and signals.escalate:
        new = dataclasses.replace(
            state,
            status=Status.ESCALATED,
            escalation=signals.escalate,
            paused=signals.escalate_pause,
            stale_since=None,
        )
        return Decision(
            state=new,
            actions=(Action.PAUSE_AGENT, Action.NOTIFY) if new.paused else (Action.NOTIFY,),
            events=(Event.ESCALATED,),
            next_check=bounded(policy.base_interval, new, now, policy),
            reason=f"needs a human: {signals.escalate}",
        )
    if state.status == Status.RUNNING and signals.turn_ended and signals.agent_alive:
        return Decision(
            state=state,
            actions=(Action.END_SESSION,),
            next_check=bounded(min(policy.base_interval, 1.0), state, now, policy),
            reason="the interactive agent finished its turn; asking it to exit",
        )
    return None


def _launched_at(state: TaskState, now: float) -> float:
    """The latest launch or resume (epoch s); ``now`` when none is known."""
    return state.launched_at if state.launched_at is not None else now


def _liveness(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision | None:
    """Layer 2: the agent is gone (its PID dead or a zombie; or no ``pid`` file while its
    session is gone or after :data:`START_TIMEOUT`) and no done-file came: a crash, at
    once when the wrapper recorded an end that never gets a done-file (a signal death, a
    resume exit code), else after :data:`EXIT_SETTLE` seconds."""
    now = signals.now
    agent_gone = signals.agent_alive is False or (
        signals.agent_alive is None
        and (signals.session_alive is False or now - _launched_at(state, now) >= START_TIMEOUT)
    )
    if not agent_gone:
        return None
    lost = signals.session_alive is False
    if signals.signal is not None or (
        signals.exit_code is not None and signals.exit_code in policy.resume_exit_codes
    ):
        # Nothing more is coming, so no settle time is needed.
        if lost:
            why = "tmux session lost"
        elif signals.signal is not None:
            why = f"agent killed by signal {signals.signal}"
        else:
            why = f"agent exited with resume exit code {signals.exit_code}"
        return fail_over(
            dataclasses.replace(state, lost_session=lost), Status.CRASHED, now, policy, why
        )
    if state.gone_since is None:
        new = dataclasses.replace(state, gone_since=now)
        return Decision(
            state=new,
            next_check=bounded(EXIT_SETTLE, new, now, policy),
            reason="agent gone; waiting for the done-file to settle",
        )
    if now - state.gone_since >= EXIT_SETTLE:
        why = "tmux session lost" if lost else "agent gone without a done-file"
        return fail_over(
            dataclasses.replace(state, lost_session=lost), Status.CRASHED, now, policy, why
        )
    return Decision(
        state=state,
        next_check=bounded(state.gone_since + EXIT_SETTLE - now, state, now, policy),
        reason="agent gone; still settling",
    )


def _staleness(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision:
    """Layer 3: output older than ``stale_threshold`` starts a grace period (the first
    stale check never acts); still stale after ``grace_period``: a hang. Fresh output
    cancels the grace period. Output age never counts from before the latest launch or
    the latest answered escalation."""
    now = signals.now
    launched = _launched_at(state, now)
    last_output = max(signals.output_mtime or launched, launched, state.active_since or launched)
    age = now - last_output
    if age > policy.stale_after:
        if state.stale_since is None:
            new = dataclasses.replace(state, stale_since=now)
            return Decision(
                state=new,
                events=(Event.STALE,),
                next_check=bounded(
                    min(policy.base_interval, max(policy.grace_period, MIN_CHECK)), new, now, policy
                ),
                reason=f"output stale for {age:.1f} s; grace period of {policy.grace_period:g} s",
            )
        if now - state.stale_since >= policy.grace_period:
            state = dataclasses.replace(state, lost_session=False)
            return fail_over(
                state,
                Status.HUNG,
                now,
                policy,
                f"output stale for {age:.1f} s, through the {policy.grace_period:g} s grace "
                f"period (stale after {policy.stale_after:g} s)",
            )
        remaining = state.stale_since + policy.grace_period - now
        return Decision(
            state=state,
            next_check=bounded(min(policy.base_interval, remaining), state, now, policy),
            reason=f"output stale; {remaining:.1f} s of grace left",
        )
    events: tuple[str, ...] = ()
    if state.stale_since is not None:
        state = dataclasses.replace(state, stale_since=None)
        events = (Event.FRESH,)
    # Look again no later than the moment the output would turn stale, so a hang is acted
    # on within stale_threshold + grace_period (+ scheduling slack), whatever base_interval.
    until_stale = last_output + policy.stale_after - now + STALE_SLACK
    return Decision(
        state=state,
        events=events,
        next_check=bounded(min(policy.base_interval, until_stale), state, now, policy),
        reason="healthy",
    )
