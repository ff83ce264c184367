"""``supervise wait --brief``: the few fields an orchestrator reads from an ended task.

``wait --json`` prints an ended task's whole manifest (documented, kept as it is): with
``output_tail``, the last 100 lines of the raw output, which for Claude Code is stream-json
(18 KB in the Brain's trial, /work/notes/brain-trial.md) that an agent reading the result
pays for and never uses; the readable output is ``supervise tail``'s. ``--brief`` keeps the
manifest the default (scripts and the MCP server read it) and gives the Brain a small,
stable object instead. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

#: ``wait --brief``'s help text (also ``submit --wait``'s, should it take the flag).
BRIEF_HELP = (
    "JSON with only task_id, task_name, status, verdict, turn, the reasons, summary, "
    "result (claude.result) and cost_usd of an ended task (no raw output_tail)"
)
#: The manifest fields an ended task's brief entry keeps, in this order.
KEPT = (
    "task_id",
    "task_name",
    "status",
    "verdict",
    "turn",
    "failure_reason",
    "abandon_reason",
    "summary",
)


def brief(entry: dict[str, Any]) -> dict[str, Any]:
    """One entry of :attr:`supervisor.waiting.WaitOutcome.shown`, made small.

    A task that needs you, a rejected one and the stand-ins (spooled, a follow-up not
    taken yet) are small already and come back as they are (they have no
    ``retry_count``, which every manifest has). A manifest (an ended task's, or a running
    one's at ``--timeout``) becomes ``{"task_id", "task_name", "status",
    "verdict", "turn", "failure_reason", "abandon_reason", "summary", "result",
    "cost_usd"}``: ``result`` is Claude Code's final text (``claude.result``) and
    ``cost_usd`` its ``claude.total_cost_usd`` (``None`` for another agent, or a value of
    another type in a damaged manifest); an absent field is ``None``.
    """
    if "needs" in entry or "retry_count" not in entry:
        return entry
    out = {key: entry.get(key) for key in KEPT}
    claude = entry.get("claude")
    claude = claude if isinstance(claude, dict) else {}
    result = claude.get("result")
    out["result"] = result if isinstance(result, str) else None
    cost = claude.get("total_cost_usd")
    out["cost_usd"] = cost if isinstance(cost, int | float) and not isinstance(cost, bool) else None
    return out
