"""The task keys of a plan (issue 26): ``after``, ``requires``, ``[workspace] base =
"after:NAME"`` and the prompt's ``{after.NAME.summary}`` / ``{after.NAME.branch}``.

What can be checked without reading the state dir is checked here, at validation: the
shape of each name (no control or format characters: a name is shown to operators and
written into events), the list's size, a task after itself, a base or a placeholder naming
a task that ``after`` does not list, and a ``[cluster]`` profile (the fleet does not run
plans yet). Which task each name means is decided at claim (:mod:`supervisor.plans`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

#: Most predecessors one task may name.
MAX_AFTER = 64
#: ``[workspace] base`` prefix naming a predecessor's branch.
AFTER_BASE = "after:"
#: ``{after.NAME.summary}`` and ``{after.NAME.branch}`` in a prompt; other braces are text.
PLACEHOLDER_RE = re.compile(r"\{after\.([^{}\n]+?)\.(summary|branch)\}")
#: ``requires``: ``pass`` (the predecessor's verdict must be ``PASS``) or ``end`` (any end).
Requires = Literal["pass", "end"]


def _name_ok(value: str) -> str:
    """A predecessor's name or id: no control, format (bidi, zero-width) or surrounding
    white space characters."""
    bad = [c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")]
    if bad:
        raise ValueError(
            f"{value!r} holds a control or format character ({bad[0]!r}); use plain text"
        )
    if value != value.strip():
        raise ValueError(f"{value!r} starts or ends with white space; remove it")
    return value


def _unique(values: list[str]) -> list[str]:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{value!r} is listed twice; list each predecessor once")
        seen.add(value)
    return values


AfterName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_name_ok)]
After = Annotated[list[AfterName], Field(max_length=MAX_AFTER), AfterValidator(_unique)]


def base_after(base: str | None) -> str | None:
    """The predecessor's name in ``base = "after:NAME"``, else ``None``."""
    if base is not None and base.startswith(AFTER_BASE):
        return base[len(AFTER_BASE) :]
    return None


def placeholders(prompt: str) -> list[tuple[str, str]]:
    """``(NAME, field)`` of every ``{after.NAME.summary|branch}`` in ``prompt``."""
    return [(m.group(1), m.group(2)) for m in PLACEHOLDER_RE.finditer(prompt)]


def plan_problems(
    name: str,
    after: list[str],
    base: str | None,
    prompt: str | None,
    cluster: bool,
    where: Callable[..., str],
) -> list[str]:
    """One line per plan key of a task that cannot work, each naming the file, the key and
    the fix (``where(*keys)`` gives ``FILE:LINE: key 'KEY'``)."""
    problems = []
    if after and cluster:
        problems.append(
            f"{where('after')}: a [cluster] profile does not run plans yet; submit the "
            "task when its predecessors have ended, or run it under a spool profile"
        )
    if name in after:
        problems.append(
            f"{where('after')}: the task {name!r} names itself; a task cannot come after itself"
        )
    wanted = base_after(base)
    if wanted is not None and wanted not in after:
        problems.append(
            f"{where('workspace', 'base')}: {base!r} names {wanted!r}, which 'after' does not "
            f"list; add {wanted!r} to 'after' or change the base"
        )
    for named, _ in placeholders(prompt or ""):
        if named not in after:
            problems.append(
                f"{where('prompt')}: '{{after.{named}...}}' names {named!r}, which 'after' "
                f"does not list; add {named!r} to 'after' or fix the placeholder"
            )
            break
    return problems
