"""The engine's checks: one task observed, decided and acted on (:class:`Checks`, a part of
:class:`supervisor.engine.scheduler.Engine`, like :class:`~supervisor.engine.kicks.Kicks`).

Checks of different tasks run side by side on the dispatcher's pool
(:mod:`supervisor.engine.dispatch`), at most one per task. What they share is guarded by the
engine's ``shared`` lock (an ``RLock``) where ``live`` and ``queue`` change: the intake and
startup jobs hold it; a check retires its task with single atomic map operations and kicks
the intake to give the slot away (it takes the lock only for a follow-up that reopens it).
The counters and the operator's requests taken by the intake (``inbox``) have a leaf lock of
their own (``leaf``), so a check never waits for the intake's launches to record it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from supervisor import policy
from supervisor.config import LoadedProfile
from supervisor.engine import clock, followups, workspaces
from supervisor.engine.actions import Actions
from supervisor.engine.dailyspend import DailySpend
from supervisor.engine.dispatch import Dispatcher, Gate
from supervisor.engine.intake import Intake
from supervisor.engine.observe import Observer, tail_pending
from supervisor.engine.runtime import Outcome, Runtime
from supervisor.engine.statefs import StateDisk
from supervisor.engine.watch import Watcher
from supervisor.taskdir.folder import TaskDir
from supervisor.tmux import TmuxError

log = logging.getLogger("supervise.engine")

#: Seconds between looks for the wrapper's end line in output.log.
TAIL_POLL = 0.05


class Checks:
    """Checks and their outcomes; the attributes are the engine's own."""

    profile: LoadedProfile
    live: dict[str, Runtime]
    queue: deque[TaskDir]
    stopping: threading.Event
    shared: threading.RLock
    leaf: threading.Lock
    inbox: dict[str, set[str]]
    unchecked: set[str]  # adopted tasks not checked yet (engine start-up)
    tailing: set[str]  # endings waiting for the agent's last lines in output.log
    started_monotonic: float
    gate: Gate
    dispatch: Dispatcher
    disk: StateDisk
    spend: DailySpend
    observer: Observer
    actions: Actions
    source: Intake
    watcher: Watcher | None
    stats: dict[str, int]
    _kicked: set[str]
    write_stats: Callable[[], None]
    _kick: Callable[[str], None]
    _account_gate: Callable[[Runtime, policy.Signals, policy.Decision], policy.Decision]

    def _count(self, counter: str) -> None:
        """Add one to an engine counter (from any thread)."""
        with self.leaf:
            self.stats[counter] += 1

    def _schedule_check(self, runtime: Runtime, delay: float) -> None:
        """Check ``runtime`` in ``delay`` seconds (at once if an event arrived meanwhile)."""
        task_id = runtime.task.task_id
        if task_id in self._kicked:  # an event arrived during this check
            delay = 0.0
        self.dispatch.schedule(task_id, max(delay, 0.0))

    def _check_job(self, task_id: str) -> None:
        """The dispatcher's body: one check, then the safety net: a live task whose check
        set no next look is looked at again ``base_interval`` seconds later."""
        self.gate.run(self.check, task_id)
        if task_id in self.unchecked:
            self._first_check(task_id)
        runtime = self.live.get(task_id)
        idle = runtime is not None and not self.dispatch.is_due(task_id)
        if idle and runtime is not None and not self.stopping.is_set():
            self.dispatch.schedule(task_id, runtime.policy.base_interval)

    def _first_check(self, task_id: str) -> None:
        """An adopted task had its first check; after the last one, log (once) and count
        how long adoption took from the engine's start (``adoption_ms``)."""
        with self.leaf:
            if task_id not in self.unchecked:
                return
            self.unchecked.discard(task_id)
            if self.unchecked:
                return
            took = time.monotonic() - self.started_monotonic
            self.stats["adoption_ms"] = max(int(took * 1000), 1)
        log.info("adoption: every adopted task checked %.3f s after the engine started", took)
        self.write_stats()  # the heartbeat says so now (mkstemp: safe beside the intake's)

    def check(self, task_id: str) -> None:
        """One monitor check of one task: observe, decide, act. While the last decision is
        not carried out (its agent being stopped, or tmux not answering), the check carries
        it on instead: one task's decisions never interleave. tmux not answering is a
        logged fault: the task is looked at again ``base_interval`` seconds later."""
        runtime = self.live.get(task_id)
        if runtime is None or runtime.launching or runtime.preparing or runtime.finishing:
            return  # the background work wakes it when done
        if runtime.stopping is not None:
            self._kicked.discard(task_id)
            self._settle(runtime, self.actions.advance_stop(runtime))
            return
        if task_id in self.tailing:  # an ending waits for its last lines (_decide_and_apply)
            self._kicked.discard(task_id)  # (else each look would be due at once)
            if tail_pending(runtime.task, clock.now()):
                self._schedule_check(runtime, TAIL_POLL)
                return
            self.tailing.discard(task_id)
        if runtime.pending is not None:  # the last decision is not carried out yet
            pending, runtime.pending = runtime.pending, None
            self._kicked.discard(task_id)
            self._settle(runtime, pending())
            return
        try:
            self._decide_and_apply(runtime)
        except TmuxError as exc:
            log.error(
                "%s: check cut short: %s; looked at again in %g s",
                task_id,
                exc,
                runtime.policy.base_interval,
            )
            if task_id in self.live and runtime.stopping is None:
                self._schedule_check(runtime, runtime.policy.base_interval)

    def _take_inbox(self, runtime: Runtime) -> None:
        """Move the operator's requests the intake took for ``runtime`` into its own set."""
        with self.leaf:
            taken = self.inbox.pop(runtime.task.task_id, None)
        if taken:
            runtime.requests |= taken

    def _decide_and_apply(self, runtime: Runtime) -> None:
        """Observe (:class:`Observer`), decide (:func:`policy.decide`), act (:class:`Actions`)."""
        task = runtime.task
        self._count("checks")
        self._kicked.discard(task.task_id)
        self._take_inbox(runtime)
        disk_full = self.disk.full()
        if self.disk.take_cleared():
            with self.shared:
                live = dict(self.live)
            self.observer.repipe_live(live)
        signals = self.observer.signals(runtime, disk_full)
        if not disk_full:  # a held decision keeps the operator's requests for later
            runtime.requests.clear()
        decision = policy.decide(runtime.state, signals, runtime.policy)
        decision = self._account_gate(runtime, signals, decision)  # issue 26
        if policy.Action.FINISH in decision.actions and tail_pending(task, signals.now):
            # The agent's last lines are still on their way through tmux and sed: look
            # again in a moment instead of holding a check thread, and only at output.log
            # until they are there (a full check asks tmux for the pane each time: 20 tmux
            # calls per ending under load, where one will do).
            self.tailing.add(task.task_id)
            self._schedule_check(runtime, TAIL_POLL)
            return
        self._settle(runtime, self.actions.apply(runtime, decision, signals.now))
        recheck = runtime.agent.recheck_in() if runtime.agent is not None else None
        if recheck is not None and task.task_id in self.live and runtime.stopping is None:
            self._schedule_check(runtime, recheck)  # e.g. a dialog seen once

    def _settle(self, runtime: Runtime, outcome: Outcome) -> None:
        """Act on what performing a decision changed: count a resume, retire the task, or
        schedule its next check."""
        self.spend.saw(runtime.task.task_id, runtime.manifest)  # the daily budget's total
        self.source.report(runtime.task, runtime.manifest, runtime.state.status, outcome.retired)
        if outcome.resumed:
            self._count("resumed")
        if outcome.retired:
            self._retire(runtime)
        elif outcome.next_check is not None:
            self._schedule_check(runtime, outcome.next_check)

    def _retire(self, runtime: Runtime) -> None:
        """Take an ended task out of the engine and have the intake give its slot to a
        queued one. No ``shared`` lock: each step is one atomic operation on a map (a
        ``dict`` copied or popped in C, under the GIL), so a check never waits for the
        intake's launches (14 % of the engine's time under load was checks waiting here for
        it, ``benchmarks/README.md``); only a follow-up that reopens the task, which the
        intake's requests may look at, takes it."""
        task_id = runtime.task.task_id
        self.dispatch.cancel(task_id)
        if task_id in self.unchecked:  # adopted and ended before its first check
            self._first_check(task_id)
        with self.leaf:
            self.inbox.pop(task_id, None)
        self.tailing.discard(task_id)
        self.live.pop(task_id, None)
        workspaces.unshare(runtime, self.live.copy())
        self._count("finished")
        self._kicked.discard(task_id)
        if self.watcher is not None:
            self.watcher.forget_task(task_id)
        if followups.waiting(runtime.task):  # an escalated task a follow-up stopped
            with self.shared:
                followups.after_end(self, runtime.task)
        self._kick("intake")  # it fills the slot (at once: a kick moves its job to now)

    def _finish_stops(self) -> None:
        """At shutdown, once no check runs: see every stop in progress through (up to 2 x
        STOP_TIMEOUT s), so no agent is left half-stopped and each decision's manifest is
        written."""
        for runtime in list(self.live.values()):
            while runtime.stopping is not None:
                if runtime.stopping.advance():
                    self._kicked.discard(runtime.task.task_id)
                    self._settle(runtime, self.actions.advance_stop(runtime))
                else:
                    time.sleep(runtime.stopping.next_look())
