"""What Claude Code's hooks say about the current turn beyond permissions (issue 21): a
turn that ended on an API failure while the agent lives on, the agent working again, and
a call its own auto-mode classifier denied.

* ``StopFailure`` (CLI 2.1.78+): in interactive mode the TUI stays at its prompt after an
  API failure ends its turn (CLI 2.1.328, measured: ``authentication_failed``,
  ``server_error``), so the hook itself is the end of the run
  (``AgentView.turn_failure``; the policy acts on it, :mod:`supervisor.policy.turns`).
* Evidence of work (:data:`WORK_EVENTS`): a new prompt or a tool call. Seen after a failed
  turn it means the CLI went on by itself (a usage-limit reset that Claude Code 2.1.234+
  continues on its own): the turn's failure and limit are forgotten, and a wait that kept
  the agent ends without a second continue.
* ``PermissionDenied`` (CLI 2.1.89+; Claude Code hooks reference: it fires when the
  auto-mode classifier denies a tool call): logged as a ``permission`` audit line
  (``by`` = ``classifier``) and counted by the circuit breaker like a failed tool call,
  since the agent is as stuck either way.

Bookkeeping only; no I/O beyond the event line the caller appends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from supervisor.audit import By
from supervisor.policy import approval
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TaskDir

#: Hooks that show the agent working: a prompt submitted (by a person or by the CLI's own
#: continue) or a tool call on its way or done.
WORK_EVENTS = frozenset(
    {
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "PermissionRequest",
        "PermissionDenied",
    }
)
#: The hook Claude Code runs when its auto-mode classifier denied a tool call.
PERMISSION_DENIED = "PermissionDenied"
#: Hooks the circuit breaker counts as a denial or a failed tool call.
BREAKER_EVENTS = frozenset({"PostToolUseFailure", PERMISSION_DENIED})
#: The audit subject and reason kept per denial, in characters.
_CHARS = 500
#: Longest ``StopFailure`` error kept (the documented values are short identifiers such as
#: ``authentication_failed``); it goes into reason lines, the summary and the notifier.
ERROR_CHARS = 64
#: What an error identifier may hold; anything else (newlines, controls, bidi) becomes ``_``.
_NOT_ID = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class TurnWatch:
    """The current turn of one task's agent, as its hooks tell it.

    Attributes:
        failure: the ``StopFailure`` error that ended the current turn while the agent
            lives on (interactive mode), else ``None``.
        working: a hook of :data:`WORK_EVENTS` arrived since the last check.
    """

    failure: str | None = None
    working: bool = False

    def begin_check(self) -> None:
        """Start a check: work is counted afresh."""
        self.working = False

    def failed(self, error: str) -> None:
        """The turn ended on an API failure (the hook's ``error``, kept as an identifier of
        at most :data:`ERROR_CHARS` characters; ``unknown`` if none)."""
        self.failure = _NOT_ID.sub("_", error[:ERROR_CHARS]) or "unknown"

    def saw(self, event: str) -> bool:
        """Note one hook. Returns True when it is work after a failed turn: the agent went
        on by itself, and the caller forgets the turn's failure class and limit."""
        if event not in WORK_EVENTS:
            return False
        self.working = True
        went_on, self.failure = self.failure is not None, None
        return went_on

    def new_run(self) -> None:
        """A new run starts: nothing of the last one's turn holds."""
        self.failure, self.working = None, False


def record_denial(task: TaskDir, data: dict[str, Any], at: float) -> None:
    """Append the ``permission`` audit line of a call Claude Code's classifier denied
    (``PermissionDenied`` hook input: ``tool_name``, ``tool_input``, ``reason``).

    Raises:
        OSError: the event cannot be written.
    """
    tool = str(data.get("tool_name") or "")
    reason = data.get("reason") or data.get("permission_decision_reason") or ""
    task.append_event(
        Event.PERMISSION,
        at=at,
        tool=tool,
        subject=approval.subject(tool, data.get("tool_input"))[:_CHARS],
        decision="deny",
        by=By.CLASSIFIER,
        rule=None,
        detail=str(reason)[:_CHARS] or None,
    )
