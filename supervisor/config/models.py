"""The models of profile and task files, and what loading them yields.

A *profile* (``supervise run PROFILE``) says where the spool and state live, which private
tmux server to use, how to launch the agent and the default monitor policy. A *task* file
(dropped into the spool, or inline as ``[[tasks]]`` in a profile) names one unit of work.
The ``[monitor]`` keys are declared in :mod:`supervisor.config.monitor`; reading files and
reporting their errors is :mod:`supervisor.config.loading`.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    Strict,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from supervisor.agents import kinds
from supervisor.config.accounts import AccountsSpec
from supervisor.config.argsize import check_args, check_env
from supervisor.config.argv import argv_placeholders_ok
from supervisor.config.attemptkeys import Attempts, Models, Pick
from supervisor.config.cluster import NAME_RE, ClusterSpec
from supervisor.config.monitor import (
    MAX_LIST_ITEMS,
    ArgText,
    ChildSeconds,
    MonitorOverrides,
    MonitorPolicy,
    PositiveSeconds,
    UsdAmount,
)
from supervisor.config.plankeys import After, Requires
from supervisor.config.workspace import WorkspaceSpec
from supervisor.taskdir import layout

#: Model aliases known to every profile: the built-in agent kinds' together
#: (:attr:`supervisor.agents.kinds.Kind.models`); ``[agent.models]`` may add or override
#: (issue 2).
DEFAULT_MODELS: dict[str, str] = {a: m for k in kinds.builtin() for a, m in k.models.items()}
#: The alias ``[agent] default_model`` defaults to.
DEFAULT_ALIAS = "sonnet"
#: A full model id, for messages that show one (the default alias's).
EXAMPLE_MODEL = DEFAULT_MODELS.get(DEFAULT_ALIAS, DEFAULT_ALIAS)

#: An alias is a bare lowercase word; anything else (a dash, digit, dot, slash, colon) is
#: taken as a full model id and passed to the agent unchanged.
ALIAS_RE = re.compile(r"^[a-z]+$")


#: A model alias or id: printable, no spaces (it becomes one argv element of the agent).
MODEL_RE = r"^[^\x00-\x20\x7f-\x9f]+$"

#: Largest prompt in bytes of UTF-8, inline or in a file (a prompt is text for a model, not a
#: data set).
MAX_PROMPT_BYTES = 10 * 1024 * 1024
#: Largest task file read, in bytes: a prompt at its limit plus room for the other keys. Checked
#: with ``fstat`` before reading, so refusing a huge file costs nothing.
MAX_TASK_FILE_BYTES = MAX_PROMPT_BYTES + 1024 * 1024


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


def _known_kind(value: Any) -> str:
    """``value`` when it names a registered agent kind; else the error a ``Literal`` of
    the kinds gives (``Input should be 'a' or 'b'``)."""
    if isinstance(value, str) and value in kinds.names():
        return value
    quoted = [repr(name) for name in kinds.names()]
    expected = " or ".join(filter(None, (", ".join(quoted[:-1]), quoted[-1])))
    raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


#: ``[agent] kind``: a kind of :mod:`supervisor.agents.kinds` (the schema lists the built-in
#: ones).
AgentKind = Annotated[
    str,
    PlainValidator(_known_kind),
    WithJsonSchema({"enum": list(kinds.builtin_names()), "type": "string"}),
]
AgentMode = Literal["headless", "interactive"]


class _AgentCore(BaseModel):
    """The ``[agent]`` keys of every kind: :class:`AgentSpec`'s first fields (its last base,
    so they lead the field order that error messages list)."""

    model_config = ConfigDict(extra="forbid")
    kind: AgentKind = "generic"
    command: list[str] | None = Field(default=None, min_length=1)
    resume_command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    models: dict[str, str] = Field(default_factory=dict)
    default_model: str = DEFAULT_ALIAS
    mode: AgentMode = "headless"

    _check_argv = field_validator("command", "resume_command")(
        classmethod(lambda cls, v: None if v is None else check_args(argv_placeholders_ok(v)))
    )
    # what would fail every launch with E2BIG (Linux's 128 KiB per string; issue 21)
    _check_env = field_validator("env")(classmethod(lambda cls, v: check_env(v)))


class AgentSpec(*kinds.settings_models(), _AgentCore):  # type: ignore[misc]
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

    # the built-in kinds' settings are fields of the bases; a later kind's, validated by its
    # own model, wait here (:meth:`settings`)
    _settings: BaseModel | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _own_settings(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> AgentSpec:
        """A kind registered after this model was built: its keys validated by its own
        settings model (errors keep their ``agent.<key>`` place), the rest by this one."""
        name = data.get("kind") if isinstance(data, dict) else None
        kind = kinds.get(name) if isinstance(name, str) and name in kinds.names() else None
        model = kind.settings() if kind is not None and kind.settings is not None else None
        if model is None or issubclass(cls, model):
            spec: AgentSpec = handler(data)
            return spec
        own = {key: value for key, value in data.items() if key in model.model_fields}
        spec = handler({key: value for key, value in data.items() if key not in own})
        spec._settings = model.model_validate(own)
        return spec

    @model_validator(mode="after")
    def _kind_fits(self) -> AgentSpec:
        kinds.get(self.kind).check(self)  # ValueError: the kind's own rules
        return self

    def settings(self) -> Any:
        """The kind's ``[agent]`` settings: this model itself for a built-in kind (their
        fields are its fields), else the instance of the kind's settings model (a kind
        without one: this model)."""
        return self._settings if self._settings is not None else self

    def known_models(self) -> dict[str, str]:
        """Alias → model id: the built-in aliases overlaid with ``[agent.models]``."""
        return {**DEFAULT_MODELS, **self.models}


ApprovalAction = Literal["approve", "deny", "escalate"]


class ApprovalRule(BaseModel):
    """One ``[[approval.rules]]`` entry (seed 003's command-approval table).

    ``tool`` is a Claude Code tool name (``Bash``, ``Write``, ``Edit``, ...; ``*`` for any);
    ``match`` an optional Python regex searched in the request's subject (the Bash command,
    the file path, the URL; see :func:`supervisor.policy.approval.subject`); ``action`` what to do.
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
    command: list[ArgText] | None = Field(default=None, min_length=1, max_length=MAX_LIST_ITEMS)
    artifacts: list[ArgText] = Field(default_factory=list, max_length=MAX_LIST_ITEMS)
    timeout: ChildSeconds = 600.0

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
    model: str | None = Field(default=None, min_length=1, max_length=200, pattern=MODEL_RE)
    env: dict[str, ArgText] = Field(default_factory=dict)
    monitor: MonitorOverrides = Field(default_factory=MonitorOverrides)
    approval: ApprovalSpec | None = None
    acceptance: AcceptanceSpec | None = None
    workspace: WorkspaceSpec | None = None
    #: ``[cluster]`` profiles only: run on this host id (its queue ``host.<id>``).
    host: str | None = None
    #: Issue 26: names or ids of tasks that must end first (``supervisor.config.plankeys``).
    after: After = Field(default_factory=list)
    #: ``pass``: each predecessor must end with verdict ``PASS``; ``end``: any ending.
    requires: Requires = "pass"
    #: Issue 26: run N copies, each in a worktree (``supervisor.config.attemptkeys``).
    attempts: Attempts = None
    #: One model alias or id per attempt.
    models: Models = None
    #: ``first-pass`` (``None``: the default): the first attempt to pass wins; ``all``:
    #: every attempt runs.
    pick: Pick | None = None

    @field_validator("host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        if value is not None and not NAME_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a host id (letters, digits, '_', '.', '-')")
        return value

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
    "monitor.max_cost_usd",
    "monitor.tool_budget",
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
            "workspace",
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


class BudgetSpec(BaseModel):
    """``[budget]``: the profile's spend limits (issue 26). ``daily_usd``: once the spend of
    the profile's tasks in the local day reaches it, no queued task is launched until the
    next local midnight (running tasks go on; :mod:`supervisor.policy.spend`). The per-task
    limit is ``[monitor] max_cost_usd``."""

    model_config = ConfigDict(extra="forbid")
    daily_usd: UsdAmount | None = Field(
        None, description="USD the profile's tasks may spend per local day before launches wait."
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
    workspace: WorkspaceSpec = Field(default_factory=WorkspaceSpec)
    security: SecuritySpec = Field(default_factory=SecuritySpec)
    budget: BudgetSpec = Field(default_factory=BudgetSpec)
    cluster: ClusterSpec | None = None
    accounts: AccountsSpec = Field(default_factory=AccountsSpec)
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
        return self.spec.paths.state_dir / layout.TASKS

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
        workspace: the effective ``[workspace]``: the task's keys laid over the profile's
            (:func:`supervisor.config.workspace.effective_workspace`).
        account: the credentials it runs with (:func:`supervisor.accounts.of_task`: the
            resolving process's environment, the profile's ``[agent] env``, the task's
            ``env``), recorded in the manifest as ``account``.
        attempt_models: the ids of ``models`` (issue 26), one per attempt, else empty.
    """

    spec: TaskSpec
    prompt: str
    model: str
    policy: MonitorPolicy
    sources: dict[str, str] = field(default_factory=dict)
    rules: tuple[ApprovalRule, ...] = ()
    acceptance: AcceptanceSpec | None = None
    workspace: WorkspaceSpec = field(default_factory=WorkspaceSpec)
    account: str | None = None
    attempt_models: tuple[str, ...] = ()
