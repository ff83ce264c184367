"""The engine: APScheduler 3.11 jobs that take tasks from the intake and run the policy.

Jobs (no serial worker: checks of different tasks run side by side, at most one per task,
:mod:`supervisor.engine.dispatch`; notifiers, acceptance runs, worktrees and sweeps run on a
pool per kind, ``pools``, so a slow one never delays a check or another kind):

- ``intake``: every ``intake_interval`` seconds (and at once when a claim batch holds
  work), queues what the claim thread took (:class:`~supervisor.engine.intake.Claims`),
  starts its next batch, records the launches the launch thread made
  (:class:`~supervisor.engine.starts.Starts`) and starts more while fewer than
  ``max_concurrent`` are live.
- ``tick``: the one clock of every due check (:class:`~supervisor.engine.dispatch.Dispatcher`);
  each check (:mod:`supervisor.engine.checks`) observes the task
  (:mod:`supervisor.engine.observe`), asks :func:`supervisor.policy.decide`, and performs the
  returned actions (:mod:`supervisor.engine.actions`). The policy also says when to look next
  (grace periods, backoff, deadline), which sets the task's due time.

This module is the only one of the package that calls the others (with its three parts, the
:class:`~supervisor.engine.kicks.Kicks` mixin for the watcher's events, the
:class:`~supervisor.engine.launches.Launches` mixin for filling slots and recording launches,
and the :class:`~supervisor.engine.checks.Checks` mixin for one task's check);
they return what they did (launched or not, what a decision changed, what adoption found) and
the scheduler acts on it.

tmux outlives the engine: SIGINT/SIGTERM stop the scheduler (within a bound:
:mod:`~supervisor.engine.shutdown`) and leave every session running; the next
``supervise run`` re-adopts live tasks from their manifests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from supervisor import children, policy, systemd
from supervisor.config import LoadedProfile, ResolvedTask
from supervisor.engine import (
    clock,
    followups,
    launch,
    recovery,
    shutdown,
    statefs,
    stats,
    workspaces,
)
from supervisor.engine import runtime as runtimes
from supervisor.engine.accountbook import AccountBook
from supervisor.engine.accounts import Accounts
from supervisor.engine.actions import Actions
from supervisor.engine.attempts import Groups
from supervisor.engine.background import engine_scheduler
from supervisor.engine.checks import Checks
from supervisor.engine.dailyspend import DailySpend
from supervisor.engine.dispatch import Dispatcher, Gate
from supervisor.engine.intake import Claims, IntakeFactory, check_spool_permissions, spool_intake
from supervisor.engine.kicks import Kicks
from supervisor.engine.launches import Launches
from supervisor.engine.observe import Observer
from supervisor.engine.panes import Sessions
from supervisor.engine.plans import Plans
from supervisor.engine.pools import Pools
from supervisor.engine.runtime import Runtime
from supervisor.engine.starts import Starts
from supervisor.engine.watch import Watcher
from supervisor.statelock import engine_lock
from supervisor.taskdir import control
from supervisor.taskdir.events import Event, last_terminal
from supervisor.taskdir.folder import TaskDir
from supervisor.taskdir.states import TERMINAL
from supervisor.tmux import Tmux, TmuxError

log = logging.getLogger("supervise.engine")
#: Seconds before adoption is tried again when tmux did not answer at startup.
ADOPT_RETRY = 5.0

#: Seconds between writes of ``state_dir/engine-stats.json``.
STATS_EVERY = 5.0


class Engine(Checks, Launches, Kicks, Accounts, Plans, Groups):
    """Runs one profile: ``Engine(profile).run()``.

    Args:
        profile: the validated profile.
        exit_when_idle: return from :meth:`run` once the spool is empty and no task is
            queued or live.
        intake: builds the source of tasks (:data:`~supervisor.engine.intake.IntakeFactory`;
            ``supervise run`` hands the fleet's with ``[cluster]``); by default the
            spool's, which a ``[cluster]`` profile may not run on.

    Raises:
        ValueError: a ``[cluster]`` profile without an intake (it would never claim a
            fleet task).
    """

    def __init__(
        self,
        profile: LoadedProfile,
        exit_when_idle: bool = False,
        intake: IntakeFactory | None = None,
    ) -> None:
        if intake is None and profile.spec.cluster is not None:
            raise ValueError(
                f"{profile.path}: a [cluster] profile's engine needs the fleet's intake"
            )
        self.profile = profile
        self.exit_when_idle = exit_when_idle
        # The server is born outside the login's scope where systemd is (supervisor/systemd.py).
        scope = systemd.scope_prefix()
        self.tmux = Tmux(
            profile.socket_name, owner=str(profile.state_dir), scope=scope, control=True
        )
        self.live: dict[str, Runtime] = {}
        self.book = AccountBook(profile.state_dir, profile.spec.accounts)  # issue 26
        self.task_accounts: dict[str, str | None] = {}  # engine/accounts.py
        self.held_kinds: dict[str, str] = {}  # engine/accounts.py
        self.queue: deque[TaskDir] = deque()  # queued tasks, oldest first; loaded at launch
        self.blocked: dict[str, TaskDir] = {}  # blocked tasks (after = [...]): engine/plans.py
        self.stopping = threading.Event()
        self.sessions = Sessions(self.tmux)
        self.disk = statefs.StateDisk(profile.state_dir, log)
        self.source = (intake or spool_intake)(profile, self.disk, lambda: self._kick("intake"))
        self.book.shared = getattr(self.source, "accounts", None)  # the fleet's (issue 26)
        self.observer = Observer(self.tmux, self.sessions)
        self.stats = stats.new_counters()
        self.pools = Pools(self.stats, profile.state_dir)  # one pool per kind (pools.py)
        self.spend = DailySpend(profile, self.pools.submit)  # [budget] daily_usd
        self.actions = Actions(
            profile, self.tmux, self.sessions, self.disk, self.pools.submit, self._wake
        )
        self.watcher: Watcher | None = None
        kick_intake = functools.partial(self._kick, "intake")
        self.preparer = workspaces.Preparer(
            self.pools.submitter("workspace"), kick_intake, self.stopping
        )
        self.starts = Starts(profile, self.tmux, self.sessions, self._watch_folder, kick_intake)
        self._kicked: set[str] = set()  # task ids with an event since their last check
        self.shared = threading.RLock()  # live and queue change under it (engine/checks.py)
        self.leaf = threading.Lock()  # the counters and the inbox (nothing called under it)
        self.inbox: dict[str, set[str]] = {}  # operator requests for a live task's next check
        self.unchecked: set[str] = set()  # adopted, not checked yet (Checks._first_check)
        self.tailing: set[str] = set()  # endings waiting for their last lines (engine/checks)
        self.started_monotonic = time.monotonic()
        # Every job body runs through it; stopping closes it before shutting the scheduler
        # down, so no body is inside a scheduler call then (dispatch.Gate).
        self.gate = Gate(self.stopping)
        self.dispatch = Dispatcher(self._check_job, lambda: self._count("jobs_failed"))
        self._stats_written = 0.0
        self._control_problem: str | None = None  # why control/ cannot be read, as logged
        self._started = time.time()
        self.claims = Claims(self.source, lambda: self._kick("intake"))
        self.scheduler = engine_scheduler()

    # ------------------------------------------------------------------ lifecycle
    def run(self) -> int:
        """Start, block until SIGINT/SIGTERM (or idle with ``exit_when_idle``), stop.

        Returns the process exit status (0).

        Raises:
            EngineBusy: another engine runs on the same ``state_dir`` (a lock on the folder
                itself, :mod:`supervisor.statelock`; released by the kernel if that engine
                dies, so it never goes stale).
        """
        for folder in (self.profile.state_dir, self.profile.spool_dir, self.profile.tasks_dir):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_spool_permissions(self.profile)
        # The handlers come before the lock and the heartbeat: a SIGTERM sent as soon as
        # either names this engine (`supervise shutdown`, a test) is a clean stop, not a kill.
        guard = shutdown.StopGuard(self.stopping).install()  # a stop is bounded in time
        try:
            lock = engine_lock(self.profile.state_dir)  # raises EngineBusy
            try:
                children.end_recorded(self.profile.state_dir)  # what a killed engine left
                return self._run_locked(guard)
            finally:
                os.close(lock)
        finally:
            guard.done()

    def _run_locked(self, guard: shutdown.StopGuard) -> int:
        log.info(
            stats.start_line(
                self.profile.path, self.profile.state_dir, self.profile.socket_name, os.getpid()
            )
        )
        self.write_stats()  # the heartbeat exists from the start (supervisor.views.model)
        self.scheduler.add_listener(
            lambda event: stats.count_job_event(self.stats, event), stats.JOB_EVENTS
        )
        self.watcher = Watcher(self._on_spool, self._on_task, self._on_exit)
        self.watcher.watch_spool(self.profile.spool_dir)
        self.watcher.start()
        try:
            self.scheduler.start()
            self.dispatch.start(self.scheduler, self.gate)
            self.scheduler.add_job(self._startup, id="startup")
            while not self.stopping.wait(0.1):
                clock.watch(self.scheduler, self.profile.state_dir)  # steps of the wall clock
        finally:
            guard.arm()
            self.gate.close()  # let the bodies in progress finish; later ones return at once
            self._finish_stops()
            self.scheduler.shutdown(wait=True)
            self.dispatch.shutdown()
            self.claims.shutdown()
            self.starts.shutdown()
            self.source.close()
            self.pools.shutdown()  # each job is bounded by its own timeout
            self.watcher.stop()
            self.tmux.shutdown()  # the control client and its session
            self.write_stats()
        log.info("engine stopped; %d task(s) left running in tmux", len(self.live))
        return 0

    def _guarded(self, body: Callable[..., None], *args: str) -> None:
        """Run an intake or startup job body through the gate, under the ``shared`` lock
        (they change ``live`` and ``queue``), unless the engine is stopping."""
        self.gate.run(self._shared_body, body, *args)

    def _shared_body(self, body: Callable[..., None], *args: str) -> None:
        with self.shared:
            body(*args)

    def _startup(self) -> None:
        self._guarded(self._startup_body)

    def _startup_body(self) -> None:
        try:
            self.source.recover()
            self.adopt()
            followups.recover(self)  # follow-ups a killed engine left half taken
        except TmuxError as exc:  # nothing adopted yet: launching now could start twice
            log.error(
                "tmux did not answer while adopting (%s); trying again in %g s", exc, ADOPT_RETRY
            )
            when = datetime.fromtimestamp(time.time() + ADOPT_RETRY, UTC)
            self.scheduler.add_job(self._startup, id="startup", next_run_time=when)
            return
        except Exception:  # whatever else adoption met, intake must run
            log.exception("adoption failed; intake starts anyway")
        try:
            for task, resolved in self.source.submit_initial():
                self._enqueue(task, resolved)
        finally:
            self.scheduler.add_job(
                self._guarded,
                clock.Interval(self.profile.spec.intake_interval),  # a step forward: no hang
                args=[self.intake],
                id="intake",
                next_run_time=datetime.now(UTC),
                # APScheduler 3.11 counts a job as running until its function returns, so a
                # kick (a spool event) that lands on a running intake would be skipped until
                # the next interval. A second instance instead waits on the single worker
                # and runs as soon as this one returns (benchmarks/perf-notes.md, section 1.3).
                max_instances=2,
            )

    # ------------------------------------------------------------------ stats
    def write_stats(self) -> None:
        """``state_dir/engine-stats.json`` (:mod:`supervisor.engine.stats`)."""
        identity = {
            "version": stats.version(),
            "profile": str(self.profile.path),
            "socket": self.profile.socket_name,
        }
        stats.write(
            self.profile.state_dir,
            self._started,
            len(self.live),
            len(self.queue),
            self.stats,
            identity,
        )
        self._stats_written = time.monotonic()

    # ------------------------------------------------------------------ intake
    def intake(self) -> None:
        """Queue what the claim thread took and start its next batch, apply operator
        requests, start queued tasks, detect idleness."""
        taken = self.claims.collect()
        if taken is not None:
            with self.leaf:
                self.stats["claimed"] += taken.claimed
                self.stats["rejected"] += taken.rejected
            for task, resolved in taken.tasks:
                self._enqueue(task, resolved)
        if time.monotonic() - self._stats_written >= STATS_EVERY:
            self.write_stats()
        self._look_at_groups()  # winners and discards of attempts (engine/attempts.py)
        self._take_requests()
        self._fill_slots()
        # Idle is judged between batches: one in flight may have moved a file out of the
        # spool that is not queued yet.
        found_nothing = taken is not None and not (taken.tasks or taken.more)
        idle = found_nothing and not self.live and not self.queue
        if self.exit_when_idle and idle and not self.source.waiting():
            # The last attempt of a group may have ended since the look above: decide its
            # group before stopping, so the record is closed when `run` returns.
            self._look_at_groups()
            log.info("idle: spool empty, nothing queued or running")
            self.stopping.set()
            return
        self.claims.start()

    def _take_requests(self) -> None:
        """Apply operator requests (``supervise stop|resume ID``) found in ``control/``."""
        found, why = control.pending_or_none(self.profile.state_dir)
        if why != self._control_problem:  # one line when it breaks, none while it stays so
            self._control_problem = why
            if why:
                log.warning("%s", why)
        for task_id, verb, path in found:
            try:
                self._take_request(task_id, verb)
            finally:  # after its log line (write-ahead): a kill in between loses nothing
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:  # never out of the intake run: nothing would launch
                    log.warning("%s: cannot remove the request: %s", path, exc.strerror)

    def _take_request(self, task_id: str, verb: str) -> None:
        """Apply one request of ``control/`` (its file still there; the caller removes it)."""
        if verb == control.CONTINUE:  # supervise continue (engine/followups.py)
            followups.take(self, task_id)
            return
        if self._stop_blocked(task_id, verb):  # a blocked task (engine/plans.py)
            return
        queued = next((t for t in self.queue if t.task_id == task_id), None)
        runtime = self.live.get(task_id)
        if runtime is None and queued is not None and verb in ("stop", "supersede", "discard"):
            self.queue.remove(queued)
            runtime = runtimes.load_queued(self.profile, self.tmux, queued)
            # logged before a kill: its file still here, or handed over by adoption
            # (recovery.Requeued.logged); either way not logged a second time
            runtime.requests |= {verb} & control.logged_requests(queued.turn_events())
        if runtime is None:
            self._no_live_task(task_id, verb)
            return
        if verb in control.ENDING and runtime.state.status in TERMINAL:  # it ended meanwhile
            log.info("%s ended %s before its %s; kept", task_id, runtime.state.status, verb)
            return
        if verb not in runtime.requests:  # else: re-taken from its log (engine/recovery.py)
            with contextlib.suppress(OSError):  # a full disk: the request is still applied
                runtime.task.append_event(Event.requested(verb), status=runtime.state.status)
        if task_id not in self.live:  # a queued task: no check of it can run
            runtime.requests.add(verb)
            self._decide_and_apply(runtime)
            return
        if runtime.launching or runtime.preparing:  # its checks wait for that work
            runtime.requests.add(verb)  # (read by the work: a stop cancels a worktree)
        else:  # a check may be running: it takes the request at its next start
            with self.leaf:
                self.inbox.setdefault(task_id, set()).add(verb)
        self._schedule_check(runtime, delay=0.0)

    def _no_live_task(self, task_id: str, verb: str) -> None:
        """A request for a task that is not live here. One whose ``<verb>_requested`` line
        its ended turn holds was carried out: the file is removed only after the ending
        (write-ahead), so a kill in between leaves it. That goes with an info line (found by
        attack: a warning that the engine had ignored the request that ended the task);
        any other is warned of."""
        try:
            events = TaskDir(self.profile.tasks_dir / task_id).turn_events()
        except OSError:  # unreadable: warned of as any other
            events = []
        names = {e.get("event") for e in events}
        if Event.requested(verb) in names and last_terminal(events) is not None:
            log.info("%s: its '%s' request was carried out already; removed", task_id, verb)
            return
        log.warning("ignored '%s' for %s: no such live task", verb, task_id)

    def _enqueue(self, task: TaskDir, resolved: ResolvedTask) -> None:
        self._note_group(task, resolved)  # an attempt (engine/attempts.py)
        if not self._hold_or_queue(task, after=bool(resolved.spec.after)):
            log.info("queued %s (%s)", task.task_id, resolved.spec.name)

    # ------------------------------------------------------------------ adoption
    def adopt(self) -> None:
        """Pick up every non-terminal task found in ``state_dir`` (see
        :func:`recovery.adopt`): queue again, watch, or complete what each one needs."""
        for found in recovery.adopt(self.profile, self.tmux):
            if isinstance(found, recovery.Unsent):
                self.actions.notifications.resend(found)
                continue
            if isinstance(found, recovery.Requeued):
                if found.ending is not None:
                    self._end_unlaunched(found.task, found.ending)
                    continue
                if found.resolved is not None:
                    self._enqueue(found.task, found.resolved)
                else:
                    self._hold_or_queue(found.task)
                for verb in found.logged:  # a logged stop/discard: the task ends unlaunched
                    self._take_request(found.task.task_id, verb)
                continue
            runtime = found.runtime
            self.live[runtime.task.task_id] = runtime
            with self.leaf:
                self.unchecked.add(runtime.task.task_id)
            try:
                self._resume_adopted(found)
            except Exception:  # one broken folder must not keep the others unwatched
                log.exception("cannot adopt %s", runtime.task.path)

    def _end_unlaunched(self, task: TaskDir, ending: dict[str, Any]) -> None:
        """Complete the ending (a terminal event) that the log of a never-launched task
        holds: the engine was killed between that line and the manifest (found by CI: the
        restart took it for a launch it never recorded and left it ``queued`` for ever).
        It ends as the log says, with no second terminal line and no session looked for."""
        try:
            runtime = runtimes.load_queued(self.profile, self.tmux, task)
            runtime.state = dataclasses.replace(runtime.state, status=runtime.manifest.status)
            events = task.turn_events()
            decision = policy.recovered_ending(runtime.state, ending, events, runtime.policy)
            self._settle(runtime, self.actions.apply(runtime, decision, clock.now()))
        except Exception:  # one broken folder must not keep the others unadopted
            log.exception("cannot complete the logged ending of %s", task.path)

    def _resume_adopted(self, found: recovery.Adopted) -> None:
        """Complete a logged ending, or redo a resume cut short; then watch and check."""
        runtime = found.runtime
        if found.ending is not None:
            self._settle(runtime, self.actions.apply(runtime, found.ending, found.now))
            return
        if found.resume:
            launch.respawn(self.profile, self.tmux, self.sessions, runtime)
        self._watch(runtime)
        self._schedule_check(runtime, delay=0.0)


def run_profile(profile: LoadedProfile, exit_when_idle: bool, intake: IntakeFactory) -> int:
    """Convenience for the CLI: build an :class:`Engine` with ``intake`` and run it."""
    return Engine(profile, exit_when_idle=exit_when_idle, intake=intake).run()
