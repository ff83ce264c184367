"""``kind = "claude"`` in the agent-kind registry (:mod:`supervisor.agents.kinds`): its
``[agent]`` rules, its model aliases, its view columns (cost and tokens from the manifest's
``claude`` object) and where its settings, manifest key and adapter live. Light: no
pydantic and no adapter until one of them is asked for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from supervisor.agents import kinds
from supervisor.agents.claude.tools import HEARTBEAT

#: The kind's name, its manifest key, and the default of ``[agent] binary``.
NAME = "claude"
#: Model alias → model id every profile knows (``config.DEFAULT_MODELS``; issue 2).
MODELS: dict[str, str] = {"opus": "claude-opus-4-6", "sonnet": "claude-sonnet-4-6"}


def check(agent: Any) -> None:
    """The ``[agent]`` rules of ``kind = "claude"`` (an ``AgentSpec``): no ``command`` or
    ``resume_command`` (the adapter builds the argv), and a headless run without hooks
    needs a permission mode that does not ask. Raises ``ValueError``."""
    if agent.command or agent.resume_command:
        raise ValueError(
            "kind 'claude' builds the command line itself; remove 'command' and "
            "'resume_command' (add flags with 'extra_args'), or use kind = \"generic\""
        )
    if (
        agent.mode == "headless"
        and not agent.hooks
        and agent.permission_mode in ("manual", "default")
    ):
        raise ValueError(
            "with hooks = false nothing answers permission requests in headless mode, so "
            "Claude Code would deny every tool call that needs one; set hooks = true (the "
            "[approval] rules decide), or a permission_mode that does not ask"
        )


def _number(value: Any) -> float | None:
    """A manifest's number as a float; ``None`` for a non-number or an int past the float
    range (a hand-edited manifest may hold ``10**400``)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _tokens(record: Mapping[str, Any]) -> int | None:
    usage = record.get("usage")
    if not isinstance(usage, dict):
        return None
    counts = [usage.get(k) for k in ("input_tokens", "output_tokens")]
    known = [int(c) for c in counts if isinstance(c, int | float) and not isinstance(c, bool)]
    return sum(known) if known else None


def columns(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``cost_usd`` (``claude.total_cost_usd``) and ``tokens`` (input + output tokens of
    ``claude.usage``) of a manifest dict; ``{}`` without a ``claude`` object."""
    record = manifest.get(NAME)
    if not isinstance(record, dict):
        return {}
    return {"cost_usd": _number(record.get("total_cost_usd")), "tokens": _tokens(record)}


KIND = kinds.register(
    kinds.Kind(
        name=NAME,
        adapter=kinds.lazy("supervisor.agents.claude.adapter", "ClaudeAdapter"),
        settings=kinds.lazy("supervisor.agents.claude.settings", "ClaudeSettings"),
        manifest=kinds.lazy("supervisor.agents.claude.manifest", "ClaudeManifest"),
        check=check,
        columns=columns,
        permissions=True,
        models=MODELS,
        heartbeat=HEARTBEAT,
    )
)
