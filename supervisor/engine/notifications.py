"""Notifications of a task's events: the notifier's payload, and each run of the notifier
on the engine's notify pool (:mod:`supervisor.engine.pools`), written ahead in the event
log (``notifying``, then ``notified``) so that one a killed engine cut short is sent again
at restart (at least once; :class:`supervisor.engine.recovery.Unsent`)."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from supervisor import statelock
from supervisor.agents.readable import agent_kind, readable_text
from supervisor.config import MonitorPolicy
from supervisor.engine import notify
from supervisor.engine.pools import Submit
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import Manifest, TaskDir

if TYPE_CHECKING:
    from supervisor.engine.recovery import Unsent

log = logging.getLogger("supervise.engine")


def notify_payload(manifest: Manifest, event_name: str, why: str) -> dict[str, Any]:
    """The JSON object a notifier gets on stdin for one event of ``manifest``'s task:
    ``reason`` (``abandon_reason``, else why the policy decided), ``failure_reason`` (the
    failure class), ``abandon_reason``, ``verdict``, ``summary`` (the summary's first
    sentence, :func:`supervisor.engine.notify.first_sentence`), ``task_dir`` and the run facts."""
    return {
        "event": event_name,
        "task_id": manifest.task_id,
        "task_name": manifest.task_name,
        "status": manifest.status,
        "reason": manifest.abandon_reason or why,
        "failure_reason": manifest.failure_reason,
        "abandon_reason": manifest.abandon_reason,
        "verdict": manifest.verdict,
        "summary": notify.first_sentence(manifest.summary),
        "exit_code": manifest.exit_code,
        "retry_count": manifest.retry_count,
        "task_dir": manifest.tmpdir,
        "session_id": manifest.session_id,
        "last_lines": last_lines(manifest),
    }


def unsent(events: Iterable[dict[str, Any]]) -> dict[str, str]:
    """The notifications ``events`` announce and never close: each ``notified_event`` with
    a ``notifying`` line and no ``notified`` after it, mapped to that line's reason. A
    killed engine left them unsent (:class:`supervisor.engine.recovery.Unsent`), or
    announced before the manifest it never wrote (then the ending, completed again,
    announces them no second time: :meth:`Notifications.announce`)."""
    pending: dict[str, str] = {}
    for event in events:
        name, notified_event = event.get("event"), str(event.get("notified_event"))
        if name == Event.NOTIFYING:
            pending[notified_event] = str(event.get("reason") or "")
        elif name == Event.NOTIFIED:
            pending.pop(notified_event, None)
    return pending


def last_lines(manifest: Manifest, count: int = 10) -> str:
    """The last ``count`` lines of the manifest's ``output_tail`` (raw) as a person reads
    them: rendered for the agent's kind (:func:`supervisor.agents.readable.readable_text`;
    the kind read from the manifest by the agents package, so the engine names none)."""
    kind = agent_kind(None, manifest.model_dump(mode="json"))
    text = readable_text(kind, manifest.output_tail or "")
    return "\n".join(text.splitlines()[-count:])


class Notifications:
    """Runs the notifier off the check worker.

    Args:
        submit_background: runs a callable on the pool of its kind
            (:meth:`supervisor.engine.pools.Pools.submit`); notifications use ``notify``.
    """

    def __init__(self, submit_background: Submit) -> None:
        self.submit_background = submit_background

    def resend(self, unsent: Unsent) -> None:
        """Run again the notifications a killed engine left unsent (adoption found them)."""
        for event, why in unsent.pending:
            task, monitor = unsent.task, unsent.resolved.policy
            log.info("%s: notifying %s again (cut short by a killed engine)", task.task_id, event)
            self.submit(task, monitor, unsent.manifest, event, why)

    @staticmethod
    def announce(
        task: TaskDir, status: str, events: list[str], why: str, logged: Iterable[str] = ()
    ) -> None:
        """Write ``notifying`` for each of ``events`` (write-ahead), before the manifest
        that records the change they announce: a killed engine then leaves a trace of
        every notification it owed, one still queued behind slow notifiers or one it had
        not queued yet, and the next engine sends each (:class:`recovery.Unsent`). Were it
        written later, a kill between the two writes lost the notification (issue 20,
        found by attack). A full disk skips it: the notification is still sent. An event
        of ``logged`` (announced by an engine killed before its manifest, or before a write
        that failed: :func:`unsent` of the turn's log) is announced no second time (found
        by attack: two ``notifying`` lines for one notification)."""
        for event in events:
            if event in logged:
                continue
            with contextlib.suppress(OSError):
                task.append_event(Event.NOTIFYING, status=status, notified_event=event, reason=why)

    def submit(
        self,
        task: TaskDir,
        monitor: MonitorPolicy,
        manifest: Manifest,
        event: str,
        why: str,
    ) -> None:
        """Queue one notification on the notify pool, the task folder held until it ends
        (:meth:`announce` wrote its ``notifying``)."""
        body = functools.partial(self._notify, task, monitor, manifest, event, why)
        self.submit_background("notify", statelock.held_while(task.path, body))

    @staticmethod
    def _notify(
        task: TaskDir, monitor: MonitorPolicy, manifest: Manifest, name: str, why: str
    ) -> None:
        """Run the notifier for one event (in the background; bounded by its timeout);
        ``notified`` after it closes the ``notifying`` :meth:`announce` wrote."""
        event = notify_payload(manifest, name, why)
        code = notify.run_notifier(monitor.notifier, event, timeout=monitor.notifier_timeout)
        task.append_event(
            Event.NOTIFIED, status=manifest.status, notified_event=name, notifier_exit_code=code
        )
