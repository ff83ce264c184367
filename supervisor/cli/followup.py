"""``supervise continue -c PROFILE ID PROMPT``: a follow-up (issue 22).

Continues an ended (or escalated) task's conversation with a new prompt as its next turn:
the same session (Claude Code's ``--resume``), the same workspace, the monitor policy and a
new deadline (:mod:`supervisor.followup`, :mod:`supervisor.engine.followups`). ``PROMPT``
``-`` reads the prompt from stdin (UTF-8, at most ``MAX_PROMPT_BYTES``).

Exit codes (README "Exit codes"): 0 the engine recorded the new turn; 1 refused (one line
saying why) or nothing requested; 2 usage; 3 queued (no engine runs: it happens when one
starts); 4 the engine did not take it within ``--wait`` seconds (it still may; an
escalated task is stopped first, and the wait covers that stop too: ``STOP_WAIT`` more).
"""

from __future__ import annotations

import argparse
import json
import sys

from supervisor.cli.common import EXIT_NOT_APPLIED, EXIT_QUEUED, err, load_profile, seconds

#: What starts every line on stderr, in the style of every refusal.
SAYS = "supervise continue"


def _prompt(text: str) -> str:
    """The prompt argument, or stdin for ``-`` (bounded; bad UTF-8 refused)."""
    from supervisor.config import MAX_PROMPT_BYTES
    from supervisor.followup import FollowUpRefused

    if text != "-":
        return text
    data = sys.stdin.buffer.read(MAX_PROMPT_BYTES + 1)
    if len(data) > MAX_PROMPT_BYTES:
        raise FollowUpRefused(f"stdin: the follow-up prompt is over {MAX_PROMPT_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FollowUpRefused(f"stdin: the follow-up prompt is not UTF-8 ({exc})") from None


def cmd_continue(args: argparse.Namespace) -> int:
    """Run ``supervise continue``; returns the exit status (module docstring)."""
    from supervisor.followup import STOP_WAIT, FollowUpRefused, request_continue
    from supervisor.policy.followups import STOP_FIRST

    profile = load_profile(args.config)  # ConfigError: one line each in cli.main
    try:
        result = request_continue(profile, args.task_id, _prompt(args.prompt), args.wait)
    except FollowUpRefused as exc:
        err(f"{SAYS}: {exc}")
        return 1
    task_id, state = args.task_id, result["result"]
    if state == "queued":
        why = f"no engine runs on {profile.state_dir}, so it starts when 'supervise run' does"
        err(f"{SAYS}: queued a follow-up for {task_id}; {why}")
    elif state == "not_applied":
        waited = args.wait + (STOP_WAIT if result["status"] in STOP_FIRST else 0)
        why = f"the engine has not taken it within {waited:g} s (it still may)"
        err(f"{SAYS}: asked to continue {task_id}; {why}")
    if args.json:
        print(json.dumps(result))
    elif state == "applied":
        print(f"{task_id}: turn {result['turn']} {result['status']}")
    return {"applied": 0, "queued": EXIT_QUEUED, "not_applied": EXIT_NOT_APPLIED}[state]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``continue`` to the ``supervise`` parser."""
    parser = sub.add_parser(
        "continue", help="continue a task's conversation with a new prompt (a new turn)"
    )
    parser.add_argument("-c", "--config", required=True, help="profile TOML file")
    parser.add_argument("task_id")
    parser.add_argument("prompt", help="the follow-up prompt ('-': read it from stdin)")
    parser.add_argument(
        "--wait",
        type=seconds,  # finite, >= 0: never NaN
        default=15.0,
        help="seconds to wait for the engine (15; longer for an escalated task: it is "
        "stopped first)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=cmd_continue)
