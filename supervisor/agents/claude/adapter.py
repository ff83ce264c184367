"""``[agent] kind = "claude"``: the Claude Code adapter.

One :class:`ClaudeAdapter` per non-terminal task. It builds the command line
(:func:`argv`) and the per-task hook settings (:mod:`.hooks`) of each run, and at each
check (:meth:`ClaudeAdapter.observe`)

1. reads the hook signal files (:mod:`.relay`), logs each one to ``events.jsonl`` with its
   hook input (``session_id``, ``transcript_path``, ``hook_event_name`` and the event's
   fields) and moves it to ``hooks/``;
2. proposes a ruling for each waiting permission request (:mod:`.permissions`; an
   interactive TUI without hooks is read from its screen, :mod:`.screen`); the rulings are
   carried out by :meth:`ClaudeAdapter.rule` only when the policy's decision says so;
3. reads new lines of ``stream.jsonl`` (headless mode) into a :class:`.stream.StreamState`,
   and when they last showed progress (:mod:`.streamfile`);
4. returns an :class:`supervisor.agents.AgentView`: the facts the pure policy needs
   (escalation, usage limit, interactive turn ended, failure class, staleness).

Everything here is bookkeeping and I/O; the decisions stay in :mod:`supervisor.policy` and
:mod:`supervisor.policy.approval`.

Sources: Claude Code CLI reference (``--session-id``, ``--resume``, ``--settings``,
``--permission-mode``, ``-p --output-format stream-json --verbose``) and hooks reference,
checked against CLI 2.1.328 on this machine (docs/claude-code-e2e.md, docs/claude-hooks.md).
Every task gets its own session id; the first run passes ``--session-id ID`` and every later
run ``--resume ID``, so two tasks in one project folder never resume each other's
conversation (``claude -c`` takes the newest one in the folder). ``--session-id`` with an id
already used fails at once, so a resume never reuses it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from supervisor import logrotate
from supervisor.agents import (
    AgentAdapter,
    AgentContext,
    AgentView,
    Keys,
    LaunchPart,
    ScreenCapture,
)
from supervisor.agents.claude import failures, hooks, limits, permissions, screen, turns
from supervisor.agents.claude.delivery import delivery
from supervisor.agents.claude.evidence import ScreenProgress
from supervisor.agents.claude.stream import StreamState, mark_turn
from supervisor.agents.claude.streamfile import StreamReader, rotate_stream
from supervisor.agents.claude.tools import HEARTBEAT, ToolsInFlight
from supervisor.audit import By
from supervisor.config import AgentSpec
from supervisor.policy import approval
from supervisor.streamcopy import LAUNCH_MARK
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TURN_PROMPT, Manifest, utc_iso
from supervisor.taskdir.layout import PROMPT
from supervisor.taskdir.states import Status

log = logging.getLogger(__name__)

#: ``StopFailure`` errors that mean "come back later" (Claude Code hooks reference).
LIMIT_ERRORS = frozenset({"rate_limit", "overloaded", "usage_limit"})
#: Seconds until the next look at a permission dialog first seen on screen (it must hold
#: across two checks before it is answered).
PROMPT_RECHECK = 1.0
#: Seconds before ``/exit`` is typed again into an interactive agent that did not quit.
END_SESSION_REPEAT = 10.0


def argv(
    agent: AgentSpec, resume: bool, settings: Path | None, tail: list[str] | None = None
) -> list[str]:
    """The Claude Code argv template (placeholders ``{prompt}``, ``{model}``,
    ``{session_id}`` are filled by the engine; no shell ever sees it).

    Headless: ``claude -p ... --output-format stream-json --verbose``; interactive: the
    TUI. ``tail`` ends the line: the prompt argument (:func:`.delivery.delivery`; default
    ``["--", "{prompt}"]``, or ``agent.resume_prompt`` on a resume), or nothing when the
    prompt goes on stdin or as a paste. A resume replaces ``--session-id`` with ``--resume``.
    """
    if tail is None:
        tail = ["--", agent.resume_prompt if resume else "{prompt}"]
    line = [agent.binary]
    if agent.mode == "headless":
        line += ["-p", "--output-format", "stream-json", "--verbose"]
        line += ["--include-partial-messages"]  # content deltas: progress (streamfile.py)
    line += ["--model", "{model}"]
    line += ["--resume", "{session_id}"] if resume else ["--session-id", "{session_id}"]
    line += ["--permission-mode", agent.permission_mode]
    if settings is not None:
        line += ["--settings", str(settings)]
    line += agent.extra_args
    return [*line, *tail]


class ClaudeAdapter(AgentAdapter):
    """Per-task reader of Claude Code's hooks and stream (see the module docstring)."""

    kind = "claude"
    heartbeat = HEARTBEAT

    def __init__(self, context: AgentContext) -> None:
        super().__init__(context)
        self.task = context.task
        self.resolved = context.resolved
        self.agent = context.agent
        self.default_message = context.default_message
        self.stream = StreamState()
        self.reader = StreamReader()
        self.denials = 0
        self.pending_answer: Path | None = None
        self.escalation: dict[str, Any] | None = None
        self.transcript_path: str | None = None
        self.turn_ended = False
        #: The class of the current run's error ending (:mod:`~supervisor.taskdir.states`).
        self.failure: str | None = None
        self.limit: tuple[float | None, str] | None = None
        #: When the TUI last showed progress (:mod:`.evidence`).
        self.screen_progress = ScreenProgress(self.resolved.policy.tool_budget)
        self.prompt_seen: tuple[str | None, str, str] | None = None
        self.screen_pending: screen.PermissionPrompt | None = None
        self.exit_sent_at: float | None = None
        #: Rulings proposed by the latest check, carried out by :meth:`rule`.
        self.proposals: list[permissions.Proposal] = []
        #: The latest Notification hook (interactive: waiting for input, idle, ...).
        self.notification: dict[str, Any] | None = None
        #: A turn that failed with the agent alive, and evidence of work (issue 21).
        self.turn = turns.TurnWatch()
        #: Tool calls in flight (:mod:`.tools`): the agent works while they run.
        self.tools = ToolsInFlight()

    def restore(self, manifest: Manifest) -> None:
        """Pick up the counters and the pending escalation after a restart (the manifest's
        declared fields: the manifest is the one record of them between engine runs)."""
        claude_facts = manifest.claude or {}
        self.denials = manifest.denials
        escalation = manifest.escalation or {}
        self.pending_answer = Path(escalation["answer"]) if escalation.get("answer") else None
        self.escalation = escalation or None
        self.transcript_path = claude_facts.get("transcript_path")
        self.notification = claude_facts.get("last_notification")
        self.tools.restore(claude_facts.get("tools_in_flight"))

    def launch(self, resume: bool, turn_prompt: str | None = None) -> LaunchPart:
        """Write the hook settings (``hooks = true``; a permission request may wait up to
        the task's deadline) and return the argv; headless runs tee ``stream.jsonl``.
        ``turn_prompt``: a follow-up's file, delivered like a first prompt to ``--resume``."""
        settings = None
        if self.agent.hooks:
            settings = hooks.write_settings(self.task.path, self.resolved.policy.deadline)
        stream = hooks.STREAM if self.agent.mode == "headless" else None
        self.new_run()
        fresh, path = turn_prompt is not None, self.task.path
        how = delivery(
            self.agent, resume and not fresh, self.resolved.prompt, path, turn_prompt or PROMPT
        )
        line = argv(self.agent, resume, settings, how.tail)
        return LaunchPart(argv=line, stream=stream, stdin=how.stdin, paste=how.paste)

    def follow_up(self) -> LaunchPart:
        """``--resume`` with the turn's prompt (issue 22), its start marked in the stream."""
        if self.agent.mode == "headless":
            mark_turn(self.task.file(hooks.STREAM))
        return self.launch(True, TURN_PROMPT)

    # ------------------------------------------------------------------ runs
    def new_run(self) -> None:
        """Forget per-run facts: called at each launch and resume. A permission request
        of the previous run can no longer be answered (its agent is gone): drop it, or it
        would block every request of the new run."""
        if self.pending_answer is not None:
            stale = self.pending_answer.with_suffix(".json")
            hooks.archive(hooks.HookSignal(stale, "", 0.0, {}))
        # The last run is over (stopped, or ended): its lines not read yet are its own (its
        # result, its cost) and must not be taken for the new run's, which has written
        # nothing yet. A limit read after the resume was a second wait that killed the
        # resumed agent (CI, real-CLI rate-limit test).
        self._read_stream(time.time())
        self.stream.end_run()
        self.pending_answer = None
        self.escalation = None
        self.turn_ended = False
        self.limit = None
        self.failure = None
        self.screen_progress = ScreenProgress(self.resolved.policy.tool_budget)
        self.prompt_seen = None
        self.screen_pending = None
        self.exit_sent_at = None
        self.proposals = []
        self.turn.new_run()
        self.tools.close_all()

    # ------------------------------------------------------------------ observe
    def observe(self, now: float, status: str, screen: ScreenCapture | None) -> AgentView:
        """Read new hook files and stream lines; propose rulings on permission requests;
        read the screen when it is the staleness signal or the permission fallback.

        Args:
            now: epoch seconds of the check.
            status: the task's status before this check (the circuit breaker trips only
                while ``running``).
            screen: captures the pane; ``None`` when the agent is not alive.
        """
        self.proposals = []
        self.turn.begin_check()
        escalate, pause = self._read_hooks(now, status)
        self._read_stream(now)
        mtime = None
        interactive = self.agent.mode == "interactive"
        how = self.resolved.policy.stale_signal or ("screen" if interactive else "mtime")
        fallback = interactive and not self.agent.hooks
        if (how == "screen" or fallback) and screen is not None:
            text = screen()
            if how == "screen":
                mtime = self.screen_changed(text, now)
            if fallback and escalate is None:
                escalate = self.screen_prompt(text)
        elif how == "transcript":
            mtime = self.transcript_mtime()
        elif not interactive:  # "mtime": the stream's progress, not output.log (pings)
            mtime = self.reader.stamp()
        resume_at, reason = self.limit if self.limit else (None, "")
        tool = self.tools.oldest(now)
        return AgentView(
            escalate=escalate,
            escalate_pause=pause,
            limit=self.limit is not None,
            limit_resume_at=resume_at,
            limit_reason=reason,
            turn_ended=self.turn_ended,
            failure=self.failure,
            output_mtime=mtime,
            requests=len(self.proposals),
            # the stream's result lines are the only cost record (headless runs)
            spent_usd=self.stream.turn_cost_usd if self.agent.mode == "headless" else None,
            turn_failure=self.turn.failure,
            agent_working=self.turn.working,
            tool_since=tool[0] if tool else None,
            tool_name=tool[1] if tool else None,
        )

    def _read_hooks(self, now: float, status: str) -> tuple[str | None, bool]:
        """Process the hook signal files; returns (escalation reason, pause the agent)."""
        escalate: str | None = None
        pause = False
        policy = self.resolved.policy
        for signal in hooks.read_hooks(self.task.path):
            data = signal.data
            if isinstance(data.get("transcript_path"), str):
                self.transcript_path = data["transcript_path"]
            if self.turn.saw(signal.event):  # it went on by itself after a failed turn
                self.limit, self.failure = None, None
            if signal.event == "PermissionRequest":
                if self.pending_answer is not None or escalate:
                    continue  # one escalation at a time; the rest wait their turn
                self.tools.asked(data.get("tool_name"), data.get("tool_input"))
                proposal = permissions.from_hook(signal, self._decide, self._denials_after())
                self.proposals.append(proposal)
                if proposal.ruling.action == "escalate":
                    escalate = proposal.reason()
                continue
            self._record(signal)
            self.tools.feed_hook(signal.event, data, now)
            if signal.event == "PostToolUse":
                self.denials = 0
            elif signal.event in turns.BREAKER_EVENTS:
                if signal.event == turns.PERMISSION_DENIED:
                    turns.record_denial(self.task, data, signal.at)
                self.denials += 1
                if (
                    self.denials >= policy.max_denials
                    and status == Status.RUNNING
                    and self.pending_answer is None
                    and not escalate
                ):
                    escalate, pause = self._breaker(now), True
            elif signal.event == "Notification":
                self.notification = {
                    "notification_type": data.get("notification_type"),
                    "message": str(data.get("message") or "")[:300],
                    "at": utc_iso(signal.at),
                }
            elif signal.event == "Stop" and self.agent.mode == "interactive":
                self.turn_ended = True
            elif signal.event == "StopFailure" and self.agent.mode == "interactive":
                # Headless runs end with the exact stream-json result (and its
                # rate_limit_event) before the done-file: the stream decides there.
                error = str(data.get("error") or data.get("error_type") or "")
                text = str(data.get("last_assistant_message") or "")[:300]
                self.stream.record_error({"status": None, "error": error, "text": text})
                keys = ("last_assistant_message", "error_details", "message")
                detail = " ".join(str(data.get(k) or "") for k in keys).strip()
                if error in LIMIT_ERRORS:
                    self._set_limit(detail or error, now, f"StopFailure hook: {error}")
                else:
                    self.failure = failures.classify_hook_error(error, detail)
                self.turn.failed(error)  # the TUI idles at its prompt: the run is over
        return escalate, pause

    def _record(self, signal: hooks.HookSignal) -> None:
        self.task.append_event(Event.HOOK, at=signal.at, **hooks.summary(signal.data))
        hooks.archive(signal)

    def _decide(self, tool: str, tool_input: Any, denials: int) -> approval.Ruling:
        """The task's rules on one request, with the circuit breaker's count."""
        return approval.decide(
            self.resolved.rules,
            tool,
            tool_input,
            denials,
            self.resolved.policy.max_denials,
            self.default_message,
        )

    def _denials_after(self) -> int:
        """The breaker's count once the rulings proposed so far are carried out."""
        return self.denials + sum(p.ruling.action == "deny" for p in self.proposals)

    def rule(self, now: float) -> None:
        """Carry out the rulings the latest check proposed (the policy's
        ``RULE_REQUESTS``), in order; each one is done once, even when a later one fails
        and the rest is carried on at the next check.

        Raises:
            OSError: an event or answer file cannot be written.
            supervisor.tmux.TmuxError: a dialog's keys could not be typed.
        """
        while self.proposals:
            proposal = self.proposals[0]
            done = permissions.perform(proposal, self.task, now, self.context.send_keys)
            self.proposals.pop(0)
            if done.escalation is None and proposal.signal is not None:
                self.tools.ruled(
                    not done.denied, proposal.tool, proposal.signal.data.get("tool_input")
                )
            if done.denied:
                self.denials += 1
            if done.escalation is not None:
                self.escalation = done.escalation
                if proposal.signal is not None:
                    self.pending_answer = proposal.signal.answer_path
                else:
                    self.screen_pending = proposal.prompt

    def _breaker(self, now: float) -> str:
        reason = f"circuit breaker: {self.denials} consecutive denials or failed tool calls"
        self.escalation = {"reason": reason, "since": utc_iso(now), "paused": True}
        return reason

    def screen_prompt(self, text: str) -> str | None:
        """The fallback for a TUI without hooks: propose a ruling on a permission dialog
        read from the screen (:func:`.screen.find_permission_prompt`, last lines only) once
        the same dialog has been seen on two checks in a row.

        Returns the escalation reason when a rule escalates, else ``None``.
        """
        prompt = screen.find_permission_prompt(text)
        if prompt is None or self.screen_pending is not None:
            self.prompt_seen = None if prompt is None else self.prompt_seen
            return None
        key = (prompt.tool, prompt.detail, prompt.question)
        if key != self.prompt_seen:
            self.prompt_seen = key  # first sighting: it must still be there next check
            return None
        self.prompt_seen = None
        proposal = permissions.from_screen(prompt, self._decide, self._denials_after())
        self.proposals.append(proposal)
        return proposal.reason() if proposal.ruling.action == "escalate" else None

    def recheck_in(self) -> float | None:
        """:data:`PROMPT_RECHECK` while a dialog seen once on screen waits for its second
        sighting, else ``None``."""
        return PROMPT_RECHECK if self.prompt_seen is not None else None

    def end_turn(self, now: float) -> list[Keys]:
        """``/exit`` and Enter (the TUI's own way out), typed again every
        :data:`END_SESSION_REPEAT` seconds while the session lives on (a last one after
        ``now``, the engine's clock having followed a step back, counts as long ago)."""
        if self.exit_sent_at is not None and 0.0 <= now - self.exit_sent_at < END_SESSION_REPEAT:
            return []
        self.exit_sent_at = now
        return [Keys(("/exit",), literal=True), Keys(("Enter",))]

    def answer(self, approve: bool, by: str) -> None:
        """Answer the request a human was asked about (``supervise approve|deny``, or the
        task's ending: ``by`` names who ruled, :class:`supervisor.audit.By`); resets the
        circuit breaker's count."""
        self.denials = 0
        if self.pending_answer is not None:  # a request waited, not the breaker
            self.tools.ruled(approve, (self.escalation or {}).get("tool"))
        prompt, self.screen_pending = self.screen_pending, None
        permissions.answer_pending(
            self.task,
            approve,
            self.pending_answer,
            self.escalation,
            prompt,
            self.context.send_keys,
            By(by),
        )
        self.pending_answer = None
        self.escalation = None

    def _set_limit(self, text: str, now: float, source: str) -> None:
        hit = limits.parse_limit(text, datetime.fromtimestamp(now, UTC))
        resume_at = hit.resume_at if hit is not None else None
        matched = hit.matched if hit is not None else text[:200]
        self.limit = (resume_at, f"{source}: {matched}")

    def _read_stream(self, now: float) -> None:
        path = self.task.file(hooks.STREAM)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                logrotate.finish(path)  # a rotation cut short by a crash
            return
        self._read_new_lines(now, path, size)
        if self.reader.offset == size and size > self.resolved.policy.max_log_bytes:
            rotated = rotate_stream(self.task, self.stream, self.resolved.policy.log_backups)
            self.reader.offset = rotated if rotated is not None else self.reader.offset

    def _read_new_lines(self, now: float, path: Path, size: int) -> None:
        if size < self.reader.offset:  # replaced: read it again from the start
            self.reader = StreamReader(progress_at=self.reader.progress_at)
            self.stream = StreamState()
        for line in self.reader.read(path, size):
            if not line.strip():
                continue
            obj = self.stream.feed_line(line)
            if obj is not None:
                self.tools.feed_stream(obj, now)
            self.reader.saw(obj)
            if obj is not None and obj.get("type") == LAUNCH_MARK:
                self.new_run_stream()
        if self.stream.run_ended and self.stream.is_error and not self.stream.limited:
            self.failure = failures.classify(
                self.stream.api_error_status, self.stream.result, self.stream.is_error
            )
        if self.stream.limited and self.limit is None:
            status = self.stream.api_error_status
            source = f"API error {status}" if status else f"{self.stream.limit_type} limit"
            self._set_limit(self.stream.result or "", now, source)
            if self.stream.limit_resets_at is not None and self.limit is not None:
                # The CLI's rate_limit_event carries the exact reset time: prefer it.
                self.limit = (self.stream.limit_resets_at, self.limit[1])

    def new_run_stream(self) -> None:
        """A new run started in the stream: a limit or failure seen before it is history."""
        self.limit = None
        self.failure = None

    # ------------------------------------------------------------------ staleness
    def screen_changed(self, text: str, now: float) -> float:
        """Feed a capture of the pane; returns when it last showed progress (epoch s): its
        normalized content changed (a turning spinner and the status line's timer do not
        count, :func:`.screen.normalize`), or the token counter grew or a running tool's
        timer advanced (:mod:`.evidence`)."""
        return self.screen_progress.feed(text, now)

    def transcript_mtime(self) -> float | None:
        """mtime of the session transcript (from the hooks' ``transcript_path``)."""
        if not self.transcript_path:
            return None
        try:
            return os.stat(self.transcript_path).st_mtime
        except OSError:
            return None

    # ------------------------------------------------------------------ report
    def report(self) -> dict[str, Any]:
        """Manifest fields: ``claude`` (stream facts + transcript path), ``denials``,
        ``escalation``."""
        facts = self.stream.report()
        facts["transcript_path"] = self.transcript_path
        facts["last_notification"] = self.notification
        facts["tools_in_flight"] = self.tools.report()
        return {"claude": facts, "denials": self.denials, "escalation": self.escalation}

    def unsaved(self) -> bool:
        """The tool calls in flight changed since the last call (:mod:`.tools`)."""
        return self.tools.take_changed()

    def result_text(self) -> str | None:
        """The ``result`` of the run's last stream-json ``result`` line."""
        return self.stream.result
