"""The engine's slots: queued tasks started while fewer than ``max_concurrent`` are live,
and the results of the work made off the worker for them, recorded on it
(:class:`Launches`, a part of :class:`supervisor.engine.scheduler.Engine`, like
:class:`supervisor.engine.kicks.Kicks`).

A task's worktree is made on the workspace pool (:class:`supervisor.engine.workspaces.Preparer`)
and its tmux session on the launch thread (:class:`supervisor.engine.starts.Starts`); both
hold the task's slot meanwhile. The intake job collects their results here: a launch is
recorded (:func:`supervisor.engine.launch.record_launch`) and watched, a failed one ends as
:func:`supervisor.policy.launch_failed` says, a full disk puts the task back in the queue.
"""

from __future__ import annotations

import errno
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from supervisor import policy
from supervisor.config import ConfigError, LoadedProfile
from supervisor.engine import clock, launch, statefs, workspaces
from supervisor.engine import runtime as runtimes
from supervisor.engine.actions import Actions
from supervisor.engine.dailyspend import DailySpend
from supervisor.engine.intake import Intake
from supervisor.engine.runtime import Outcome, Runtime
from supervisor.engine.starts import Result, Starts
from supervisor.taskdir import control
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TaskDir
from supervisor.taskdir.states import FailureReason
from supervisor.tmux import Tmux

log = logging.getLogger("supervise.engine")


class Launches:
    """Slot filling and launch results of the engine; the attributes are the engine's own."""

    profile: LoadedProfile
    tmux: Tmux
    live: dict[str, Runtime]
    queue: deque[TaskDir]
    disk: statefs.StateDisk
    spend: DailySpend
    source: Intake
    actions: Actions
    preparer: workspaces.Preparer
    starts: Starts
    stats: dict[str, int]
    _watch: Callable[[Runtime], None]
    _settle: Callable[[Runtime, Outcome], None]
    _decide_and_apply: Callable[[Runtime], None]
    _schedule_check: Callable[[Runtime, float], None]
    _count: Callable[[str], None]
    _account_holds: Callable[[TaskDir], bool]
    _release_blocked: Callable[[], None]

    def _fill_slots(self) -> None:
        """Record the worktrees and launches made off the worker, then start queued tasks,
        oldest first, while fewer than ``max_concurrent`` are live (none on a full disk); a
        task its account holds back stays queued and the ones behind it still start."""
        limit = self.profile.spec.max_concurrent
        self._release_blocked()  # blocked tasks whose predecessors ended join the queue
        for runtime, error in self.preparer.take():  # worktrees made off the check pool
            self._one(runtime, self._prepared, error)
        for runtime, result in self.starts.take():  # launches made off the check pool
            self._one(runtime, self._launched, result)
        if self.queue and self.disk.full():
            return  # a launch writes launch.json, events and the manifest: wait for room
        if self.spend.holds(self.queue, clock.now()) and self.queue:
            return  # the profile's daily budget is spent: queued tasks wait (policy/spend.py)
        held: list[TaskDir] = []
        while self.queue and len(self.live) < limit:
            task = self.queue.popleft()
            if self._account_holds(task):  # its account is limited (engine/accounts.py)
                held.append(task)
                continue
            try:
                runtime = runtimes.load_queued(self.profile, self.tmux, task)
            except (OSError, ValueError, ConfigError):
                log.exception("cannot load queued task %s; it stays queued on disk", task.task_id)
                continue
            if self.preparer.start(runtime):  # holds its slot while its worktree is made
                self.live[task.task_id] = runtime
                continue
            self.live[task.task_id] = runtime  # holds its slot while it is launched
            self.starts.start(runtime)
        self.queue.extendleft(reversed(held))  # still queued, in their order

    def _one(self, runtime: Runtime, record: Callable[[Runtime, Any], None], result: Any) -> None:
        """Record one finished worktree or launch; one that raises is logged and the others
        are still recorded (taken from their queue, they would be lost: each task would stay
        ``queued`` holding its slot). The task's checks pick it up again (its folder is the
        record)."""
        try:
            record(runtime, result)
        except Exception:
            log.exception("recording the launch of %s failed", runtime.task.task_id)
            runtime.launching = runtime.preparing = False
            if runtime.task.task_id in self.live:
                self._schedule_check(runtime, 0.0)

    def _prepared(self, runtime: Runtime, error: str | None) -> None:
        """A task's worktree was made (then it is launched in turn), or not (``error``:
        it ends as :func:`policy.launch_failed` says, ``failure_reason`` workspace)."""
        if error is not None:
            self._launch_failed(runtime, runtime.state, clock.now(), error, FailureReason.WORKSPACE)
        elif runtime.requests.intersection(control.ENDING):  # ended while its worktree was made
            self._schedule_check(runtime, 0.0)  # on the check pool, one check at a time
        else:
            self.live.pop(runtime.task.task_id, None)
            self.queue.appendleft(runtime.task)

    def _launched(self, runtime: Runtime, started: Result) -> None:
        """Record a launch made off the check pool (:class:`Starts`), then let its checks
        run: ``launching`` stays set until the record is written, so no check of the task
        interleaves with it."""
        next_check = None
        try:
            next_check = self._record_launch(runtime, started)
        finally:
            runtime.launching = False
        if next_check is not None and runtime.task.task_id in self.live:
            # a copy: checks retire tasks without the shared lock (engine/checks.py)
            workspaces.share(runtime, self.live.copy())  # (a task still launching shares nothing)
            self._schedule_check(runtime, next_check)

    def _record_launch(self, runtime: Runtime, started: Result) -> float | None:
        """Record a launch, and watch the task from then on; returns when to check it first
        (seconds; ``None``: the launch failed and the task ended or waits again). A launch
        that could not write its ``launch.json`` on a full disk started nothing: the task
        waits in the queue again."""
        task = runtime.task
        if isinstance(started, OSError) and started.errno in (errno.ENOSPC, errno.EDQUOT):
            log.error("%s: cannot launch: %s; it stays queued", task.task_id, started)
            self.live.pop(task.task_id, None)
            self.queue.appendleft(task)
            return None
        if isinstance(started, Exception):  # nothing was started: the task ends with why
            log.error("launch of %s failed: %r", task.task_id, started)
            why = " ".join(f"{type(started).__name__}: {started}".split())
            self._launch_failed(runtime, runtime.state, clock.now(), why, FailureReason.LAUNCH)
            return None
        if started.error is not None:
            # tmux refused to create the session: the task ends ``failed`` with the reason
            # (policy.launch_failed). It counts as launched until then, so a failed event
            # write leaves it a live task that the next check decides again.
            log.error("launch of %s failed: %s", task.task_id, started.error)
            runtime.state = started.decision.state
            self.live[task.task_id] = runtime
            state, why = started.decision.state, str(started.error)
            self._launch_failed(runtime, state, started.now, why, FailureReason.LAUNCH)
            return None
        self._count("launched")
        self.live[task.task_id] = runtime  # watched from now on, whatever the writes do
        launch.record_launch(runtime, started.decision, started.now)
        self.source.report(task, runtime.manifest, Event.LAUNCHED, ended=False)
        self._watch(runtime)
        log.info("launched %s in tmux session %s", task.task_id, task.task_id)
        return started.decision.next_check

    def _launch_failed(
        self, runtime: Runtime, state: policy.TaskState, now: float, why: str, reason: str
    ) -> None:
        """End a task that could not start, as :func:`policy.launch_failed` decides."""
        decision = policy.launch_failed(state, now, why, runtime.policy, reason)
        self._settle(runtime, self.actions.apply(runtime, decision, now))
