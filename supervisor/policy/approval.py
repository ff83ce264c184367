"""The permission policy: ordered approval rules, decided purely (no I/O).

Seed 003 sketched a command-approval table matched against the screen. Here the request
comes exact, from Claude Code's ``PermissionRequest`` hook (``tool_name`` and
``tool_input``), and the table is the task's ``[[approval.rules]]`` followed by the
profile's. The first rule whose ``tool`` and ``match`` fit decides; a request that no rule
matches is denied with the ``[approval] default_message`` (issue 4).

A Bash command that chains or substitutes commands (``;``, ``&``, ``|``, a backtick,
``$(``, ``<(``, ``>(``, a newline), or is too long for its rule to have seen it whole
(:data:`MAX_SUBJECT`), is never *approved* by a rule: ``ls; rm -rf ~`` must not pass as
``ls``. Such a request skips the approve rules and falls to the deny / escalate rules or
the default.

The circuit breaker: after ``max_denials`` consecutive denials or failed tool calls, the
next request is escalated to a human instead of being answered, so an agent stuck trying
forbidden things stops burning its budget.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from supervisor.audit import By
from supervisor.config import ApprovalRule

#: Longest subject (characters) a rule's regex is matched against.
MAX_SUBJECT = 10_000

#: How a ruling by no rule and a circuit-breaker ruling start their ``by`` (see :class:`Ruling`).
DEFAULT_BY = "default"
BREAKER_BY = "circuit breaker"

#: Shell syntax that runs more than the command a rule looked at.
_COMPOUND = re.compile(r"[;&|`\n\r]|\$\(|[<>]\(")

#: Where each tool keeps the thing a rule's ``match`` is about (Claude Code tool inputs).
_SUBJECT_KEYS: dict[str, tuple[str, ...]] = {
    "Bash": ("command",),
    "Write": ("file_path",),
    "Edit": ("file_path",),
    "MultiEdit": ("file_path",),
    "Read": ("file_path",),
    "NotebookEdit": ("notebook_path",),
    "WebFetch": ("url",),
    "WebSearch": ("query",),
    "Glob": ("pattern",),
    "Grep": ("pattern",),
}


@dataclass(frozen=True)
class Ruling:
    """The answer to one permission request.

    Attributes:
        action: ``approve``, ``deny`` or ``escalate``.
        rule: 1-based index of the deciding rule in the combined list, or ``None``.
        by: who decided, for the audit log: ``rule N (Tool ~ /regex/)``, ``default``
            or ``circuit breaker``.
        message: what the agent is told on ``deny`` (``None`` otherwise).
    """

    action: str
    rule: int | None
    by: str
    message: str | None = None

    @property
    def who(self) -> By:
        """Who ruled, for the audit's ``by`` (:class:`supervisor.audit.By`): a rule, the
        default, the circuit breaker, or the engine (a ruling made by no rule, such as a
        dialog escalated because it was cut off on screen)."""
        if self.by.startswith(BREAKER_BY):
            return By.BREAKER
        if self.by == DEFAULT_BY:
            return By.DEFAULT
        return By.RULE if self.rule is not None else By.ENGINE


def subject(tool_name: str, tool_input: Any) -> str:
    """The text a rule's ``match`` is searched in: the Bash command, the file path, the URL
    (per :data:`_SUBJECT_KEYS`), else the compact JSON of the whole input; at most
    :data:`MAX_SUBJECT` characters."""
    if isinstance(tool_input, dict):
        for key in _SUBJECT_KEYS.get(tool_name, ()):
            value = tool_input.get(key)
            if isinstance(value, str):
                return value[:MAX_SUBJECT]
    try:
        text = json.dumps(tool_input, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(tool_input)
    return text[:MAX_SUBJECT]


def _unsafe_command(tool_input: Any) -> bool:
    """A Bash input no approve rule may pass: chained or substituted commands, an input
    longer than :data:`MAX_SUBJECT` (the rule saw only part of it) or a non-string."""
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    if not isinstance(command, str):
        return True
    return len(command) > MAX_SUBJECT or _COMPOUND.search(command) is not None


#: How :func:`_describe` labels a rule (``Ruling.by``); reads the index back out of a
#: label recorded before the index itself was kept (``supervise wait``'s ``needs.rule``).
RULE_LABEL = re.compile(r"rule (\d+) \(")


def _describe(index: int, rule: ApprovalRule) -> str:
    where = f" ~ /{rule.match}/" if rule.match is not None else ""
    return f"rule {index} ({rule.tool}{where})"


def rule_matches(rule: ApprovalRule, tool_name: str, text: str) -> bool:
    """Whether ``rule`` covers a request for ``tool_name`` with subject ``text``
    (``re.search``, so anchor the regex with ``^``/``$`` to match the whole subject)."""
    if rule.tool not in ("*", tool_name):
        return False
    return rule.match is None or re.search(rule.match, text) is not None


def decide(
    rules: tuple[ApprovalRule, ...] | list[ApprovalRule],
    tool_name: str,
    tool_input: Any,
    consecutive_denials: int,
    max_denials: int,
    default_message: str,
) -> Ruling:
    """Rule on one permission request.

    Args:
        rules: the ordered rules (task first, then profile).
        tool_name: the hook input's ``tool_name``.
        tool_input: the hook input's ``tool_input`` (any JSON value).
        consecutive_denials: denials and failed tool calls since the last success.
        max_denials: the circuit breaker's threshold (``>= 1``).
        default_message: the message for a request that no rule matches.

    Returns:
        A :class:`Ruling`. Once ``consecutive_denials`` has reached ``max_denials``, every
        request is escalated (by ``circuit breaker``) whatever the rules say.
    """
    text = subject(tool_name, tool_input)
    compound = tool_name == "Bash" and _unsafe_command(tool_input)
    ruling = Ruling("deny", None, DEFAULT_BY, default_message)
    for index, rule in enumerate(rules, start=1):
        if rule.action == "approve" and compound:
            continue
        if rule_matches(rule, tool_name, text):
            message = (rule.message or default_message) if rule.action == "deny" else None
            ruling = Ruling(rule.action, index, _describe(index, rule), message)
            break
    if ruling.action != "escalate" and consecutive_denials >= max_denials:
        return Ruling(
            "escalate",
            ruling.rule,
            f"{BREAKER_BY} ({consecutive_denials} consecutive denials or failures; "
            f"{ruling.by} said {ruling.action})",
        )
    return ruling


def hook_answer(action: str, message: str | None = None) -> dict[str, Any]:
    """The JSON a ``PermissionRequest`` hook prints to allow or deny the tool call
    (Claude Code hooks reference: ``hookSpecificOutput.decision.behavior``)."""
    decision: dict[str, Any] = {"behavior": "allow" if action == "approve" else "deny"}
    if action != "approve":
        decision["message"] = message or "denied by supervise"
    return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}
