"""``supervise attempts``: the attempts of one task (issue 26, part 2), for a person or the
Brain to choose one to ``supervise merge``.

    supervise attempts -c PROFILE ID [--json]

``ID`` is the group id (``attempts-…``, printed at claim and in each attempt's manifest as
``attempt.group``) or any attempt's task id. One line for the group (pick, winner, outcome,
summed cost in USD), then one per attempt: index, task id, model, status, verdict, cost
(USD), diff size against the attempt's base commit (files changed, insertions, deletions),
branch, and the branch ``supervise merge`` merged it into (a ``tabulate`` table, as
``status`` and ``cost`` print). ``--json`` prints :func:`supervisor.attempts.listing`'s
object. Every value from a task file or a manifest is shown with control characters
escaped. Exit 0; 1 for an id that names no group or a task that is no attempt (one line); 2
for a bad option.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from supervisor.cli.common import err, load_profile
from supervisor.terminal import escape_controls


def _usd(value: Any) -> str:
    return "-" if value is None else f"${value:.4f}"


def _diff(row: dict[str, Any]) -> str:
    if row["files_changed"] is None:
        return "-"
    return f"{row['files_changed']}f +{row['insertions']} -{row['deletions']}"


def _row(row: dict[str, Any]) -> dict[str, str]:
    status = row["status"] + (f" ({row['abandon_reason']})" if row["abandon_reason"] else "")
    cells = {
        "#": str(row["index"]),
        "task": row["task_id"],
        "model": str(row["model"] or "-"),
        "status": status,
        "verdict": str(row["verdict"] or "-"),
        "cost": _usd(row["cost_usd"]),
        "diff": _diff(row),
        "branch": str(row["branch"] or "-"),
        "merged into": row.get("merged_into") or "-",
    }
    return {k: escape_controls(v) for k, v in cells.items()}


def lines(found: dict[str, Any]) -> list[str]:
    """The text listing of :func:`supervisor.attempts.listing`'s object (escaped)."""
    from tabulate import tabulate

    head = (
        f"{found['group']} ({found.get('name')}): pick {found.get('pick')}, "
        f"winner {found.get('winner') or '-'}, outcome {found.get('outcome') or 'running'}, "
        f"cost {_usd(found.get('cost_usd'))}"
    )
    table = tabulate([_row(r) for r in found["attempts"]], headers="keys", disable_numparse=True)
    return [escape_controls(head), *table.splitlines()]


def cmd_attempts(args: argparse.Namespace) -> int:
    """Print the attempts of the group ``args.id`` names; exit 1 when it names none."""
    from supervisor import attempts

    profile = load_profile(args.config)
    try:
        found = attempts.listing(profile, args.id)
    except attempts.NotFound as exc:
        err(f"supervise attempts: {exc}")
        return 1
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        print("\n".join(lines(found)))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``attempts`` to the ``supervise`` parser."""
    parser = sub.add_parser("attempts", help="list the attempts of a task (issue 26)")
    parser.add_argument("-c", "--config", required=True, help="profile TOML file")
    parser.add_argument("id", metavar="ID", help="the group id or any attempt's task id")
    parser.add_argument("--json", action="store_true", help="print the listing as JSON")
    parser.set_defaults(func=cmd_attempts)
