"""The shape of a task id: the one definition every command, view and server checks an id
against before it names a path with it (issue 22: an id over 255 characters made
``Path.exists()`` raise ``ENAMETOOLONG`` and printed a traceback).

A task id is the slug the spool makes (:func:`supervisor.spool.new_task_id`:
``<slug>-<6 hex>``, at most 47 characters). Folders made by hand or by older versions may
hold any lowercase slug, so the check is the slug, cut where the longest file name derived
from an id (``spool/rejected/<id>.toml.error``) still fits Linux's ``NAME_MAX`` (255 bytes).
Standard library only.
"""

from __future__ import annotations

import argparse
import re

from supervisor.taskdir import layout
from supervisor.terminal import escape_controls

#: The longest file name Linux takes (``NAME_MAX``, bytes; an id is ASCII).
NAME_MAX = 255
#: The longest suffix a file named after an id carries (``spool/rejected/<id>.toml.error``).
LONGEST_SUFFIX = ".toml" + layout.ERROR_SUFFIX
#: The longest task id: every file named after one still fits :data:`NAME_MAX`.
MAX_LENGTH = NAME_MAX - len(LONGEST_SUFFIX)
#: A task id's characters: a lowercase slug, never a path (no ``/``, ``.``, leading ``-``).
TASK_ID = re.compile(r"[a-z0-9][a-z0-9-]*")
#: The ids the spool makes (:func:`supervisor.spool.new_task_id`); a spool file named so
#: keeps its name as its id.
GENERATED = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?-[0-9a-f]{6}")
#: How many characters of a bad id a message shows.
SHOWN = 60
#: What a task id is, for the lines that refuse one.
RULE = f"a task id is lowercase letters, digits and '-', at most {MAX_LENGTH} characters"


def is_task_id(text: str) -> bool:
    """Whether ``text`` can name a task: a lowercase slug of at most :data:`MAX_LENGTH`
    characters (never a path, never too long for a file name derived from it)."""
    return len(text) <= MAX_LENGTH and TASK_ID.fullmatch(text) is not None


def shown(text: str) -> str:
    """``text`` as a message may show it: control characters escaped
    (:func:`supervisor.terminal.escape_controls`), cut to :data:`SHOWN` characters."""
    cut = text if len(text) <= SHOWN else f"{text[:SHOWN]}… ({len(text)} characters)"
    return escape_controls(cut)


def refusal(text: str) -> str:
    """The one line that refuses ``text`` as a task id: ``no task '…': <the rule>``."""
    return f"no task '{shown(text)}': {RULE} (supervise status lists them)"


def bad_argument(args: argparse.Namespace) -> str | None:
    """The refusal line for a command's ``task_id`` argument when it is no task id, else
    ``None``. Called by ``supervise``'s ``main`` before any command runs, so every command
    taking one id (``show``, ``tail``, ``attach``, ``events``, ``continue``, ``diff``,
    ``merge``, ``discard``) refuses it the same way, exit 1; commands taking several ids
    (``task_ids``) refuse each in their own report."""
    task_id = getattr(args, "task_id", None)
    if isinstance(task_id, str) and not is_task_id(task_id):
        return refusal(task_id)
    return None
