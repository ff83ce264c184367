"""Every :class:`supervisor.policy.Signals` field of one check, built in one place.

Sources, in order: the wrapper's files (:func:`supervisor.engine.signals.observe`), the disk state
(:class:`supervisor.engine.statefs.StateDisk`), the task's own tmux pane (asked only once its
agent is gone: :meth:`Tmux.pane`, never ``list-panes``), the operator's requests, the
acceptance check, and the agent adapter's facts (:meth:`AgentAdapter.observe`). Nothing here
decides; the scheduler hands the signals to :func:`supervisor.policy.decide`.
"""

from __future__ import annotations

import dataclasses
import logging

from supervisor import policy
from supervisor.engine import acceptance, clock, signals, statefs
from supervisor.engine.panes import Sessions
from supervisor.engine.runtime import Runtime
from supervisor.taskdir import layout
from supervisor.taskdir.folder import TaskDir
from supervisor.taskdir.states import Status
from supervisor.tmux import PaneInfo, Tmux
from supervisor.wrapper import END_MARK

log = logging.getLogger("supervise.engine")

#: Seconds to wait for the wrapper's last line to reach output.log before taking the tail.
TAIL_SETTLE = 1.0


class Observer:
    """Builds the signals of one check.

    Args:
        tmux: the profile's tmux server (pane captures, ``pipe-pane`` after a rotation).
        sessions: the shared session list (valid until tmux says it changed).
    """

    def __init__(self, tmux: Tmux, sessions: Sessions) -> None:
        self.tmux = tmux
        self.sessions = sessions

    def signals(self, runtime: Runtime, disk_full: bool) -> policy.Signals:
        """What one check sees of ``runtime``'s task; rotates ``output.log`` first when it
        passed ``max_log_bytes``.

        Raises:
            TmuxError: tmux did not answer (the check is cut short).
        """
        task, pol = runtime.task, runtime.policy
        now = clock.rebase(runtime)  # the engine's clock, never the wall clock's steps
        rotated = task.rotate_output(pol.max_log_bytes, pol.log_backups)
        if rotated and self.tmux.pane(task.task_id) is not None:
            self.tmux.repipe(task.task_id, task.path)
        seen = signals.observe(task, now, runtime.run, max(runtime.restart_step, 0.0))
        # A live agent's session is not looked at: the policy reads ``session_alive`` only
        # once the agent is gone (crash or tmux lost), and a live agent has no end files
        # kept in pane options. So a quiet check makes no tmux call at all.
        pane = None if seen.agent_alive else self.tmux.pane(task.task_id)
        if not disk_full and not seen.done and self._restore_run_files(task, pane):
            runtime.run.force = True  # written by us just now: read them, event or not
            seen = signals.observe(task, now, runtime.run, max(runtime.restart_step, 0.0))
        seen = dataclasses.replace(
            seen,
            stop_requested="stop" in runtime.requests,
            resume_requested="resume" in runtime.requests,
            approve_requested="approve" in runtime.requests,
            deny_requested="deny" in runtime.requests,
            superseded="supersede" in runtime.requests,
            discarded="discard" in runtime.requests,
            session_alive=None if seen.agent_alive else pane is not None,
            has_acceptance=runtime.resolved.acceptance is not None,
            acceptance_running=runtime.accepting,
            state_disk_full=disk_full,
        )
        if runtime.state.status == Status.VERIFYING and not runtime.accepting:
            accepted = acceptance.read(task)
            if accepted is not None:
                seen = dataclasses.replace(seen, acceptance=bool(accepted.get("passed")))
        if runtime.agent is not None:
            seen = self._agent_signals(runtime, seen)
        # Output age counts from when the engine saw the output change, not from its mtime
        # (a wall time: a clock step would make it look fresh or stale).
        return dataclasses.replace(
            seen, output_mtime=clock.output_seen(runtime, seen.output_mtime, now)
        )

    def _agent_signals(self, runtime: Runtime, seen: policy.Signals) -> policy.Signals:
        """Add what the agent told its adapter (:meth:`AgentAdapter.observe`) and the
        staleness signal it chose."""
        assert runtime.agent is not None
        session = runtime.task.task_id
        screen = (lambda: self.tmux.capture(session, lines=0)) if seen.agent_alive else None
        view = runtime.agent.observe(seen.now, runtime.state.status, screen)
        mtime = view.output_mtime if view.output_mtime is not None else seen.output_mtime
        return dataclasses.replace(
            seen,
            output_mtime=mtime,
            escalate=view.escalate,
            escalate_pause=view.escalate_pause,
            limit=view.limit,
            limit_resume_at=view.limit_resume_at,
            limit_reason=view.limit_reason,
            turn_ended=view.turn_ended,
            failure=view.failure or seen.failure,
            requests=view.requests,
            spent_usd=view.spent_usd,
            turn_failure=view.turn_failure,
            agent_working=view.agent_working,
            tool_since=view.tool_since,
            tool_name=view.tool_name,
        )

    @staticmethod
    def _restore_run_files(task: TaskDir, pane: PaneInfo | None) -> bool:
        """Write the wrapper files a full disk sent to tmux (:func:`statefs.restore_run_files`)."""
        try:
            return statefs.restore_run_files(task, pane)
        except OSError as exc:
            log.warning("%s: cannot write the run files kept in tmux yet: %s", task.task_id, exc)
            return False

    def repipe_live(self, live: dict[str, Runtime]) -> None:
        """Re-attach every live pane's capture after the disk was full (its ``sed`` exited
        on the first write that failed, and tmux does not restart it)."""
        sessions = self.sessions.get(max_age=0.0)
        for task_id, runtime in live.items():
            if task_id in sessions:
                self.tmux.repipe(task_id, runtime.task.path)


def tail_pending(task: TaskDir, now: float) -> bool:
    """True while the wrapper's end line has not reached ``output.log`` yet, for at most
    :data:`TAIL_SETTLE` seconds after the agent ended (then the tail is taken as is).
    ``now``: the engine's clock; an end time after it (the wall clock stepped back since
    the wrapper wrote it) counts as settled."""
    ended = task.done_mtime()
    if ended is None:
        try:
            ended = task.file(layout.EXIT_CODE).stat().st_mtime
        except FileNotFoundError:
            return False  # the wrapper did not end normally: no end line will come
    if not 0.0 <= now - ended < TAIL_SETTLE:
        return False
    last = task.output_tail(lines=1).rstrip().splitlines()[-1:] or [""]
    return not last[0].startswith(END_MARK)
