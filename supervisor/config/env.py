"""``MONITOR_*`` environment overrides, read and type-checked by pydantic-settings.

The environment model is derived from :class:`~supervisor.config.monitor.MonitorPolicy`
(the one declaration of the monitor keys): the same types and bounds, every key optional,
lax (an environment value is always a string). It is built on first use, so
pydantic-settings is imported only when a ``MONITOR_*`` variable is actually set (it costs a
noticeable part of a CLI start-up).

List keys are read as a JSON list or a comma-separated string (``failed,abandoned``,
``75,76``); ``MONITOR_NOTIFIER`` as a JSON list (``["notify-send", "{message}"]``) or a
shell-like string split into argv with :func:`shlex.split` (it is never run by a shell).
"""

from __future__ import annotations

import difflib
import functools
import json
import os
from typing import Annotated, Any, get_origin

from pydantic import BaseModel, BeforeValidator, ValidationError, create_model

from supervisor.config.argv import split_argv
from supervisor.config.monitor import MonitorPolicy, error_message, field_type
from supervisor.errors import ConfigError

PREFIX = "MONITOR_"


def _list_from_env(value: Any) -> Any:
    """A JSON list, or a comma-separated string: ``failed,abandoned`` or ``75,76``.

    Raises:
        ValueError: malformed JSON.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


def _argv_from_env(value: Any) -> Any:
    """An argv list from a JSON list or a shell-like string (see :func:`split_argv`).

    Raises:
        ValueError: malformed JSON or unbalanced quoting, with what to give instead.
    """
    try:
        return split_argv(value)
    except ValueError as exc:
        raise ValueError(f"{exc}; give a JSON list of strings or a shell-like string") from exc


#: Keys whose environment value is not a plain comma-separated list.
_PARSERS = {"notifier": _argv_from_env}


@functools.cache
def monitor_env() -> type[BaseModel]:
    """The ``MONITOR_*`` settings model (a ``pydantic_settings.BaseSettings``), derived
    from :class:`MonitorPolicy`: one optional, lax key per policy key."""
    from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

    class _Settings(BaseSettings):
        model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore")

    fields: dict[str, Any] = {}
    for name, info in MonitorPolicy.model_fields.items():
        kind = field_type(info) | None
        if get_origin(info.annotation) is list:  # parsed here, not as pydantic-settings' JSON
            parse = _PARSERS.get(name, _list_from_env)
            kind = Annotated[kind, NoDecode, BeforeValidator(parse)]
        fields[name] = (kind, None)
    return create_model("MonitorEnv", __base__=_Settings, __module__=__name__, **fields)


def read_env_overrides() -> dict[str, Any]:
    """Validated ``MONITOR_*`` overrides from the process environment (pydantic-settings).

    Returns only the keys that are set. Raises :class:`ConfigError` naming the variable,
    its value and what is allowed; an unknown ``MONITOR_*`` name (a typo) is an error too.
    """
    if not any(name.upper().startswith(PREFIX) for name in os.environ):
        return {}  # the common case: no need to load pydantic-settings at all
    known = {f"{PREFIX}{name.upper()}" for name in MonitorPolicy.model_fields}
    problems = []
    for name in sorted(os.environ):
        if name.upper().startswith(PREFIX) and name.upper() not in known:
            guess = difflib.get_close_matches(name.upper(), sorted(known), n=1)
            hint = f" (did you mean {guess[0]}?)" if guess else ""
            problems.append(
                f"env {name}: unknown MONITOR_* variable{hint}; known: " + ", ".join(sorted(known))
            )
    try:
        values = monitor_env()()
    except ValidationError as exc:
        for item in exc.errors():
            field_name = str(item["loc"][0]) if item["loc"] else "?"
            var = f"{PREFIX}{field_name.upper()}"
            message = error_message(item, MonitorPolicy)
            actual = next((k for k in os.environ if k.upper() == var), var)
            problems.append(f"env {actual}={os.environ.get(actual, '')!r}: {message}")
    except ValueError as exc:  # a parse error pydantic-settings raised itself
        problems.append(f"env: {exc}")
    if problems:
        raise ConfigError(problems)
    return values.model_dump(exclude_none=True)
