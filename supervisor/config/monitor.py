"""The monitor policy: its 16 keys, declared once, and the models derived from them.

:class:`MonitorPolicy` is the one declaration of every ``[monitor]`` key: its type, its
bounds, its default and its description. The other two shapes of the same keys are
derived from it, so they cannot drift:

* :class:`MonitorOverrides`: a ``[monitor]`` table as written in a profile or task file,
  every key optional (``None``: not given), strict like the policy (TOML values are typed:
  ``deadline = "600"`` is a wrong type, an int is still fine for a float);
* the ``MONITOR_*`` environment model (:mod:`supervisor.config.env`), lax because every
  environment value is a string.

Strictness is a property of the model (``ConfigDict(strict=True)``), not of the key types,
which is what lets the environment model reuse the same types lax.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    create_model,
    model_validator,
)
from pydantic.fields import FieldInfo

from supervisor.config.argv import notifier_ok
from supervisor.config.ranges import RANGE_ERRORS, allowed_range

#: Longest interval, deadline or timeout accepted anywhere, in seconds (365 days). Beyond
#: it a value is a typo or an attack, and APScheduler cannot schedule a run that far away
#: (``base_interval = 1e12`` overflowed its datetime arithmetic and left the task ``running``).
MAX_SECONDS = 365 * 24 * 3600.0

#: Shortest interval between checks, in seconds (``base_interval``, ``max_interval``,
#: ``stale_threshold``): every task's checks share the engine's one worker thread, so a task
#: asking for a check every nanosecond would take it for itself (issue 20).
MIN_INTERVAL = 0.1
#: Longest run of a child a task starts (acceptance check, workspace ``setup``), in seconds
#: (1 day): each holds a slot of the engine's background pool while it runs.
MAX_CHILD_SECONDS = 24 * 3600.0
#: Longest notifier run, in seconds: a notifier sends one message (issue 20).
MAX_NOTIFIER_SECONDS = 3600.0
#: Most rotated logs kept per log (``log_backups``; supervisord's default is 10).
MAX_LOG_BACKUPS = 100
#: Largest ``max_log_bytes`` (1 GiB): a log this size is rotated at a check.
MAX_LOG_BYTES = 1 << 30
#: Most resumes over a task's life (``max_retries``).
MAX_RETRIES = 100
#: Default ``tool_budget`` in seconds (30 min): well above Claude Code's own Bash timeout,
#: 10 min at most (its Bash tool reference), so a tool the CLI still lets run is never hung.
DEFAULT_TOOL_BUDGET = 1800.0
#: Most consecutive denials before escalation (``max_denials``).
MAX_DENIALS = 1000
#: Largest budget in USD (``max_cost_usd``).
MAX_COST_USD = 1_000_000.0
#: Longest argv element in characters: Linux refuses one string over 128 KiB
#: (``MAX_ARG_STRLEN``), and a character is at most 4 bytes of UTF-8.
MAX_ARG_CHARS = 32 * 1024
#: Most elements in an argv list or a list of paths a task file gives.
MAX_LIST_ITEMS = 1000

#: A duration in seconds: finite (no ``inf``/``nan``) and at most :data:`MAX_SECONDS`. The one
#: declaration of the bound; every duration type builds on it (plain ``Field`` constraints,
#: so the JSON Schemas in ``schemas/`` show the bound too).
Seconds = Annotated[float, Field(allow_inf_nan=False, le=MAX_SECONDS)]
_Positive = Annotated[Seconds, Field(gt=0)]
_NonNegative = Annotated[Seconds, Field(ge=0)]
_Interval = Annotated[Seconds, Field(ge=MIN_INTERVAL)]
#: A strict duration for keys outside ``[monitor]`` (``intake_interval``): a TOML string
#: or boolean is a wrong type there too.
PositiveSeconds = Annotated[_Positive, Strict()]
#: A strict timeout of a child a task starts (acceptance ``timeout``, ``setup_timeout``).
ChildSeconds = Annotated[PositiveSeconds, Field(le=MAX_CHILD_SECONDS)]


def _no_nul(value: str) -> str:
    """An argv element, environment value or path cannot hold NUL (``execve(2)`` and
    ``open(2)`` take C strings); refused here rather than at every run.

    Raises:
        ValueError: ``value`` holds NUL.
    """
    if "\x00" in value:
        raise ValueError("holds a NUL character, which no argv element or path can; remove it")
    return value


#: One argv element or path a task file gives (see :data:`MAX_ARG_CHARS`; no NUL).
ArgText = Annotated[str, Field(max_length=MAX_ARG_CHARS), AfterValidator(_no_nul)]
_ExitCode = Annotated[int, Field(ge=1, le=255)]
_Usd = Annotated[float, Field(gt=0, le=MAX_COST_USD, allow_inf_nan=False)]
#: An amount of USD a profile may set (``[budget] daily_usd``): a number, never a boolean.
UsdAmount = Annotated[_Usd, Strict()]
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
_NOTIFY_EVENTS = len(get_args(NotifyEvent))
#: Events that run the notifier by default: the terminal ones and the one that needs a
#: human (issue 14: escalated, failed, abandoned, completed; ``waiting`` is opt-in, and
#: then notified once per limit, see ``supervisor.policy.outcomes.same_wait``).
DEFAULT_NOTIFY_ON: tuple[str, ...] = ("escalated", "failed", "abandoned", "completed")
#: How output staleness is measured (issue 4): the output file's mtime, a hash of the
#: visible tmux screen (for a TUI that redraws a spinner), or the agent's transcript file.
StaleSignal = Literal["mtime", "screen", "transcript"]


def error_message(item: Any, model: type[BaseModel] | None = None) -> str:
    """The text of one pydantic error (an ``ErrorDetails``) for a problem line; the
    :data:`MAX_SECONDS` bound is said in words, and a number out of range is followed by
    the whole range allowed (:func:`supervisor.config.ranges.allowed_range`) when the
    ``model`` holding the key at ``item["loc"]`` is given."""
    message = str(item["msg"]).removeprefix("Value error, ")
    if item["type"] == "less_than_equal" and (item.get("ctx") or {}).get("le") == MAX_SECONDS:
        message = f"at most {MAX_SECONDS:.0f} seconds (1 year) is allowed; give fewer"
    if item["type"] in RANGE_ERRORS:
        allowed = allowed_range(model, tuple(item["loc"]))
        if allowed is not None:
            message += f"; allowed: {allowed}"
    return message


class MonitorPolicy(BaseModel):
    """The effective monitor policy of one task (all times in seconds).

    Defaults come from the seed monitor (``MONITOR_BASE_INTERVAL=30``,
    ``MONITOR_MAX_INTERVAL=300``, ``MONITOR_DEADLINE=18000``, ``MONITOR_GRACE_PERIOD=30``).
    Log rotation follows supervisord's ``stdout_logfile_maxbytes`` /
    ``stdout_logfile_backups``; ``resume_exit_codes`` is its ``exitcodes``, inverted. Each
    key's meaning is its field's ``description`` (shown in ``schemas/``).

    Raises:
        pydantic.ValidationError: on a non-positive interval, a value of the wrong type, or
            ``max_interval`` smaller than ``base_interval``.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    base_interval: _Interval = Field(30.0, description="Seconds between checks at first.")
    max_interval: _Interval = Field(
        300.0, description="Longest interval between checks and backoff (s); >= base_interval."
    )
    deadline: _Positive = Field(
        18000.0, description="Seconds from the first launch after which the task is abandoned."
    )
    grace_period: _NonNegative = Field(
        30.0, description="Seconds output may stay stale before the agent counts as hung."
    )
    stale_threshold: _Interval | None = Field(
        None, description="Seconds without output that make it stale; default 3 x base_interval."
    )
    max_retries: Annotated[int, Field(ge=0, le=MAX_RETRIES)] = Field(
        3, description="Resumes over the task's whole life."
    )
    notifier: Annotated[
        list[ArgText], Field(max_length=MAX_LIST_ITEMS), AfterValidator(notifier_ok)
    ] = Field(
        default_factory=list, description="Argv run on the notify_on events ({message}, ...)."
    )
    notifier_timeout: Annotated[_Positive, Field(le=MAX_NOTIFIER_SECONDS)] = Field(
        10.0, description="Seconds the notifier may run."
    )
    notify_on: Annotated[list[NotifyEvent], Field(max_length=_NOTIFY_EVENTS)] = Field(
        default_factory=lambda: list(DEFAULT_NOTIFY_ON),
        description="Events that run the notifier.",
    )
    resume_exit_codes: Annotated[list[_ExitCode], Field(max_length=255)] = Field(
        default_factory=list, description="Exit codes that mean 'resume me', not 'failed'."
    )
    max_log_bytes: Annotated[int, Field(ge=4096, le=MAX_LOG_BYTES)] = Field(
        50 * 1024 * 1024, description="Bytes of output.log before it is rotated."
    )
    log_backups: Annotated[int, Field(ge=0, le=MAX_LOG_BACKUPS)] = Field(
        3, description="Rotated output.log files kept."
    )
    stale_signal: StaleSignal | None = Field(
        None,
        description="What output means for staleness; default screen for an interactive "
        "agent's TUI, else mtime.",
    )
    max_denials: Annotated[int, Field(ge=1, le=MAX_DENIALS)] = Field(
        3, description="Consecutive denials or failed tool calls that escalate the task."
    )
    max_cost_usd: _Usd | None = Field(
        None,
        description="USD a task may spend (the agent's reported cost summed over its runs); "
        "once reached no further resume starts and the task is abandoned (budget). "
        "Default: no limit.",
    )

    tool_budget: _NonNegative = Field(
        DEFAULT_TOOL_BUDGET,
        description="Seconds a tool call in flight (the agent's PreToolUse hook without its "
        "PostToolUse) excuses silent output; past it the run is judged by staleness again. "
        "0: a tool in flight never excuses silence.",
    )

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


def optional_fields(model: type[BaseModel]) -> dict[str, Any]:
    """Each field of ``model`` as ``(annotation | None, Field(None, ...))`` for
    :func:`pydantic.create_model`: the same type and constraints, every key optional, the
    description kept."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        fields[name] = (field_type(info) | None, Field(None, description=info.description))
    return fields


def field_type(info: FieldInfo) -> Any:
    """The annotation of a declared field with its constraints (``info.metadata``) put back."""
    if not info.metadata:
        return info.annotation
    return Annotated[(info.annotation, *info.metadata)]


MonitorOverrides = create_model(
    "MonitorOverrides",
    __config__=ConfigDict(extra="forbid", strict=True),
    __doc__="""A ``[monitor]`` table as written in a profile or task: every key optional.

    Units: seconds for every interval. See :class:`MonitorPolicy` for the meaning of each key.
    """,
    __module__=__name__,
    **optional_fields(MonitorPolicy),
)
