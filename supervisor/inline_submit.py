"""``supervise submit``: a task from a file, from stdin, or from flags (issue 22 item 4).

Commands::

    supervise submit -c PROFILE TASK.toml [--json] [--wait [--timeout S] [--terminal-only]]
    supervise submit -c PROFILE - [--json] [--wait ...]          a task file on stdin
    supervise submit -c PROFILE --prompt TEXT --project DIR [--name N] [--model M]
                     [--set KEY=VALUE]... [--json] [--wait [--timeout S]]
    supervise submit -c PROFILE --prompt-file F|- --project DIR ...   the prompt in a file
                                                                      (``-``: from stdin)

Every way ends in one place: the task table is validated by
:func:`supervisor.config.loading.task_from_table` (the checks and one-line errors of a task
file, ``task_may_set`` included) and goes into the spool through
:func:`supervisor.submission.place`, or into the fleet's database for a ``[cluster]``
profile, exactly as a file submit. ``--wait`` then runs ``supervise wait`` on the new id
(its output and exit codes). Relative paths in flags and on stdin resolve against the
current folder; in a task file, against the file's folder.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor.cli.common import (
    EXIT_USAGE,
    Parser,
    load_profile,
    missing_cluster_extra,
    seconds,
    warn_no_engine,
)
from supervisor.errors import ConfigError
from supervisor.terminal import escape_controls

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile, ResolvedTask

#: The name error lines of an inline task start with (it has no file).
INLINE = Path("inline task")
#: The name error lines of a task file read from stdin start with.
STDIN = Path("<stdin>")
#: The keys the dedicated flags set (``--set`` may not set them again).
FLAG_KEYS = {
    "prompt": "--prompt",
    "prompt_file": "--prompt-file",
    "project_dir": "--project",
    "name": "--name",
    "model": "--model",
}


def resolve_fields(
    profile: LoadedProfile,
    fields: dict[str, Any],
    base: Path | None = None,
    shown: Path = INLINE,
) -> ResolvedTask:
    """Validate a task table given as a dict (the keys of a task file) as a task file is.

    Args:
        fields: ``{"name", "prompt" | "prompt_file", "project_dir", ...}``; ``None``
            values are left out.
        base: the folder relative paths resolve against (default: the current folder).
        shown: the name error lines start with.

    Raises:
        ConfigError: one line per problem (the task file's lines, without line numbers).
    """
    from supervisor.config.loading import task_from_table

    data = {key: value for key, value in fields.items() if value is not None}
    return task_from_table(data, profile, base or Path.cwd(), shown)


def place_task(
    profile: LoadedProfile, resolved: ResolvedTask, retry_for: float = 0.0
) -> dict[str, Any]:
    """Put a validated task where the engine takes it: the spool, or the fleet's database
    for a ``[cluster]`` profile (``retry_for``: seconds to ride out a database that does
    not answer, :func:`supervisor.cluster.submit.submit`). Returns ``{"task_id", "name",
    "spool_file"}`` (spool) or ``{"task_id", "name", "queue", "job_id"}`` (cluster).

    Raises:
        ConfigError: the spool cannot take the file (:mod:`supervisor.submission`), the
            ``cluster`` extra is missing, or the database refused (one line).
    """
    import tomli_w

    from supervisor.submission import place

    spec = resolved.spec
    if profile.spec.cluster is not None:
        return _place_in_fleet(profile, resolved, retry_for)
    # by alias: the file says `[workspace] copy`, the model `copy_paths`
    data: dict[str, Any] = spec.model_dump(
        mode="json", exclude_none=True, exclude_defaults=True, by_alias=True
    )
    data["name"] = spec.name
    data["project_dir"] = str(spec.project_dir)
    if spec.prompt_file is not None:
        data["prompt_file"] = str(spec.prompt_file)
    spool_dir = profile.spool_dir  # never replaces a file or reuses an id (submission.py)
    task_id = place(spool_dir, profile.tasks_dir, spec.name, tomli_w.dumps(data).encode())
    return {"task_id": task_id, "name": spec.name, "spool_file": str(spool_dir / f"{task_id}.toml")}


def _place_in_fleet(
    profile: LoadedProfile, resolved: ResolvedTask, retry_for: float
) -> dict[str, Any]:
    try:
        from supervisor.cluster.db import ClusterError, dsn_of
        from supervisor.cluster.roles import denied_line
        from supervisor.cluster.submit import submit
    except ImportError:
        raise ConfigError(
            [
                "the cluster commands need the 'cluster' extra: pip install "
                "'supervise-agents[cluster]'"
            ]
        ) from None
    dsn = dsn_of(profile)
    try:
        done = submit(dsn, profile, resolved, retry_for, on_retry=_say_retrying)
    except ClusterError as exc:
        denied = denied_line("submit", dsn, exc)
        raise ConfigError([f"{denied}; nothing was submitted" if denied else str(exc)]) from None
    return {
        "task_id": done.task_id,
        "name": resolved.spec.name,
        "queue": done.queue,
        "job_id": done.job_id,
    }


def _say_retrying(problem: str, seconds_left: float) -> None:
    """``--retry-for``'s one line when the database does not answer (then it is quiet)."""
    print(
        f"supervise submit: {problem}; retrying for up to {seconds_left:.0f} s",
        file=sys.stderr,
        flush=True,
    )


def submit_fields(
    profile: LoadedProfile,
    fields: dict[str, Any],
    *,
    base: Path | None = None,
    shown: Path = INLINE,
) -> str:
    """Validate ``fields`` (a task file's keys as a dict) and submit the task; returns its
    id. The path of ``supervise submit --prompt`` and of the MCP ``submit`` tool.

    Raises:
        ConfigError: one line per problem (:func:`resolve_fields`, :func:`place_task`).
    """
    return str(place_task(profile, resolve_fields(profile, fields, base, shown))["task_id"])


# ---------------------------------------------------------------- the command


def parse_set(items: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as a nested table: a dotted ``KEY`` names a sub-table
    (``monitor.deadline=3600``); ``VALUE`` is read as a TOML value when it is one
    (``3600``, ``true``, ``["pytest", "-q"]``, ``"text"``) and as a plain string otherwise.

    Raises:
        ConfigError: an item without ``=``, an empty key part, a key set twice, or a key a
            dedicated flag sets.
    """
    table: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        parts = [part.strip() for part in key.split(".")]
        if not sep or not all(parts):
            raise ConfigError([f"--set {item!r}: give KEY=VALUE, e.g. monitor.deadline=3600"])
        if parts[0] in FLAG_KEYS:
            raise ConfigError([f"--set {key}: use {FLAG_KEYS[parts[0]]} for this key"])
        try:
            value: Any = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = table
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError([f"--set {key}: {part!r} is already set to a value"])
        if parts[-1] in node:
            raise ConfigError([f"--set {key}: given twice; give each key once"])
        node[parts[-1]] = value
    return table


def _stdin_text(what: str) -> bytes:
    """Stdin's bytes, at most the task file limit (a larger input is one line)."""
    from supervisor.config import MAX_TASK_FILE_BYTES, too_big

    if sys.stdin is None or sys.stdin.isatty():
        raise ConfigError(
            [
                f"{what}: stdin is a terminal; pipe the text in, e.g. "
                "'... | supervise submit -c PROFILE -'"
            ]
        )
    raw = sys.stdin.buffer.read(MAX_TASK_FILE_BYTES + 1)
    if len(raw) > MAX_TASK_FILE_BYTES:
        raise ConfigError([too_big(STDIN, len(raw))])
    return raw


def _inline_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The task table the flags give (``--prompt-file -``: the prompt read from stdin)."""
    fields = parse_set(args.set or [])
    if args.prompt is not None and args.prompt_file is not None:
        raise ConfigError(["supervise submit: give --prompt or --prompt-file, not both"])
    if args.prompt is None and args.prompt_file is None:
        raise ConfigError(
            [
                "supervise submit: give a task file, '-' (a task file on stdin), "
                "--prompt TEXT or --prompt-file FILE"
            ]
        )
    if args.project is None:
        raise ConfigError(
            [
                "supervise submit: --project DIR is required with --prompt and "
                "--prompt-file (the folder the agent works in)"
            ]
        )
    project = Path(args.project).expanduser()
    if args.prompt_file == "-":
        raw = _stdin_text("--prompt-file -")
        try:
            fields["prompt"] = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError([f"--prompt-file -: not UTF-8 text (byte {exc.start})"]) from None
    elif args.prompt_file is not None:
        fields["prompt_file"] = str(Path(args.prompt_file).expanduser())
    else:
        fields["prompt"] = args.prompt
    fields["project_dir"] = str(project)
    fields["name"] = args.name or project.resolve().name or "task"
    fields["model"] = args.model
    return fields


def _resolved(args: argparse.Namespace, profile: LoadedProfile) -> ResolvedTask:
    """The task the arguments name: a file, stdin (``-``) or the inline flags."""
    from supervisor.config import load_task
    from supervisor.config.loading import task_from_table
    from supervisor.config.tomlfile import toml_table

    given = {
        "--prompt": args.prompt,
        "--prompt-file": args.prompt_file,
        "--project": args.project,
        "--name": args.name,
        "--model": args.model,
        "--set": args.set,
    }
    inline = [flag for flag, value in given.items() if value]
    # A fleet's task runs on the host that claims it: its project_dir is checked there
    # (issue 25), unless --check-local asks for the check here too.
    local = profile.spec.cluster is None or args.check_local
    if args.task is None:
        fields = {k: v for k, v in _inline_fields(args).items() if v is not None}
        return task_from_table(fields, profile, Path.cwd(), INLINE, check_project=local)
    if inline:
        raise ConfigError(
            [
                f"supervise submit: {', '.join(inline)} cannot be combined with a "
                "task file; put the keys in the file, or leave the file out"
            ]
        )
    if args.task == "-":
        text, data = toml_table(_stdin_text("supervise submit -"), STDIN)
        return task_from_table(data, profile, Path.cwd(), STDIN, text, check_project=local)
    return load_task(Path(args.task).resolve(), profile, check_project=local)


def cmd_submit(args: argparse.Namespace, whole: Parser) -> int:
    """``supervise submit``: validate, place, print the id (``--json``: the placement);
    with ``--wait``, then ``supervise wait`` on it (its output and exit status), through the
    whole parser that ``whole()`` builds (handed over by :func:`register`)."""
    if (args.timeout is not None or args.terminal_only) and not args.wait:
        raise ConfigError(
            ["supervise submit: --timeout and --terminal-only are --wait's; add --wait"]
        )
    profile = load_profile(args.config)
    if args.retry_for is not None and profile.spec.cluster is None:
        raise ConfigError(
            [
                f"supervise submit: --retry-for is for a [cluster] profile ({profile.path} "
                "has none: its spool folder needs no database)"
            ]
        )
    if args.task not in (None, "-") and _plan(args):
        from supervisor import plans

        placed = plans.submit(Path(args.task).resolve(), profile)
        print(json.dumps(placed) if args.json else escape_controls(placed["plan_file"]))
        return 0
    resolved = _resolved(args, profile)
    if profile.spec.cluster is not None and missing_cluster_extra():
        return EXIT_USAGE
    placed = place_task(profile, resolved, args.retry_for or 0.0)
    if profile.spec.cluster is None:
        warn_no_engine(profile, "the task waits in the spool")
    if not args.wait:
        print(json.dumps(placed) if args.json else escape_controls(placed["task_id"]))
        return 0
    if not args.json:  # the id first, so a caller can act on it while the wait runs
        print(placed["task_id"], flush=True)
    return _wait(args, placed["task_id"], whole)


def _plan(args: argparse.Namespace) -> bool:
    """Whether ``args.task`` is a plan file (issue 26: ``[[tasks]]``); no ``--wait`` then,
    nor for a task with ``attempts`` (submitted as a task: the id printed is its group's).

    Raises:
        ConfigError: a plan or attempts with ``--wait`` (they end one by one).
    """
    from supervisor import plans

    kind = plans.several(Path(args.task))
    if kind is None:
        return False
    if args.wait:
        what = "task of the plan" if kind == "plan" else "attempt (supervise attempts ID)"
        raise ConfigError([f"supervise submit: --wait takes one task; wait for each {what}"])
    return kind == "plan"


def _wait(args: argparse.Namespace, task_id: str, whole: Parser) -> int:
    """``supervise wait -c PROFILE ID [--timeout S] [--json]`` through the CLI's own
    parser (``whole()``), so the fleet's routing and ``wait``'s exit codes apply unchanged."""
    argv = ["wait", "-c", args.config, task_id]
    if args.timeout is not None:
        argv += ["--timeout", str(args.timeout)]
    if args.json:
        argv.append("--json")
    if args.terminal_only:
        argv.append("--terminal-only")
    waited = whole().parse_args(argv)
    return int(waited.func(waited))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], whole: Parser) -> None:
    """Add ``submit`` to the ``supervise`` parser; ``whole()`` builds the whole parser
    (:func:`supervisor.cli.app.build_parser`: ``submit --wait`` runs ``wait`` through it)."""
    submit = sub.add_parser(
        "submit", help="validate a task (a file, '-' for stdin, or --prompt) and spool it"
    )
    submit.add_argument("-c", "--config", required=True, help="profile TOML file")
    submit.add_argument("task", nargs="?", help="task TOML file ('-': read it from stdin)")
    submit.add_argument("--prompt", help="the prompt, instead of a task file")
    submit.add_argument(
        "--prompt-file",
        metavar="FILE",
        help="read the prompt from FILE ('-': stdin), instead of a task file",
    )
    submit.add_argument("--project", metavar="DIR", help="project folder (with --prompt)")
    submit.add_argument("--name", help="task name (default: the project folder's name)")
    submit.add_argument("--model", help="model alias or id (default: the profile's)")
    submit.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any other task key, dotted for tables: monitor.deadline=3600, "
        "acceptance.command='[\"pytest\"]' (repeatable)",
    )
    submit.add_argument("--json", action="store_true", help="print the id as JSON")
    submit.add_argument(
        "--wait", action="store_true", help="then wait for the task as 'supervise wait' does"
    )
    submit.add_argument(
        "--terminal-only",
        action="store_true",
        help="with --wait: wait through escalations, as 'supervise wait --terminal-only'",
    )
    submit.add_argument(
        "--timeout", type=seconds, help="with --wait: give up after S seconds (exit 124)"
    )
    submit.add_argument(
        "--retry-for",
        type=seconds,
        metavar="S",
        help="[cluster]: ride out a database that does not answer (a restart) for up to S "
        "seconds; the task is stored once",
    )
    submit.add_argument(
        "--check-local",
        action="store_true",
        help="[cluster]: check here that project_dir exists (else the host that runs the "
        "task checks it)",
    )
    submit.set_defaults(func=functools.partial(cmd_submit, whole=whole))
