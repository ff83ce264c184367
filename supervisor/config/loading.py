"""Loading profiles and tasks: validation, paths, prompts, model aliases and the policy.

Monitor policy precedence, highest first (issue 2):

1. the task's own ``[monitor]`` table,
2. ``MONITOR_*`` environment variables (:mod:`supervisor.config.env`),
3. the profile's ``[monitor]`` table,
4. built-in defaults (the seed monitor's: base 30 s, max 300 s, deadline 18000 s, grace 30 s).

Every error is raised as :class:`ConfigError`, whose ``problems`` are one line each, naming
the file, the TOML key (with its line where known), what is wrong and what is allowed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from supervisor import accounts
from supervisor.config.argsize import env_problems, prompt_problems
from supervisor.config.attemptkeys import attempt_problems
from supervisor.config.env import read_env_overrides
from supervisor.config.models import (
    ALIAS_RE,
    EXAMPLE_MODEL,
    MAX_PROMPT_BYTES,
    MAX_TASK_FILE_BYTES,
    LoadedProfile,
    Profile,
    ResolvedTask,
    SecuritySpec,
    TaskSpec,
    default_socket_name,
)
from supervisor.config.monitor import MonitorOverrides, MonitorPolicy, error_message
from supervisor.config.plankeys import plan_problems
from supervisor.config.salvage import without_bad_values
from supervisor.config.tomlfile import format_errors, key_line, policy_line, read_toml
from supervisor.config.workspace import effective_workspace
from supervisor.diskio import FileTooBig, NotRegularFile, read_regular
from supervisor.errors import ConfigError
from supervisor.profilepaths import resolve


def effective_policy(
    profile_monitor: MonitorOverrides,
    task_monitor: MonitorOverrides | None = None,
) -> tuple[MonitorPolicy, dict[str, str]]:
    """Merge the four layers into one :class:`MonitorPolicy`.

    Returns:
        ``(policy, sources)`` where ``sources[key]`` is ``default``, ``profile``, ``env``
        or ``task``.

    Raises:
        ConfigError: a bad env override, or a merged result that breaks a rule
            (``max_interval < base_interval``).
    """
    layers = [
        ("profile", profile_monitor.model_dump(exclude_none=True)),
        ("env", read_env_overrides()),
        ("task", (task_monitor or MonitorOverrides()).model_dump(exclude_none=True)),
    ]
    merged: dict[str, Any] = {}
    sources = {name: "default" for name in MonitorPolicy.model_fields}
    for source, values in layers:
        for key, value in values.items():
            merged[key] = value
            sources[key] = source
    try:
        policy = MonitorPolicy(**merged)
    except ValidationError as exc:
        lines = []
        for item in exc.errors():
            message = error_message(item, MonitorPolicy)
            keys = [k for k in ("base_interval", "max_interval") if k in message] or [
                str(p) for p in item["loc"]
            ]
            origin = ", ".join(f"{k} from {sources.get(k, 'default')}" for k in keys)
            lines.append(f"monitor policy: {message} ({origin})")
        raise ConfigError(lines) from exc
    if "stale_threshold" not in merged:
        sources["stale_threshold"] = "default (3 x base_interval)"
    return policy, sources


def _read_prompt_file(path: Path) -> str:
    """Read a prompt file byte for byte (``\\r\\n`` kept). Only regular files up to
    :data:`MAX_PROMPT_BYTES` are read: a FIFO would block the engine, ``/dev/zero`` never ends.

    The file is opened once, non-blocking, and checked with ``fstat`` on that descriptor, so
    a path swapped for a FIFO after any earlier look is still refused, never waited on.

    Raises:
        ValueError: not a regular file, or too big. OSError, UnicodeDecodeError.
    """
    try:
        data = read_regular(path, MAX_PROMPT_BYTES)
    except (NotRegularFile, FileTooBig) as exc:  # their one line, without errno and path
        raise ValueError(exc.strerror) from exc
    return data.decode("utf-8")


_resolve = resolve  # the one rule for paths in profile and task files (profilepaths.py)


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def load_profile(path: Path | str) -> LoadedProfile:
    """Read and validate a profile file.

    Relative ``[paths]`` resolve against the profile's folder. Inline ``[[tasks]]`` are
    validated too, and the profile's policy is merged once with the environment so a bad
    ``MONITOR_*`` value is reported at load time.

    Raises:
        ConfigError: with one line per problem.
    """
    path = Path(path).resolve()
    text, data = read_toml(path)
    try:
        spec = Profile.model_validate(data)
    except ValidationError as exc:
        problems = format_errors(exc, path, text, Profile)
        rest = without_bad_values(Profile, data, exc)  # the checks below, on what is left
        if rest is not None:
            written = data.get("tasks")
            if len(rest.tasks) != (len(written) if isinstance(written, list) else 0):
                rest.tasks = []  # an inline task was set aside: the others' indexes moved
            problems += _checked_profile(rest, path, text)[1]
        raise ConfigError(problems) from exc
    loaded, problems = _checked_profile(spec, path, text)
    if problems:
        raise ConfigError(problems)
    return loaded


def _checked_profile(spec: Profile, path: Path, text: str) -> tuple[LoadedProfile, list[str]]:
    """The checks of a validated profile (paths resolved, the policy merged with the
    environment, the default model's alias, each inline task): ``(profile, problem lines)``."""
    base = path.parent
    spec.paths.spool_dir = _resolve(base, spec.paths.spool_dir)
    spec.paths.state_dir = _resolve(base, spec.paths.state_dir)
    if spec.tmux.socket_name is None:
        spec.tmux.socket_name = default_socket_name(spec.paths.state_dir)
    if spec.workspace.root is not None:
        spec.workspace.root = str(_resolve(base, Path(spec.workspace.root)))
    loaded = LoadedProfile(path=path, spec=spec)
    problems: list[str] = []
    try:
        effective_policy(spec.monitor, None)
    except ConfigError as exc:
        line = policy_line(text, ())
        at = f"{path}:{line}" if line else f"{path}"
        problems.extend(f"{at}: {p}" if p.startswith("monitor") else p for p in exc.problems)
    if spec.agent.default_model not in spec.agent.known_models() and ALIAS_RE.match(
        spec.agent.default_model
    ):
        line = key_line(text, ("agent", "default_model"))
        problems.append(
            f"{path}:{line}: key 'agent.default_model': unknown model alias "
            f"{spec.agent.default_model!r}; known aliases: "
            + ", ".join(sorted(spec.agent.known_models()))
        )
    for index, task in enumerate(spec.tasks):
        if task.attempts is not None:  # issue 26: a group is claimed from the spool
            problems.append(
                f"{path}:{key_line(text, ('tasks', index, 'attempts'))}: key "
                f"'tasks.{index}.attempts': a profile's [[tasks]] cannot have attempts; "
                "drop the task file with 'attempts' into the spool (supervise submit)"
            )
        try:
            resolve_task(task, loaded, base, path, text, loc_prefix=("tasks", index))
        except ConfigError as exc:
            problems.extend(exc.problems)
    return loaded, problems


def resolve_task(
    spec: TaskSpec,
    profile: LoadedProfile,
    base: Path,
    file: Path,
    text: str = "",
    loc_prefix: tuple[Any, ...] = (),
    check_project: bool = True,
) -> ResolvedTask:
    """Check a parsed task against its profile and compute what it needs to run.

    Resolves relative ``project_dir`` / ``prompt_file`` against ``base``, reads the prompt,
    looks up the model alias and merges the monitor policy. ``check_project`` False: a
    ``project_dir`` missing here is no problem (``supervise submit`` to a fleet: the host
    that claims the task checks it, issue 25).

    Raises:
        ConfigError: a missing ``project_dir``, unreadable ``prompt_file``, unknown model
            alias (the known ones are listed), a bad policy, or a prompt or ``env`` the
            agent's exec could not take (:mod:`supervisor.config.argsize`).
    """
    problems: list[str] = []

    def where(*keys: str) -> str:
        line = key_line(text, (*loc_prefix, *keys)) if text else None
        dotted = ".".join(str(p) for p in (*loc_prefix, *keys))
        return (f"{file}:{line}" if line else f"{file}") + f": key '{dotted}'"

    try:
        spec.project_dir = _resolve(base, spec.project_dir)
    except ValueError as exc:
        problems.append(f"{where('project_dir')}: not a usable path ({exc})")
    else:
        if check_project and not _is_dir(spec.project_dir):
            problems.append(
                f"{where('project_dir')}: folder {str(spec.project_dir)!r} does not exist; "
                "give an existing project folder (absolute, or relative to this file)"
            )
    prompt = _prompt(spec, base, where, problems)
    model = _model(spec, profile, where, problems)
    policy: MonitorPolicy | None = None
    sources: dict[str, str] = {}
    try:
        policy, sources = effective_policy(profile.spec.monitor, spec.monitor)
    except ConfigError as exc:
        line = policy_line(text, loc_prefix) if text else None
        at = f"{file}:{line}" if line else f"{file}"
        problems.extend(f"{at if p.startswith('monitor') else file}: {p}" for p in exc.problems)
    if spec.workspace is not None and spec.workspace.root is not None:
        try:
            spec.workspace.root = str(_resolve(base, Path(spec.workspace.root)))
        except ValueError as exc:
            problems.append(f"{where('workspace.root')}: not a usable path ({exc})")
    problems += _exec_problems(spec, profile, prompt, where)
    problems += _plan_problems(spec, profile, prompt, where)
    problems += _attempt_problems(spec, profile, where)
    models = tuple(_model(spec, profile, where, problems, one) for one in spec.models or ())
    if problems or policy is None or prompt is None:
        raise ConfigError(problems)
    rules = (*(spec.approval.rules if spec.approval else ()), *profile.spec.approval.rules)
    return ResolvedTask(
        spec=spec,
        prompt=prompt,
        model=model,
        policy=policy,
        sources=sources,
        rules=tuple(rules),
        acceptance=spec.acceptance or profile.spec.acceptance,
        workspace=effective_workspace(profile.spec.workspace, spec.workspace),
        account=accounts.of_task(profile.spec.agent.env, spec.env),
        attempt_models=models,
    )


def _prompt(
    spec: TaskSpec, base: Path, where: Callable[..., str], problems: list[str]
) -> str | None:
    """The task's prompt: ``prompt``, or ``prompt_file`` (resolved against ``base``) read;
    None with a line added to ``problems`` when the file cannot be read."""
    if spec.prompt_file is None:
        return spec.prompt
    try:
        spec.prompt_file = _resolve(base, spec.prompt_file)
        return _read_prompt_file(spec.prompt_file)
    except UnicodeDecodeError as exc:
        problems.append(
            f"{where('prompt_file')}: cannot read {str(spec.prompt_file)!r} as UTF-8 ({exc})"
        )
    except (OSError, ValueError) as exc:  # not a regular file, too big, unreadable
        problems.append(f"{where('prompt_file')}: cannot read {str(spec.prompt_file)!r} ({exc})")
    return None


def _model(
    spec: TaskSpec,
    profile: LoadedProfile,
    where: Callable[..., str],
    problems: list[str],
    one: str | None = None,
) -> str:
    """The task's model id (or that of ``one``, an entry of ``models``): its alias looked
    up in the profile's models; an unknown alias adds one line (listing the known ones) to
    ``problems``."""
    models = profile.spec.agent.known_models()
    wanted = one or spec.model or profile.spec.agent.default_model
    if wanted in models:
        return models[wanted]
    if ALIAS_RE.match(wanted):
        problems.append(
            f"{where('models' if one else 'model')}: unknown model alias {wanted!r}; "
            "known aliases: "
            + ", ".join(f"{k} ({v})" for k, v in sorted(models.items()))
            + f"; or give a full model id such as {EXAMPLE_MODEL}"
        )
    return wanted


def _plan_problems(
    spec: TaskSpec, profile: LoadedProfile, prompt: str | None, where: Callable[..., str]
) -> list[str]:
    """The plan keys' problems (issue 26, :func:`supervisor.config.plankeys.plan_problems`)."""
    base = effective_workspace(profile.spec.workspace, spec.workspace).base
    cluster = profile.spec.cluster is not None
    return plan_problems(spec.name, spec.after, base, prompt, cluster, where)


def _attempt_problems(
    spec: TaskSpec, profile: LoadedProfile, where: Callable[..., str]
) -> list[str]:
    """The attempts keys' problems (issue 26, :func:`supervisor.config.attemptkeys.
    attempt_problems`)."""
    mode = effective_workspace(profile.spec.workspace, spec.workspace).mode
    pick = spec.pick
    cluster = profile.spec.cluster is not None
    return attempt_problems(
        spec.attempts, spec.models, pick, spec.model is not None, mode, cluster, where
    )


def _exec_problems(
    spec: TaskSpec, profile: LoadedProfile, prompt: str | None, where: Callable[..., str]
) -> list[str]:
    """What of the task the agent's ``execve`` could not take (issue 21, E2BIG): a prompt
    its argv cannot carry, an environment string or table too big. ``where(*keys)`` names
    the file, line and key."""
    problems = []
    if prompt is not None:
        key = "prompt_file" if spec.prompt_file is not None else "prompt"
        problems += prompt_problems(profile.spec.agent, prompt, where(key), str(profile.path))
    problems += env_problems(spec.env, lambda name: where("env", *([name] if name else [])))
    return problems


def load_task(
    path: Path | str,
    profile: LoadedProfile,
    base: Path | None = None,
    shown_as: Path | None = None,
    check_project: bool = True,
) -> ResolvedTask:
    """Read and validate one task file against ``profile``.

    Args:
        path: the task file.
        profile: the profile it will run under (model aliases, policy).
        base: folder that relative paths resolve against (default: the file's folder).
        shown_as: the name to use in error lines (default: ``path``); the spool names the
            file where the user dropped it even after it was moved.
        check_project: as :func:`resolve_task`'s.

    Raises:
        ConfigError: with one line per problem, each naming the file.
    """
    path = Path(path).resolve()
    shown = shown_as or path
    text, data = read_toml(path, shown, limit=MAX_TASK_FILE_BYTES)
    return task_from_table(data, profile, base or path.parent, shown, text, check_project)


def task_from_table(
    data: dict[str, Any],
    profile: LoadedProfile,
    base: Path,
    shown: Path,
    text: str = "",
    check_project: bool = True,
) -> ResolvedTask:
    """Validate one task table (a parsed task file, or ``submit``'s inline keys) against
    ``profile`` exactly as :func:`load_task` does: the model, ``task_may_set``, paths
    (relative ones against ``base``), the prompt, the policy.

    Args:
        shown: the name error lines start with.
        text: the TOML text ``data`` was parsed from, for line numbers ("" for none).
        check_project: as :func:`resolve_task`'s.

    Raises:
        ConfigError: with one line per problem.
    """
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        problems = format_errors(exc, shown, text, TaskSpec) + _refusals(data, profile, shown, text)
        rest = without_bad_values(TaskSpec, data, exc)  # the checks below, on what is left
        if rest is not None:
            try:
                resolve_task(rest, profile, base, shown, text, check_project=check_project)
            except ConfigError as later:
                problems += later.problems
        raise ConfigError(problems) from exc
    refused = _refusals(data, profile, shown, text)
    if refused:
        raise ConfigError(refused)
    return resolve_task(spec, profile, base, shown, text, check_project=check_project)


def _refusals(data: dict[str, Any], profile: LoadedProfile, shown: Path, text: str) -> list[str]:
    """One line per key of the task file that the profile's ``task_may_set`` refuses."""
    allowed = ", ".join(profile.spec.security.task_may_set) or "(none)"
    return [
        f"{shown}{_at_line(text, key)}: key '{key}': "
        f"this profile does not let task files set it ({profile.path} "
        f"[security] task_may_set = {allowed})"
        for key in _refused_keys(data, profile.spec.security)
    ]


def _at_line(text: str, key: str) -> str:
    """``:LINE`` of a dotted key in a task file's text (``:?`` when not found), or "" for
    a table that came from no text (``submit``'s inline keys)."""
    return f":{key_line(text, tuple(key.split('.'))) or '?'}" if text else ""


def _refused_keys(data: dict[str, Any], security: SecuritySpec) -> list[str]:
    """Optional keys in a task file that the profile's ``task_may_set`` does not allow."""
    keys = [k for k in ("model", "env", "approval", "acceptance", "workspace") if k in data]
    if "models" in data and not security.allows("model"):  # issue 26: one model per attempt
        keys.append("models")
    monitor = data.get("monitor")
    if isinstance(monitor, dict):
        # an unknown key is the model's problem line, not a refusal as well
        keys += [f"monitor.{k}" for k in monitor if k in MonitorOverrides.model_fields]
    return [k for k in keys if not security.allows(k)]


def looks_like_profile(path: Path | str) -> bool:
    """Whether ``path`` holds a profile rather than a task (``supervise validate``).

    A file with an ``agent`` key is a profile; otherwise it is whichever kind it has more
    top-level keys of (``paths``, ``tmux``, ``tasks``, ... versus ``name``, ``prompt``,
    ``project_dir``, ...); a tie means a task.

    A file over :data:`MAX_TASK_FILE_BYTES` is taken as a task without being read (the task
    loader then refuses it on its size).

    Raises:
        ConfigError: the file cannot be read or is not valid TOML.
    """
    with contextlib.suppress(OSError):
        if os.stat(path).st_size > MAX_TASK_FILE_BYTES:
            return False
    _, data = read_toml(Path(path).resolve())
    keys = set(data)
    profile_only = set(Profile.model_fields) - set(TaskSpec.model_fields)
    task_only = set(TaskSpec.model_fields) - set(Profile.model_fields)
    return "agent" in keys or len(keys & profile_only) > len(keys & task_only)
