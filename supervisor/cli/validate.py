"""``supervise validate [-c PROFILE] FILE... [--json]``: check profiles and task files.

Every problem of a file is reported at once (the loaders set a bad value aside and go on:
:mod:`supervisor.config.salvage`), one line each on stderr, naming the file, the key and
the fix; ``ok: FILE (kind)`` on stdout for a file without problems. ``--json`` prints one
``{"file", "kind", "ok", "problems", "warnings"}`` object per file instead of the ``ok``
lines.

What the profile needs at run time is checked too (issue 22 item 8):

- **tmux** missing is a *problem* (exit 1): no task can run anywhere without it, and the
  engine refuses to start (:func:`supervisor.tmux.missing_tmux`).
- **the agent's program** and **the notifier's program** not found are *warnings* (exit
  0): they are looked up on the ``PATH`` the engine will have, which is often not the one
  ``validate`` runs with (a systemd unit's ``PATH``, ``[agent.env] PATH``, a profile
  validated in CI for another machine). A missing agent program ends every task ``failed``
  (exit 127, ``failure_reason`` ``launch``); a missing notifier is logged and never blocks
  a task (:mod:`supervisor.engine.notify`), so neither is proof the profile is wrong.

Exit codes (as :mod:`supervisor.cli`): 0 every file is fine, 1 one or more has a problem, 2
usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor.cli.common import err, load_profile
from supervisor.errors import ConfigError
from supervisor.terminal import escape_controls

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile


def missing_program(program: str, search: str, where: str, fix: str) -> str | None:
    """A ``warning:`` line when ``program`` (a name or a path) is not found on ``search``
    (a ``PATH`` value); ``None`` when it is found, or is empty or a ``{placeholder}`` that
    only a task fills in. ``where`` names the file and key, ``fix`` ends the line."""
    if not program or "{" in program or shutil.which(program, path=search):
        return None
    return escape_controls(f"warning: {where} {program!r} is not found on PATH ({search}); {fix}")


def missing_agent_binary(profile: LoadedProfile) -> str | None:
    """The warning for an agent program not on the ``PATH`` the agent will run with (the
    engine's, or ``[agent.env] PATH``): every task would fail with exit 127 and
    ``failure_reason`` ``launch``."""
    agent = profile.spec.agent
    program = agent.binary if agent.kind == "claude" else (agent.command or [""])[0]
    key = "binary" if agent.kind == "claude" else "command[0]"
    search = agent.env.get("PATH", os.environ.get("PATH", ""))
    return missing_program(
        program,
        search,
        f"{profile.path}: [agent] {key}",
        f"every task would fail with exit 127. Fix: set [agent] {key} to the program's "
        "absolute path, or add its folder to [agent.env] PATH",
    )


def missing_notifier(profile: LoadedProfile) -> str | None:
    """The warning for a notifier program (the effective ``notifier[0]``: the profile's,
    or ``MONITOR_NOTIFIER``) not on the engine's ``PATH`` (the notifier runs with the
    engine's environment, :func:`supervisor.engine.notify.run_notifier`)."""
    from supervisor.config import effective_policy

    try:
        policy, sources = effective_policy(profile.spec.monitor)
    except ConfigError:
        return None  # the profile's own problem lines say why
    program = (policy.notifier or [""])[0]
    key = "MONITOR_NOTIFIER" if sources.get("notifier") == "env" else "[monitor] notifier"
    return missing_program(
        program,
        os.environ.get("PATH", ""),
        f"{profile.path}: {key}",
        "no notification would be sent (each failure is logged). Fix: give the program's "
        "absolute path, install it, or set notifier = [] (README: notifier recipes)",
    )


def profile_warnings(profile: LoadedProfile) -> list[str]:
    """Every warning line ``validate`` prints for a profile that loads: the agent's and the
    notifier's programs, folders other users can read (:mod:`supervisor.folderaccess`),
    thresholds shorter than the agent's heartbeat (:mod:`supervisor.heartbeats`)."""
    from supervisor import heartbeats
    from supervisor.folderaccess import exposure_warnings

    found = [missing_agent_binary(profile), missing_notifier(profile)]
    exposed = [f"warning: {line}" for line in exposure_warnings(profile)]
    return [line for line in found if line] + exposed + heartbeats.check(profile)


def cmd_validate(args: argparse.Namespace) -> int:
    """``supervise validate``: see the module docstring. Returns the exit status."""
    profile: LoadedProfile | None = None
    if args.config:
        try:
            profile = load_profile(args.config)
        except ConfigError as exc:
            for line in exc.problems:
                err(line)
            return 1
        for warning in profile_warnings(profile):
            err(warning)
    results = [_check_file(Path(name), profile, args.json) for name in args.files]
    if args.json:
        print(json.dumps(results, indent=2))
    return 0 if all(row["ok"] for row in results) else 1


def _check_file(path: Path, profile: LoadedProfile | None, as_json: bool) -> dict[str, Any]:
    """Validate one file; print its lines; return its ``--json`` row."""
    from supervisor.cli import cluster as cli_cluster
    from supervisor.config import load_task, looks_like_profile

    row: dict[str, Any] = {
        "file": str(path),
        "kind": None,
        "ok": False,
        "problems": [],
        "warnings": [],
    }
    try:
        if _plan_file(path):
            from supervisor import plans  # the spool's machinery: only for a plan

            row["kind"] = "plan"
            plans.check(path.resolve(), profile or _any_profile(path))
        elif looks_like_profile(path):
            row["kind"] = "profile"
            row["problems"] = _profile_file(path, row["warnings"])
        else:
            row["kind"] = "task"
            task = load_task(path, profile or _any_profile(path))
            cli_cluster.task_warnings(row, task, profile)
            if task.spec.attempts is not None:  # issue 26: each attempt needs a worktree
                _attempts_problems(path, task, profile or _any_profile(path), row)
    except ConfigError as exc:
        row["problems"] = list(exc.problems)
    for line in row["problems"]:
        err(line)
    row["ok"] = not row["problems"]
    if row["ok"] and not as_json:
        print(escape_controls(f"ok: {path} ({row['kind']})"))
    return row


def _attempts_problems(path: Path, task: Any, profile: LoadedProfile, row: dict[str, Any]) -> None:
    """Add to ``row`` why the attempts of ``task`` would not each get a worktree."""
    from supervisor import attempts

    problem = attempts.worktree_problem(task, profile, path)
    if problem is not None:
        row["problems"].append(problem)


def _any_profile(path: Path) -> LoadedProfile:
    """A profile that lets a task or plan file be checked without ``-c``: no model
    aliases, the default policy."""
    from supervisor.config import LoadedProfile, Profile

    spec = Profile.model_validate({"agent": {"command": ["x"]}})
    return LoadedProfile(path=path.resolve(), spec=spec)


def _plan_file(path: Path) -> bool:
    """Whether ``path`` is a plan file (issue 26: ``[[tasks]]`` tables and no ``[agent]``;
    a profile may hold ``[[tasks]]`` too).

    Raises:
        ConfigError: the file cannot be read or is not valid TOML.
    """
    from supervisor.config import MAX_TASK_FILE_BYTES
    from supervisor.config.tomlfile import read_toml

    with contextlib.suppress(OSError):  # a huge file: no plan (the loaders say why)
        if os.stat(path).st_size > MAX_TASK_FILE_BYTES:
            return False
    _, data = read_toml(path.resolve())
    return isinstance(data.get("tasks"), list) and "agent" not in data


def _profile_file(path: Path, warnings: list[str]) -> list[str]:
    """A profile file's problem lines (the loader's, then tmux's); its warnings printed
    and added to ``warnings``."""
    from supervisor.tmux import missing_tmux

    problems: list[str] = []
    try:
        loaded = load_profile(path)
    except ConfigError as exc:
        problems += exc.problems
    else:
        for warning in profile_warnings(loaded):
            warnings.append(warning)
            err(warning)
    tmux = missing_tmux()
    if tmux is not None:
        problems.append(f"{path}: {tmux}")
    return problems


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``validate`` to the subcommands."""
    validate = sub.add_parser("validate", help="check profile and task files")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.add_argument(
        "-c", "--config", help="profile to check tasks against (model aliases, policy)"
    )
    validate.add_argument("--json", action="store_true", help="one result per file as JSON")
    validate.set_defaults(func=cmd_validate)
