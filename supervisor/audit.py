"""Who ruled on a permission request: the ``by`` of every ``permission`` line of a task's
``events.jsonl`` (issue 21, Build 3), and the model its JSON Schema is generated from
(``schemas/permission-event.schema.json``, :mod:`supervisor.schemas`).

``by`` names who ruled, never ``operator`` unless a person asked (``supervise approve|deny``,
or their buttons in ``supervise top`` and ``supervise serve``). A deadline, an operator's
``supervise stop`` or a spent budget that ends an escalated task frees the request's
waiting hook with a denial: ``by`` then names that cause.

Pure: no I/O (the standard library and pydantic only).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from supervisor.taskdir.states import AbandonReason, Status


class By(StrEnum):
    """Who ruled on one permission request (the ``by`` of a ``permission`` event)."""

    OPERATOR = "operator"
    """A person: ``supervise approve|deny`` (or the same action in ``top`` / ``serve``)."""
    RULE = "rule"
    """An ``[[approval.rules]]`` entry; the event's ``rule`` gives its 1-based number."""
    DEFAULT = "default"
    """No rule matched: denied with ``[approval] default_message``."""
    BREAKER = "circuit_breaker"
    """``max_denials`` consecutive denials or failed tool calls: escalated to a human."""
    CLASSIFIER = "classifier"
    """Claude Code itself denied the call (its auto-mode classifier; ``PermissionDenied``
    hook, CLI 2.1.89+); supervise only records it."""
    DEADLINE = "deadline"
    """The task's deadline ended it while the request waited for a human."""
    STOP = "stop"
    """``supervise stop`` ended the task while the request waited (nobody ruled on it)."""
    BUDGET = "budget"
    """``max_cost_usd`` was spent while the request waited."""
    SUPERSEDED = "superseded"
    """The fleet gave the task to a newer generation while the request waited."""
    ENGINE = "engine"
    """The engine itself: a dialog it could not read whole (escalated), or a waiting hook
    freed when the task ended for any other reason."""


#: ``abandon_reason`` of an escalated task's ending -> who denied its waiting request.
_ENDINGS: dict[str, By] = {
    AbandonReason.DEADLINE: By.DEADLINE,
    AbandonReason.STOPPED: By.STOP,
    AbandonReason.DENIED: By.OPERATOR,  # a person denied the paused escalation
    AbandonReason.BUDGET: By.BUDGET,
}


def ended_by(status: str, abandon_reason: str | None) -> By:
    """Who denied the request an escalated task still held when it ended with ``status``
    (``abandon_reason`` when ``abandoned``); :attr:`By.ENGINE` for any other ending."""
    if status == Status.SUPERSEDED:
        return By.SUPERSEDED
    return _ENDINGS.get(abandon_reason or "", By.ENGINE)


class PermissionEvent(BaseModel):
    """One ``permission`` line of ``events.jsonl``: a ruling on a permission request.

    Attributes:
        event: always ``permission``.
        ts: when it was written (ISO-8601 UTC).
        tool: the tool asked for (``Bash``, ``Write``, ...; empty when a screen hid it).
        subject: what the tool acts on (the Bash command, the file path), at most 500
            characters.
        decision: ``approve``, ``deny`` or ``escalate``.
        by: who ruled (:class:`By`).
        rule: the deciding rule's 1-based number, or ``None``.
        detail: the ruling in words (``rule 2 (Bash ~ /^ls/)``, the breaker's count,
            the classifier's reason), when there is more to say.
        source: ``screen`` when the request was a dialog read from the TUI.
    """

    model_config = ConfigDict(extra="allow")

    event: str = Field(default="permission", pattern="^permission$")
    ts: str | None = None
    tool: str | None = None
    subject: str | None = None
    decision: str = Field(pattern="^(approve|deny|escalate)$")
    by: By
    rule: int | None = None
    detail: str | None = None
    source: str | None = None
