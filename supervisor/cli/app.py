"""``supervise``: the command line. Thin: parse, call, print.

Commands (``--json``: the result as JSON on stdout)::

    supervise run PROFILE [--exit-when-idle] [--log-file PATH]   run the engine (cli/ops.py)
    supervise validate [-c PROFILE] FILE... [--json]  check profile, task files (cli/validate.py)
    supervise submit -c PROFILE TASK.toml|-|--prompt TEXT --project DIR [--wait] [--json]
                                                 validate a task, spool it, print its id
    supervise status -c PROFILE [--json] [--sort K] [--status S]... [--archived]
                                                 engine, spool, tasks (or the archived ones)
    supervise top -c PROFILE [--status S] [--filter T]  live view (the 'tui' extra)
    supervise serve -c PROFILE [--bind H:P]      live web page (the 'web' extra; views/serve.py)
    supervise wait -c PROFILE ID... [--timeout S] [--terminal-only] [--json]
                                                 until they end or one needs you (cli/ops.py)
    supervise show -c PROFILE ID                 print one manifest
    supervise stop -c PROFILE ID... [--json]     end tasks as abandoned (reason "stopped")
    supervise resume -c PROFILE ID... [--json]   force a resume now
    supervise approve -c PROFILE ID... [--json]  allow what an escalated task waits for
    supervise deny -c PROFILE ID... [--json]     refuse it (the agent is told no); the four
                                                 take --all or --status S (cli/requests.py)
    supervise shutdown -c PROFILE [--wait S]     stop the engine, leave the agents (cli/shutdown.py)
    supervise tail -c PROFILE ID [-n N] [-f] [--raw]  a task's output, rendered (cli/tail.py)
    supervise logs|events ...                    the engine log, a task's events (cli/read.py)
    supervise attach -c PROFILE ID               attach this terminal to the task's tmux session
    supervise config -c PROFILE [--task FILE] [--json]  every effective policy value, its source
    supervise archive -c PROFILE --older-than D  ended task folders into tarballs (cli/ops.py)
    supervise diff|merge|discard|prune ...       review a task's worktree (cli/workspace.py)
    supervise init|schema|startup|completion ... set up; --version (cli/setup.py)
    supervise mcp -c PROFILE                     an MCP server over stdio (cli/mcp.py)
    supervise cost -c PROFILE... [--days N] [--by K] [--json]  spend per day, profile,
                                                 account, task (cli/cost.py)

Exit codes (the table in README "Exit codes"; their names, ``EXIT_*``, in
:mod:`supervisor.cli.common`)::

    command                      0        1                          2      other
    run                          stopped  cannot start               usage
    submit validate config show  done     invalid input, no task     usage
      tail attach status
    stop resume approve deny     applied  nothing requested          usage  3 queued (no
                                                                            engine), 4 not
                                                                            applied in --wait;
                                                                            several: the worst,
                                                                            1 > 4 > 3 > 0
    continue (cli/followup.py)   recorded refused                    usage  3 queued, 4 not taken
    shutdown                     stopped  no engine                  usage  4 still running
    wait                         all PASS one or more did not        usage  10 needs you (wins
                                                                            over 0, 1), 124
                                                                            timeout
    submit --wait                as wait (the id printed first); 1 also: invalid input
    mcp                          client closed  bad profile          usage, no 'mcp' extra
    archive                      done     archive not written        usage
    diff merge discard prune     done     refused                    usage
    init startup schema          done     refused or failed          usage
      completion top (quit; 1: no 'tui' extra; 2: a bad --status)
    logs events                  printed  no log yet, no task        usage  130 -f stopped

A malformed task id (``taskid.py``) and a file this user may not read (another user's
state dir) are one line each, exit 1, for every command.
``submit``, ``wait`` and the four requests warn on stderr when no live engine holds the
state dir (:mod:`supervisor.engine_probe`); ``status`` shows the engine line itself.
Heavy imports (the engine, APScheduler, libtmux) happen only in the commands that need them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor import inline_submit, taskid
from supervisor.cli import attempts as cli_attempts
from supervisor.cli import cluster as cli_cluster
from supervisor.cli import cost as cli_cost
from supervisor.cli import followup as cli_followup
from supervisor.cli import mcp as cli_mcp
from supervisor.cli import ops as cli_ops
from supervisor.cli import read as cli_read
from supervisor.cli import requests as cli_requests
from supervisor.cli import setup as cli_setup
from supervisor.cli import shutdown as cli_shutdown
from supervisor.cli import tail as cli_tail
from supervisor.cli import validate as cli_validate
from supervisor.cli import workspace as cli_workspace
from supervisor.cli.cluster import STATUS_HELP as CLUSTER_HELP
from supervisor.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_NOT_APPLIED,  # noqa: F401 (an old home: tests and callers import it from here)
    EXIT_QUEUED,  # noqa: F401
    EXIT_USAGE,
    err,
    load_profile,
)
from supervisor.errors import ConfigError
from supervisor.taskdir import layout
from supervisor.views import (
    fleet_status,  # the fleet's options; no database import
    serve,  # imports no web library until it runs
)
from supervisor.views import status as views_status  # plain os/json, no third-party import
from supervisor.views.top import register as register_top  # never imports Textual itself

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile


# ---------------------------------------------------------------- commands


def cmd_status(args: argparse.Namespace) -> int:
    if args.cluster:
        return cli_cluster.status_cluster(args)
    given = [f"--{name}" for name in fleet_status.CLUSTER_ONLY if getattr(args, name) is not None]
    if given:
        err(f"supervise status: {', '.join(given)} need --cluster (the fleet's tasks)")
        return EXIT_USAGE
    if not args.config:
        err("supervise status: -c/--config PROFILE is required (or --cluster)")
        return EXIT_USAGE
    if args.archived:
        return cli_ops.print_archived(load_profile(args.config), args.json)
    from supervisor.profilepaths import read_paths  # status needs only the two folders

    return views_status.run(read_paths(args.config) or load_profile(args.config), args)


def cmd_top(args: argparse.Namespace) -> int:
    from supervisor.views import top

    if top.textual_missing():  # before loading the profile: the fix is the same either way
        return top.run(None)
    return top.run(load_profile(args.config), args)


def _task_dir(profile: LoadedProfile, task_id: str) -> Path | None:
    path = profile.tasks_dir / task_id
    if "/" in task_id or task_id.startswith(".") or not (path / layout.MANIFEST).exists():
        err(cli_read.missing_line(profile, task_id))
        return None
    return path


def cmd_tail(args: argparse.Namespace) -> int:
    folder = _task_dir(load_profile(args.config), args.task_id)
    return 1 if folder is None else cli_tail.run(folder, args)


def cmd_attach(args: argparse.Namespace) -> int:
    from supervisor.views.attach import BoundedServer, attach_argv, attach_problem

    profile = load_profile(args.config)
    if _task_dir(profile, args.task_id) is None:
        return 1
    server = BoundedServer(profile.socket_name)
    if (problem := attach_problem(server, args.task_id)) is not None:
        err(f"supervise attach: {problem}")
        return 1
    argv = attach_argv(server, args.task_id, read_only=args.read_only)
    os.execvp(argv[0], argv)
    return 1  # pragma: no cover - execvp does not return


def cmd_config(args: argparse.Namespace) -> int:
    from supervisor.config import effective_policy, load_task
    from supervisor.config.approvalrules import approval_rows
    from supervisor.config.workspace import workspace_rows

    profile = load_profile(args.config)
    if args.task:
        resolved = load_task(args.task, profile)
        policy, sources = resolved.policy, resolved.sources
    else:
        policy, sources = effective_policy(profile.spec.monitor, None)
    values = policy.model_dump(mode="json")
    rows = [
        {"key": k, "value": json.dumps(v), "source": sources.get(k, "default")}
        for k, v in values.items()
    ]
    task_ws = resolved.spec.workspace if args.task else None
    rules = approval_rows(profile.spec, resolved.spec if args.task else None)  # with sources
    for key, value, source in workspace_rows(profile.spec.workspace, task_ws) + rules:
        values[key] = value
        rows.append({"key": key, "value": json.dumps(value), "source": source})
    if args.json:
        print(
            json.dumps(
                {r["key"]: {"value": values[r["key"]], "source": r["source"]} for r in rows},
                indent=2,
            )
        )
        return 0
    from tabulate import tabulate

    print(tabulate(rows, headers="keys"))
    return 0


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree for ``supervise``."""
    parser = argparse.ArgumentParser(
        prog="supervise",
        description="Run coding agents (Claude Code first) in tmux, watch them, recover them, "
        "and report each outcome in a manifest.",
    )
    cli_setup.add_version_argument(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cli_ops.register(sub)  # run, wait, archive
    cli_read.register(sub)  # logs, events, _ids

    cli_validate.register(sub)  # validate

    inline_submit.register(sub, build_parser)  # submit: a file, stdin or --prompt

    status = sub.add_parser("status", help="list tasks and their state")
    status.add_argument("-c", "--config", help="profile TOML file")
    views_status.add_arguments(status)
    status.add_argument("--cluster", action="store_true", help=CLUSTER_HELP)
    fleet_status.add_arguments(status)  # --limit, --after, --host
    status.add_argument("--archived", action="store_true", help="list the archived tasks")
    status.set_defaults(func=cmd_status)

    register_top(sub, cmd_top)
    show = sub.add_parser("show", help="print one task's manifest.json")
    show.add_argument("-c", "--config", required=True, help="profile TOML file")
    show.add_argument("task_id")
    show.set_defaults(func=cli_read.cmd_show)

    cli_requests.register(sub)  # stop, resume, approve, deny: one task or many
    cli_shutdown.register(sub)  # stop the engine, leave the agents

    tail = sub.add_parser("tail", help="print the end of a task's output, rendered readably")
    tail.add_argument("-c", "--config", required=True, help="profile TOML file")
    tail.add_argument("task_id")
    cli_tail.add_arguments(tail)  # -n, -f, --raw
    tail.set_defaults(func=cmd_tail)

    attach = sub.add_parser("attach", help="attach this terminal to a task's tmux session")
    attach.add_argument("-c", "--config", required=True, help="profile TOML file")
    attach.add_argument("task_id")
    attach.add_argument("-r", "--read-only", action="store_true", help="attach read-only")
    attach.set_defaults(func=cmd_attach)

    config = sub.add_parser("config", help="effective policy values and their sources")
    config.add_argument("-c", "--config", required=True, help="profile TOML file")
    config.add_argument("--task", help="a task file whose [monitor] overrides to include")
    config.add_argument("--json", action="store_true", help="machine-readable output")
    config.set_defaults(func=cmd_config)
    cli_workspace.register(sub)  # diff, merge, discard, prune
    serve.register(sub)  # the web view (extra 'web')
    cli_setup.register(sub, build_parser)  # init, schema, startup, completion
    cli_mcp.register(sub)  # the MCP server over stdio (extra 'mcp')
    cli_cluster.register(sub)  # cluster init|check, hosts (extra 'cluster')
    cli_followup.register(sub)  # continue (issue 22)
    cli_cost.register(sub)  # cost (issue 26)
    cli_attempts.register(sub)  # attempts (issue 26)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Console entry point. Returns the exit status."""
    args = build_parser().parse_args(argv)
    if bad_id := taskid.bad_argument(args):  # before any path is made of it (taskid.py)
        err(bad_id)
        return 1
    try:
        return int(args.func(args))
    except ConfigError as exc:
        for line in exc.problems:
            err(line)
        return 1
    except PermissionError as exc:  # another user's state dir: one line, never a traceback
        from supervisor.folderaccess import denied_line

        err(denied_line(args.command, exc))
        return 1
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `supervise ... | head` left early: no traceback (Python docs)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE  # 128 + SIGPIPE, as a program killed by it


if __name__ == "__main__":
    sys.exit(main())
