"""An account: the set of tasks that share credentials (issue 26), named by a fingerprint.

Standard library only: the views, ``supervise show`` and the cost report read it without
pydantic. The one owner of

* the account's fingerprint (:func:`fingerprint`, :func:`of_task`): ``acct-`` and the first
  12 hex digits of a sha256 over the agent's ``HOME``, ``CLAUDE_CONFIG_DIR``,
  ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_AUTH_TOKEN`` as the task's launch environment has
  them (the engine's own environment, the profile's ``[agent] env``, the task's ``env`` on
  top: :func:`supervisor.engine.launch.launch_spec`). The secret itself is never written:
  only a salted digest of it (the salt is fixed, so two hosts agree on the fingerprint);
* reading the engine's record of the accounts' limits (``state_dir/accounts.json``, written
  by :mod:`supervisor.engine.accountbook`): :func:`read_limits`;
* the line that tells an operator why a queued task waits (:func:`limited_text`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

from supervisor.diskio import read_regular
from supervisor.taskdir import layout

#: The variables that name an account, in the order they are hashed.
KEYS = ("HOME", "CLAUDE_CONFIG_DIR", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")

#: The fingerprint's prefix; followed by :data:`DIGITS` hex digits.
PREFIX = "acct-"
DIGITS = 12

#: Seconds ahead of now a recorded reset is believed: Claude Code's usage limits reset
#: every five hours and every week (Anthropic's plans), so a reset over 8 days away, or
#: one that is not a finite number, is a misread or a hand edit and holds nothing.
MAX_AHEAD = 8 * 86400.0
#: The most bytes of ``state_dir/accounts.json`` read (a few hundred per account).
BOOK_MAX = 1 << 20

#: Mixed into the digest, so a fingerprint cannot be looked up in a table of plain sha256
#: digests of known keys. Fixed: every host of a fleet computes the same fingerprint.
_SALT = b"supervise/account/v1\0"


def fingerprint(env: Mapping[str, str]) -> str:
    """``acct-`` + 12 hex digits of a salted sha256 over the :data:`KEYS` of ``env`` (an
    absent variable and an empty one differ). The same credentials give the same string on
    every host; the values themselves cannot be read back from it."""
    digest = hashlib.sha256(_SALT)
    for key in KEYS:
        value = env.get(key)
        digest.update(
            key.encode()
            + (b"=" + value.encode("utf-8", "surrogateescape") if value is not None else b"")
            + b"\0"
        )
    return PREFIX + digest.hexdigest()[:DIGITS]


def of_task(
    agent_env: Mapping[str, str],
    task_env: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
) -> str:
    """The account of a task: :func:`fingerprint` of the launch environment it gets, the
    engine's ``environ`` (default ``os.environ``) with the profile's ``[agent] env`` and
    then the task's ``env`` on top (the order of :func:`supervisor.engine.launch.launch_spec`)."""
    base = os.environ if environ is None else environ
    return fingerprint({**base, **agent_env, **task_env})


def is_account(value: object) -> bool:
    """``value`` is a fingerprint as :func:`fingerprint` writes it."""
    if not isinstance(value, str) or not value.startswith(PREFIX):
        return False
    digits = value[len(PREFIX) :]
    return len(digits) == DIGITS and all(c in "0123456789abcdef" for c in digits)


def believable(until: object, now: float) -> TypeGuard[float]:
    """Whether ``until`` is a reset to hold an account for: a finite number of epoch
    seconds at most :data:`MAX_AHEAD` after ``now``."""
    return (
        isinstance(until, int | float)
        and not isinstance(until, bool)
        and math.isfinite(until)
        and until <= now + MAX_AHEAD
    )


def believable_entry(entry: object, now: float) -> TypeGuard[dict[str, Any]]:
    """Whether ``entry`` (one account's value in the book) is a limit to hold for: a dict
    with a :func:`believable` ``until``, a string ``by`` and a ``last_start`` that is
    ``None`` or believable (one far ahead would stagger the account's starts for ever)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("by"), str):
        return False
    last = entry.get("last_start")
    return believable(entry.get("until"), now) and (last is None or believable(last, now))


def read_book(path: Path) -> object:
    """The JSON of an accounts book (``state_dir/accounts.json``), read as a regular file of
    at most :data:`BOOK_MAX` bytes, never through a symlink, never blocking on a FIFO.

    Raises:
        OSError: missing, not a regular file, too big or unreadable.
        ValueError: not JSON (also JSON nested too deep to parse).
    """
    data = read_regular(path, BOOK_MAX, follow=False)
    try:
        return json.loads(data)
    except RecursionError as exc:
        raise ValueError("JSON nested too deep") from exc


def read_limits(state_dir: Path, now: float | None = None) -> dict[str, dict[str, Any]]:
    """``state_dir/accounts.json`` as the engine last wrote it: account → ``{"until",
    "by", "last_start"}`` (epoch seconds, the task id that met the limit); ``{}`` when the
    file is missing or unreadable (a view shows no hold rather than failing); an entry
    that is not :func:`believable_entry` at ``now`` (default: the time now) is left out."""
    now = time.time() if now is None else now
    try:
        data = read_book(state_dir / layout.ACCOUNTS)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if is_account(k) and believable_entry(v, now)}


def clock_text(moment: float, now: float | None = None) -> str:
    """``moment`` (epoch seconds) as ``HH:MM`` in the machine's local time zone, or
    ``YYYY-MM-DD HH:MM`` when it is not on ``now``'s local day (default: today); ``?`` for
    a time the platform cannot convert."""
    try:
        when = time.localtime(moment)
        today = time.localtime(time.time() if now is None else now)
    except (OverflowError, OSError, ValueError):
        return "?"
    same_day = (when.tm_year, when.tm_yday) == (today.tm_year, today.tm_yday)
    return time.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M", when)


def limited_text(until: float, now: float | None = None) -> str:
    """The reason a held task shows: ``account limited until HH:MM`` (with the date when
    the reset is not today: :func:`clock_text`)."""
    return f"account limited until {clock_text(until, now)}"


def hold_of(limits: Mapping[str, Mapping[str, Any]], account: str | None, now: float) -> str | None:
    """Why a queued task of ``account`` waits at ``now`` by ``limits`` (:func:`read_limits`):
    ``account limited until HH:MM`` before the reset, else ``None``."""
    entry = limits.get(account or "")
    until = entry.get("until") if entry else None
    if believable(until, now) and now < until:
        return limited_text(float(until), now)
    return None
