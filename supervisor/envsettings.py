"""``MONITOR_*`` environment overrides, read and type-checked by pydantic-settings.

Kept apart from :mod:`supervisor.config` so that pydantic-settings is imported only when a
``MONITOR_*`` variable is actually set (it costs a noticeable part of a CLI start-up).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from supervisor.config import (
    NOTIFIER_PLACEHOLDERS,
    NotifyEvent,
    Seconds,
    StaleSignal,
    _argv_placeholders_ok,
    _split_argv,
)

_EnvPositiveSeconds = Annotated[Seconds, Field(gt=0)]
_EnvNonNegativeSeconds = Annotated[Seconds, Field(ge=0)]


class MonitorEnv(BaseSettings):
    """The ``MONITOR_*`` environment overrides, read and type-checked by pydantic-settings.

    ``MONITOR_NOTIFIER`` is a JSON list (``["notify-send", "{message}"]``) or a shell-like
    string that is split into argv with :func:`shlex.split` (it is never run by a shell).
    """

    model_config = SettingsConfigDict(env_prefix="MONITOR_", extra="ignore")

    base_interval: _EnvPositiveSeconds | None = None
    max_interval: _EnvPositiveSeconds | None = None
    deadline: _EnvPositiveSeconds | None = None
    grace_period: _EnvNonNegativeSeconds | None = None
    stale_threshold: _EnvPositiveSeconds | None = None
    max_retries: Annotated[int, Field(ge=0)] | None = None
    notifier: Annotated[list[str] | None, NoDecode] = None
    notifier_timeout: _EnvPositiveSeconds | None = None
    notify_on: Annotated[list[NotifyEvent] | None, NoDecode] = None
    resume_exit_codes: Annotated[list[Annotated[int, Field(ge=1, le=255)]] | None, NoDecode] = None
    max_log_bytes: Annotated[int, Field(ge=4096)] | None = None
    log_backups: Annotated[int, Field(ge=0)] | None = None
    stale_signal: StaleSignal | None = None
    max_denials: Annotated[int, Field(ge=1)] | None = None

    @field_validator("notify_on", "resume_exit_codes", mode="before")
    @classmethod
    def _parse_list(cls, value: Any) -> Any:
        """A JSON list, or a comma-separated string: ``failed,abandoned`` or ``75,76``."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("notifier", mode="before")
    @classmethod
    def _parse_notifier(cls, value: Any) -> Any:
        try:
            return _split_argv(value)
        except ValueError as exc:
            raise ValueError(f"{exc}; give a JSON list of strings or a shell-like string") from exc

    @field_validator("notifier")
    @classmethod
    def _check_notifier(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _argv_placeholders_ok(value, NOTIFIER_PLACEHOLDERS)
