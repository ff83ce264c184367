"""``supervise``: the command line. Thin: parse, call, print.

Commands (``--json``: the result as JSON on stdout)::

    supervise run PROFILE [--exit-when-idle] [--log-file PATH]   run the engine (cli_ops.py)
    supervise validate [-c PROFILE] FILE... [--json]  check profiles and task files
    supervise submit -c PROFILE TASK.toml [--json]    validate a task, spool it, print its id
    supervise status -c PROFILE [--json] [--sort K] [--status S]... [--archived]
                                                 engine, spool, tasks (or the archived ones)
    supervise top -c PROFILE                     live view (the 'tui' extra: Textual)
    supervise serve -c PROFILE [--bind H:P]      live web page (the 'web' extra; views/serve.py)
    supervise wait -c PROFILE ID... [--timeout S] [--json]  until they end (cli_ops.py)
    supervise show -c PROFILE ID                 print one manifest
    supervise stop -c PROFILE ID [--json]        end a task as abandoned (reason "stopped")
    supervise resume -c PROFILE ID [--json]      force a resume now
    supervise approve -c PROFILE ID [--json]     allow what an escalated task waits for
    supervise deny -c PROFILE ID [--json]        refuse it (the agent is told no)
    supervise tail -c PROFILE ID [-n N] [-f]     print (and follow) a task's output.log
    supervise attach -c PROFILE ID               attach this terminal to the task's tmux session
    supervise config -c PROFILE [--task FILE] [--json]  every effective policy value, its source
    supervise archive -c PROFILE --older-than D  ended task folders into tarballs (cli_ops.py)
    supervise diff|merge|discard|prune ...       review a task's worktree (cli_workspace.py)
    supervise init|schema|startup|completion ... set up; --version (cli_setup.py)

Exit codes (the table in README "Exit codes")::

    command                      0        1                          2      other
    run                          stopped  cannot start               usage
    submit validate config show  done     invalid input, no task     usage
      tail attach status
    stop resume approve deny     applied  nothing requested          usage  3 queued (no
      continue (cli_followup.py)          (continue: refused)               engine), 4 not
                                                                            applied in --wait
    wait                         all PASS one or more did not        usage  124 timeout
    archive                      done     archive not written        usage
    diff merge discard prune     done     refused                    usage
    init startup schema          done     refused or failed          usage
      completion

``submit``, ``wait`` and the four requests warn on stderr when no live engine holds the
state dir (:mod:`supervisor.engine_probe`); ``status`` shows the engine line itself.
Heavy imports (the engine, APScheduler, libtmux) happen only in the commands that need them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor import cli_cluster, cli_followup, cli_ops, cli_setup, cli_workspace, heartbeats
from supervisor.cli_cluster import STATUS_HELP as CLUSTER_HELP
from supervisor.errors import ConfigError
from supervisor.terminal import escape_controls
from supervisor.views import serve  # imports no web library until it runs
from supervisor.views import status as views_status  # plain os/json, no third-party import
from supervisor.views.top import register as register_top  # never imports Textual itself

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile


#: Exit status of a request left for an engine that is not running (issue 10: an operator
#: script must not take "queued" for "done").
EXIT_QUEUED = 3
#: Exit status of a request the running engine has not applied within ``--wait`` seconds.
EXIT_NOT_APPLIED = 4


def _err(message: str) -> None:
    """One line to stderr; control characters from task files or names shown escaped."""
    print(escape_controls(message), file=sys.stderr)


def _profile(path: str) -> LoadedProfile:
    from supervisor.config import load_profile

    return load_profile(path)


# ---------------------------------------------------------------- commands


def cmd_validate(args: argparse.Namespace) -> int:
    from supervisor.config import (
        LoadedProfile,
        Profile,
        load_profile,
        load_task,
        looks_like_profile,
    )
    from supervisor.tmux import require_tmux

    profile: LoadedProfile | None = None
    results: list[dict[str, Any]] = []  # --json: {"file", "kind", "ok", "problems", "warnings"}
    if args.config:
        try:
            profile = _profile(args.config)
        except ConfigError as exc:
            for line in exc.problems:
                _err(line)
            return 1
        for warning in filter(None, [_missing_agent_binary(profile), *_exposed(profile)]):
            _err(warning)
    for name in args.files:
        path = Path(name)
        row: dict[str, Any] = {"file": name, "kind": None, "ok": False, "problems": [],
                               "warnings": []}  # fmt: skip
        results.append(row)
        try:
            if looks_like_profile(path):
                row["kind"] = "profile"
                loaded = load_profile(path)
                for warning in filter(None, [_missing_agent_binary(loaded), *_exposed(loaded)]):
                    row["warnings"].append(warning)
                    _err(warning)
                require_tmux(path)
            else:
                row["kind"] = "task"
                base = profile or LoadedProfile(
                    path=path.resolve(), spec=Profile.model_validate({"agent": {"command": ["x"]}})
                )
                cli_cluster.task_warnings(row, load_task(path, base), profile)
        except ConfigError as exc:
            row["problems"] = list(exc.problems)
            for line in exc.problems:
                _err(line)
            continue
        row["ok"] = True
        if not args.json:
            print(escape_controls(f"ok: {path} ({row['kind']})"))
    if args.json:
        print(json.dumps(results, indent=2))
    return 0 if all(row["ok"] for row in results) else 1


def _missing_agent_binary(profile: LoadedProfile) -> str | None:
    """A warning line when the agent's program is not found on the ``PATH`` the agent
    will run with (the engine's, or ``[agent.env] PATH``); ``None`` when it is found or
    cannot be known (a ``{placeholder}``). A missing program ends every task ``failed``
    with exit 127 and ``failure_reason`` ``launch``."""
    import shutil

    agent = profile.spec.agent
    program = agent.binary if agent.kind == "claude" else (agent.command or [""])[0]
    key = "binary" if agent.kind == "claude" else "command[0]"
    if not program or "{" in program:
        return None
    search = agent.env.get("PATH", os.environ.get("PATH", ""))
    if shutil.which(program, path=search):
        return None
    return escape_controls(
        f"warning: {profile.path}: [agent] {key} {program!r} is not found on PATH "
        f"({search}); every task would fail with exit 127. Fix: set [agent] {key} to the "
        "program's absolute path, or add its folder to [agent.env] PATH"
    )


def _exposed(profile: LoadedProfile) -> list[str]:
    """``validate``'s lines for readable folders (folderaccess.py), thresholds (heartbeats.py)."""
    from supervisor.folderaccess import exposure_warnings

    return [f"warning: {line}" for line in exposure_warnings(profile)] + heartbeats.check(profile)


def cmd_submit(args: argparse.Namespace) -> int:
    import tomli_w

    from supervisor.config import load_task
    from supervisor.submission import place

    profile = _profile(args.config)
    source = Path(args.task).resolve()
    resolved = load_task(source, profile)
    if profile.spec.cluster is not None:  # into the fleet's database, not the spool
        return cli_cluster.submit(profile, resolved, args.json)
    spec = resolved.spec
    data: dict[str, Any] = spec.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    data["name"] = spec.name
    data["project_dir"] = str(spec.project_dir)
    if spec.prompt_file is not None:
        data["prompt_file"] = str(spec.prompt_file)
    spool_dir = profile.spool_dir  # never replaces a file or reuses an id (submission.py)
    task_id = place(spool_dir, profile.tasks_dir, spec.name, tomli_w.dumps(data).encode())
    warn_no_engine(profile, "the task waits in the spool")
    if args.json:
        print(json.dumps({"task_id": task_id, "name": spec.name,
                          "spool_file": str(spool_dir / f"{task_id}.toml")}))  # fmt: skip
    else:
        print(task_id)
    return 0


def warn_no_engine(profile: LoadedProfile, what: str) -> None:
    """One stderr line when no live engine holds the profile's state dir
    (:func:`supervisor.engine_probe.warning`)."""
    from supervisor import engine_probe

    warning = engine_probe.warning(profile.state_dir, profile.path, what)
    if warning:
        _err(warning)


def cmd_status(args: argparse.Namespace) -> int:
    if args.cluster:
        return cli_cluster.status_cluster(args)
    if not args.config:
        _err("supervise status: -c/--config PROFILE is required (or --cluster)")
        return 2
    if args.archived:
        return cli_ops.print_archived(_profile(args.config), args.json)
    from supervisor.profilepaths import read_paths  # status needs only the two folders

    return views_status.run(read_paths(args.config) or _profile(args.config), args)


def cmd_top(args: argparse.Namespace) -> int:
    from supervisor.views import top

    if top.textual_missing():  # before loading the profile: the fix is the same either way
        return top.run(None)
    return top.run(_profile(args.config))


def cmd_show(args: argparse.Namespace) -> int:
    profile = _profile(args.config)
    path = profile.tasks_dir / args.task_id / "manifest.json"
    if "/" in args.task_id or not path.exists():
        _err(f"no task {args.task_id!r} in {profile.tasks_dir}; see 'supervise status -c ...'")
        return 1
    from supervisor.terminal import escape_json_text

    sys.stdout.write(escape_json_text(path.read_text(encoding="utf-8", errors="replace")))
    return 0


def _task_dir(profile: LoadedProfile, task_id: str) -> Path | None:
    path = profile.tasks_dir / task_id
    if "/" in task_id or task_id.startswith(".") or not (path / "manifest.json").exists():
        _err(f"no task {task_id!r} in {profile.tasks_dir}; see 'supervise status -c ...'")
        return None
    return path


def _request(args: argparse.Namespace, verb: str) -> int:
    from supervisor import control, engine_probe
    from supervisor.states import TERMINAL, Status

    profile = _profile(args.config)
    folder = _task_dir(profile, args.task_id)
    if folder is None:
        return 1
    manifest_path = folder / "manifest.json"
    try:
        before = json.loads(manifest_path.read_text(encoding="utf-8"))
        if not isinstance(before, dict) or not isinstance(before.get("status"), str):
            raise ValueError("no 'status'")
        before.setdefault("retry_count", 0)
    except (OSError, ValueError) as exc:
        _err(f"{manifest_path}: cannot read the manifest ({exc}); see 'supervise status'")
        return 1
    refused = control.refusal(args.task_id, before["status"], verb)
    if refused:
        _err(refused)
        return 1
    control.request(profile.state_dir, args.task_id, verb)
    found = engine_probe.engine(profile.state_dir)
    if not found.lock_held:
        _err(f"queued '{verb}' for {args.task_id}; no engine runs on {profile.state_dir}, "
             "so it happens when 'supervise run' starts")  # fmt: skip
        return _said(args, verb, "queued", before, EXIT_QUEUED)
    if found.state != "running":
        warn_no_engine(profile, f"'{verb}' waits until it moves")
    deadline = time.time() + args.wait
    while time.time() < deadline:
        try:
            after = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # replaced atomically; a damaged one is looked at again
            time.sleep(0.1)
            continue
        if verb == "stop":
            acted = after["status"] in TERMINAL
        elif verb in ("approve", "deny"):
            acted = after["status"] != Status.ESCALATED
        else:
            acted = after["retry_count"] > before["retry_count"] or after["status"] in TERMINAL
        if acted:
            if not args.json:
                print(f"{args.task_id}: {after['status']} (retry_count {after['retry_count']})")
            return _said(args, verb, "applied", after, 0)
        time.sleep(0.1)
    _err(f"requested '{verb}' for {args.task_id}; the engine has not applied it within "
         f"{args.wait:g} s (the request stays in {profile.state_dir / 'control'})")  # fmt: skip
    return _said(args, verb, "not_applied", before, EXIT_NOT_APPLIED)


def _said(args: argparse.Namespace, verb: str, result: str, manifest: dict, code: int) -> int:
    """With ``--json``, print ``{"task_id", "verb", "result", "status", "retry_count"}``
    (``result``: ``applied``, ``queued`` or ``not_applied``); return ``code``."""
    if args.json:
        print(json.dumps({"task_id": args.task_id, "verb": verb, "result": result,
                          "status": manifest.get("status"),
                          "retry_count": manifest.get("retry_count")}))  # fmt: skip
    return code


def cmd_stop(args: argparse.Namespace) -> int:
    return _request(args, "stop")


def cmd_resume(args: argparse.Namespace) -> int:
    return _request(args, "resume")


def cmd_approve(args: argparse.Namespace) -> int:
    return _request(args, "approve")


def cmd_deny(args: argparse.Namespace) -> int:
    return _request(args, "deny")


def cmd_tail(args: argparse.Namespace) -> int:
    profile = _profile(args.config)
    folder = _task_dir(profile, args.task_id)
    if folder is None:
        return 1
    from supervisor.states import TERMINAL
    from supervisor.taskdir import TaskDir

    task = TaskDir(folder)
    # output.log is filtered at capture, but a log from an older version or a file put
    # there by hand is not: escape here as well.
    sys.stdout.write(escape_controls(task.output_tail(args.lines), keep="\n\t") + "\n")
    if not args.follow:
        return 0
    import codecs

    # Incremental: a UTF-8 character split across two reads is decoded whole.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    log_path = folder / "output.log"
    position = log_path.stat().st_size if log_path.exists() else 0
    while True:
        if log_path.exists() and log_path.stat().st_size > position:
            with open(log_path, "rb") as handle:
                handle.seek(position)
                chunk = handle.read()
            position += len(chunk)
            sys.stdout.write(escape_controls(decoder.decode(chunk), keep="\n\t"))
            sys.stdout.flush()
        elif task.read_manifest().status in TERMINAL:
            return 0
        time.sleep(0.25)


def cmd_attach(args: argparse.Namespace) -> int:
    import shutil

    profile = _profile(args.config)
    if _task_dir(profile, args.task_id) is None:
        return 1
    tmux = shutil.which("tmux") or "tmux"
    socket = profile.socket_name
    argv = [tmux, "-L", socket, "attach-session", "-t", f"={args.task_id}"]
    if args.read_only:
        argv.insert(4, "-r")
    os.execvp(tmux, argv)
    return 1  # pragma: no cover - execvp does not return


def cmd_config(args: argparse.Namespace) -> int:
    from supervisor.config import effective_policy, load_task
    from supervisor.config.workspace import workspace_rows

    profile = _profile(args.config)
    if args.task:
        resolved = load_task(args.task, profile)
        policy, sources = resolved.policy, resolved.sources
    else:
        policy, sources = effective_policy(profile.spec.monitor, None)
    values = policy.model_dump(mode="json")
    rows = [{"key": k, "value": json.dumps(v), "source": sources.get(k, "default")}
            for k, v in values.items()]  # fmt: skip
    task_ws = resolved.spec.workspace if args.task else None
    for key, value, source in workspace_rows(profile.spec.workspace, task_ws):
        values[key] = value
        rows.append({"key": key, "value": json.dumps(value), "source": source})
    if args.json:
        print(json.dumps({r["key"]: {"value": values[r["key"]], "source": r["source"]}
                          for r in rows}, indent=2))  # fmt: skip
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
    sub = parser.add_subparsers(dest="command", required=True)
    cli_ops.register(sub)  # run, wait, archive

    validate = sub.add_parser("validate", help="check profile and task files")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.add_argument(
        "-c", "--config", help="profile to check tasks against (model aliases, policy)"
    )
    validate.add_argument("--json", action="store_true", help="one result per file as JSON")
    validate.set_defaults(func=cmd_validate)

    submit = sub.add_parser("submit", help="validate a task file and drop it into the spool")
    submit.add_argument("-c", "--config", required=True, help="profile TOML file")
    submit.add_argument("task", help="task TOML file")
    submit.add_argument("--json", action="store_true", help="print the id as JSON")
    submit.set_defaults(func=cmd_submit)

    status = sub.add_parser("status", help="list tasks and their state")
    status.add_argument("-c", "--config", help="profile TOML file")
    views_status.add_arguments(status)
    status.add_argument("--cluster", action="store_true", help=CLUSTER_HELP)
    status.add_argument("--archived", action="store_true", help="list the archived tasks")
    status.set_defaults(func=cmd_status)

    register_top(sub, cmd_top)
    show = sub.add_parser("show", help="print one task's manifest.json")
    show.add_argument("-c", "--config", required=True, help="profile TOML file")
    show.add_argument("task_id")
    show.set_defaults(func=cmd_show)

    for name, func, text in (
        ("stop", cmd_stop, "end a task now as abandoned (reason 'stopped'), with a clean stop"),
        ("resume", cmd_resume, "stop the agent and resume it now with the resume command"),
        ("approve", cmd_approve, "allow the request an escalated task waits on (or unpause it)"),
        ("deny", cmd_deny, "refuse the request an escalated task waits on"),
    ):
        verb = sub.add_parser(name, help=text)
        verb.add_argument("-c", "--config", required=True, help="profile TOML file")
        verb.add_argument("task_id")
        verb.add_argument(
            "--wait", type=float, default=15.0, help="seconds to wait for the engine (15)"
        )
        verb.add_argument("--json", action="store_true", help="print the result as JSON")
        verb.set_defaults(func=func)

    tail = sub.add_parser("tail", help="print the end of a task's output.log")
    tail.add_argument("-c", "--config", required=True, help="profile TOML file")
    tail.add_argument("task_id")
    tail.add_argument("-n", "--lines", type=int, default=20, help="lines to print (20)")
    tail.add_argument("-f", "--follow", action="store_true", help="follow until the task ends")
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
    cli_setup.register(sub)  # init, schema, startup, completion
    cli_cluster.register(sub)  # cluster init|check, hosts (extra 'cluster')
    cli_followup.register(sub)  # continue (issue 22)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Console entry point. Returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        for line in exc.problems:
            _err(line)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `supervise ... | head` left early: no traceback (Python docs)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a program killed by it


if __name__ == "__main__":
    sys.exit(main())
