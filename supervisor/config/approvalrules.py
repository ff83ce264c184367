"""The approval rules in force for a task, with where each came from (``supervise config``).

The rules are the task's ``[[approval.rules]]`` followed by the profile's
(:func:`supervisor.config.loading.load_task`); the first that fits a permission request
decides (:func:`supervisor.policy.approval.decide`), and a request no rule fits is denied with the
``default_message`` of the task's ``[approval]`` table when it has one, else the profile's
(:func:`default_message`, used by the engine too). Only Claude Code agents ask permissions
(its ``PermissionRequest`` hook, or a dialog read from the TUI); a generic agent's command
runs whatever it runs, so its rules are not in force. The circuit breaker's threshold is the
monitor key ``max_denials``, listed with the other monitor keys.
"""

from __future__ import annotations

from typing import Any

from supervisor.agents import kinds
from supervisor.config.models import Profile, TaskSpec


def default_message(profile: Profile, task: TaskSpec | None) -> tuple[str, str]:
    """``(message, source)``: what an agent is told when no rule fits its request, and
    where it was set (``task``, ``profile`` or ``default``). A task with an ``[approval]``
    table uses that table's message (its default when the table does not set one)."""
    if task is not None and task.approval is not None:
        spec, source = task.approval, "task"
    else:
        spec, source = profile.approval, "profile"
    if "default_message" not in spec.model_fields_set:
        source = "default"
    return spec.default_message, source


def approval_rows(profile: Profile, task: TaskSpec | None = None) -> list[tuple[str, Any, str]]:
    """``(key, value, source)`` rows: ``approval.in_force`` (whether the agent asks
    permissions at all: :attr:`supervisor.agents.kinds.Kind.permissions`), one
    ``approval.rules[N]`` per rule in the order they are tried (``{"tool", "match",
    "action", "message"}``, ``match``/``message`` left out when unset; source ``task`` or
    ``profile``), and ``approval.unmatched`` (``{"action": "deny", "message"}``, the ruling
    when no rule fits)."""
    kind_source = "profile" if "kind" in profile.agent.model_fields_set else "default"
    rows: list[tuple[str, Any, str]] = [
        ("approval.in_force", kinds.get(profile.agent.kind).permissions, kind_source)
    ]
    task_rules = task.approval.rules if task is not None and task.approval is not None else []
    tagged = [(rule, "task") for rule in task_rules]
    tagged += [(rule, "profile") for rule in profile.approval.rules]
    for index, (rule, source) in enumerate(tagged, start=1):
        value = rule.model_dump(mode="json", exclude_none=True)
        rows.append((f"approval.rules[{index}]", value, source))
    message, source = default_message(profile, task)
    rows.append(("approval.unmatched", {"action": "deny", "message": message}, source))
    return rows
