"""The engine's side of task dependencies (issue 26): blocked tasks, held out of the queue
until :func:`supervisor.policy.plans.gate` says they may start (:class:`Plans`, a part of
:class:`supervisor.engine.scheduler.Engine`, like :class:`~supervisor.engine.launches.Launches`).

A ``blocked`` task holds no ``max_concurrent`` slot: it waits in ``Engine.blocked`` (never
in ``Engine.queue``). Each intake run, before the slots are filled, the blocked tasks are
looked at again when a task ended since the last look, a blocked task arrived, or
:data:`RECHECK` seconds passed: each predecessor's manifest is read and the pure gate
decides. A ready task gets its prompt's ``{after.NAME.*}`` filled and its ``[workspace]
base = "after:NAME"`` set to NAME's branch and final commit, then the ``unblocked`` event
and manifest (through the policy's decision), then joins the queue. A failed one ends
``abandoned`` (reason ``dependency``) without launching.

Whether a folder is blocked is read from its event log (the last of ``blocked`` and
``unblocked``), which is written ahead of the manifest: after a crash between the two, the
task is queued, never blocked again nor unblocked twice.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from supervisor import attempts, policy
from supervisor.config import LoadedProfile
from supervisor.config.plankeys import PLACEHOLDER_RE, base_after
from supervisor.diskio import atomic_write
from supervisor.engine import clock
from supervisor.engine import runtime as runtimes
from supervisor.engine.actions import Actions
from supervisor.engine.runtime import Outcome, Runtime
from supervisor.policy import attempts as attempt_rules
from supervisor.policy import plans as rules
from supervisor.policy.attempts import discard
from supervisor.policy.outcomes import supersede
from supervisor.taskdir import control, layout
from supervisor.taskdir.events import Event, last_of
from supervisor.taskdir.folder import TaskDir
from supervisor.taskdir.states import DAMAGED, Status
from supervisor.tmux import Tmux
from supervisor.waiting import load_manifest

log = logging.getLogger("supervise.engine")

#: Seconds after which blocked tasks are looked at again even if no task ended here (a
#: predecessor's folder archived or repaired meanwhile).
RECHECK = 30.0
#: Characters of a predecessor's summary or branch filled into a prompt (each).
MAX_FILLED = 16 * 1024


def is_blocked(task: TaskDir) -> bool:
    """Whether the task folder waits for its predecessors: its log's last ``blocked`` /
    ``unblocked`` event is ``blocked``."""
    last = last_of(task.events(), (Event.BLOCKED, Event.UNBLOCKED))
    return last is not None and last.get("event") == Event.BLOCKED


def predecessor(tasks_dir: Path, task_id: str) -> tuple[rules.Predecessor, dict[str, Any]]:
    """What the gate needs of one predecessor, and its manifest (``{}`` when unreadable).
    A folder without a readable manifest counts as ``damaged`` (ended, never run again).
    An attempt stands for its group (:func:`supervisor.policy.attempts.stands_for`): the
    winner's ending and manifest, or not ended (status ``None`` is never given for it)
    while the group is undecided."""
    found, data = _own(tasks_dir, task_id)
    group = data.get("attempt") if isinstance(data.get("attempt"), dict) else None
    if group is None or not isinstance(group.get("group"), str):
        return found, data
    record = attempts.read(tasks_dir.parent, group["group"])
    if record is None:
        return found, data
    pick = str(record.get("pick") or attempt_rules.FIRST_PASS)
    winner = record.get("winner") if isinstance(record.get("winner"), str) else None
    target = attempt_rules.stands_for(task_id, pick, winner, record.get("outcome"))
    if target is None:
        return rules.Predecessor(task_id, Status.RUNNING), data
    if target == task_id:
        return found, data
    chosen, manifest = _own(tasks_dir, target)
    return rules.Predecessor(task_id, chosen.status, chosen.verdict), manifest


def _own(tasks_dir: Path, task_id: str) -> tuple[rules.Predecessor, dict[str, Any]]:
    """:func:`predecessor` of the task folder itself."""
    folder = tasks_dir / task_id
    if not folder.is_dir():
        return rules.Predecessor(task_id, None), {}
    try:
        data = load_manifest(folder / layout.MANIFEST)
    except (OSError, ValueError):
        return rules.Predecessor(task_id, DAMAGED), {}
    verdict = data.get("verdict")
    return rules.Predecessor(task_id, data["status"], verdict), data


def fill(template: str, names: list[str], found: dict[str, dict[str, Any]]) -> str:
    """``template`` with each ``{after.NAME.summary|branch}`` of a name in ``names``
    replaced by that predecessor's (``found``: name -> manifest); a missing value is an
    empty string, and every other brace stays as written."""

    def value(match: Any) -> str:
        name, field = match.group(1), match.group(2)
        if name not in names:
            return str(match.group(0))
        data = found.get(name, {})
        if field == "summary":
            text = data.get("summary")
        else:
            text = (data.get("workspace") or {}).get("branch")
        return str(text or "")[:MAX_FILLED]

    return PLACEHOLDER_RE.sub(value, template)


class Plans:
    """Blocked tasks of the engine; the attributes are the engine's own."""

    profile: LoadedProfile
    tmux: Tmux
    queue: deque[TaskDir]
    blocked: dict[str, TaskDir]
    actions: Actions
    stats: dict[str, int]
    _settle: Callable[[Runtime, Outcome], None]
    _plans_look: tuple[int, float] = (-1, 0.0)

    def _hold_or_queue(self, task: TaskDir, after: bool = True) -> bool:
        """Queue a claimed or adopted task, or hold it while it is blocked (``after``
        False: it names no predecessor, so its log is not read); True when held."""
        if after and is_blocked(task):
            self.blocked[task.task_id] = task
            self._plans_look = (-1, 0.0)
            log.info("%s is blocked until its predecessors end", task.task_id)
            return True
        self.queue.append(task)
        return False

    def _release_blocked(self) -> None:
        """Look at the blocked tasks again (see the module docstring), at most when a task
        ended, one arrived, or :data:`RECHECK` s passed."""
        finished, looked = self._plans_look
        if not self.blocked or (
            finished == self.stats["finished"] and time.monotonic() - looked < RECHECK
        ):
            return
        self._plans_look = (self.stats["finished"], time.monotonic())
        read: dict[str, tuple[rules.Predecessor, dict[str, Any]]] = {}  # once per look
        for task_id, task in list(self.blocked.items()):
            try:
                self._look_at(task, read)
            except Exception:  # one broken folder must not hold the others
                log.exception("%s: cannot decide whether it may start; looked at again", task_id)

    def _look_at(
        self, task: TaskDir, read: dict[str, tuple[rules.Predecessor, dict[str, Any]]]
    ) -> None:
        """Decide one blocked task: wait, start (queue it) or end it ``dependency``. Its
        ``blocked`` event is the record of its predecessors (a manifest rebuilt by repair
        has no ``after``); ``read`` keeps each predecessor read once per look. A task that
        still waits costs its event log and those reads, nothing more."""
        record = last_of(task.events(), (Event.BLOCKED,)) or {}
        after = [str(i) for i in record.get("after") or task.read_manifest().after]
        for task_id in after:
            if task_id not in read:
                read[task_id] = predecessor(self.profile.tasks_dir, task_id)
        found = [read[i] for i in after]
        requires = str(record.get("requires") or rules.PASS)
        verdict = rules.gate(requires, [one for one, _ in found])
        if verdict.failed is None and not verdict.ready:
            return
        runtime = runtimes.load_queued(self.profile, self.tmux, task)
        runtime.state = policy.TaskState(status=Status.BLOCKED)
        spec, now = runtime.resolved.spec, clock.now()
        if verdict.failed is not None:
            del self.blocked[task.task_id]
            decision = rules.dependency_failed(
                runtime.state, verdict.failed, requires, runtime.policy
            )
            log.warning("%s: %s", task.task_id, decision.reason)
            self._settle(runtime, self.actions.apply(runtime, decision, now))
            return
        if not verdict.ready:
            return
        by_name = dict(zip(spec.after, (data for _, data in found), strict=False))
        self._build_on(runtime, by_name)
        why = "its predecessors ended as required: " + ", ".join(one.describe() for one, _ in found)
        self.actions.apply(runtime, rules.unblocked(runtime.state, why), now)
        del self.blocked[task.task_id]
        self.queue.append(task)
        log.info("%s unblocked: queued", task.task_id)

    def _build_on(self, runtime: Runtime, by_name: dict[str, dict[str, Any]]) -> None:
        """Fill the prompt's ``{after.NAME.*}`` from the template (kept at the first fill)
        and start the worktree from ``after:NAME``'s branch at its final commit."""
        task, spec = runtime.task, runtime.resolved.spec
        template = task.file(layout.PROMPT_TEMPLATE)
        if not template.exists():
            text = task.file(layout.PROMPT).read_bytes()
            if PLACEHOLDER_RE.search(text.decode("utf-8", errors="replace")):
                atomic_write(template, text)
        if template.exists():
            raw = template.read_bytes().decode("utf-8", errors="replace")
            filled = fill(raw, list(spec.after), by_name)
            atomic_write(task.file(layout.PROMPT), filled.encode("utf-8"))
        name = base_after(runtime.resolved.workspace.base)
        if name is None or runtime.manifest.workspace is None:
            return
        report = (by_name.get(name) or {}).get("workspace") or {}
        branch, commit = report.get("branch"), report.get("head_commit")

        def change(m: Any) -> None:
            if m.workspace is not None and m.workspace.mode == "worktree":
                m.workspace.base = branch or m.workspace.base
                m.workspace.base_commit = commit

        task.update_manifest(change)

    def _stop_blocked(self, task_id: str, verb: str) -> bool:
        """``supervise stop`` (or the engine's ``discard`` or ``supersede``) of a blocked
        task: it ends ``abandoned`` (reason ``stopped``, or ``discarded``) or
        ``superseded`` without launching. False when ``task_id`` is not blocked here.
        Found by attack: a blocked task's ``supersede`` was ignored, and the task launched
        once its predecessors ended, on a host the fleet no longer gave it to."""
        task = self.blocked.get(task_id)
        if task is None or verb not in ("stop", "discard", "supersede"):
            return False
        del self.blocked[task_id]
        runtime = runtimes.load_queued(self.profile, self.tmux, task)
        runtime.state = policy.TaskState(status=Status.BLOCKED)
        if verb not in control.logged_requests(task.turn_events()):  # else: logged, then a kill
            with contextlib.suppress(OSError):
                task.append_event(Event.requested(verb), status=Status.BLOCKED)
        if verb == "stop":
            decision = rules.stopped(runtime.state)
        elif verb == "discard":  # another attempt of its group won (policy/attempts.py)
            decision = discard(runtime.state)
        else:  # the fleet gave it to a newer generation (policy/outcomes.py)
            decision = supersede(runtime.state)
        self._settle(runtime, self.actions.apply(runtime, decision, clock.now()))
        return True
