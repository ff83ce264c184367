"""Profiles and tasks: TOML files validated with pydantic, plus ``MONITOR_*`` env overrides.

The package, by what each module holds (imports go one way, top to bottom):

* :mod:`~supervisor.config.argv`: the ``{placeholder}`` names argv lists may use;
* :mod:`~supervisor.config.ranges`: a key's allowed range in words, for error lines;
* :mod:`~supervisor.config.monitor`: the 16 monitor keys (and the bounds a task file
  meets), declared once in :class:`MonitorPolicy`, and the :class:`MonitorOverrides`
  model derived from it;
* :mod:`~supervisor.config.env`: the ``MONITOR_*`` environment model, derived too;
* :mod:`~supervisor.config.models`: :class:`Profile`, :class:`TaskSpec` and their tables,
  :class:`LoadedProfile` and :class:`ResolvedTask`;
* :mod:`~supervisor.config.tomlfile`: bounded reading, TOML parsing, error lines;
* :mod:`~supervisor.config.loading`: :func:`load_profile`, :func:`load_task`,
  :func:`resolve_task` and :func:`effective_policy`.

``from supervisor.config import X`` works for every public name below.
"""

from __future__ import annotations

from supervisor.config.argv import NOTIFIER_PLACEHOLDERS, PLACEHOLDERS
from supervisor.config.env import read_env_overrides
from supervisor.config.loading import (
    effective_policy,
    load_profile,
    load_task,
    looks_like_profile,
    resolve_task,
)
from supervisor.config.models import (
    DEFAULT_MODELS,
    DEFAULT_TASK_MAY_SET,
    MAX_PROMPT_BYTES,
    MAX_TASK_FILE_BYTES,
    AcceptanceSpec,
    AgentKind,
    AgentMode,
    AgentSpec,
    ApprovalAction,
    ApprovalRule,
    ApprovalSpec,
    LoadedProfile,
    PathsSpec,
    Profile,
    ResolvedTask,
    SecuritySpec,
    TaskSpec,
    TmuxSpec,
    default_socket_name,
)
from supervisor.config.monitor import (
    DEFAULT_NOTIFY_ON,
    MAX_ARG_CHARS,
    MAX_CHILD_SECONDS,
    MAX_COST_USD,
    MAX_DENIALS,
    MAX_LIST_ITEMS,
    MAX_LOG_BACKUPS,
    MAX_LOG_BYTES,
    MAX_NOTIFIER_SECONDS,
    MAX_RETRIES,
    MAX_SECONDS,
    MIN_INTERVAL,
    MonitorOverrides,
    MonitorPolicy,
    NotifyEvent,
    PositiveSeconds,
    Seconds,
    StaleSignal,
    error_message,
)
from supervisor.config.tomlfile import read_bounded, too_big
from supervisor.diskio import file_kind
from supervisor.errors import ConfigError

__all__ = [
    "DEFAULT_MODELS",
    "DEFAULT_NOTIFY_ON",
    "DEFAULT_TASK_MAY_SET",
    "MAX_ARG_CHARS",
    "MAX_CHILD_SECONDS",
    "MAX_COST_USD",
    "MAX_DENIALS",
    "MAX_LIST_ITEMS",
    "MAX_LOG_BACKUPS",
    "MAX_LOG_BYTES",
    "MAX_NOTIFIER_SECONDS",
    "MAX_PROMPT_BYTES",
    "MAX_RETRIES",
    "MAX_SECONDS",
    "MAX_TASK_FILE_BYTES",
    "MIN_INTERVAL",
    "NOTIFIER_PLACEHOLDERS",
    "PLACEHOLDERS",
    "AcceptanceSpec",
    "AgentKind",
    "AgentMode",
    "AgentSpec",
    "ApprovalAction",
    "ApprovalRule",
    "ApprovalSpec",
    "ConfigError",
    "LoadedProfile",
    "MonitorOverrides",
    "MonitorPolicy",
    "NotifyEvent",
    "PathsSpec",
    "PositiveSeconds",
    "Profile",
    "ResolvedTask",
    "Seconds",
    "SecuritySpec",
    "StaleSignal",
    "TaskSpec",
    "TmuxSpec",
    "default_socket_name",
    "effective_policy",
    "error_message",
    "file_kind",
    "load_profile",
    "load_task",
    "looks_like_profile",
    "read_bounded",
    "read_env_overrides",
    "resolve_task",
    "too_big",
]
