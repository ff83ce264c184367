"""``supervise stop|resume|approve|deny``: one task, several, ``--all`` or ``--status``.

Commands::

    supervise stop|resume|approve|deny -c PROFILE ID... [--wait S] [--json]
    supervise stop|resume|approve|deny -c PROFILE (--all | --status S [--status S ...])

``--all`` picks every task the verb applies to (not ended; ``escalated`` for approve and
deny); ``--status`` narrows that to a status or a group of ``supervise status`` (repeatable,
e.g. ``approve --status escalated``). Each task gets one line: applied ones on stdout
(``ID: STATUS (retry_count N)``), the rest on stderr; ``--json`` prints one object for a
single id (as before issue 22) and a list otherwise. The logic is
:mod:`supervisor.requests`'s; exit codes there and in README "Exit codes": 0 applied, 1
nothing requested, 3 queued (no engine), 4 not applied within ``--wait``; several tasks
exit with the worst (1 > 4 > 3 > 0); ``--all``/``--status`` matching nothing: one line,
exit 1; ids together with ``--all``/``--status``: usage, exit 2. ``stop`` of an attempts
group's id (issue 26) stops every attempt of it that has not ended.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from supervisor.cli.common import EXIT_USAGE, err, load_profile, seconds
from supervisor.terminal import escape_controls

VERB_HELP = {
    "stop": "end tasks now as abandoned (reason 'stopped'), with a clean stop",
    "resume": "stop the agent and resume it now with the resume command",
    "approve": "allow the request an escalated task waits on (or unpause it)",
    "deny": "refuse the request an escalated task waits on",
}


def cmd_request(args: argparse.Namespace) -> int:
    """Apply ``args.command`` to the tasks named or selected; print each; the worst code."""
    from supervisor import requests

    verb, ids = args.command, list(args.task_ids)
    chosen = args.all or args.statuses is not None
    if ids and chosen:
        err(f"supervise {verb}: give task ids or --all/--status, not both")
        return EXIT_USAGE
    if not ids and not chosen:
        err(f"supervise {verb}: give one or more task ids, --all, or --status S")
        return EXIT_USAGE
    profile = load_profile(args.config)
    if verb == "stop" and ids:  # a group id stops every live attempt (issue 26)
        ids = _groups_expanded(profile, ids)
        if not ids:
            return 1
    if chosen:
        ids = requests.select(profile, verb, args.statuses)
        if not ids:
            which = f" with status {', '.join(args.statuses)}" if args.statuses else ""
            where = f"no task in {profile.tasks_dir}{which} that '{verb}' applies to"
            err(f"supervise {verb}: {where}; see 'supervise status -c {args.config}'")
            return 1
    results = requests.apply_requests(profile, ids, verb, args.wait, selected=chosen, warn=err)
    for r in results:
        if r.result == "applied" and not args.json:
            print(escape_controls(_applied_line(r.task_id, r.manifest)))
        elif r.line:  # refused, skipped, queued, not applied: one style with every refusal
            err(f"supervise {verb}: {r.line}")
    if args.json and len(args.task_ids) == 1:  # one id: one object, none when refused
        if results[0].result != "refused":
            print(json.dumps(results[0].as_dict()))
    elif args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    return requests.worst(r.code for r in results)


def _groups_expanded(profile: Any, ids: list[str]) -> list[str]:
    """``ids`` with each attempts group id replaced by its attempts not ended yet (one
    line on stderr for a group with none)."""
    from supervisor import attempts

    out: list[str] = []
    for task_id in ids:
        record = attempts.read(profile.state_dir, task_id)
        if record is None:
            out.append(task_id)
            continue
        live = attempts.live_attempts(profile, record)
        if not live:
            err(f"supervise stop: attempts group {task_id}: every attempt already ended")
        out += [one for one in live if one not in out]
    return out


def _applied_line(task_id: str, manifest: dict) -> str:
    from supervisor.taskdir.control import applied_line

    return applied_line(task_id, manifest)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``stop``, ``resume``, ``approve`` and ``deny`` to the ``supervise`` parser."""
    from supervisor.views.status import STATUS_CHOICES

    for name, text in VERB_HELP.items():
        verb = sub.add_parser(name, help=text)
        verb.add_argument("-c", "--config", required=True, help="profile TOML file")
        verb.add_argument("task_ids", nargs="*", metavar="ID", help="one or more task ids")
        verb.add_argument("--all", action="store_true", help=f"every task that '{name}' applies to")
        verb.add_argument(
            "--status",
            action="append",
            choices=STATUS_CHOICES,
            metavar="STATUS",
            dest="statuses",
            help="only tasks with this status or in this group (repeatable)",
        )
        verb.add_argument(
            "--wait", type=seconds, default=15.0, help="seconds to wait for the engine (15)"
        )
        verb.add_argument("--json", action="store_true", help="print the results as JSON")
        verb.set_defaults(func=cmd_request)
