"""The task keys of attempts (issue 26, part 2): ``attempts = N``, ``models = [...]`` and
``pick = "first-pass" | "all"``.

What can be checked without git or the state dir is checked here, at validation: the
number of attempts (:data:`MIN_ATTEMPTS` to :data:`MAX_ATTEMPTS`), ``models`` one per
attempt (each looked up as ``model`` is, by :func:`supervisor.config.loading.resolve_task`),
``models`` or ``pick`` without ``attempts``, ``model`` beside ``models``, a ``shared``
workspace (N agents in one folder would clobber each other) and a ``[cluster]`` profile
(the fleet does not run attempts yet). Whether ``project_dir`` really gets worktrees is
checked at claim (:mod:`supervisor.attempts`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictInt, WithJsonSchema

#: Fewest attempts: one attempt is a plain task.
MIN_ATTEMPTS = 2
#: Most attempts of one task (each is an agent and a worktree of its own).
MAX_ATTEMPTS = 8
#: ``pick``: the first attempt to pass wins and the others are discarded, or all run.
Pick = Literal["first-pass", "all"]
FIRST_PASS, ALL = "first-pass", "all"


def _count_ok(value: int | None) -> int | None:
    if value is not None and not MIN_ATTEMPTS <= value <= MAX_ATTEMPTS:
        raise ValueError(
            f"{value} attempts; give {MIN_ATTEMPTS} to {MAX_ATTEMPTS} (one attempt is a "
            "plain task: remove the key), or submit the task again for more"
        )
    return value


def _models_ok(values: list[Any] | None) -> list[str] | None:
    """Each entry a model alias or id: a string of 1 to 200 characters, no space or control
    character (checked as one key: a bad entry never leaves a shorter list behind)."""
    for number, value in enumerate(values or (), 1):
        ok = isinstance(value, str) and 0 < len(value) <= 200
        if not ok or re.search(r"[\x00-\x20\x7f-\x9f]", value):
            shown = repr(value[:60] if isinstance(value, str) else value)[:80]
            raise ValueError(
                f"entry {number} ({shown}) is not a model alias or id (a string of 1 to 200 "
                "characters, no space or control character); fix or remove it"
            )
    return values


Attempts = Annotated[
    StrictInt | None,
    AfterValidator(_count_ok),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": MIN_ATTEMPTS, "maximum": MAX_ATTEMPTS},
                {"type": "null"},
            ]
        }
    ),
]
Models = Annotated[
    list[Any] | None,
    Field(max_length=MAX_ATTEMPTS),
    AfterValidator(_models_ok),
    WithJsonSchema({"type": "array", "items": {"type": "string"}, "maxItems": MAX_ATTEMPTS}),
]


def attempt_problems(
    attempts: int | None,
    models: list[str] | None,
    pick: str | None,
    has_model: bool,
    mode: str | None,
    cluster: bool,
    where: Callable[..., str],
) -> list[str]:
    """One line per attempts key that cannot work, each naming the file, the key and the
    fix (``where(*keys)`` gives ``FILE:LINE: key 'KEY'``). ``pick`` is ``None`` when the
    file does not set it (``first-pass``); ``mode`` is the effective ``[workspace] mode``."""
    if attempts is None:
        return [
            f"{where(key)}: only a task with 'attempts = N' takes {key!r}; add 'attempts' "
            "or remove the key"
            for key, value in (("models", models), ("pick", pick))
            if value is not None
        ]
    problems = []
    if cluster:
        problems.append(
            f"{where('attempts')}: a [cluster] profile does not run attempts yet; submit "
            "the task once per attempt, or run it under a spool profile"
        )
    if mode == "shared":
        problems.append(
            f"{where('attempts')}: attempts need a worktree each, and this task's "
            "[workspace] mode is 'shared' (the agents would clobber each other's files); "
            "set [workspace] mode = \"worktree\" or remove 'attempts'"
        )
    if models is not None and len(models) != attempts:
        problems.append(
            f"{where('models')}: {len(models)} models for {attempts} attempts; give one "
            "model per attempt, or remove 'models' to run the task's model in each"
        )
    if models is not None and has_model:
        problems.append(
            f"{where('model')}: 'model' and 'models' are both set; keep 'models' (one per "
            "attempt) or 'model' (the same in each)"
        )
    return problems
