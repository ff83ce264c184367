"""Argv lists in configuration: the ``{placeholder}`` names they may use, and parsing.

``[agent] command`` / ``resume_command`` and the monitor's ``notifier`` are argv lists
whose elements may hold ``{name}`` placeholders, substituted once and never seen by a
shell. A placeholder that is not known is refused when the file is loaded, naming it and
listing the known ones.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

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
#: Placeholders allowed in the ``notifier`` argv: the event fields filled by
#: :mod:`supervisor.engine.notify`.
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


def expand_placeholders(template: list[str], values: dict[str, str]) -> list[str]:
    """Replace ``{name}`` placeholders in each argv element, in one pass, from ``values``
    (an unknown name stays as written).

    One pass: a value that itself contains ``{model}`` is not expanded again, and each
    value lands inside its own argv element, so a prompt is always exactly one element and
    no shell ever sees it. Used for the agent's argv and the notifier's.
    """
    return [
        _PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), m.group(0)), item) for item in template
    ]


def argv_placeholders_ok(argv: list[str], allowed: tuple[str, ...] = PLACEHOLDERS) -> list[str]:
    """``argv`` unchanged when every ``{name}`` in it is one of ``allowed``.

    Raises:
        ValueError: naming the unknown placeholder, the element and the allowed names.
    """
    for item in argv:
        for name in _PLACEHOLDER_RE.findall(item):
            if name not in allowed:
                raise ValueError(
                    f"unknown placeholder {{{name}}} in {item!r}; allowed: "
                    + ", ".join("{" + p + "}" for p in allowed)
                )
    return argv


def notifier_ok(argv: list[str]) -> list[str]:
    """``argv`` unchanged when it uses only :data:`NOTIFIER_PLACEHOLDERS`.

    Raises:
        ValueError: see :func:`argv_placeholders_ok`.
    """
    return argv_placeholders_ok(argv, NOTIFIER_PLACEHOLDERS)


def split_argv(value: Any) -> Any:
    """An argv list as given, or (from the environment) a JSON list or a shell-like string
    split with :func:`shlex.split`; anything else passes through for pydantic to refuse.

    Raises:
        ValueError: malformed JSON or unbalanced shell quoting.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return shlex.split(text)
    return value
