"""The notifier: an argv run once per notified event, with a timeout, never through a shell.

It receives the event as one JSON object on stdin, whole and exact, and the same facts as
``SUPERVISE_*`` environment variables, each cut to :data:`FIELD_BYTES` bytes with a marker
(Linux's per-string limit on argv and the environment is 128 KiB). Argv elements may use
``{message}``, ``{task_id}``, ``{task_name}``, ``{status}``, ``{reason}``,
``{failure_reason}``, ``{verdict}``, ``{summary}`` (the summary's first sentence),
``{exit_code}``, ``{retry_count}`` and ``{task_dir}``; each is substituted inside its own
argv element, so values never become extra arguments or code.
Values in argv and in the environment are for display: control characters from agent output
or task files are escaped there (:mod:`supervisor.terminal`); the JSON on stdin is exact.
The seed sent ``openclaw system event --text "..." --mode now`` fire-and-forget; here a
failure or a timeout is logged and never blocks or undoes the task's cleanup.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from supervisor import children
from supervisor.children import Capture
from supervisor.config.argv import expand_placeholders
from supervisor.taskdir.events import Event
from supervisor.terminal import escape_controls

log = logging.getLogger("supervise.notify")


#: Characters of the summary's first sentence kept in a message.
SENTENCE_CHARS = 200
#: UTF-8 bytes of one value in argv or the environment, before the marker. Linux refuses
#: any single argv or environment string over 128 KiB (MAX_ARG_STRLEN, execve(2): E2BIG,
#: "Argument list too long"); a 200 KB last output line lost its failure notification.
#: 8 KiB keeps an argv element that holds every placeholder under that limit.
FIELD_BYTES = 8 * 1024
#: UTF-8 bytes of one whole argv element after substitution (with its marker), below
#: MAX_ARG_STRLEN (131072) for templates that repeat placeholders.
ARGV_BYTES = 120 * 1024
#: Bytes of the notifier's stderr read into memory (its start and end); the rest is drained.
STDERR_BYTES = 16 * 1024
#: Characters of its stderr's end in the log line of a failed notifier.
LOGGED_CHARS = 500


def first_sentence(text: str | None, limit: int = SENTENCE_CHARS) -> str:
    """The first sentence of ``text`` (up to the first ``. ``, ``! ``, ``? `` or line end),
    whitespace folded, at most ``limit`` characters (``…`` when clipped); ``""`` for none."""
    folded = " ".join((text or "").split())
    match = re.search(r"[.!?](\s|$)", folded)
    sentence = folded[: match.end()].strip() if match else folded
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


def message_for(event: dict[str, Any]) -> str:
    """One-line human summary, e.g. ``supervise: task fix-bug-1a2b3c failed (exit 1,
    billing, verdict FAIL): Agent: Credit balance is too low. [/state/tasks/fix-bug-1a2b3c]``:
    status, exit code, failure class (``failure_reason``) or ``abandon_reason``, verdict,
    the summary's first sentence (else the reason for the event) and the task dir. Control
    characters escaped (one line, safe on a terminal). The profile's daily budget (issue 26,
    no task) is ``supervise: daily budget reached: $X of $Y [PROFILE]``."""
    if event.get("event") == Event.DAILY_BUDGET:
        return escape_controls(f"supervise: {event.get('reason')} [{event.get('profile')}]")
    text = f"supervise: task {event.get('task_id')} {event.get('status')}"
    details = []
    if event.get("exit_code") is not None:
        details.append(f"exit {event['exit_code']}")
    if event.get("failure_reason"):
        details.append(str(event["failure_reason"]))
    elif event.get("abandon_reason"):
        details.append(str(event["abandon_reason"]))
    if event.get("verdict"):
        details.append(f"verdict {event['verdict']}")
    if details:
        text += f" ({', '.join(details)})"
    said = event.get("summary") or event.get("reason")
    if said:
        text += f": {said}"
    if event.get("task_dir"):
        text += f" [{event['task_dir']}]"
    return escape_controls(text)


def _display(key: str, value: Any) -> str:
    """A field as shown to a person: ``""`` for None, controls escaped; ``last_lines``
    keeps its newlines and tabs."""
    if value is None:
        return ""
    return escape_controls(str(value), keep="\n\t" if key == "last_lines" else "")


def bounded(text: str, limit: int = FIELD_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes plus a marker naming its whole size
    (``…[cut: N bytes, whole on stdin]``); unchanged when it fits. Cut on a character
    boundary, so the result is valid UTF-8."""
    data = text.encode("utf-8", "surrogateescape")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", "ignore")
    return f"{kept}…[cut: {len(data)} bytes, whole on stdin]"


def expand(argv: list[str], event: dict[str, Any]) -> list[str]:
    """Substitute ``{field}`` placeholders from ``event`` in each argv element, once; each
    value at most :data:`FIELD_BYTES` bytes (:func:`bounded`)."""
    values = {k: bounded(_display(k, v)) for k, v in event.items()}
    values["message"] = bounded(message_for(event))
    return expand_placeholders(argv, values)


def run_notifier(argv: list[str], event: dict[str, Any], timeout: float) -> int | None:
    """Run the notifier for ``event``; return its exit code, or ``None`` if it failed to run
    or timed out. Never raises. It runs in a process group of its own, ended at its
    timeout and at its end, and only the last :data:`LOGGED_CHARS` characters of its
    stderr are logged (:mod:`supervisor.children` reads at most :data:`STDERR_BYTES`).

    Args:
        argv: the notifier argv template (empty: nothing is run).
        event: the event facts (task_id, task_name, status, reason, exit_code,
            retry_count, task_dir, last_lines).
        timeout: seconds before the notifier is ended.
    """
    if not argv:
        return None
    command = [bounded(arg, ARGV_BYTES) for arg in expand(argv, event)]
    env = dict(os.environ)
    for key, value in event.items():
        env[f"SUPERVISE_{key.upper()}"] = bounded(_display(key, value))
    env["SUPERVISE_MESSAGE"] = bounded(message_for(event))
    payload = json.dumps({**event, "message": message_for(event)}).encode()
    done = children.run(
        command, timeout=timeout, env=env, stdin=payload, stderr=Capture(STDERR_BYTES)
    )
    if done.error is not None:
        log.warning("notifier %s could not run: %s", command[0], done.error)
    elif done.timed_out:
        log.warning("notifier %s timed out after %g s; ended", command[0], timeout)
    elif done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()[-LOGGED_CHARS:]
        log.warning("notifier %s exited %d: %s", command[0], done.returncode, err)
    return done.returncode
