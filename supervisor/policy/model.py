"""The policy's data: what it remembers (:class:`TaskState`), what it is shown
(:class:`Signals`), what it answers (:class:`Decision`, :class:`Action`), and the timing
rules every transition shares (backoff, first check, the deadline bound).

No I/O; the state table is in :mod:`supervisor.policy`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from supervisor.config import MonitorPolicy
from supervisor.taskdir.states import TERMINAL as TERMINAL  # re-exported by supervisor.policy
from supervisor.taskdir.states import Status, Verdict

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
    RULE_REQUESTS = "rule_requests"  # carry out the rulings on waiting permission requests


@dataclass(frozen=True)
class TaskState:
    """What the policy remembers about a task between checks (all times epoch seconds).

    Attributes:
        status: a :class:`supervisor.taskdir.states.Status`.
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
        failure_reason: set with status ``failed``: a
            :class:`supervisor.taskdir.states.FailureReason`.
        agent_kept: the current wait left the agent running: an interactive CLI whose
            turn ended on a usage limit idles at its prompt and may continue by itself once
            the limit resets (Claude Code 2.1.234+); the end of the wait stops it first.
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
    agent_kept: bool = False


@dataclass(frozen=True)
class Signals:
    """Facts observed by the engine for one check.

    Attributes:
        now: epoch seconds of the observation.
        done: the done-file exists.
        exit_code: content of ``exit_code``, if written.
        agent_alive: ``True``/``False`` from the PID check (zombie = dead, PID reuse guarded
            with create_time); ``None`` when no ``pid`` file exists yet.
        output_mtime: when the agent last showed progress (epoch s, as the engine saw it
            change): ``output.log``'s mtime, or the adapter's own signal (headless Claude
            Code: ``stream.jsonl``'s progress, pings excepted; the TUI: its screen's
            evidence of work); ``None`` when absent.
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
            :mod:`supervisor.engine.statefs`): run files may be missing or stale for want of space.
        requests: permission requests the agent waits on, each with the ruling the task's
            rules give it (:func:`supervisor.policy.approval.decide`); one that escalates is also
            in ``escalate``.
        spent_usd: what the task has spent so far in USD as the agent reports it (Claude
            Code's ``total_cost_usd`` summed over the task's runs); ``None``: not reported.
        superseded: the fleet's database gives this cluster task to a newer generation
            (or another host): this host's copy must stop and never resume (issue 15).
        discarded: another attempt of the task's group won (issue 26): it ends
            ``abandoned`` with reason ``discarded`` (:func:`supervisor.policy.attempts.discard`).
        turn_failure: an interactive agent's turn ended on an API failure that its process
            outlives (Claude Code's ``StopFailure`` hook; the TUI stays at its prompt,
            measured with CLI 2.1.328): the hook's error (``authentication_failed``,
            ``server_error``, ``rate_limit``, ...). ``failure`` (or ``limit``) holds its
            class. The run is over though the agent lives on (issue 21).
        agent_working: the agent showed new evidence of work at this check (a hook such as
            ``UserPromptSubmit``, ``PreToolUse``, ``PostToolUse``): used to see an
            interactive CLI continue by itself after a usage limit reset (issue 21).
        tool_since: when the agent's oldest tool call in flight started (epoch s; Claude
            Code's ``PreToolUse`` without its ``PostToolUse``, or a stream ``tool_use``
            without its ``tool_result``); ``None`` when no tool runs (issue 21).
        tool_name: that call's tool (``Bash``, ...), for the log.
        launch_error: why the agent could not be started, in the wrapper's words (its
            ``launch_error`` file: an exec's errno, e.g. a prompt too long for argv, E2BIG;
            issue 21), for the decision's reason and so the manifest's summary; ``None``
            when the agent started.
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
    requests: int = 0
    spent_usd: float | None = None
    superseded: bool = False
    discarded: bool = False
    turn_failure: str | None = None
    agent_working: bool = False
    tool_since: float | None = None
    tool_name: str | None = None
    launch_error: str | None = None


@dataclass(frozen=True)
class Decision:
    """The policy's answer.

    Attributes:
        state: the next state.
        actions: what the engine must do, in order.
        events: transition names to append to ``events.jsonl`` (may be empty).
        next_check: seconds until the next check (never past the deadline).
        reason: one human-readable line explaining the decision.
        quiet: events of ``events`` that are logged but never notified (a repeated wait).
    """

    state: TaskState
    actions: tuple[Action, ...] = ()
    events: tuple[str, ...] = ()
    next_check: float = 1.0
    reason: str = ""
    quiet: tuple[str, ...] = ()

    def notified(self, notify_on: list[str]) -> list[str]:
        """The events of this decision that run the notifier under ``notify_on``."""
        return [e for e in self.events if e in notify_on and e not in self.quiet]


#: Verdicts (seed 003), one per terminal state: the values of
#: :class:`supervisor.taskdir.states.Verdict`.
VERDICTS = tuple(Verdict)


def first_check(policy: MonitorPolicy) -> float:
    """Seconds from a launch or resume to the first check: never later than the moment a
    silent agent's output would turn stale (a hang at start is caught in time too)."""
    return min(policy.base_interval, policy.stale_after + STALE_SLACK)


def backoff(retry_count: int, policy: MonitorPolicy) -> float:
    """Seconds to wait before the next resume: ``min(base * 2**retry_count, max)``."""
    exponent = min(retry_count, 62)  # 2**62 s is past any deadline; avoids float overflow
    return min(policy.base_interval * (2.0**exponent), policy.max_interval)


def bounded(delay: float, state: TaskState, now: float, policy: MonitorPolicy) -> float:
    """``delay`` (seconds) clipped so the next check never falls after the deadline, and
    never below :data:`MIN_CHECK`."""
    if state.started_at is not None:
        delay = min(delay, state.started_at + policy.deadline - now)
    return max(MIN_CHECK, delay)


def with_notify(decision: Decision, policy: MonitorPolicy) -> Decision:
    """``decision`` with :attr:`Action.NOTIFY` last in its actions exactly when one of its
    events is in ``policy.notify_on`` and not ``quiet`` (and nowhere else)."""
    actions = tuple(a for a in decision.actions if a is not Action.NOTIFY)
    if decision.notified(policy.notify_on):
        actions += (Action.NOTIFY,)
    if actions != decision.actions:
        decision = dataclasses.replace(decision, actions=actions)
    return decision
