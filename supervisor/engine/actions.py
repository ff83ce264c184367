"""Performing a :class:`supervisor.policy.Decision`: its events, its actions (stop, resume,
cleanup, pause/continue, answers, acceptance, end of turn), the manifest write (its content is
:mod:`supervisor.engine.projection`'s) and the notifier payload.

Nothing here schedules: each entry returns an :class:`Outcome` (a check wanted in so many
seconds, the task retired, a resume done) and the scheduler acts on it. Work that may take
seconds (acceptance, notifiers, the sweep of leftover processes) goes to
``submit_background`` (a pool per kind, :mod:`supervisor.engine.pools`), never the
engine's check worker.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
from collections.abc import Callable
from typing import Any, cast

from supervisor import policy, statelock
from supervisor.audit import By, ended_by
from supervisor.config import LoadedProfile
from supervisor.engine import (
    acceptance,
    launch,
    processes,
    projection,
    statefs,
    stopping,
    workspaces,
)
from supervisor.engine.notifications import Notifications, unsent
from supervisor.engine.panes import Sessions
from supervisor.engine.pools import Submit
from supervisor.engine.projection import Applied
from supervisor.engine.runtime import Outcome, Runtime
from supervisor.engine.stopping import STOP_TIMEOUT, StopInProgress
from supervisor.taskdir import layout, repair
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TaskDir, utc_iso
from supervisor.taskdir.states import TERMINAL, Status
from supervisor.tmux import Tmux, TmuxError

log = logging.getLogger("supervise.engine")


class Actions:
    """Carries out decisions for the engine.

    Args:
        profile: the validated profile (``launch.json`` of a resume).
        tmux: the profile's tmux server.
        sessions: the shared ``list-panes`` snapshot (forgotten when a session changes).
        disk: the state filesystem's fullness.
        submit_background: runs a callable off the check worker, on the pool of its kind
            (:meth:`supervisor.engine.pools.Pools.submit`).
        wake: asks for a check of the task id now (e.g. when an acceptance run ends).
    """

    def __init__(
        self,
        profile: LoadedProfile,
        tmux: Tmux,
        sessions: Sessions,
        disk: statefs.StateDisk,
        submit_background: Submit,
        wake: Callable[[str], None],
    ) -> None:
        self.profile = profile
        self.tmux = tmux
        self.sessions = sessions
        self.disk = disk
        self.submit_background = submit_background
        self.wake = wake
        self.notifications = Notifications(submit_background)

    # ------------------------------------------------------------------ a decision
    def apply(self, runtime: Runtime, decision: policy.Decision, now: float) -> Outcome:
        """Perform a decision. Order, chosen so a crash of ``supervise`` loses nothing:

        1. events are appended (the write-ahead record; a terminal event is never written
           twice, and ``retry_count`` is reconciled with ``resumed`` events on adoption);
        2. the actions run (stop, resume, cleanup);
        3. the manifest is replaced atomically. If that write fails (disk full, read-only)
           the error is logged, the old manifest stays intact, and the next check retries.
        """
        task, previous, A = runtime.task, runtime.state, policy.Action
        events = task.turn_events() if decision.state.status in TERMINAL else []
        state = policy.logged_ending(decision.state, events)
        if A.RESUME in decision.actions and not self._prepare_resume(runtime):
            return Outcome(next_check=runtime.policy.base_interval)
        runtime.state = state
        applied = self._fix(runtime, decision, now, state, previous, events)
        if not self._record_events(runtime, decision, now, applied, events):
            runtime.state = previous
            return Outcome(next_check=runtime.policy.base_interval)
        return self._perform(runtime, decision, now, applied, decision.actions)

    @staticmethod
    def _fix(
        runtime: Runtime,
        decision: policy.Decision,
        now: float,
        state: policy.TaskState,
        previous: policy.TaskState,
        logged: list[dict[str, Any]],
    ) -> Applied:
        """Read what an ending records (exit code, end time, output tail) and what its
        turn's log (``logged``) announced already before acting."""
        task = runtime.task
        finished = policy.Action.FINISH in decision.actions
        exit_code = (
            state.exit_code if state.exit_code is not None else task.read_int(layout.EXIT_CODE)
        )
        done_at = task.done_mtime()
        own_end = done_at is not None and state.status not in (Status.ABANDONED, Status.SUPERSEDED)
        finished_at = utc_iso(done_at if own_end else now) if finished else None
        tail = task.output_tail() if finished else None
        announced = frozenset(unsent(logged)).intersection(TERMINAL)  # an ending's only
        return Applied(previous, state, finished, exit_code, finished_at, tail, announced)

    @staticmethod
    def _record_events(
        runtime: Runtime,
        decision: policy.Decision,
        now: float,
        applied: Applied,
        logged: list[dict[str, Any]],
    ) -> bool:
        """Step 1: append the decision's events. False when the log cannot be written: no
        action without its write-ahead record, the decision is taken again, whole, at the
        next check (a full disk is held by the policy before it gets here)."""
        task, state, finished = runtime.task, applied.state, applied.finished
        already = {e.get("event") for e in logged}
        ending: dict[str, Any] = {}
        if finished:
            record = projection.ending_record(runtime, decision, state)
            ending = {"verdict": state.verdict, **record}
        try:
            for event in decision.events:
                if event in TERMINAL and (event in already or already & TERMINAL):
                    continue
                task.append_event(
                    event,
                    at=now,
                    status=state.status,
                    reason=decision.reason,
                    retry_count=state.retry_count,
                    exit_code=applied.exit_code if finished else None,
                    abandon_reason=state.abandon_reason,
                    limit_waits=state.limit_waits,
                    transient_waits=state.transient_waits,
                    # the terminal record is final: repair.rebuild restores a lost manifest
                    # from it, and policy.logged_ending a decision taken again
                    **ending,
                )
        except OSError as exc:
            log.error(
                "%s: cannot append to %s: %s; decision held",
                task.task_id,
                task.file(layout.EVENTS),
                exc,
            )
            return False
        return True

    def _perform(
        self,
        runtime: Runtime,
        decision: policy.Decision,
        now: float,
        applied: Applied,
        actions: tuple[policy.Action, ...],
    ) -> Outcome:
        """Step 2: carry out ``actions`` in order, then :meth:`_conclude` (the manifest).

        A stop that does not end at once keeps the rest (later actions, the manifest) on
        the runtime; :meth:`advance_stop` runs it once the agent's process group is gone.
        tmux not answering is a logged fault: the rest, from the action that met it, is
        kept in ``runtime.pending`` and tried again at the next check (no new decision
        before this one is carried out).
        """
        A = policy.Action
        index, resumed = 0, False
        try:
            for index, action in enumerate(actions):
                if action is A.STOP_AGENT:
                    rest = actions[index + 1 :]
                    then = functools.partial(self._perform, runtime, decision, now, applied, rest)
                    wait = self._stop_agent(runtime, then)
                    if wait is not None:
                        return Outcome(next_check=wait, resumed=resumed)
                elif action is A.RESUME:
                    resumed = True
                    launch.respawn(self.profile, self.tmux, self.sessions, runtime, True)
                else:
                    self._act(runtime, action, now)
        except TmuxError as exc:
            retry = runtime.policy.base_interval
            log.error(
                "%s: %s; '%s' carried on in %g s", runtime.task.task_id, exc, decision.reason, retry
            )
            again = functools.partial(self._perform, runtime, decision, now, applied)
            runtime.pending = functools.partial(again, actions[index:])
            return Outcome(next_check=retry, resumed=resumed)
        if applied.state.status in TERMINAL and workspaces.needs_finish(runtime):
            then = functools.partial(self._conclude, runtime, decision, now, applied)
            return self._finish_workspace(runtime, then, resumed)
        outcome = self._conclude(runtime, decision, now, applied)
        return Outcome(outcome.next_check, outcome.retired, outcome.resumed or resumed)

    def _finish_workspace(
        self, runtime: Runtime, then: Callable[[], Outcome], resumed: bool
    ) -> Outcome:
        """Commit the task's worktree on the background pool before the ending's manifest
        (``then``, :meth:`_conclude`) is written: whoever reads ``completed`` finds the
        work on the branch. Meanwhile checks wait (``runtime.finishing``); when it is done,
        ``then`` becomes the task's pending rest and its check is woken. A crash of
        ``supervise`` meanwhile: adoption completes the logged ending, which comes here
        again (a clean worktree is not committed twice)."""
        runtime.finishing = True

        def body() -> None:
            try:
                workspaces.finish(runtime)
            finally:
                runtime.pending = then
                runtime.finishing = False
                self.wake(runtime.task.task_id)

        self.submit_background("workspace", body)
        return Outcome(next_check=runtime.policy.base_interval, resumed=resumed)

    def _act(self, runtime: Runtime, action: policy.Action, now: float) -> None:
        """One action other than stop and resume (they hold the rest of the decision)."""
        task, agent, A = runtime.task, runtime.agent, policy.Action
        if action is A.CLEANUP:
            self._sweep(runtime, self.tmux.close(task.task_id))
            self.sessions.forget()
        elif action is A.PAUSE_AGENT:
            self._signal_agent(task, signal.SIGSTOP)
        elif action is A.CONTINUE_AGENT:
            self._signal_agent(task, signal.SIGCONT)
            if agent is not None:
                agent.answer(approve=True, by=By.OPERATOR)
        elif action in (A.ANSWER_APPROVE, A.ANSWER_DENY) and agent is not None:
            agent.answer(approve=action is A.ANSWER_APPROVE, by=By.OPERATOR)
        elif action is A.RULE_REQUESTS and agent is not None:
            agent.rule(now)
        elif action is A.ACCEPT:
            self._start_acceptance(runtime)
        elif action is A.END_SESSION and agent is not None:
            for keys in agent.end_turn(now):
                self.tmux.send_keys(task.task_id, *keys.keys, literal=keys.literal)

    def _conclude(
        self, runtime: Runtime, decision: policy.Decision, now: float, applied: Applied
    ) -> Outcome:
        """Step 3: write the manifest, start the notifier, retire or look again. An ending
        holds the task folder from before its manifest says so until its notifiers hold it
        themselves, so ``supervise archive`` never takes a folder whose notification is
        still to come (:func:`supervisor.statelock.hold_task`, issue 20)."""
        with statelock.task_held(runtime.task.path, applied.state.status in TERMINAL):
            return self._write_and_notify(runtime, decision, now, applied)

    def _write_and_notify(
        self, runtime: Runtime, decision: policy.Decision, now: float, applied: Applied
    ) -> Outcome:
        """:meth:`_conclude` within its hold."""
        task, state, previous = runtime.task, applied.state, applied.previous
        ended_escalated = previous.status == Status.ESCALATED and state.status in TERMINAL
        if runtime.agent is not None and ended_escalated:
            by = ended_by(state.status, state.abandon_reason)
            runtime.agent.answer(approve=False, by=by)  # frees a waiting hook
        pid = task.read_int(layout.PID)
        report = runtime.agent.report() if runtime.agent is not None else {}
        change = projection.decided(runtime, decision, now, applied, pid, report)
        # A quiet check writes nothing: no event, no action, the same state as the manifest
        # shows it and the same PID, nothing new from the agent (its report, tools in
        # flight). Only last_checked_at would change; the engine's liveness is its
        # heartbeat (engine-stats.json).
        quiet = not decision.events and not decision.actions
        quiet = quiet and projection.shown(previous) == projection.shown(state)
        quiet = quiet and pid in (None, runtime.manifest.pid)  # a new run's PID is news
        quiet = quiet and not (runtime.agent is not None and runtime.agent.unsaved())
        quiet = quiet and projection.reported(runtime.manifest, report)
        # While the disk is full a held decision has nothing worth a write that must fail.
        held = self.disk.is_full and not decision.events and not decision.actions
        if held or quiet:
            return Outcome(next_check=decision.next_check)
        notify = policy.Action.NOTIFY in decision.actions and bool(runtime.policy.notifier)
        notified = decision.notified(runtime.policy.notify_on) if notify else []
        self.notifications.announce(
            task, state.status, notified, decision.reason, applied.announced
        )
        try:
            # No fsync where the log, fsynced first, restores the manifest (repair.restorable)
            runtime.manifest = task.update_manifest(
                change, durable=repair.needs_fsync, fallback=runtime.manifest
            )
        except OSError as exc:
            log.error(
                "%s: cannot write %s: %s; the previous manifest is intact",
                task.task_id,
                task.file(layout.MANIFEST),
                exc,
            )
            if state.status in TERMINAL:  # keep watching so the final write is retried
                runtime.state = previous
                return Outcome(next_check=runtime.policy.base_interval)
        if previous.status != state.status:
            log.info(
                "%s: %s -> %s (%s)", task.task_id, previous.status, state.status, decision.reason
            )
        for event in notified:  # each announced before the manifest was written
            self.notifications.submit(
                task, runtime.policy, runtime.manifest.model_copy(), event, decision.reason
            )
        if state.status in TERMINAL:
            return Outcome(retired=True)
        return Outcome(next_check=decision.next_check)

    # ------------------------------------------------------------------ background work
    def _start_acceptance(self, runtime: Runtime) -> None:
        """Run ``[acceptance]`` in the background; when it ends the task's check is woken."""
        spec = runtime.resolved.acceptance
        if spec is None or runtime.accepting:
            return
        runtime.accepting = True
        runtime.task.file(acceptance.RESULT).unlink(missing_ok=True)

        def body() -> None:
            try:
                workspaces.finish(runtime)  # the agent's work committed before it is judged
                result = acceptance.run(runtime.task, runtime.workdir, spec)
                runtime.task.append_event(Event.ACCEPTANCE, **result)
            except Exception:
                log.exception("%s: acceptance check failed to run", runtime.task.task_id)
            finally:
                runtime.accepting = False
                self.wake(runtime.task.task_id)

        self.submit_background("acceptance", body)

    def _sweep(self, runtime: Runtime, session: int | None) -> None:
        """End whatever the task left running (its tmux pane's session members and every
        carrier of its ``SUPERVISE_TASK_DIR``, see :mod:`supervisor.engine.processes`) in the
        background: SIGTERM, then SIGKILL after STOP_TIMEOUT s, never on the check worker."""
        task, started = runtime.task, runtime.state.started_at

        def body() -> None:
            found = processes.task_processes(task.path, [session] if session else [], started)
            if found:
                ended, killed = processes.reap(found, STOP_TIMEOUT)
                task.append_event(Event.PROCESSES_ENDED, pids=ended, killed=killed)
                log.info("%s: ended %d leftover process(es) %s", task.task_id, len(ended), ended)

        self.submit_background("sweep", statelock.held_while(task.path, body))

    @staticmethod
    def _signal_agent(task: TaskDir, signum: int) -> None:
        """Send ``signum`` to the agent's process group (pause/continue an escalation)."""
        pid = task.read_int(layout.PID)
        pgid = stopping.group_of(pid) if pid is not None else None
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signum)
            task.append_event(Event.AGENT_SIGNALLED, pid=pid, signal=signal.Signals(signum).name)

    # ------------------------------------------------------------------ stop and resume
    def _stop_agent(self, runtime: Runtime, then: Callable[[], Outcome]) -> float | None:
        """SIGTERM the agent's process group now (:func:`stopping.begin`).

        Returns ``None`` when it is already gone (or there was none): the caller goes on.
        Otherwise the stop is in progress on ``runtime.stopping`` and the result is the
        seconds until the next look; ``then`` runs from :meth:`advance_stop` once the group
        is gone (SIGKILL after STOP_TIMEOUT s).
        """
        stop = stopping.begin(runtime.task.read_int(layout.PID), then)
        if stop is None:
            return None
        if stop.advance():
            self._record_stop(runtime.task, stop)
            return None
        runtime.stopping = stop
        return stop.next_look()

    def advance_stop(self, runtime: Runtime) -> Outcome:
        """A check while the agent is being stopped: look at its process group; once it is
        gone, record ``agent_stopped`` and run the rest of the decision, else look again."""
        stop = runtime.stopping
        assert stop is not None
        if not stop.advance():
            return Outcome(next_check=stop.next_look())
        runtime.stopping = None
        self._record_stop(runtime.task, stop)
        # ``then`` is the rest of the decision (:meth:`_perform`), which returns its Outcome.
        return cast(Outcome, stop.then())

    @staticmethod
    def _record_stop(task: TaskDir, stop: StopInProgress) -> None:
        try:
            task.append_event(Event.AGENT_STOPPED, pid=stop.pid, killed=stop.killed)
        except OSError as exc:  # the stop happened; its record is informational
            log.error("%s: cannot record the agent's stop: %s", task.task_id, exc)

    def _prepare_resume(self, runtime: Runtime) -> bool:
        """Write the resume's ``launch.json`` before the decision is recorded. If it cannot
        be written (a full disk, EIO), the decision is held: nothing recorded, no retry
        counted, the task unchanged and looked at again in ``base_interval`` seconds."""
        try:
            launch.write_launch(self.profile, runtime, resume=True)
            return True
        except OSError as exc:
            log.error(
                "%s: cannot write %s: %s; the resume waits for the next check",
                runtime.task.task_id,
                runtime.task.file(layout.LAUNCH),
                exc,
            )
            return False
