"""Profiles and tasks: TOML files validated with pydantic, plus ``MONITOR_*`` env overrides.

A *profile* (``supervise run PROFILE``) says where the spool and state live, which private
tmux server to use, how to launch the agent and the default monitor policy. A *task* file
(dropped into the spool, or inline as ``[[tasks]]`` in a profile) names one unit of work.

Monitor policy precedence, highest first (issue 2):

1. the task's own ``[monitor]`` table,
2. ``MONITOR_*`` environment variables (read with pydantic-settings),
3. the profile's ``[monitor]`` table,
4. built-in defaults (the seed monitor's: base 30 s, max 300 s, deadline 18000 s, grace 30 s).

Every error is raised as :class:`ConfigError`, whose ``problems`` are one line each, naming
the file, the TOML key (with its line where known), what is wrong and what is allowed.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import os
import re
import shlex
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from supervisor.errors import ConfigError

#: Placeholders allowed in ``[agent] command`` / ``resume_command``.
#: ``{python}`` is the interpreter running supervise, ``{profile_dir}`` the profile's folder.
PLACEHOLDERS: tuple[str, ...] = (
    "prompt",
    "prompt_file",
    "model",
    "session_id",
    "project_dir",
    "task_id",
    "python",
    "profile_dir",
)
#: Placeholders allowed in the ``notifier`` argv: the event fields filled by supervisor.notify.
NOTIFIER_PLACEHOLDERS: tuple[str, ...] = (
    "message",
    "task_id",
    "task_name",
    "status",
    "reason",
    "exit_code",
    "retry_count",
    "task_dir",
    "session_id",
    "last_lines",
)
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: Model aliases known to every profile; ``[agent.models]`` may add or override (issue 2).
DEFAULT_MODELS: dict[str, str] = {"opus": "claude-opus-4-6", "sonnet": "claude-sonnet-4-6"}

#: An alias is a bare lowercase word; anything else (a dash, digit, dot, slash, colon) is
#: taken as a full model id and passed to the agent unchanged.
_ALIAS_RE = re.compile(r"^[a-z]+$")


# --------------------------------------------------------------------------- models


def error_message(item: Any) -> str:
    """The text of one pydantic error (an ``ErrorDetails``) for a problem line; the
    :data:`MAX_SECONDS` bound is said in words."""
    if item["type"] == "less_than_equal" and (item.get("ctx") or {}).get("le") == MAX_SECONDS:
        return f"at most {MAX_SECONDS:.0f} seconds (1 year) is allowed; give fewer"
    return str(item["msg"]).removeprefix("Value error, ")


def _argv_placeholders_ok(argv: list[str], allowed: tuple[str, ...] = PLACEHOLDERS) -> list[str]:
    for item in argv:
        for name in _PLACEHOLDER_RE.findall(item):
            if name not in allowed:
                raise ValueError(
                    f"unknown placeholder {{{name}}} in {item!r}; allowed: "
                    + ", ".join("{" + p + "}" for p in allowed)
                )
    return argv


def _split_argv(value: Any) -> Any:
    """Accept an argv list, or (from the environment) a JSON list or a shell-like string."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return shlex.split(text)
    return value


#: Largest prompt in bytes of UTF-8, inline or in a file (a prompt is text for a model, not a
#: data set).
MAX_PROMPT_BYTES = 10 * 1024 * 1024
#: Largest task file read, in bytes: a prompt at its limit plus room for the other keys. Checked
#: with ``fstat`` before reading, so a 200 MB file costs nothing (it once blocked the engine
#: for 23 s at 648 MB RSS).
MAX_TASK_FILE_BYTES = MAX_PROMPT_BYTES + 1024 * 1024

#: Longest interval, deadline or timeout accepted anywhere, in seconds (365 days). Beyond
#: it a value is a typo or an attack, and APScheduler cannot schedule a run that far away
#: (``base_interval = 1e12`` overflowed its datetime arithmetic and left the task ``running``).
MAX_SECONDS = 365 * 24 * 3600.0


#: A duration in seconds: finite (no ``inf``/``nan``) and at most :data:`MAX_SECONDS`. The one
#: declaration of the bound; the TOML types below and the ``MONITOR_*`` env types build on it
#: (plain ``Field`` constraints, so the JSON Schemas in ``schemas/`` show the bound too).
Seconds = Annotated[float, Field(allow_inf_nan=False, le=MAX_SECONDS)]
# TOML values are typed, so these are strict: ``deadline = true`` or ``deadline = "600"`` is a
# wrong type (an int is still fine for a float). Env values are strings: _Env* types parse them.
PositiveSeconds = Annotated[Seconds, Field(gt=0), Strict()]
NonNegativeSeconds = Annotated[Seconds, Field(ge=0), Strict()]
Count = Annotated[int, Field(ge=0), Strict()]
ExitCode = Annotated[int, Field(ge=1, le=255), Strict()]
#: Events the notifier can be asked to run for (``notify_on``).
NotifyEvent = Literal[
    "completed",
    "failed",
    "abandoned",
    "crashed",
    "hung",
    "resumed",
    "stale",
    "escalated",
    "waiting",
]
#: Events that run the notifier by default: the terminal ones, plus the two that need a
#: human or explain a long pause (issue 4: escalation, usage-limit waits).
DEFAULT_NOTIFY_ON: tuple[str, ...] = ("abandoned", "failed", "completed", "escalated", "waiting")
#: How output staleness is measured (issue 4): the output file's mtime, a hash of the
#: visible tmux screen (for a TUI that redraws a spinner), or the agent's transcript file.
StaleSignal = Literal["mtime", "screen", "transcript"]


class MonitorOverrides(BaseModel):
    """A ``[monitor]`` table as written in a profile or task: every key optional.

    Units: seconds for every interval. See :class:`MonitorPolicy` for the meaning of each key.
    """

    model_config = ConfigDict(extra="forbid")

    base_interval: PositiveSeconds | None = None
    max_interval: PositiveSeconds | None = None
    deadline: PositiveSeconds | None = None
    grace_period: NonNegativeSeconds | None = None
    stale_threshold: PositiveSeconds | None = None
    max_retries: Count | None = None
    notifier: list[str] | None = None
    notifier_timeout: PositiveSeconds | None = None
    notify_on: list[NotifyEvent] | None = None
    resume_exit_codes: list[ExitCode] | None = None
    max_log_bytes: Annotated[int, Field(ge=4096), Strict()] | None = None
    log_backups: Count | None = None
    stale_signal: StaleSignal | None = None
    max_denials: Annotated[int, Field(ge=1), Strict()] | None = None

    _check_notifier = field_validator("notifier")(
        classmethod(
            lambda cls, v: None if v is None else _argv_placeholders_ok(v, NOTIFIER_PLACEHOLDERS)
        )
    )


class MonitorPolicy(BaseModel):
    """The effective monitor policy of one task (all times in seconds).

    Defaults come from the seed monitor (``MONITOR_BASE_INTERVAL=30``,
    ``MONITOR_MAX_INTERVAL=300``, ``MONITOR_DEADLINE=18000``, ``MONITOR_GRACE_PERIOD=30``);
    ``stale_threshold`` defaults to 3 × ``base_interval`` as in the seed's Pattern 3.
    ``notify_on`` picks the events that run the notifier (default: the terminal ones);
    ``resume_exit_codes`` are exit codes that mean "resume me" rather than ``failed``
    (supervisord's ``exitcodes``, inverted). ``output.log`` is rotated past
    ``max_log_bytes`` bytes keeping ``log_backups`` old files (supervisord's
    ``stdout_logfile_maxbytes`` / ``stdout_logfile_backups``; default 50 MiB and 3).
    ``stale_signal`` picks what "output" means for staleness (``None``: ``screen`` for an
    interactive Claude Code TUI, else ``mtime``); ``max_denials`` consecutive permission
    denials or failed tool calls escalate the task to a human (the circuit breaker).

    Raises:
        pydantic.ValidationError: on a non-positive interval or ``max_interval`` smaller
            than ``base_interval``.
    """

    model_config = ConfigDict(extra="forbid")

    base_interval: PositiveSeconds = 30.0
    max_interval: PositiveSeconds = 300.0
    deadline: PositiveSeconds = 18000.0
    grace_period: NonNegativeSeconds = 30.0
    stale_threshold: PositiveSeconds | None = None
    max_retries: Count = 3
    notifier: list[str] = Field(default_factory=list)
    notifier_timeout: PositiveSeconds = 10.0
    notify_on: list[NotifyEvent] = Field(default_factory=lambda: list(DEFAULT_NOTIFY_ON))
    resume_exit_codes: list[ExitCode] = Field(default_factory=list)
    max_log_bytes: Annotated[int, Field(ge=4096), Strict()] = 50 * 1024 * 1024
    log_backups: Count = 3
    stale_signal: StaleSignal | None = None
    max_denials: Annotated[int, Field(ge=1), Strict()] = 3

    @model_validator(mode="after")
    def _check(self) -> MonitorPolicy:
        if self.max_interval < self.base_interval:
            raise ValueError(
                f"max_interval ({self.max_interval:g}) is smaller than base_interval "
                f"({self.base_interval:g}); it must be >= base_interval"
            )
        if self.stale_threshold is None:
            self.stale_threshold = 3 * self.base_interval
        return self

    @property
    def stale_after(self) -> float:
        """``stale_threshold`` in seconds, resolved (never ``None``)."""
        return self.stale_threshold if self.stale_threshold is not None else 3 * self.base_interval


class PathsSpec(BaseModel):
    """``[paths]``: the spool folder watched for task files and the state folder."""

    model_config = ConfigDict(extra="forbid")
    spool_dir: Path = Path("spool")
    state_dir: Path = Path("state")


class TmuxSpec(BaseModel):
    """``[tmux]``: the private tmux server (``tmux -L socket_name``), never the default one.

    ``socket_name`` left out (``None``) becomes :func:`default_socket_name` of the profile's
    ``state_dir`` when the profile is loaded, so two profiles never share a server by
    accident (issue 10: two engines on one socket killed each other's agents).
    """

    model_config = ConfigDict(extra="forbid")
    socket_name: str | None = None

    @field_validator("socket_name")
    @classmethod
    def _socket(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value in ("", "default") or not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            raise ValueError(
                "socket_name must be a non-empty name of letters, digits, '_', '.', '-' "
                "and not 'default' (supervise never uses your default tmux server)"
            )
        return value


def default_socket_name(state_dir: Path) -> str:
    """``supervise-<8 hex>``: the default ``[tmux] socket_name``, a SHA-256 prefix of the
    absolute ``state_dir``, so each state folder has its own tmux server."""
    digest = hashlib.sha256(os.fsencode(str(state_dir))).hexdigest()
    return f"supervise-{digest[:8]}"


AgentKind = Literal["generic", "claude"]
AgentMode = Literal["headless", "interactive"]


class AgentSpec(BaseModel):
    """``[agent]``: how to launch and resume the agent.

    ``kind = "generic"`` (the default) runs ``command`` / ``resume_command`` as written: argv
    lists whose elements may hold the placeholders ``{prompt}``, ``{prompt_file}``,
    ``{model}``, ``{session_id}``, ``{project_dir}``, ``{task_id}``, ``{python}`` and
    ``{profile_dir}``, substituted once and never seen by a shell.

    ``kind = "claude"`` builds the Claude Code argv itself (see :mod:`supervisor.agents.claude`):
    ``--session-id`` on the first run, ``--resume`` with ``resume_prompt`` after, hooks
    injected with a generated ``--settings`` file, ``--permission-mode permission_mode``.
    ``mode = "headless"`` runs ``-p --output-format stream-json --verbose``;
    ``"interactive"`` runs the TUI for a human to attach to. ``extra_args`` are appended.

    Raises:
        pydantic.ValidationError: ``command`` missing for ``generic`` or given for
            ``claude``.
    """

    model_config = ConfigDict(extra="forbid")
    kind: AgentKind = "generic"
    command: list[str] | None = Field(default=None, min_length=1)
    resume_command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    models: dict[str, str] = Field(default_factory=dict)
    default_model: str = "sonnet"
    mode: AgentMode = "headless"
    binary: str = Field(default="claude", min_length=1)
    permission_mode: str = Field(default="manual", pattern=r"^[A-Za-z]+$")
    resume_prompt: str = Field(default="continue the task", min_length=1)
    extra_args: list[str] = Field(default_factory=list)
    hooks: Annotated[bool, Strict()] = True

    _check_argv = field_validator("command", "resume_command")(
        classmethod(lambda cls, v: None if v is None else _argv_placeholders_ok(v))
    )

    @model_validator(mode="after")
    def _kind_fits(self) -> AgentSpec:
        if self.kind == "generic" and self.command is None:
            raise ValueError(
                "kind 'generic' needs 'command' (an argv list); or set kind = \"claude\" "
                "to let supervise build the Claude Code command line"
            )
        if self.kind == "claude" and (self.command or self.resume_command):
            raise ValueError(
                "kind 'claude' builds the command line itself; remove 'command' and "
                "'resume_command' (add flags with 'extra_args'), or use kind = \"generic\""
            )
        if self.kind == "generic" and self.mode == "interactive":
            raise ValueError("mode 'interactive' needs kind = \"claude\"")
        if (
            self.kind == "claude"
            and self.mode == "headless"
            and not self.hooks
            and self.permission_mode in ("manual", "default")
        ):
            raise ValueError(
                "with hooks = false nothing answers permission requests in headless mode, so "
                "Claude Code would deny every tool call that needs one; set hooks = true (the "
                "[approval] rules decide), or a permission_mode that does not ask"
            )
        return self

    def known_models(self) -> dict[str, str]:
        """Alias → model id: the built-in aliases overlaid with ``[agent.models]``."""
        return {**DEFAULT_MODELS, **self.models}


ApprovalAction = Literal["approve", "deny", "escalate"]


class ApprovalRule(BaseModel):
    """One ``[[approval.rules]]`` entry (seed 003's command-approval table).

    ``tool`` is a Claude Code tool name (``Bash``, ``Write``, ``Edit``, ...; ``*`` for any);
    ``match`` an optional Python regex searched in the request's subject (the Bash command,
    the file path, the URL; see :func:`supervisor.approval.subject`); ``action`` what to do.
    ``message`` is told to the agent on ``deny``.

    Raises:
        pydantic.ValidationError: a ``match`` that is not a valid regex.
    """

    model_config = ConfigDict(extra="forbid")
    tool: str = Field(min_length=1)
    match: str | None = None
    action: ApprovalAction
    message: str | None = None

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression ({exc})") from exc
        return value


class ApprovalSpec(BaseModel):
    """``[approval]``: ordered ``rules``; the first match decides, and a request no rule
    matches is denied with ``default_message`` (issue 4)."""

    model_config = ConfigDict(extra="forbid")
    rules: list[ApprovalRule] = Field(default_factory=list)
    default_message: str = (
        "supervise: this action is not allowed by the task's approval rules; "
        "do the task another way, with the tools and commands it allows"
    )


class AcceptanceSpec(BaseModel):
    """``[acceptance]``: how a finished task is judged (seed 003's verdict).

    ``command`` is an argv run in the project folder after the agent exits 0 (exit 0 =
    pass, at most ``timeout`` seconds); ``artifacts`` are paths (relative to the project
    folder) that must exist. At least one is required.
    """

    model_config = ConfigDict(extra="forbid")
    command: list[str] | None = Field(default=None, min_length=1)
    artifacts: list[str] = Field(default_factory=list)
    timeout: PositiveSeconds = 600.0

    @model_validator(mode="after")
    def _something(self) -> AcceptanceSpec:
        if not self.command and not self.artifacts:
            raise ValueError("give 'command' (an argv list) and/or 'artifacts' (paths)")
        return self


class TaskSpec(BaseModel):
    """One task as written in a spool file or an inline ``[[tasks]]`` entry.

    Exactly one of ``prompt`` / ``prompt_file`` is required; ``project_dir`` must be an
    existing folder. Relative paths resolve against the folder of the file they appear in.
    """

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=200)
    prompt: str | None = None
    prompt_file: Path | None = None
    project_dir: Path
    model: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    monitor: MonitorOverrides = Field(default_factory=MonitorOverrides)
    approval: ApprovalSpec | None = None
    acceptance: AcceptanceSpec | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt_size(cls, value: str | None) -> str | None:
        if value is not None:
            size = len(value.encode("utf-8", errors="surrogatepass"))
            if size > MAX_PROMPT_BYTES:
                raise ValueError(
                    f"{size} bytes; a prompt may be at most {MAX_PROMPT_BYTES} bytes "
                    "(10 MiB, the prompt_file limit too); shorten it"
                )
        return value

    @model_validator(mode="after")
    def _one_prompt(self) -> TaskSpec:
        if (self.prompt is None) == (self.prompt_file is None):
            which = "both are given" if self.prompt is not None else "neither is given"
            raise ValueError(f"give exactly one of 'prompt' or 'prompt_file' ({which})")
        return self


#: Optional task-file keys a task may set unless the profile says otherwise: never the
#: notifier (it runs commands), ``env`` (``PATH`` or ``LD_PRELOAD`` would change what
#: the agent command runs) nor ``approval`` (rules that loosen what the agent may do).
#: ``acceptance`` is allowed: it is the orchestrator's own check of its task.
#: ``name``, ``prompt``, ``prompt_file`` and ``project_dir`` are always allowed.
DEFAULT_TASK_MAY_SET: tuple[str, ...] = (
    "model",
    "acceptance",
    "monitor.base_interval",
    "monitor.max_interval",
    "monitor.deadline",
    "monitor.grace_period",
    "monitor.stale_threshold",
    "monitor.max_retries",
    "monitor.resume_exit_codes",
    "monitor.max_log_bytes",
    "monitor.log_backups",
)


class SecuritySpec(BaseModel):
    """``[security]``: what the spool (a security boundary) may do.

    ``task_may_set`` lists the optional keys a task *file* may set: ``model``, ``env`` and
    ``monitor.<key>`` (or ``monitor`` for all of them). Inline ``[[tasks]]`` in the profile
    are the profile author's and are not limited. ``allow_shared_spool`` lets
    ``supervise run`` accept a spool folder that other users can write to.
    """

    model_config = ConfigDict(extra="forbid")
    task_may_set: list[str] = Field(default_factory=lambda: list(DEFAULT_TASK_MAY_SET))
    allow_shared_spool: Annotated[bool, Strict()] = False

    @field_validator("task_may_set")
    @classmethod
    def _known(cls, values: list[str]) -> list[str]:
        known = {
            "model",
            "env",
            "approval",
            "acceptance",
            "monitor",
            *(f"monitor.{k}" for k in MonitorOverrides.model_fields),
        }
        for value in values:
            if value not in known:
                raise ValueError(
                    f"unknown task key {value!r}; allowed: " + ", ".join(sorted(known))
                )
        return values

    def allows(self, key: str) -> bool:
        """Whether a task file may set ``key`` (``model``, ``env``, ``monitor.<key>``)."""
        return key in self.task_may_set or (
            key.startswith("monitor.") and "monitor" in self.task_may_set
        )


class Profile(BaseModel):
    """A whole profile file: ``supervise run PROFILE``."""

    model_config = ConfigDict(extra="forbid")
    max_concurrent: Annotated[int, Field(ge=1), Strict()] = 4
    intake_interval: PositiveSeconds = 0.5
    paths: PathsSpec = Field(default_factory=PathsSpec)
    tmux: TmuxSpec = Field(default_factory=TmuxSpec)
    agent: AgentSpec
    monitor: MonitorOverrides = Field(default_factory=MonitorOverrides)
    approval: ApprovalSpec = Field(default_factory=ApprovalSpec)
    acceptance: AcceptanceSpec | None = None
    security: SecuritySpec = Field(default_factory=SecuritySpec)
    tasks: list[TaskSpec] = Field(default_factory=list)


# ------------------------------------------------------------------ loaded results


@dataclass(frozen=True)
class LoadedProfile:
    """A validated profile with its paths resolved.

    Attributes:
        path: the profile file.
        spec: the validated model (paths inside it are absolute).
    """

    path: Path
    spec: Profile

    @property
    def spool_dir(self) -> Path:
        return self.spec.paths.spool_dir

    @property
    def state_dir(self) -> Path:
        return self.spec.paths.state_dir

    @property
    def tasks_dir(self) -> Path:
        return self.spec.paths.state_dir / "tasks"

    @property
    def socket_name(self) -> str:
        """The tmux server's name: ``[tmux] socket_name`` or one derived from ``state_dir``."""
        return self.spec.tmux.socket_name or default_socket_name(self.state_dir)


@dataclass(frozen=True)
class ResolvedTask:
    """A validated task, ready to run.

    Attributes:
        spec: the task as written (paths absolute).
        prompt: the prompt text (read from ``prompt_file`` if that was given).
        model: the resolved model id (alias looked up).
        policy: the effective monitor policy.
        sources: for each policy key, where its value came from:
            ``default``, ``profile``, ``env`` or ``task``.
        rules: the approval rules in force, the task's first, then the profile's.
        acceptance: the task's ``[acceptance]``, else the profile's, else ``None``.
    """

    spec: TaskSpec
    prompt: str
    model: str
    policy: MonitorPolicy
    sources: dict[str, str] = field(default_factory=dict)
    rules: tuple[ApprovalRule, ...] = ()
    acceptance: AcceptanceSpec | None = None


# ------------------------------------------------------------------ error reporting


def _key_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """Best-effort 1-based line of the TOML key at ``loc`` (e.g. ``('monitor', 'deadline')``).

    Walks table headers (``[a.b]``, ``[[tasks]]``) and ``key =`` lines; dotted keys and inline
    tables are matched on their last component. Returns ``None`` when not found.
    """
    parts = [p for p in loc if isinstance(p, str)]
    indexes = [p for p in loc if isinstance(p, int)]
    if not parts:
        return None
    table: list[str] = []
    array_seen: dict[str, int] = {}
    target_table, key = parts[:-1], parts[-1]
    header_line: int | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        header = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", line)
        if header:
            table = [h.strip().strip('"') for h in header.group(1).split(".")]
            if line.startswith("[["):
                array_seen[table[0]] = array_seen.get(table[0], -1) + 1
            this_entry = not (indexes and table[0] in array_seen) or (
                array_seen[table[0]] == indexes[0]
            )
            if table == parts and header_line is None and this_entry:
                header_line = number
            continue
        match = re.match(r'^"?([A-Za-z0-9_.-]+)"?\s*=', line)
        if not match:
            continue
        written = match.group(1).split(".")
        full = table + written
        if table and table[0] in array_seen and indexes and array_seen[table[0]] != indexes[0]:
            continue
        if full == [*target_table, key] or (written[-1] == key and table == target_table):
            return number
    return header_line


def _describe_allowed(model: type[BaseModel] | None) -> str:
    if model is None:
        return ""
    return ", ".join(model.model_fields)


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    current: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return None
        annotation = fields[part].annotation
        inner = getattr(annotation, "__args__", None)
        candidates = [annotation, *(inner or ())]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if current is None:
            return None
    return current if isinstance(current, type) else None


def _format_errors(
    error: ValidationError, file: Path, text: str, root: type[BaseModel], prefix: tuple = ()
) -> list[str]:
    problems = []
    for item in error.errors():
        loc = prefix + tuple(item["loc"])
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        line = _key_line(text, loc)
        where = f"{file}:{line}" if line else f"{file}"
        kind = item["type"]
        if kind == "extra_forbidden":
            parent = _model_at(root, loc[len(prefix) : -1] if prefix else loc[:-1])
            allowed = list(parent.model_fields) if parent else []
            guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            hint = f" (did you mean '{guess[0]}'?)" if guess else ""
            problems.append(
                f"{where}: unknown key '{dotted}'{hint}; allowed keys here: {', '.join(allowed)}"
            )
        elif kind == "missing":
            problems.append(f"{where}: missing required key '{dotted}'")
        else:
            message = error_message(item)
            model = _model_at(root, loc[len(prefix) :]) if kind == "value_error" else None
            named = [
                k
                for k in dict.fromkeys(re.findall(r"'(\w+)'", message))
                if model and k in model.model_fields
            ]
            if named:  # a rule across keys (prompt / prompt_file): at the first one written
                line = next((n for k in named if (n := _key_line(text, (*loc, k)))), None)
                where = f"{file}:{line}" if line else f"{file}"
                dotted = "', '".join(".".join(str(p) for p in (*loc, k)) for k in named)
            got = item.get("input")
            shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
            label = "keys" if len(named) > 1 else "key"
            problems.append(f"{where}: {label} '{dotted}': {message}{shown}")
    return problems


def file_kind(mode: int) -> str:
    """What a ``st_mode`` names, for error lines: ``a directory``, ``a FIFO``, ..."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def too_big(shown: Path, size: int, limit: int = MAX_TASK_FILE_BYTES) -> str:
    """The error line for a task file of ``size`` bytes over ``limit``."""
    return (
        f"{shown}: {size} bytes; a task file may be at most {limit} bytes (its prompt at "
        f"most {MAX_PROMPT_BYTES}); shorten the prompt"
    )


def read_bounded(path: Path, shown: Path, limit: int | None) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (``None``: any size).

    Opened non-blocking and checked with ``fstat`` before reading: a FIFO would block the
    reader, ``/dev/zero`` never ends, and a huge file is refused without being read.

    Raises:
        ConfigError: unreadable, not a regular file, or too big.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError([f"{shown}: cannot read: {exc.strerror}"]) from exc
    with open(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = file_kind(info.st_mode)
            raise ConfigError([f"{shown}: {kind}, not a regular file; give a TOML file"])
        if limit is not None and info.st_size > limit:
            raise ConfigError([too_big(shown, info.st_size, limit)])
        try:
            raw = handle.read() if limit is None else handle.read(limit + 1)
        except OSError as exc:
            raise ConfigError([f"{shown}: cannot read: {exc.strerror}"]) from exc
    if limit is not None and len(raw) > limit:  # it grew while we read
        raise ConfigError([too_big(shown, len(raw), limit)])
    return raw


def _read_toml(
    path: Path, shown: Path | None = None, limit: int | None = None
) -> tuple[str, dict[str, Any]]:
    raw = read_bounded(path, shown or path, limit)
    path = shown or path
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"{path}: not UTF-8 text (byte {exc.start}); TOML must be UTF-8"
        raise ConfigError([problem]) from exc
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: malformed TOML: {exc}"]) from exc
    except RecursionError as exc:  # tomllib recurses on nested arrays/tables
        raise ConfigError([f"{path}: malformed TOML: nested too deeply"]) from exc


def _policy_line(text: str, prefix: tuple[Any, ...]) -> int | None:
    """Line of the ``[monitor]`` interval key in ``text`` that a ``max >= base`` error is about."""
    lines = (_key_line(text, (*prefix, "monitor", k)) for k in ("max_interval", "base_interval"))
    return next((line for line in lines if line), None)


# ------------------------------------------------------------------ policy merging


def read_env_overrides() -> dict[str, Any]:
    """Validated ``MONITOR_*`` overrides from the process environment (pydantic-settings).

    Returns only the keys that are set. Raises :class:`ConfigError` naming the variable,
    its value and what is allowed; an unknown ``MONITOR_*`` name (a typo) is an error too.
    """
    known = {f"MONITOR_{name.upper()}" for name in MonitorOverrides.model_fields}
    if not any(name.upper().startswith("MONITOR_") for name in os.environ):
        return {}  # the common case: no need to load pydantic-settings at all
    from supervisor.envsettings import MonitorEnv

    problems = []
    for name in sorted(os.environ):
        if name.upper().startswith("MONITOR_") and name.upper() not in known:
            guess = difflib.get_close_matches(name.upper(), sorted(known), n=1)
            hint = f" (did you mean {guess[0]}?)" if guess else ""
            problems.append(
                f"env {name}: unknown MONITOR_* variable{hint}; known: " + ", ".join(sorted(known))
            )
    try:
        values = MonitorEnv()
    except ValidationError as exc:
        for item in exc.errors():
            field_name = str(item["loc"][0]) if item["loc"] else "?"
            var = f"MONITOR_{field_name.upper()}"
            message = error_message(item)
            actual = next((k for k in os.environ if k.upper() == var), var)
            problems.append(f"env {actual}={os.environ.get(actual, '')!r}: {message}")
    except ValueError as exc:  # JSON or shlex parse errors from _split_argv
        problems.append(f"env MONITOR_NOTIFIER: {exc}; give a JSON list or a shell-like string")
    if problems:
        raise ConfigError(problems)
    return values.model_dump(exclude_none=True)


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
            message = error_message(item)
            keys = [k for k in ("base_interval", "max_interval") if k in message] or [
                str(p) for p in item["loc"]
            ]
            origin = ", ".join(f"{k} from {sources.get(k, 'default')}" for k in keys)
            lines.append(f"monitor policy: {message} ({origin})")
        raise ConfigError(lines) from exc
    if "stale_threshold" not in merged:
        sources["stale_threshold"] = "default (3 x base_interval)"
    return policy, sources


# ------------------------------------------------------------------ loaders


def _read_prompt_file(path: Path) -> str:
    """Read a prompt file byte for byte (``\\r\\n`` kept). Only regular files up to
    :data:`MAX_PROMPT_BYTES` are read: a FIFO would block the engine, ``/dev/zero`` never ends.

    Raises:
        ValueError: not a regular file, or too big. OSError, UnicodeDecodeError.
    """
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file")
    if info.st_size > MAX_PROMPT_BYTES:
        raise ValueError(f"{info.st_size} bytes; at most {MAX_PROMPT_BYTES} are allowed")
    with open(path, "rb") as handle:
        data = handle.read(MAX_PROMPT_BYTES + 1)
    if len(data) > MAX_PROMPT_BYTES:
        raise ValueError(f"more than {MAX_PROMPT_BYTES} bytes")
    return data.decode("utf-8")


def _resolve(base: Path, value: Path) -> Path:
    """``value`` made absolute against ``base`` (``~`` expanded).

    Raises:
        ValueError: the path cannot name a file (a NUL byte, a part over NAME_MAX).
    """
    with contextlib.suppress(RuntimeError):  # "~nosuchuser": keep it; it will not exist
        value = value.expanduser()
    if "\0" in str(value):
        raise ValueError("a path cannot contain a NUL byte")
    if any(len(os.fsencode(part)) > 255 for part in value.parts):
        raise ValueError("a path component is longer than 255 bytes")
    try:
        return value if value.is_absolute() else (base / value).resolve()
    except OSError as exc:
        raise ValueError(str(exc)) from exc


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
    text, data = _read_toml(path)
    try:
        spec = Profile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, path, text, Profile)) from exc
    base = path.parent
    spec.paths.spool_dir = _resolve(base, spec.paths.spool_dir)
    spec.paths.state_dir = _resolve(base, spec.paths.state_dir)
    if spec.tmux.socket_name is None:
        spec.tmux.socket_name = default_socket_name(spec.paths.state_dir)
    loaded = LoadedProfile(path=path, spec=spec)
    problems: list[str] = []
    try:
        effective_policy(spec.monitor, None)
    except ConfigError as exc:
        line = _policy_line(text, ())
        at = f"{path}:{line}" if line else f"{path}"
        problems.extend(f"{at}: {p}" if p.startswith("monitor") else p for p in exc.problems)
    if spec.agent.default_model not in spec.agent.known_models() and _ALIAS_RE.match(
        spec.agent.default_model
    ):
        line = _key_line(text, ("agent", "default_model"))
        problems.append(
            f"{path}:{line}: key 'agent.default_model': unknown model alias "
            f"{spec.agent.default_model!r}; known aliases: "
            + ", ".join(sorted(spec.agent.known_models()))
        )
    for index, task in enumerate(spec.tasks):
        try:
            resolve_task(task, loaded, base, path, text, loc_prefix=("tasks", index))
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return loaded


def resolve_task(
    spec: TaskSpec,
    profile: LoadedProfile,
    base: Path,
    file: Path,
    text: str = "",
    loc_prefix: tuple[Any, ...] = (),
) -> ResolvedTask:
    """Check a parsed task against its profile and compute what it needs to run.

    Resolves relative ``project_dir`` / ``prompt_file`` against ``base``, reads the prompt,
    looks up the model alias and merges the monitor policy.

    Raises:
        ConfigError: a missing ``project_dir``, unreadable ``prompt_file``, unknown model
            alias (the known ones are listed) or a bad policy.
    """
    problems: list[str] = []

    def where(key: str) -> str:
        line = _key_line(text, (*loc_prefix, key)) if text else None
        dotted = ".".join(str(p) for p in (*loc_prefix, key))
        return (f"{file}:{line}" if line else f"{file}") + f": key '{dotted}'"

    try:
        spec.project_dir = _resolve(base, spec.project_dir)
    except ValueError as exc:
        problems.append(f"{where('project_dir')}: not a usable path ({exc})")
    else:
        if not _is_dir(spec.project_dir):
            problems.append(
                f"{where('project_dir')}: folder {str(spec.project_dir)!r} does not exist; "
                "give an existing project folder (absolute, or relative to this file)"
            )
    prompt = spec.prompt
    if spec.prompt_file is not None:
        try:
            spec.prompt_file = _resolve(base, spec.prompt_file)
            prompt = _read_prompt_file(spec.prompt_file)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append(
                f"{where('prompt_file')}: cannot read {str(spec.prompt_file)!r} as UTF-8 ({exc})"
            )
    models = profile.spec.agent.known_models()
    wanted = spec.model or profile.spec.agent.default_model
    model = wanted
    if wanted in models:
        model = models[wanted]
    elif _ALIAS_RE.match(wanted):
        problems.append(
            f"{where('model')}: unknown model alias {wanted!r}; known aliases: "
            + ", ".join(f"{k} ({v})" for k, v in sorted(models.items()))
            + "; or give a full model id such as claude-sonnet-4-6"
        )
    policy: MonitorPolicy | None = None
    sources: dict[str, str] = {}
    try:
        policy, sources = effective_policy(profile.spec.monitor, spec.monitor)
    except ConfigError as exc:
        line = _policy_line(text, loc_prefix) if text else None
        at = f"{file}:{line}" if line else f"{file}"
        problems.extend(f"{at if p.startswith('monitor') else file}: {p}" for p in exc.problems)
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
    )


def load_task(
    path: Path | str,
    profile: LoadedProfile,
    base: Path | None = None,
    shown_as: Path | None = None,
) -> ResolvedTask:
    """Read and validate one task file against ``profile``.

    Args:
        path: the task file.
        profile: the profile it will run under (model aliases, policy).
        base: folder that relative paths resolve against (default: the file's folder).
        shown_as: the name to use in error lines (default: ``path``); the spool names the
            file where the user dropped it even after it was moved.

    Raises:
        ConfigError: with one line per problem, each naming the file.
    """
    path = Path(path).resolve()
    shown = shown_as or path
    text, data = _read_toml(path, shown, limit=MAX_TASK_FILE_BYTES)
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, shown, text, TaskSpec)) from exc
    refused = _refused_keys(data, profile.spec.security)
    if refused:
        allowed = ", ".join(profile.spec.security.task_may_set) or "(none)"
        raise ConfigError(
            [
                f"{shown}:{_key_line(text, tuple(key.split('.'))) or '?'}: key '{key}': "
                f"this profile does not let task files set it ({profile.path} "
                f"[security] task_may_set = {allowed})"
                for key in refused
            ]
        )
    return resolve_task(spec, profile, base or path.parent, shown, text)


def _refused_keys(data: dict[str, Any], security: SecuritySpec) -> list[str]:
    """Optional keys in a task file that the profile's ``task_may_set`` does not allow."""
    keys = [k for k in ("model", "env", "approval", "acceptance") if k in data]
    monitor = data.get("monitor")
    if isinstance(monitor, dict):
        keys += [f"monitor.{k}" for k in monitor]
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
    _, data = _read_toml(Path(path).resolve())
    keys = set(data)
    profile_only = set(Profile.model_fields) - set(TaskSpec.model_fields)
    task_only = set(TaskSpec.model_fields) - set(Profile.model_fields)
    return "agent" in keys or len(keys & profile_only) > len(keys & task_only)
