"""The one definition of the event names a task's ``events.jsonl`` holds, and its readers.

Every line of ``events.jsonl`` is ``{"ts", "event", **fields}``
(:meth:`supervisor.taskdir.folder.TaskDir.append_event`); its ``event`` is a member of
:class:`Event`. Every module that writes or reads an event names it from here. The members
are :class:`enum.StrEnum`, so a member equals its string (``Event.LAUNCHED == "launched"``)
and is written to JSON as it: logs written before this enum existed read the same.

The readers take the parsed events (oldest first, as :meth:`TaskDir.events` returns them)
and do no I/O, so the policy uses them too (:mod:`supervisor.policy` stays pure).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from supervisor.taskdir.states import TERMINAL, Status


class Event(StrEnum):
    """An event name of ``events.jsonl``.

    The status events (``queued`` ... ``superseded``) record the decision that put the task
    in that status, written ahead of the manifest. The others record what the engine, the
    agent adapter, a workspace step or an operator's request did; the ``*_REQUESTED``
    members are :meth:`requested` of a control verb (:mod:`supervisor.taskdir.control`).
    """

    # the task's statuses, each recorded when the policy decides it
    QUEUED = Status.QUEUED.value
    BLOCKED = Status.BLOCKED.value
    RUNNING = Status.RUNNING.value
    CRASHED = Status.CRASHED.value
    HUNG = Status.HUNG.value
    WAITING = Status.WAITING.value
    ESCALATED = Status.ESCALATED.value
    VERIFYING = Status.VERIFYING.value
    COMPLETED = Status.COMPLETED.value
    FAILED = Status.FAILED.value
    ABANDONED = Status.ABANDONED.value
    SUPERSEDED = Status.SUPERSEDED.value
    # the policy's other decisions
    LAUNCHED = "launched"
    RESUMED = "resumed"
    CONTINUED = "continued"
    STALE = "stale"
    FRESH = "fresh"
    APPROVED = "approved"
    DENIED = "denied"
    FOLLOWED_UP = "followed_up"
    UNBLOCKED = "unblocked"  # a blocked task's predecessors ended as required: queued
    # the engine's records
    ADOPTED = "adopted"
    RESUME_REDONE = "resume_redone"
    MANIFEST_REPAIRED = "manifest_repaired"
    ACCEPTANCE = "acceptance"
    PROCESSES_ENDED = "processes_ended"
    AGENT_SIGNALLED = "agent_signalled"
    AGENT_STOPPED = "agent_stopped"
    NOTIFYING = "notifying"
    NOTIFIED = "notified"
    #: the profile's daily cap was reached (issue 26): the notifier's event of the day,
    #: and the line of ``state_dir/daily-budget.json`` (:mod:`supervisor.engine.dailyspend`)
    DAILY_BUDGET = "daily_budget"
    CONTINUE_REFUSED = "continue_refused"
    # an operator's or the fleet's requests (``<verb>_requested``)
    STOP_REQUESTED = "stop_requested"
    RESUME_REQUESTED = "resume_requested"
    APPROVE_REQUESTED = "approve_requested"
    DENY_REQUESTED = "deny_requested"
    SUPERSEDE_REQUESTED = "supersede_requested"
    DISCARD_REQUESTED = "discard_requested"
    CONTINUE_REQUESTED = "continue_requested"
    # the agent adapter's records
    HOOK = "hook"
    PERMISSION = "permission"
    # the task's workspace
    WORKSPACE_PREPARING = "workspace_preparing"
    WORKSPACE_READY = "workspace_ready"
    WORKSPACE_IN_PLACE = "workspace_in_place"
    WORKSPACE_FAILED = "workspace_failed"
    WORKSPACE_FINISHED = "workspace_finished"
    SHARED_WORKSPACE = "shared_workspace"
    MERGED = "merged"
    DISCARDED = "discarded"
    PRUNED = "pruned"

    @classmethod
    def requested(cls, verb: str) -> Event:
        """The event recording a control request ``verb`` (``stop`` -> ``stop_requested``).

        Raises:
            ValueError: ``verb`` is not a control verb (no such member).
        """
        return cls(f"{verb}_requested")


#: Events that record why ``supervise`` stopped or left an agent before it acts on it.
INTENTS: frozenset[Event] = frozenset({Event.CRASHED, Event.HUNG, Event.WAITING})
#: The events that start a run of the agent (the first launch and every resume).
RUNS: frozenset[Event] = frozenset({Event.LAUNCHED, Event.RESUMED})
#: The events fsynced when appended (:meth:`supervisor.taskdir.folder.TaskDir.append_event`):
#: the log is the write-ahead record of every state change, so each event that sets or ends
#: a status (every status event; ``launched``/``resumed`` start a run, ``continued`` and
#: ``followed_up`` go on in one, ``approved``/``denied`` end an escalation), each operator's
#: or the fleet's request (its control file is gone once it is recorded) and ``notifying``
#: (a notification delivered at least once) is on the disk before the manifest that shows
#: it is written, and before any action it decides. The manifest is then written without
#: an fsync (:func:`supervisor.taskdir.repair.restorable`): a power cut can lose or empty
#: it, and :func:`supervisor.taskdir.repair.rebuild` or adoption gets it back from here.
#: The other events (hooks, adoption notes, workspace steps) are records a power cut may
#: lose without changing what the task is.
DURABLE: frozenset[str] = frozenset(
    {
        *Status,
        Event.LAUNCHED,
        Event.RESUMED,
        Event.CONTINUED,
        Event.FOLLOWED_UP,
        Event.UNBLOCKED,
        Event.APPROVED,
        Event.DENIED,
        Event.NOTIFYING,
        Event.STOP_REQUESTED,
        Event.RESUME_REQUESTED,
        Event.APPROVE_REQUESTED,
        Event.DENY_REQUESTED,
        Event.SUPERSEDE_REQUESTED,
        Event.CONTINUE_REQUESTED,
    }
)
#: The events that may be the log's last word (:func:`last_word`).
LAST_WORDS: frozenset[str] = frozenset(
    {*TERMINAL, *INTENTS, Event.RESUMED, Event.RESUME_REDONE, Event.CONTINUED}
)
#: A resume decided (``resumed``) or performed again after a crash cut it short
#: (``resume_redone``): the run in progress started at the latest of them.
RESUMES: frozenset[str] = frozenset({Event.RESUMED, Event.RESUME_REDONE})


def last_of(events: Iterable[dict[str, Any]], names: Iterable[str]) -> dict[str, Any] | None:
    """The last event of ``events`` (oldest first) whose name is in ``names``, or ``None``."""
    wanted = frozenset(names)
    found = None
    for event in events:
        if event.get("event") in wanted:
            found = event
    return found


def last_terminal(events: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The log's final word: the last terminal event (a status in
    :data:`supervisor.taskdir.states.TERMINAL`), if any. The log is written ahead of the
    manifest, so this ending is final even where the manifest does not show it yet."""
    return last_of(events, TERMINAL)


def last_word(events: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The event log's last decision that the manifest may not show yet (the log is
    written ahead): the last terminal event, intent (:data:`INTENTS`), resume
    (:data:`RESUMES`) or ``continued`` (the agent went on by itself during a wait)."""
    return last_of(events, LAST_WORDS)


def first_of(events: Iterable[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The first event of ``events`` named ``name``, or ``None``."""
    return next((e for e in events if e.get("event") == name), None)


def named(events: Iterable[dict[str, Any]], *names: str) -> list[dict[str, Any]]:
    """The events of ``events`` named one of ``names``, in their order."""
    return [e for e in events if e.get("event") in names]
