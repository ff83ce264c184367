"""Interactive turns that end on an API failure while the agent lives on, and a CLI that
continues by itself during a usage-limit wait (issue 21).

Claude Code's TUI reports an API failure that ends its turn through the ``StopFailure``
hook, then stays at its prompt with its process alive (CLI 2.1.328, measured; see
``../shared/notes/real-world-facts.md``): no done-file comes, and output staleness alone
would judge it hung and spend retries. The hook (``Signals.turn_failure``, classed in
``Signals.failure`` with the classes of :mod:`~supervisor.taskdir.states`) is acted on at once, as
the stream's final ``result`` is in headless mode:

* ``transient``: ``waiting`` with a backoff, the agent stopped, then a resume of the same
  session by id; never a retry (:func:`supervisor.policy.outcomes.wait_transient`);
* a permanent class: ``failed`` with that ``failure_reason``, the agent stopped
  (:func:`fail_turn`);
* a usage limit: the limit wait that exists (:func:`supervisor.policy.outcomes.wait_limit`),
  which keeps this agent (``TaskState.agent_kept``): Claude Code 2.1.234+ may continue by
  itself once the limit resets.

While a wait keeps the agent, new evidence of work (``Signals.agent_working``: a hook such
as ``UserPromptSubmit`` or ``PreToolUse``) means the CLI continued by itself: back to
``running`` (event ``continued``, :func:`continued`) and no second continue is sent.

A run whose turn failed is never ``completed``, even when its wrapper then records exit
code 0 (``/exit`` typed into the TUI exits 0): :func:`failed_turn` is true for it.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses

from supervisor.config import MonitorPolicy
from supervisor.policy.model import Action, Decision, Signals, TaskState, bounded, first_check
from supervisor.policy.outcomes import wait_transient
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import TRANSIENT, Status, Verdict

#: The event of a waiting task whose agent continued by itself (no resume was sent).
CONTINUED = Event.CONTINUED


def failed_turn(signals: Signals) -> bool:
    """The agent's current turn ended on an API failure it reported in a hook
    (``turn_failure``) and the failure is classed: the run is over, whatever exit code
    follows."""
    return signals.turn_failure is not None and signals.failure is not None


def on_failed_turn(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision | None:
    """A ``running`` task whose interactive turn ended on a classed API failure: a
    transient class waits (the agent stopped, unless it already ended), a permanent one
    ends ``failed`` (:func:`fail_turn`); ``None`` otherwise."""
    if state.status != Status.RUNNING or not failed_turn(signals):
        return None
    why = f"the agent's turn ended on an API failure ({signals.turn_failure}: {signals.failure})"
    if signals.failure == TRANSIENT:
        return wait_transient(state, signals, policy, stop=not signals.done, why=why)
    return fail_turn(state, signals, why)


def fail_turn(state: TaskState, signals: Signals, why: str) -> Decision:
    """End the task ``failed`` (verdict ``FAIL``) with ``failure_reason`` =
    ``signals.failure``: stop the agent (its TUI would idle at its prompt), finish, clean
    up, notify. ``exit_code`` is the wrapper's when the agent already ended, else unknown."""
    new = dataclasses.replace(
        state,
        status=Status.FAILED,
        exit_code=signals.exit_code if signals.done else None,
        stale_since=None,
        gone_since=None,
        resume_at=None,
        escalation=None,
        paused=False,
        verdict=Verdict.FAIL,
        failure_reason=signals.failure,
        agent_kept=False,
    )
    return Decision(
        state=new,
        actions=(Action.STOP_AGENT, Action.FINISH, Action.CLEANUP, Action.NOTIFY),
        events=(Event.FAILED,),
        reason=f"{why}; failure reason: {signals.failure}",
    )


def keeps_agent(signals: Signals) -> bool:
    """A usage limit reported by an interactive turn whose agent lives on: the wait keeps
    it, since the CLI may continue by itself at the reset (Claude Code 2.1.234+)."""
    return signals.turn_failure is not None and signals.agent_alive is True and not signals.done


def continued(state: TaskState, signals: Signals, policy: MonitorPolicy) -> Decision | None:
    """A wait that kept the agent sees it work again (it continued by itself after the
    limit reset): ``running`` in the same run, no resume, no retry; output age counts
    from now. ``None`` when that is not the case."""
    if state.status != Status.WAITING or not state.agent_kept:
        return None
    if signals.agent_alive is not True or not signals.agent_working:
        return None
    now = signals.now
    new = dataclasses.replace(
        state,
        status=Status.RUNNING,
        resume_at=None,
        agent_kept=False,
        active_since=now,
        stale_since=None,
        gone_since=None,
    )
    return Decision(
        state=new,
        events=(CONTINUED,),
        next_check=bounded(first_check(policy), new, now, policy),
        reason="the agent continued by itself after the usage limit; no continue sent",
    )
