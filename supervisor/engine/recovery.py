"""Adoption after a restart or crash: what each task folder in ``state_dir`` holds.

:func:`adopt` reads the folders one by one and yields what it found (a task to queue again,
a live task to watch, an ending the event log already holds, a resume that was cut short);
it writes only the records of adoption itself (events, a repaired manifest). The scheduler
acts on each finding before the next folder is read.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Set
from dataclasses import dataclass
from typing import Any

from supervisor import policy, spool
from supervisor.config import ConfigError, LoadedProfile, ResolvedTask
from supervisor.diskio import read_regular
from supervisor.engine import clock, launch, notifications
from supervisor.engine import runtime as runtimes
from supervisor.engine.runtime import Runtime
from supervisor.taskdir import control, layout, repair
from supervisor.taskdir.events import RESUMES, Event, first_of, last_terminal, last_word
from supervisor.taskdir.folder import Manifest, TaskDir
from supervisor.taskdir.states import TERMINAL, Status
from supervisor.tmux import PaneInfo, Tmux
from supervisor.waiting import MANIFEST_MAX

log = logging.getLogger("supervise.engine")


@dataclass(frozen=True)
class Requeued:
    """A task to queue again (queued when we stopped, or a claim finished now).
    ``resolved`` is set when the claim was finished now (the scheduler logs it queued).
    ``logged``: the ending verbs (``stop``, ``discard``) its log holds, taken and not
    carried out (killed after the log line, before the ending): the scheduler applies them
    once it is queued, logging them no second time. Before, the task was queued again and
    launched. ``ending``: the terminal event its log holds, for a task that never launched
    (killed between that line and the manifest): the scheduler completes it, unqueued."""

    task: TaskDir
    resolved: ResolvedTask | None = None
    logged: tuple[str, ...] = ()
    ending: dict[str, Any] | None = None


@dataclass(frozen=True)
class Adopted:
    """A live task, watched again. ``ending``: the policy's decision completing an ending
    the log already holds (to perform at ``now``); ``resume``: its resume was interrupted
    and must be performed now (it was already counted)."""

    runtime: Runtime
    ending: policy.Decision | None = None
    now: float = 0.0
    resume: bool = False


@dataclass(frozen=True)
class Unsent:
    """An ended task whose notifications a killed engine left unsent: each
    (``notified_event``, reason) pair has a ``notifying`` event with no ``notified`` after
    it. Its notifier was cut short (and its group ended at restart by
    :func:`supervisor.children.end_recorded`), or never started; it is run again, so a
    notification is delivered at least once."""

    task: TaskDir
    resolved: ResolvedTask
    manifest: Manifest
    pending: tuple[tuple[str, str], ...]


Found = Requeued | Adopted | Unsent


def adopt(profile: LoadedProfile, tmux: Tmux) -> Iterator[Found]:
    """Every non-terminal task found in ``state_dir`` (after a restart or crash).

    - a claim interrupted before its manifest was written is validated again (queued or
      rejected);
    - a queued task is queued again, unless its tmux session exists (we died right after
      launching it): then it is watched, never launched twice;
    - a live task is watched (its session is not relaunched); the policy then sees
      whatever happened while we were away (done-file, dead agent, deadline);
    - ``retry_count`` is reconciled with the ``resumed`` events, so a crash between
      the event and the manifest write does not lose or invent a retry.

    Raises:
        TmuxError: tmux did not answer the first ``list-panes``.
    """
    clock.CLOCK.restarted(profile.state_dir)  # a step since the last engine: logged once
    sessions = tmux.panes()
    for folder in sorted(profile.tasks_dir.iterdir()):
        if not folder.is_dir():
            continue
        try:
            found = _adopt_one(profile, tmux, TaskDir(folder), sessions)
        except Exception:  # one broken folder must not keep the others unwatched
            log.exception("cannot adopt %s", folder)
            continue
        if found is not None:
            yield found


def _adopt_one(
    profile: LoadedProfile, tmux: Tmux, task: TaskDir, sessions: dict[str, PaneInfo]
) -> Found | None:
    """Adopt one task folder (see :func:`adopt`)."""
    manifest, damaged = _manifest(task)
    if damaged is not None:
        rebuilt = _adopt_damaged(profile, task, damaged)
        if rebuilt is None:
            return None
        if rebuilt.status in TERMINAL:  # its announced notifications are still owed
            return _unsent(profile, task, rebuilt)
        if rebuilt.status == Status.QUEUED:
            return Requeued(task, logged=_logged_endings(task, task.turn_events()))
        manifest = rebuilt  # a run in progress, restored from the log: adopted as any other
    if manifest is None:
        return _recover_claim(profile, task)
    if manifest.status in TERMINAL:
        return _unsent(profile, task, manifest)
    try:
        resolved = runtimes.reload(profile, task)
    except (OSError, ValueError, ConfigError) as exc:
        log.error("cannot re-adopt %s: %s", task.task_id, exc)
        return None
    events = task.turn_events()  # an earlier turn is no word on this one
    ended = last_terminal(events) is not None  # the log's last word is final
    launch_logged = first_of(events, Event.LAUNCHED) is not None
    # A queued manifest whose launch the log holds (a power cut kept the manifest before
    # the launch's, written without an fsync) is a run in progress, never launched twice.
    queued = manifest.status in (Status.QUEUED, Status.BLOCKED) and task.task_id not in sessions
    if queued and ended and not launch_logged:  # never launched: not a run to watch
        return Requeued(task, ending=last_terminal(events))
    if queued and not launch_logged:
        # admitted under the credentials it will launch with (engine/accounts.py)
        launch.record_account(task, manifest, resolved.account)
        return Requeued(task, logged=_logged_endings(task, events))
    launch_written = None
    if manifest.status == Status.QUEUED and not launch_logged:
        # launched, but we died before recording it
        launch_written = task.file(layout.LAUNCH).stat().st_mtime
        task.append_event(Event.LAUNCHED, status=Status.RUNNING, recovered=True)
    state = policy.adopted(manifest, events, launch_written)
    # The event log runs ahead of the manifest (write-ahead): trust its last word.
    last = last_word(events)
    runtime = runtimes.build(profile, tmux, task, resolved, state, manifest)
    clock.adopted(runtime, profile.state_dir)  # its recorded times on this engine's clock
    state = runtime.state
    _requests_left(profile, runtime, events)
    if last is None or last["event"] not in TERMINAL:
        _requests_logged(runtime, events)
    with contextlib.suppress(OSError):  # a full disk must not leave the task unwatched
        task.append_event(Event.ADOPTED, status=state.status, retry_count=state.retry_count)
    log.info("adopted %s (%s)", task.task_id, state.status)
    if last is not None and last["event"] in TERMINAL:
        return Adopted(runtime, ending=_logged_ending(runtime, last, events), now=clock.now())
    resume = last is not None and last["event"] in RESUMES
    return Adopted(runtime, resume=resume and _resume_cut_short(runtime, sessions))


def _manifest(task: TaskDir) -> tuple[Manifest | None, str | None]:
    """The task's manifest, read and validated once (non-blocking, no symlink followed: the
    agent can write its folder), or why it cannot be used (:func:`repair.damage`'s line,
    which reads it again only then). ``(None, None)``: no manifest and no event yet, a
    claim to finish. Adoption read and validated every manifest twice before (``damage``,
    then ``read_manifest``): 200 tasks, 400 reads."""
    try:
        data = read_regular(task.file(layout.MANIFEST), MANIFEST_MAX, follow=False)
        return Manifest.model_validate_json(data), None
    except (OSError, ValueError):
        return None, repair.damage(task)


def _unsent(profile: LoadedProfile, task: TaskDir, manifest: Manifest) -> Unsent | None:
    """The notifications of an ended task that were started and never finished, or None."""
    pending = notifications.unsent(task.events())
    if not pending:
        return None
    try:
        resolved = runtimes.reload(profile, task)
    except (OSError, ValueError, ConfigError) as exc:
        log.error("cannot notify %s again: %s", task.task_id, exc)
        return None
    return Unsent(task, resolved, manifest, tuple(pending.items()))


def _requests_left(profile: LoadedProfile, runtime: Runtime, events: list[dict[str, Any]]) -> None:
    """Requests left for this task while no engine ran (an operator's ``stop``; the cluster
    intake's ``supersede``, checked before adoption: issue 20) are the runtime's from its
    first check, as the intake job would apply them: before that check can read a
    done-file and record an ending, run acceptance or notify."""
    logged = control.logged_requests(events)
    for task_id, verb, path in control.pending_or_none(profile.state_dir)[0]:
        if task_id != runtime.task.task_id:
            continue
        if verb not in logged:  # else: logged, then killed before the file was removed
            with contextlib.suppress(OSError):  # a full disk: the request is still applied
                runtime.task.append_event(Event.requested(verb), status=runtime.state.status)
        path.unlink(missing_ok=True)  # after the log line (write-ahead): never lost
        runtime.requests.add(verb)


def _logged_endings(
    task: TaskDir, events: list[dict[str, Any]], taken: Set[str] = frozenset()
) -> tuple[str, ...]:
    """The task's logged, unanswered ``stop``/``discard`` not in ``taken`` (for a queued
    task, :class:`Requeued`'s ``logged``), each with one log line."""
    logged = tuple(sorted(control.logged_requests(events) - taken))
    for verb in logged:
        log.info("%s: its logged '%s' request was not carried out; done now", task.task_id, verb)
    return logged


def _requests_logged(runtime: Runtime, events: list[dict[str, Any]]) -> None:
    """A ``stop`` or ``discard`` whose request the log holds but whose ending it does not
    (the engine was killed after taking the request, before the check that performs it:
    the request file is gone, its word only in memory) is the runtime's again, as if just
    taken. Before, an operator's ``stop`` was lost then, and the group's look asked a
    loser's ``discard`` a second time (two ``discard_requested`` lines)."""
    runtime.requests.update(_logged_endings(runtime.task, events, runtime.requests))


def _adopt_damaged(profile: LoadedProfile, task: TaskDir, why: str) -> Manifest | None:
    """A folder whose manifest is missing or unreadable: never run again on that account.
    The manifest is rebuilt where the event log fixes it exactly (an ended task; a queued
    one, queued again; a run in progress, adopted), the unreadable file kept beside it, and
    returned; otherwise nothing is touched, the result is ``None`` and ``supervise status``
    shows the task ``damaged`` (see :mod:`supervisor.taskdir.repair`)."""
    events = task.events()
    try:
        resolved = runtimes.reload(profile, task)
        spec = resolved.spec
        manifest = repair.rebuild(task, events, spec.name, resolved.model, str(spec.project_dir))
    except (OSError, ValueError, ConfigError):
        manifest = None
    if manifest is None:
        log.error(
            "%s: %s, and its event log cannot restore it exactly; left as it is "
            "(not run again; 'supervise status' shows it damaged)",
            task.task_id,
            why,
        )
        return None
    kept = repair.set_aside(task.file(layout.MANIFEST))
    task.write_manifest(manifest)
    task.append_event(
        Event.MANIFEST_REPAIRED,
        status=manifest.status,
        damage=why,
        damaged_copy=str(kept) if kept else None,
    )
    log.warning("%s: %s; rebuilt from events.jsonl (%s)", task.task_id, why, manifest.status)
    return manifest


def _resume_cut_short(runtime: Runtime, sessions: dict[str, PaneInfo]) -> bool:
    """We died between a ``resumed`` event and the new agent's start (the event is written
    first): its pane is dead or gone and no ``pid`` newer than the resume exists. Then the
    resume is performed now; it was already counted, so it is not counted again. Records
    ``resume_redone`` and returns True in that case."""
    task = runtime.task
    pane = sessions.get(task.task_id)
    launched = runtime.state.launched_at or 0.0
    try:
        pid_written = task.file(layout.PID).stat().st_mtime + max(runtime.restart_step, 0.0)
    except FileNotFoundError:
        pid_written = None
    started = pid_written is not None and pid_written >= launched - 1.0
    if (pane is not None and not pane.dead) or started or task.done():
        return False
    task.append_event(
        Event.RESUME_REDONE, status=Status.RUNNING, retry_count=runtime.state.retry_count
    )
    runtime.state = policy.resume_redone(runtime.state, clock.now())
    log.warning("%s: its resume was interrupted; resuming it now", task.task_id)
    return True


def _logged_ending(
    runtime: Runtime, last: dict[str, Any], events: list[dict[str, Any]]
) -> policy.Decision:
    """Complete an ending the log already holds (we died between the terminal event and
    the manifest): :func:`supervisor.policy.recovered_ending` decides, as the log says."""
    return policy.recovered_ending(runtime.state, last, events, runtime.policy)


def _recover_claim(profile: LoadedProfile, task: TaskDir) -> Found | None:
    """Finish a claim that a crash interrupted (task.toml moved in, no manifest yet)."""
    if not task.file(layout.TASK_TOML).exists():
        return None
    claimed = spool.finish_claim(task, profile)
    if claimed.error:
        log.warning("rejected %s after restart", task.file(layout.TASK_TOML))
        for problem in claimed.error.splitlines():
            log.warning("  %s", problem)
        return None
    if claimed.resolved is not None:
        return Requeued(task, claimed.resolved)
    return None
