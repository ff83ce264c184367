"""The notifier: an argv run once per notified event, with a timeout, never through a shell.

It receives the event as one JSON object on stdin and the same facts as ``SUPERVISE_*``
environment variables. Argv elements may use ``{message}``, ``{task_id}``, ``{task_name}``,
``{status}``, ``{reason}``, ``{failure_reason}``, ``{verdict}``, ``{summary}`` (the
summary's first sentence), ``{exit_code}``, ``{retry_count}`` and ``{task_dir}``; each is
substituted inside its own argv element, so values never become extra arguments or code.
Values in argv and in the environment are for display: control characters from agent output
or task files are escaped there (:mod:`supervisor.terminal`); the JSON on stdin is exact.
The seed sent ``openclaw system event --text "..." --mode now`` fire-and-forget; here a
failure or a timeout is logged and never blocks or undoes the task's cleanup.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
from typing import Any

from supervisor.config.argv import expand_placeholders
from supervisor.terminal import escape_controls

log = logging.getLogger("supervise.notify")


#: Characters of the summary's first sentence kept in a message.
SENTENCE_CHARS = 200


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
    characters escaped (one line, safe on a terminal)."""
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


def expand(argv: list[str], event: dict[str, Any]) -> list[str]:
    """Substitute ``{field}`` placeholders from ``event`` in each argv element, once."""
    values = {k: _display(k, v) for k, v in event.items()}
    values["message"] = message_for(event)
    return expand_placeholders(argv, values)


def run_notifier(argv: list[str], event: dict[str, Any], timeout: float) -> int | None:
    """Run the notifier for ``event``; return its exit code, or ``None`` if it failed to run
    or timed out (it is killed then). Never raises.

    Args:
        argv: the notifier argv template (empty: nothing is run).
        event: the event facts (task_id, task_name, status, reason, exit_code,
            retry_count, task_dir, last_lines).
        timeout: seconds before the notifier is killed.
    """
    if not argv:
        return None
    command = expand(argv, event)
    env = dict(os.environ)
    for key, value in event.items():
        env[f"SUPERVISE_{key.upper()}"] = _display(key, value)
    env["SUPERVISE_MESSAGE"] = message_for(event)
    payload = json.dumps({**event, "message": message_for(event)}).encode()
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # its own process group, so a timeout ends all of it
        )
    except OSError as exc:
        log.warning("notifier %s could not run: %s", command[0], exc)
        return None
    try:
        _, err = process.communicate(payload, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.communicate(timeout=1.0)
        log.warning("notifier %s timed out after %g s; killed", command[0], timeout)
        return None
    if process.returncode != 0:
        log.warning(
            "notifier %s exited %d: %s",
            command[0],
            process.returncode,
            err.decode(errors="replace").strip()[-500:],
        )
    return process.returncode
