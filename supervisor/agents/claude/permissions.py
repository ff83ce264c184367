"""Permission requests of a Claude Code agent: rulings proposed at a check, carried out
only when the policy says so.

A check (:meth:`ClaudeAdapter.observe`) reads each waiting request, from a
``PermissionRequest`` hook or, for a TUI without hooks, a dialog seen on screen twice, and
asks the task's rules (:func:`supervisor.policy.approval.decide`, pure) for a :class:`Proposal`.
Nothing is answered, logged or moved then. The policy sees how many requests wait
(``Signals.requests``) and whether one escalates (``Signals.escalate``); while the task is
``running`` its decision carries ``Action.RULE_REQUESTS``, and the engine then calls
:meth:`ClaudeAdapter.rule`, which performs each proposal with :func:`perform`: the
``permission`` audit event naming the deciding rule, then the answer (the hook's answer
file, or the dialog's keys) or, for an escalation, the record a human answers with
``supervise approve|deny``. A request that is not carried out stays in the task folder and
is proposed again at the next check (a stop, a limit or a full disk leaves it for later).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.agents import Keys
from supervisor.agents.claude import hooks, screen
from supervisor.audit import By
from supervisor.policy import approval
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TaskDir, utc_iso

#: The audit subject kept per request, in characters.
SUBJECT_CHARS = 500
#: What the agent is told when a waiting request is denied, by who denied it.
_DENIED_BY: dict[str, str] = {
    By.OPERATOR: "denied by the operator (supervise deny)",
    By.DEADLINE: "denied: the task's deadline passed while this request waited",
    By.STOP: "denied: the task was stopped (supervise stop) while this request waited",
}


@dataclass(frozen=True)
class Proposal:
    """One request and the ruling the task's rules give it.

    Attributes:
        tool: the tool name (``Bash``, ``Write``, ...; empty when the screen hid it).
        subject: what the tool acts on (:func:`supervisor.policy.approval.subject`).
        ruling: the rules' answer (approve, deny or escalate, and which rule said so).
        signal: the hook file of the request, or ``None`` for a dialog on screen.
        prompt: the dialog read from the screen, or ``None`` for a hook request.
    """

    tool: str
    subject: str
    ruling: approval.Ruling
    signal: hooks.HookSignal | None = None
    prompt: screen.PermissionPrompt | None = None

    def reason(self) -> str:
        """The escalation line for the policy and the notifier."""
        where = "; on screen" if self.prompt is not None else ""
        return f"{self.tool} {self.subject[:200]!r} ({self.ruling.by}{where})"


#: The rules of one task: ``(tool, tool_input, denials so far) -> Ruling``.
Rules = Callable[[str, Any, int], approval.Ruling]


def from_hook(signal: hooks.HookSignal, rules: Rules, denials: int) -> Proposal:
    """The proposal for one ``PermissionRequest`` hook (its ``tool_name``/``tool_input``)."""
    tool = str(signal.data.get("tool_name") or "")
    tool_input = signal.data.get("tool_input")
    subject = approval.subject(tool, tool_input)
    return Proposal(tool, subject, rules(tool, tool_input, denials), signal=signal)


def from_screen(prompt: screen.PermissionPrompt, rules: Rules, denials: int) -> Proposal:
    """The proposal for a dialog seen on screen twice. A dialog partly off screen is
    escalated: nothing is approved that was not read whole."""
    tool = prompt.tool or ""
    if prompt.cropped or prompt.tool is None:
        ruling = approval.Ruling("escalate", None, "screen: the dialog is cut off")
    else:
        tool_input = {"command": prompt.detail} if tool == "Bash" else {"file_path": prompt.detail}
        ruling = rules(tool, tool_input, denials)
    return Proposal(tool, prompt.detail, ruling, prompt=prompt)


@dataclass(frozen=True)
class Performed:
    """What carrying out one proposal left to remember: the escalation record (status
    ``escalated``; ``answer`` names the hook's answer file) or ``None``, and whether it
    was a denial (the circuit breaker counts them)."""

    escalation: dict[str, Any] | None
    denied: bool


def perform(
    proposal: Proposal, task: TaskDir, now: float, send_keys: Callable[[Keys], None]
) -> Performed:
    """Log the ruling (``permission`` event), then answer the request or record its
    escalation. An escalated hook request stays in the folder (a restarted engine finds it
    again); an answered one is archived in ``hooks/``.

    Raises:
        OSError: the event or the answer file cannot be written.
        supervisor.tmux.TmuxError: the dialog's keys could not be typed.
    """
    ruling, signal, prompt = proposal.ruling, proposal.signal, proposal.prompt
    if signal is not None:
        task.append_event(Event.HOOK, at=signal.at, **hooks.summary(signal.data))
    extra = {"source": "screen"} if prompt is not None else {}
    task.append_event(
        Event.PERMISSION,
        tool=proposal.tool,
        subject=proposal.subject[:SUBJECT_CHARS],
        decision=ruling.action,
        by=ruling.who,
        rule=ruling.rule,
        detail=ruling.by,
        **extra,
    )
    if ruling.action == "escalate":
        record: dict[str, Any] = {
            "reason": ruling.by,
            "rule": ruling.rule,  # the index, for ``wait``'s ``needs.rule``
            "tool": proposal.tool,
            "subject": proposal.subject[:SUBJECT_CHARS],
            "since": utc_iso(now),
        }
        if signal is not None:
            record["answer"] = str(signal.answer_path)
        else:
            record["screen"] = True
        return Performed(record, denied=False)
    if signal is not None:
        hooks.answer(signal, approval.hook_answer(ruling.action, ruling.message))
        hooks.archive(signal)
    elif prompt is not None:
        keys = prompt.approve_keys() if ruling.action == "approve" else prompt.deny_keys()
        send_keys(Keys(tuple(keys)))
    return Performed(None, denied=ruling.action == "deny")


def answer_pending(
    task: TaskDir,
    approve: bool,
    answer_path: Path | None,
    escalation: dict[str, Any] | None,
    prompt: screen.PermissionPrompt | None,
    send_keys: Callable[[Keys], None],
    by: By,
) -> None:
    """Carry out an answer to the escalated request: the dialog's keys, or the hook's
    answer file (then archived), each with its ``permission`` event naming ``by``, who
    ruled (:class:`supervisor.audit.By`): ``operator`` for ``supervise approve|deny``, the
    cause of the ending when an escalated task ended with the request waiting.

    Raises:
        OSError: the answer or the event cannot be written.
        supervisor.tmux.TmuxError: the dialog's keys could not be typed.
    """
    action = "approve" if approve else "deny"
    if prompt is not None:
        send_keys(Keys(tuple(prompt.approve_keys() if approve else prompt.deny_keys())))
        task.append_event(
            Event.PERMISSION,
            tool=prompt.tool,
            subject=prompt.detail[:SUBJECT_CHARS],
            decision=action,
            by=by,
            rule=None,
            source="screen",
        )
    if answer_path is not None:
        message = None if approve else _DENIED_BY.get(by, f"denied by supervise ({by})")
        signal = hooks.HookSignal(answer_path.with_suffix(".json"), "", 0.0, {})
        hooks.answer(signal, approval.hook_answer(action, message))
        hooks.archive(signal)
        task.append_event(
            Event.PERMISSION,
            tool=(escalation or {}).get("tool"),
            subject=(escalation or {}).get("subject"),
            decision=action,
            by=by,
            rule=None,
        )
