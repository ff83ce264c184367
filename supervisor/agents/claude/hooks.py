"""Claude Code's hooks for one task: the generated ``--settings`` file and the signal files.

Hooks are injected per task through a generated ``claude-settings.json`` in the task folder,
passed with ``--settings`` (merged by the CLI over the user's own settings, which are never
edited). Each hook runs the relay :mod:`supervisor.agents.claude.relay` as a command, which
records the hook's input as a signal file in the task folder (and, for a permission request,
waits for the engine's answer). Sources: Claude Code hooks reference, checked against CLI
2.1.328 on this machine (docs/claude-hooks.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor.diskio import atomic_write, read_regular

#: Hook events the adapter registers (Claude Code hooks reference). ``PermissionRequest``
#: blocks until the engine rules; the others only record and wake the engine (``PreToolUse``
#: and ``PostToolUse``/``PostToolUseFailure``/``PostToolBatch`` bracket a tool in flight,
#: :mod:`supervisor.agents.claude.tools`).
HOOK_EVENTS: tuple[str, ...] = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PermissionDenied",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "Notification",
    "Stop",
    "StopFailure",
    "SessionEnd",
)
#: Hook events that take a ``matcher`` (tool events).
_TOOL_EVENTS = frozenset(
    {"PreToolUse", "PermissionRequest", "PermissionDenied", "PostToolUse", "PostToolUseFailure"}
)
SETTINGS = "claude-settings.json"
STREAM = "stream.jsonl"
#: Seconds a non-blocking hook may take before Claude Code gives up on it.
HOOK_TIMEOUT = 30
#: Longest wait (seconds) of a permission request for a ruling: a week.
MAX_PERMISSION_WAIT = 7 * 24 * 3600
#: Bytes a hook signal file may have (its JSON input: a Write's whole content included).
HOOK_MAX = 64 << 20
_HOOK_NAME = re.compile(r"^hook-(\d{20})-(\d+)-([A-Za-z]+)\.json$")


def settings(task_dir: Path, permission_wait: float) -> dict[str, Any]:
    """The ``--settings`` JSON registering :data:`HOOK_EVENTS` for one task.

    Args:
        task_dir: the task folder (the hook writes its signal files there).
        permission_wait: seconds a ``PermissionRequest`` may wait for a ruling (an
            escalation waits for a human); capped at :data:`MAX_PERMISSION_WAIT`.
    """
    wait = int(min(max(permission_wait, 60), MAX_PERMISSION_WAIT))
    hook = str(Path(__file__).with_name("relay.py"))
    hooks: dict[str, Any] = {}
    for event in HOOK_EVENTS:
        blocking = event == "PermissionRequest"
        command = shlex.join(
            [sys.executable, "-I", "-S", hook, str(task_dir), event]
            + ([str(wait)] if blocking else [])
        )
        entry: dict[str, Any] = {
            "hooks": [
                {
                    "type": "command",
                    "command": command,
                    "timeout": wait + 30 if blocking else HOOK_TIMEOUT,
                }
            ]
        }
        if event in _TOOL_EVENTS:
            entry = {"matcher": "*", **entry}
        hooks[event] = [entry]
    return {"hooks": hooks}


def write_settings(task_dir: Path, permission_wait: float) -> Path:
    """Write :func:`settings` to ``task_dir/claude-settings.json`` (0600); returns it."""
    path = task_dir / SETTINGS
    data = json.dumps(settings(task_dir, permission_wait), indent=1).encode()
    atomic_write(path, data)
    os.chmod(path, 0o600)
    return path


@dataclass(frozen=True)
class HookSignal:
    """One hook invocation recorded by :mod:`supervisor.agents.claude.relay`.

    Attributes:
        path: the signal file (``hook-<time_ns>-<pid>-<event>.json``).
        event: the hook event name.
        at: epoch seconds when the hook ran.
        data: the hook's JSON input (``{}`` if unreadable).
    """

    path: Path
    event: str
    at: float
    data: dict[str, Any]

    @property
    def answer_path(self) -> Path:
        """Where the ruling for a ``PermissionRequest`` goes."""
        return self.path.with_suffix(".answer")


def read_hooks(task_dir: Path) -> list[HookSignal]:
    """The unprocessed hook signal files of a task, oldest first."""
    found = []
    try:
        names = os.listdir(task_dir)
    except FileNotFoundError:
        return []
    for name in names:
        match = _HOOK_NAME.match(name)
        if not match:
            continue
        path = task_dir / name
        try:  # non-blocking, bounded, no symlink: the agent can write into its folder
            data = json.loads(read_regular(path, HOOK_MAX, follow=False) or b"{}")
        except (OSError, ValueError, RecursionError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        found.append(HookSignal(path, match.group(3), int(match.group(1)) / 1e9, data))
    return sorted(found, key=lambda h: h.path.name)


def archive(signal: HookSignal) -> None:
    """Move a processed signal file into ``task_dir/hooks/`` (kept for the audit trail)."""
    folder = signal.path.parent / "hooks"
    folder.mkdir(mode=0o700, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.replace(signal.path, folder / signal.path.name)


def answer(signal: HookSignal, ruling: dict[str, Any]) -> None:
    """Give a waiting ``PermissionRequest`` hook its decision JSON (atomic write)."""
    atomic_write(signal.answer_path, json.dumps(ruling).encode(), durable=False)


def summary(data: dict[str, Any], limit: int = 300) -> dict[str, Any]:
    """The fields of a hook input worth an ``events.jsonl`` line (long values clipped):
    ``session_id``, ``transcript_path``, ``hook_event_name`` and the event's own fields."""
    keep = (
        "session_id",
        "transcript_path",
        "hook_event_name",
        "notification_type",
        "message",
        "tool_name",
        "tool_input",
        "error",
        "error_type",
        "error_details",
        "reason",
        "source",
        "stop_hook_active",
    )
    out: dict[str, Any] = {}
    for key in keep:
        if key in data:
            value = data[key]
            if not isinstance(value, str):
                value = json.dumps(value, ensure_ascii=False, sort_keys=True)
            out[key] = value if len(value) <= limit else value[:limit] + "…"
    return out
