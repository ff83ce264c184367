"""The engine: APScheduler 3.11 jobs that take tasks from the spool and run the policy.

Jobs (all state changes run on one worker thread, so the engine needs no locks of its own;
notifiers run on a separate pool so a slow one never delays a check):

- ``intake``: every ``intake_interval`` seconds, claims settled spool files and launches
  queued tasks while fewer than ``max_concurrent`` are live.
- ``check:<task_id>``: one interval job per live task (``base_interval`` seconds); each run
  observes the task (:mod:`supervisor.signals`), asks :func:`supervisor.policy.decide`, and
  performs the returned actions. The policy also says when to look next (grace periods,
  backoff, deadline), which moves the job's ``next_run_time``.

tmux outlives the engine: SIGINT/SIGTERM stop the scheduler and leave every session
running; the next ``supervise run`` re-adopts live tasks from their manifests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobEvent,
)
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from filelock import FileLock, Timeout

from supervisor import (
    acceptance,
    control,
    notify,
    policy,
    processes,
    repair,
    spool,
    statefs,
    stopping,
)
from supervisor.agents import AgentAdapter, Keys, adapter_for
from supervisor.config import (
    ConfigError,
    LoadedProfile,
    MonitorPolicy,
    ResolvedTask,
    TaskSpec,
    resolve_task,
)
from supervisor.signals import observe
from supervisor.states import TERMINAL
from supervisor.stopping import STOP_TIMEOUT, StopInProgress
from supervisor.taskdir import Manifest, TaskDir, atomic_write, utc_iso
from supervisor.tmux import PaneInfo, Tmux, TmuxError, TmuxTimeout
from supervisor.watch import Watcher
from supervisor.wrapper import END_MARK

log = logging.getLogger("supervise.engine")

#: Seconds between manifest writes of checks that change nothing but ``last_checked_at``.
QUIET_WRITE = 5.0
#: Seconds between writes of ``state_dir/engine-stats.json``.
STATS_EVERY = 5.0
#: Spool files claimed per intake run; more are taken on the next run, right after the
#: checks that are due, so a burst of files never starves the checks.
INTAKE_BATCH = 25
#: Files whose appearance in a task folder triggers an immediate check.
WAKE_FILES = frozenset({"done", "exit_code", "signal", acceptance.RESULT})
#: Seconds a ``list-panes`` snapshot is reused across the checks of one tick.
SESSIONS_MAX_AGE = 0.25
#: Seconds between looks for the wrapper's end line in output.log.
TAIL_POLL = 0.05
#: Seconds to wait for the wrapper's last line to reach output.log before taking the tail.
TAIL_SETTLE = 1.0
_PLACEHOLDER_RE = re.compile(r"\{([a-z_]+)\}")


@dataclass
class Runtime:
    """What the engine holds in memory for one non-terminal task."""

    task: TaskDir
    resolved: ResolvedTask
    state: policy.TaskState
    manifest: Manifest
    requests: set[str] = field(default_factory=set)
    last_written: float = 0.0  # when the manifest was last written (time.monotonic())
    agent: AgentAdapter | None = None  # the [agent] kind's hooks (supervisor.agents)
    accepting: bool = False  # the acceptance check runs on the notify pool
    stopping: StopInProgress | None = None  # its agent is being stopped (no decision meanwhile)
    pending: Callable[[], None] | None = None  # a decision's rest, to retry (tmux did not answer)

    @property
    def policy(self) -> MonitorPolicy:
        return self.resolved.policy


def expand_argv(template: list[str], values: dict[str, str]) -> list[str]:
    """Replace ``{name}`` placeholders in each argv element, in one pass.

    A value that itself contains ``{model}`` is not expanded again, and a prompt is always
    exactly one argv element: no shell ever sees it.
    """
    return [
        _PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), m.group(0)), item) for item in template
    ]


@dataclass(frozen=True)
class _Applied:
    """What :meth:`Engine._apply` fixed before the actions ran, for the manifest write
    that follows them (perhaps after a stop, see :mod:`supervisor.stopping`)."""

    previous: policy.TaskState
    state: policy.TaskState
    finished: bool
    exit_code: int | None
    finished_at: str | None
    tail: str | None


class EngineBusy(RuntimeError):
    """Another engine holds the state directory's lock (one engine per ``state_dir``)."""


class UnsafeSpool(RuntimeError):
    """The spool folder can be written by other users and the profile does not allow it."""


def check_spool_permissions(profile: LoadedProfile) -> None:
    """Refuse a spool that other users could write to: whoever writes there runs commands
    as us. ``[security] allow_shared_spool = true`` accepts it. A group-writable spool
    whose group is our user private group is not shared (see :func:`spool.sharing_problem`).

    Raises:
        UnsafeSpool: one line naming the folder, its mode, owner and group, and the fix.
    """
    folder = profile.spool_dir
    problem = spool.sharing_problem(folder)
    if problem is not None and not profile.spec.security.allow_shared_spool:
        raise UnsafeSpool(
            f"{problem}; anyone who can write there runs commands as this user. "
            f"Fix: chmod 700 {folder}, or set [security] allow_shared_spool = true in "
            f"{profile.path}"
        )


class Engine:
    """Runs one profile: ``Engine(profile).run()``.

    Args:
        profile: the validated profile.
        exit_when_idle: return from :meth:`run` once the spool is empty and no task is
            queued or live.
    """

    def __init__(self, profile: LoadedProfile, exit_when_idle: bool = False) -> None:
        self.profile = profile
        self.exit_when_idle = exit_when_idle
        self.tmux = Tmux(profile.socket_name, owner=str(profile.state_dir))
        self.live: dict[str, Runtime] = {}
        self.queue: deque[TaskDir] = deque()  # queued tasks, oldest first; loaded at launch
        self.stopping = threading.Event()
        self._sessions_cache: tuple[float, dict[str, PaneInfo]] | None = None
        self.disk = statefs.StateDisk(profile.state_dir, log)
        self.watcher: Watcher | None = None
        self._complete: set[str] = set()  # spool names inotify saw finished by their writer
        self._kicked: set[str] = set()  # task ids with an event since their last check
        self._intake_kicked = False  # a spool event arrived since intake last started
        # Held by every job body. Stopping takes it once before shutting the scheduler down,
        # so no job is inside a scheduler call then (shutdown(wait=True) holds APScheduler's
        # job-store lock while it waits: a job calling modify_job at that moment deadlocks).
        self._job_lock = threading.Lock()
        self.stats: dict[str, int] = dict.fromkeys(
            ("checks", "claimed", "rejected", "launched", "resumed", "finished",
             "jobs_missed", "jobs_max_instances", "jobs_failed"), 0
        )  # fmt: skip
        self._stats_written = 0.0
        self._started = time.time()
        self.scheduler = BackgroundScheduler(
            executors={
                "default": ThreadPoolExecutor(max_workers=1),
                "notify": ThreadPoolExecutor(max_workers=4),
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=UTC,
        )

    # ------------------------------------------------------------------ lifecycle
    def run(self) -> int:
        """Start, block until SIGINT/SIGTERM (or idle with ``exit_when_idle``), stop.

        Returns the process exit status (0).

        Raises:
            EngineBusy: another engine runs on the same ``state_dir`` (an OS file lock,
                released by the kernel if that engine dies, so it never goes stale).
        """
        for folder in (self.profile.state_dir, self.profile.spool_dir, self.profile.tasks_dir):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        check_spool_permissions(self.profile)
        lock = FileLock(str(self.profile.state_dir / "engine.lock"), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise EngineBusy(
                f"another 'supervise run' already owns {self.profile.state_dir} "
                f"(lock {self.profile.state_dir / 'engine.lock'}); stop it first"
            ) from None
        try:
            return self._run_locked()
        finally:
            lock.release()

    def _run_locked(self) -> int:
        self.scheduler.add_listener(
            self._on_job_event, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES | EVENT_JOB_ERROR
        )
        self.watcher = Watcher(self._on_spool, self._on_task, self._on_exit)
        self.watcher.watch_spool(self.profile.spool_dir)
        self.watcher.start()
        previous = {
            sig: signal.signal(sig, lambda *_: self.stopping.set())
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            self.scheduler.start()
            self.scheduler.add_job(self._startup, id="startup")
            while not self.stopping.wait(0.1):
                pass
        finally:
            self.stopping.set()
            with self._job_lock:  # let the job in progress finish; later ones return at once
                self._finish_stops()
            self.scheduler.shutdown(wait=True)
            self.watcher.stop()
            self.write_stats()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("engine stopped; %d task(s) left running in tmux", len(self.live))
        return 0

    def _guarded(self, body: Callable[..., None], *args: str) -> None:
        """Run a job body under the job lock, unless the engine is stopping."""
        with self._job_lock:
            if not self.stopping.is_set():
                body(*args)

    def _startup(self) -> None:
        self._guarded(self._startup_body)

    def _startup_body(self) -> None:
        try:
            self._recover_claims()
            self.adopt()
            self._submit_inline_tasks()
        finally:  # whatever adoption met, intake must run
            self.scheduler.add_job(
                self._guarded,
                "interval",
                args=[self.intake],
                seconds=self.profile.spec.intake_interval,
                id="intake",
                next_run_time=datetime.now(UTC),
                # APScheduler 3.11 counts a job as running until its function returns, so a
                # kick (a spool event) that lands on a running intake was skipped until the
                # next interval. A second instance instead waits on the single worker and
                # runs as soon as this one returns (measured: a file dropped 10 ms after
                # another waited 0.53 s at p50 in 19 of 20 pairs; with this, 0.06 s, 0 of 20).
                max_instances=2,
            )

    # ------------------------------------------------------------------ stats
    def _on_job_event(self, event: JobEvent) -> None:
        """Count APScheduler's missed, skipped (max instances) and failed runs."""
        key = {
            EVENT_JOB_MISSED: "jobs_missed",
            EVENT_JOB_MAX_INSTANCES: "jobs_max_instances",
            EVENT_JOB_ERROR: "jobs_failed",
        }.get(event.code)
        if key:
            self.stats[key] += 1

    def write_stats(self) -> None:
        """``state_dir/engine-stats.json``: counters since start, for operators and benchmarks."""
        data = {
            "pid": os.getpid(),
            "started_at": utc_iso(self._started),
            "written_at": utc_iso(),
            "live": len(self.live),
            "queued": len(self.queue),
            **self.stats,
        }
        with contextlib.suppress(OSError):
            path = self.profile.state_dir / "engine-stats.json"
            atomic_write(path, json.dumps(data, indent=1).encode(), durable=False)
        self._stats_written = time.monotonic()

    # ------------------------------------------------------------------ events
    def _kick(self, job_id: str) -> None:
        """Run a job now (from the watcher thread); polling remains the safety net."""
        if self.stopping.is_set():
            return
        with contextlib.suppress(JobLookupError):
            self.scheduler.modify_job(job_id, next_run_time=datetime.now(UTC))

    def _on_spool(self, name: str) -> None:
        if name.endswith(".toml") and not name.startswith("."):
            self._complete.add(name)
            self._intake_kicked = True  # seen by a running intake, which then runs again
            self._kick("intake")

    def _on_task(self, task_id: str, name: str) -> None:
        if name == "pid":
            task = TaskDir(self.profile.tasks_dir / task_id)
            pid = task.read_int("pid")
            if pid is not None and self.watcher is not None:
                self.watcher.watch_pid(task_id, pid)
            self._kicked.add(task_id)  # a new run: its check records the PID
            self._kick(f"check:{task_id}")
        elif name in WAKE_FILES or (name.startswith("hook-") and name.endswith(".json")):
            self._kicked.add(task_id)
            self._kick(f"check:{task_id}")

    def _on_exit(self, task_id: str) -> None:
        self._kicked.add(task_id)
        self._kick(f"check:{task_id}")

    def _watch(self, runtime: Runtime) -> None:
        if self.watcher is None:
            return
        task = runtime.task
        self.watcher.watch_task(task.task_id, task.path)
        pid = task.read_int("pid")
        if pid is not None:
            self.watcher.watch_pid(task.task_id, pid)

    # ------------------------------------------------------------------ intake
    def intake(self) -> None:
        """Claim settled spool files, start queued tasks, and detect idleness."""
        self._intake_kicked = False
        ready = spool.pending(self.profile.spool_dir, complete=frozenset(self._complete))
        # A claim writes the task's folder on the state filesystem: while it is full, files
        # wait in the spool (a valid task must never be rejected for want of space).
        claimable = [] if ready and self.disk.full() else ready
        for path in claimable[:INTAKE_BATCH]:
            self._complete.discard(path.name)
            try:
                claimed = spool.claim(path, self.profile)
            except Exception as exc:  # a bad file must never stop the engine
                log.exception("cannot claim %s", path)
                self._quarantine(path, exc)
                continue
            if claimed is None:
                continue
            if claimed.error:
                self.stats["rejected"] += 1
                log.warning("rejected %s -> %s", path, claimed.rejected_to)
                for problem in claimed.error.splitlines():  # one log line per problem
                    log.warning("  %s", problem)
                continue
            self.stats["claimed"] += 1
            assert claimed.task_dir is not None and claimed.resolved is not None
            self._enqueue(claimed.task_dir, claimed.resolved)
        if time.monotonic() - self._stats_written >= STATS_EVERY:
            self.write_stats()
        # More files than one batch, or a file dropped while this run was busy (APScheduler
        # skips a kick that lands on a running job): run again right after the due checks.
        if len(ready) > INTAKE_BATCH or self._intake_kicked:
            self._kick("intake")
        self._take_requests()
        self._fill_slots()
        if (
            self.exit_when_idle
            and not self.live
            and not self.queue
            and not spool.has_waiting_files(self.profile.spool_dir)
        ):
            log.info("idle: spool empty, nothing queued or running")
            self.stopping.set()

    def _recover_claims(self) -> None:
        """Finish or undo spool claims a crash cut short (see :func:`spool.recover_claims`)."""
        try:
            for path in spool.recover_claims(self.profile):
                log.warning("claim of %s was cut short; put back into the spool", path)
        except OSError:
            log.exception("cannot recover interrupted spool claims")

    def _quarantine(self, path: Path, exc: BaseException) -> None:
        """Move a file that broke the claim aside with the reason (never delete it)."""
        if not os.path.lexists(path):
            return  # already moved (its claim got that far); re-examined on restart
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return  # no room to claim it now: it stays in the spool for a later run
        try:
            spool.reject(path, self.profile.spool_dir, [f"{path}: cannot be processed: {exc!r}"])
        except Exception:
            log.exception("cannot move %s aside either; it stays in the spool", path)

    def _take_requests(self) -> None:
        """Apply operator requests (``supervise stop|resume ID``) found in ``control/``."""
        for task_id, verb, path in control.pending(self.profile.state_dir):
            path.unlink(missing_ok=True)
            queued = next((t for t in self.queue if t.task_id == task_id), None)
            runtime = self.live.get(task_id)
            if runtime is None and queued is not None and verb == "stop":
                self.queue.remove(queued)
                runtime = self._load(queued)
            if runtime is None:
                log.warning("ignored '%s' for %s: no such live task", verb, task_id)
                continue
            with contextlib.suppress(OSError):  # a full disk: the request is still applied
                runtime.task.append_event(f"{verb}_requested", status=runtime.state.status)
            runtime.requests.add(verb)
            if task_id in self.live:
                self._schedule_check(runtime, delay=0.0)
            else:
                self._decide_and_apply(runtime)

    def _enqueue(self, task: TaskDir, resolved: ResolvedTask) -> None:
        self.queue.append(task)
        log.info("queued %s (%s)", task.task_id, resolved.spec.name)

    def _load(self, task: TaskDir) -> Runtime:
        """A queued task's runtime, read back from its folder (queued tasks are kept on disk,
        not in memory, so a burst of thousands of files costs almost no RAM)."""
        manifest = task.read_manifest()
        return self._runtime(task, self._reload(task), policy.TaskState(status="queued"), manifest)

    def _runtime(
        self, task: TaskDir, resolved: ResolvedTask, state: policy.TaskState, manifest: Manifest
    ) -> Runtime:
        runtime = Runtime(task, resolved, state, manifest)
        message = self.profile.spec.approval.default_message
        if resolved.spec.approval is not None:
            message = resolved.spec.approval.default_message
        session = task.task_id

        def send_keys(keys: Keys) -> None:
            self.tmux.send_keys(session, *keys.keys, literal=keys.literal)

        runtime.agent = adapter_for(
            self.profile.spec.agent, task, resolved, manifest, message, send_keys
        )
        return runtime

    def _fill_slots(self) -> None:
        limit = self.profile.spec.max_concurrent
        if self.queue and self.disk.full():
            return  # a launch writes launch.json, events and the manifest: wait for room
        while self.queue and len(self.live) < limit:
            task = self.queue.popleft()
            try:
                runtime = self._load(task)
            except (OSError, ValueError, ConfigError):
                log.exception("cannot load queued task %s; it stays queued on disk", task.task_id)
                continue
            try:
                self.launch(runtime)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                log.error("%s: cannot launch: %s; it stays queued", task.task_id, exc)
                self.queue.appendleft(task)
                return

    def _submit_inline_tasks(self) -> None:
        """Materialize the profile's ``[[tasks]]`` once per state dir (marker file)."""
        marker = self.profile.state_dir / "inline-tasks.submitted"
        if not self.profile.spec.tasks or marker.exists():
            return
        base = self.profile.path.parent
        for spec in self.profile.spec.tasks:
            task_id = spool.new_task_id(spec.name)
            folder = self.profile.tasks_dir / task_id
            folder.mkdir(mode=0o700)
            copy = spec.model_copy(deep=True)
            resolved = resolve_task(copy, self.profile, base, self.profile.path)
            task = TaskDir(folder)
            spool.materialize(task, resolved, source=f"{self.profile.path} [[tasks]]")
            self._enqueue(task, resolved)
        atomic_write(marker, utc_iso().encode())

    # ------------------------------------------------------------------ adoption
    def adopt(self) -> None:
        """Pick up every non-terminal task found in ``state_dir`` (after a restart or crash).

        - a claim interrupted before its manifest was written is validated again (queued or
          rejected);
        - a queued task is queued again, unless its tmux session exists (we died right after
          launching it): then it is watched, never launched twice;
        - a live task is watched (its session is not relaunched); the policy then sees
          whatever happened while we were away (done-file, dead agent, deadline);
        - ``retry_count`` is reconciled with the ``resumed`` events, so a crash between
          the event and the manifest write does not lose or invent a retry.
        """
        sessions = self.tmux.panes()
        for folder in sorted(self.profile.tasks_dir.iterdir()):
            if not folder.is_dir():
                continue
            try:
                self._adopt_one(TaskDir(folder), sessions)
            except Exception:  # one broken folder must not keep the others unwatched
                log.exception("cannot adopt %s", folder)

    def _adopt_one(self, task: TaskDir, sessions: dict[str, PaneInfo]) -> None:
        """Adopt one task folder (see :meth:`adopt`)."""
        damaged = repair.damage(task)
        if damaged is not None:
            self._adopt_damaged(task, damaged)
            return
        if not task.has_manifest():
            self._recover_claim(task)
            return
        try:
            manifest = task.read_manifest()
        except (OSError, ValueError) as exc:
            log.error("cannot read %s: %s", task.file("manifest.json"), exc)
            return
        if manifest.status in TERMINAL:
            return
        try:
            resolved = self._reload(task)
        except (OSError, ValueError, ConfigError) as exc:
            log.error("cannot re-adopt %s: %s", task.task_id, exc)
            return
        events = task.events()
        ended = repair.last_terminal(events) is not None  # the log's last word is final
        if manifest.status == "queued" and task.task_id not in sessions and not ended:
            self.queue.append(task)
            return
        launch_written = None
        launch_logged = any(e.get("event") == "launched" for e in events)
        if manifest.status == "queued" and not launch_logged:
            # launched, but we died before recording it
            launch_written = task.file("launch.json").stat().st_mtime
            task.append_event("launched", status="running", recovered=True)
        state = policy.adopted(manifest, events, launch_written)
        # The event log runs ahead of the manifest (write-ahead): trust its last word.
        last = policy.last_word(events)
        runtime = self._runtime(task, resolved, state, manifest)
        self.live[task.task_id] = runtime
        with contextlib.suppress(OSError):  # a full disk must not leave the task unwatched
            task.append_event("adopted", status=state.status, retry_count=state.retry_count)
        log.info("adopted %s (%s)", task.task_id, state.status)
        if last is not None and last["event"] in TERMINAL:
            self._finish_logged(runtime, last, events)
            return
        if last is not None and last["event"] == "resumed":
            self._finish_interrupted_resume(runtime, sessions.get(task.task_id))
        self._watch(runtime)
        self._schedule_check(runtime, delay=0.0)

    def _adopt_damaged(self, task: TaskDir, why: str) -> None:
        """A folder whose manifest is missing or unreadable: never run again on that account.
        The manifest is rebuilt where the event log fixes it exactly (an ended task; a queued
        one, queued again), the unreadable file kept beside it; otherwise nothing is touched
        and ``supervise status`` shows the task ``damaged`` (see :mod:`supervisor.repair`)."""
        events = task.events()
        try:
            resolved = self._reload(task)
            spec = resolved.spec
            manifest = repair.rebuild(
                task, events, spec.name, resolved.model, str(spec.project_dir)
            )
        except (OSError, ValueError, ConfigError):
            manifest = None
        if manifest is None:
            log.error("%s: %s, and its event log cannot restore it exactly; left as it is "
                      "(not run again; 'supervise status' shows it damaged)",
                      task.task_id, why)  # fmt: skip
            return
        kept = repair.set_aside(task.file("manifest.json"))
        task.write_manifest(manifest)
        task.append_event("manifest_repaired", status=manifest.status, damage=why,
                          damaged_copy=str(kept) if kept else None)  # fmt: skip
        log.warning("%s: %s; rebuilt from events.jsonl (%s)", task.task_id, why, manifest.status)
        if manifest.status == "queued":
            self.queue.append(task)

    def _finish_interrupted_resume(self, runtime: Runtime, pane: PaneInfo | None) -> None:
        """We died between a ``resumed`` event and the new agent's start (the event is
        written first): its pane is dead or gone and no ``pid`` newer than the resume
        exists. Perform the resume now; it was already counted, so it is not counted
        again (found by the chaos test, seed 4275908639)."""
        task = runtime.task
        launched = runtime.state.launched_at or 0.0
        try:
            pid_written = task.file("pid").stat().st_mtime
        except FileNotFoundError:
            pid_written = None
        started = pid_written is not None and pid_written >= launched - 1.0
        if (pane is not None and not pane.dead) or started or task.done():
            return
        task.append_event("resume_redone", status="running", retry_count=runtime.state.retry_count)
        log.warning("%s: its resume was interrupted; resuming it now", task.task_id)
        self._resume(runtime)

    def _finish_logged(self, runtime: Runtime, last: dict[str, Any], events: list) -> None:
        """Complete an ending the log already holds (we died between the terminal event and
        the manifest): :func:`supervisor.policy.recovered_ending` decides, as the log says."""
        decision = policy.recovered_ending(runtime.state, last, events, runtime.policy)
        self._apply(runtime, decision, time.time())

    def _recover_claim(self, task: TaskDir) -> None:
        """Finish a claim that a crash interrupted (task.toml moved in, no manifest yet)."""
        if not task.file("task.toml").exists():
            return
        claimed = spool.finish_claim(task, self.profile)
        if claimed.error:
            log.warning("rejected %s after restart", task.file("task.toml"))
            for problem in claimed.error.splitlines():
                log.warning("  %s", problem)
        elif claimed.resolved is not None:
            self._enqueue(task, claimed.resolved)

    def _reload(self, task: TaskDir) -> ResolvedTask:
        """The task as validated at claim time (``spec.json``), with its stored prompt."""
        spec = TaskSpec.model_validate_json(task.file("spec.json").read_bytes())
        spec.prompt, spec.prompt_file = "-", None
        resolved = resolve_task(spec, self.profile, task.path, task.file("spec.json"))
        prompt = task.file("prompt").read_bytes().decode("utf-8")
        return dataclasses.replace(resolved, prompt=prompt)

    # ------------------------------------------------------------------ launch
    def _argv_values(self, runtime: Runtime) -> dict[str, str]:
        manifest = runtime.manifest
        return {
            "prompt": runtime.resolved.prompt,
            "prompt_file": str(runtime.task.file("prompt")),
            "model": runtime.resolved.model,
            "session_id": manifest.session_id,
            "project_dir": manifest.project_dir,
            "task_id": manifest.task_id,
            "python": sys.executable,
            "profile_dir": str(self.profile.path.parent),
        }

    def _write_launch(self, runtime: Runtime, resume: bool) -> None:
        agent = self.profile.spec.agent
        assert runtime.agent is not None  # set by _runtime
        part = runtime.agent.launch(resume)
        env = {
            **part.env,
            **agent.env,
            **runtime.resolved.spec.env,
            "SUPERVISE_TASK_ID": runtime.manifest.task_id,
            "SUPERVISE_TASK_DIR": str(runtime.task.path),
            "SUPERVISE_SESSION_ID": runtime.manifest.session_id,
        }
        launch = {
            "argv": expand_argv(part.argv, self._argv_values(runtime)),
            "env": env,
            "cwd": runtime.manifest.project_dir,
            "resume_exit_codes": runtime.policy.resume_exit_codes,
        }
        if part.stream:
            launch["stream"] = part.stream
        data = json.dumps(launch, ensure_ascii=False, indent=1).encode()
        atomic_write(runtime.task.file("launch.json"), data)
        os.chmod(runtime.task.file("launch.json"), 0o600)

    def launch(self, runtime: Runtime) -> None:
        """Start a queued task: write ``launch.json``, create its tmux session, watch it."""
        task = runtime.task
        now = time.time()
        started = policy.launched(runtime.state, now, runtime.policy)
        self._write_launch(runtime, resume=False)
        task.clear_run_files()
        if self.watcher is not None:  # before the agent starts, so no event is missed
            self.watcher.watch_task(task.task_id, task.path)
        try:
            self.tmux.launch(task.task_id, task.path, Path(runtime.manifest.project_dir))
        except TmuxError as exc:
            if task.task_id in self.tmux.panes():  # ours only (the owner mark)
                # A session of this name exists: launched by an engine that died before
                # recording it. Watch it; never start the agent twice.
                log.warning("%s already has a session; adopting it", task.task_id)
                self._sessions_cache = None
            else:
                self._launch_failed(runtime, started, now, exc)
                return
        self._record_launch(runtime, started, now)

    def _launch_failed(
        self, runtime: Runtime, started: policy.Decision, now: float, exc: Exception
    ) -> None:
        """tmux refused to create the session: the task ends ``failed`` with the reason
        (:func:`supervisor.policy.launch_failed`). It counts as launched until then, so a
        failed event write leaves it a live task that the next check decides again."""
        log.error("launch of %s failed: %s", runtime.task.task_id, exc)
        runtime.state = started.state
        self.live[runtime.task.task_id] = runtime
        decision = policy.launch_failed(started.state, now, str(exc), runtime.policy)
        self._apply(runtime, decision, now)

    def _record_launch(self, runtime: Runtime, started: policy.Decision, now: float) -> None:
        """Perform :func:`supervisor.policy.launched`'s decision ``started``: its events
        (the write-ahead record), then the manifest; the task is watched from now on."""
        task = runtime.task
        runtime.state = started.state

        def change(m: Manifest) -> None:
            m.status = "running"
            m.started_at = utc_iso(now)
            m.last_checked_at = utc_iso(now)
            m.pid = None
            m.launched_at = utc_iso(now)

        # stamped with the manifest's started_at, so repair.rebuild restores it exactly
        for event in started.events:
            task.append_event(event, at=now, status=started.state.status, session_name=task.task_id)
        self.stats["launched"] += 1
        self.live[task.task_id] = runtime  # watched from now on, whatever the write does
        try:
            runtime.manifest = task.update_manifest(change, fallback=runtime.manifest)
        except OSError as exc:
            log.error("%s: cannot write %s: %s; the next check writes it again",
                      task.task_id, task.file("manifest.json"), exc)  # fmt: skip
        self._watch(runtime)
        self._schedule_check(runtime, delay=started.next_check)
        log.info("launched %s in tmux session %s", task.task_id, task.task_id)

    # ------------------------------------------------------------------ checks
    def _schedule_check(self, runtime: Runtime, delay: float) -> None:
        job_id = f"check:{runtime.task.task_id}"
        if runtime.task.task_id in self._kicked:  # an event arrived during this check
            delay = 0.0
        when = datetime.fromtimestamp(time.time() + max(delay, 0.0), UTC)
        if self.scheduler.get_job(job_id) is None:
            self.scheduler.add_job(
                self._guarded,
                "interval",
                seconds=runtime.policy.base_interval,
                args=[self.check, runtime.task.task_id],
                id=job_id,
                next_run_time=when,
                max_instances=2,  # a kick during a running check runs right after it
                # (not one base_interval later); see the intake job
            )
        else:
            self.scheduler.modify_job(job_id, next_run_time=when)

    def check(self, task_id: str) -> None:
        """One monitor check of one task: observe, decide, act. While the last decision is
        not carried out (its agent being stopped, or tmux not answering), the check carries
        it on instead: one task's decisions never interleave. tmux not answering is a
        logged fault: the task is looked at again ``base_interval`` seconds later."""
        runtime = self.live.get(task_id)
        if runtime is None:
            return
        if runtime.stopping is not None:
            self._advance_stop(runtime)
            return
        if runtime.pending is not None:  # the last decision is not carried out yet
            pending, runtime.pending = runtime.pending, None
            self._kicked.discard(task_id)
            pending()
            return
        try:
            self._decide_and_apply(runtime)
        except TmuxError as exc:
            log.error("%s: check cut short: %s; looked at again in %g s", task_id, exc,
                      runtime.policy.base_interval)  # fmt: skip
            if task_id in self.live and runtime.stopping is None:
                self._schedule_check(runtime, runtime.policy.base_interval)

    def _sessions(self, max_age: float = SESSIONS_MAX_AGE) -> dict[str, PaneInfo]:
        """Live tmux sessions by name: one ``list-panes -a`` shared by all checks of a tick."""
        cached = self._sessions_cache
        if cached is None or time.monotonic() - cached[0] > max_age:
            cached = (time.monotonic(), self.tmux.panes())
            self._sessions_cache = cached
        return cached[1]

    def _decide_and_apply(self, runtime: Runtime) -> None:
        task, pol = runtime.task, runtime.policy
        self.stats["checks"] += 1
        self._kicked.discard(task.task_id)
        disk_full = self.disk.full()
        if self.disk.take_cleared():
            self._repipe_live()
        rotated = task.rotate_output(pol.max_log_bytes, pol.log_backups)
        if rotated and task.task_id in self._sessions():
            self.tmux.repipe(task.task_id, task.path)
        signals = observe(task)
        panes = self._sessions(max_age=SESSIONS_MAX_AGE if signals.agent_alive else 0.0)
        if not disk_full and not signals.done and self._restore_run_files(task, panes):
            signals = observe(task)
        signals = dataclasses.replace(
            signals,
            stop_requested="stop" in runtime.requests,
            resume_requested="resume" in runtime.requests,
            approve_requested="approve" in runtime.requests,
            deny_requested="deny" in runtime.requests,
            # A dead agent's verdict (crash, or tmux lost) needs a fresh look at tmux.
            session_alive=task.task_id in panes,
            has_acceptance=runtime.resolved.acceptance is not None,
            acceptance_running=runtime.accepting,
            state_disk_full=disk_full,
        )
        if runtime.state.status == "verifying" and not runtime.accepting:
            accepted = acceptance.read(task)
            if accepted is not None:
                signals = dataclasses.replace(signals, acceptance=bool(accepted.get("passed")))
        if runtime.agent is not None:
            signals = self._agent_signals(runtime, signals)
        if not disk_full:  # a held decision keeps the operator's requests for later
            runtime.requests.clear()
        decision = policy.decide(runtime.state, signals, runtime.policy)
        if policy.Action.FINISH in decision.actions and self._tail_pending(task, signals.now):
            # The agent's last lines are still on their way through tmux and sed: look
            # again in a moment instead of blocking the engine's one worker thread.
            self._schedule_check(runtime, TAIL_POLL)
            return
        self._apply(runtime, decision, signals.now)
        recheck = runtime.agent.recheck_in() if runtime.agent is not None else None
        if recheck is not None and task.task_id in self.live and runtime.stopping is None:
            self._schedule_check(runtime, recheck)  # e.g. a dialog seen once

    def _restore_run_files(self, task: TaskDir, panes: dict[str, PaneInfo]) -> bool:
        """Write the wrapper files a full disk sent to tmux (:func:`statefs.restore_run_files`)."""
        try:
            return statefs.restore_run_files(task, panes.get(task.task_id))
        except OSError as exc:
            log.warning("%s: cannot write the run files kept in tmux yet: %s", task.task_id, exc)
            return False

    def _repipe_live(self) -> None:
        """Re-attach every live pane's capture after the disk was full (its ``sed`` exited
        on the first write that failed, and tmux does not restart it)."""
        sessions = self._sessions(max_age=0.0)
        for task_id, runtime in self.live.items():
            if task_id in sessions:
                self.tmux.repipe(task_id, runtime.task.path)

    def _agent_signals(self, runtime: Runtime, signals: policy.Signals) -> policy.Signals:
        """Add what the agent told its adapter (:meth:`AgentAdapter.observe`) and the
        staleness signal it chose."""
        assert runtime.agent is not None
        session = runtime.task.task_id
        screen = (lambda: self.tmux.capture(session, lines=0)) if signals.agent_alive else None
        view = runtime.agent.observe(signals.now, runtime.state.status, screen)
        mtime = view.output_mtime if view.output_mtime is not None else signals.output_mtime
        return dataclasses.replace(
            signals,
            output_mtime=mtime,
            escalate=view.escalate,
            escalate_pause=view.escalate_pause,
            limit=view.limit,
            limit_resume_at=view.limit_resume_at,
            limit_reason=view.limit_reason,
            turn_ended=view.turn_ended,
            failure=view.failure or signals.failure,
        )

    def _apply(self, runtime: Runtime, decision: policy.Decision, now: float) -> None:
        """Perform a decision. Order, chosen so a crash of ``supervise`` loses nothing:

        1. events are appended (the write-ahead record; a terminal event is never written
           twice, and ``retry_count`` is reconciled with ``resumed`` events on adoption);
        2. the actions run (stop, resume, cleanup);
        3. the manifest is replaced atomically. If that write fails (disk full, read-only)
           the error is logged, the old manifest stays intact, and the next check retries.
        """
        task = runtime.task
        previous = runtime.state
        A = policy.Action
        events = task.events() if decision.state.status in TERMINAL else []
        state = policy.logged_ending(decision.state, events)
        if A.RESUME in decision.actions and not self._prepare_resume(runtime, previous):
            return
        runtime.state = state
        finished = A.FINISH in decision.actions
        exit_code = state.exit_code if state.exit_code is not None else task.read_int("exit_code")
        done_at = task.done_mtime()
        finished_at = utc_iso(done_at if done_at is not None and state.status != "abandoned"
                              else now) if finished else None  # fmt: skip
        tail = task.output_tail() if finished else None
        already = {e.get("event") for e in events}
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
                    exit_code=exit_code if finished else None,
                    abandon_reason=state.abandon_reason,
                    # the terminal record is final: repair.rebuild restores a lost manifest
                    # from it, and policy.logged_ending a decision taken again
                    **({"verdict": state.verdict} if finished else {}),
                )
        except OSError as exc:
            # No action without its write-ahead record: the decision is taken again, whole,
            # at the next check (a full disk is held by the policy before it gets here).
            log.error("%s: cannot append to %s: %s; decision held", task.task_id,
                      task.file("events.jsonl"), exc)  # fmt: skip
            runtime.state = previous
            self._schedule_check(runtime, runtime.policy.base_interval)
            return
        applied = _Applied(previous, state, finished, exit_code, finished_at, tail)
        self._perform(runtime, decision, now, applied, decision.actions)

    def _perform(
        self,
        runtime: Runtime,
        decision: policy.Decision,
        now: float,
        applied: _Applied,
        actions: tuple[policy.Action, ...],
    ) -> None:
        """Carry out ``actions`` in order, then :meth:`_conclude` (the manifest write).

        A stop that does not end at once keeps the rest (later actions, the manifest) on
        the runtime; :meth:`_advance_stop` runs it once the agent's process group is gone.
        tmux not answering is a logged fault: the rest, from the action that met it, is
        kept in ``runtime.pending`` and tried again at the next check (no new decision
        before this one is carried out).
        """
        task = runtime.task
        A = policy.Action
        index = 0
        try:
            for index, action in enumerate(actions):
                if action is A.STOP_AGENT:
                    rest = actions[index + 1 :]
                    then = functools.partial(self._perform, runtime, decision, now, applied, rest)
                    if self._stop_agent(runtime, then):
                        return
                elif action is A.RESUME:
                    self.stats["resumed"] += 1
                    self._resume(runtime, launch_written=True)
                elif action is A.CLEANUP:
                    self._sweep(runtime, self.tmux.close(task.task_id))
                    self._sessions_cache = None
                elif action is A.PAUSE_AGENT:
                    self._signal_agent(task, signal.SIGSTOP)
                elif action is A.CONTINUE_AGENT:
                    self._signal_agent(task, signal.SIGCONT)
                    if runtime.agent is not None:
                        runtime.agent.answer(approve=True)
                elif action in (A.ANSWER_APPROVE, A.ANSWER_DENY) and runtime.agent is not None:
                    runtime.agent.answer(approve=action is A.ANSWER_APPROVE)
                elif action is A.ACCEPT:
                    self._start_acceptance(runtime)
                elif action is A.END_SESSION and runtime.agent is not None:
                    for keys in runtime.agent.end_turn(now):
                        self.tmux.send_keys(task.task_id, *keys.keys, literal=keys.literal)
        except TmuxError as exc:
            retry = runtime.policy.base_interval
            log.error("%s: %s; '%s' carried on in %g s", task.task_id, exc, decision.reason,
                      retry)  # fmt: skip
            again = functools.partial(self._perform, runtime, decision, now, applied)
            runtime.pending = functools.partial(again, actions[index:])
            self._schedule_check(runtime, retry)
            return
        self._conclude(runtime, decision, now, applied)

    def _conclude(
        self, runtime: Runtime, decision: policy.Decision, now: float, applied: _Applied
    ) -> None:
        """Step 3 of :meth:`_apply`: write the manifest, notify, retire or schedule."""
        task, A = runtime.task, policy.Action
        previous, state, finished = applied.previous, applied.state, applied.finished
        exit_code, finished_at, tail = applied.exit_code, applied.finished_at, applied.tail
        ended_escalated = previous.status == "escalated" and state.status in TERMINAL
        if runtime.agent is not None and ended_escalated:
            runtime.agent.answer(approve=False)  # frees a waiting hook
        pid = task.read_int("pid")
        report = runtime.agent.report() if runtime.agent is not None else {}
        accepted = acceptance.read(task) if finished and runtime.resolved.acceptance else None
        summary = None
        if finished:
            result_text = runtime.agent.result_text() if runtime.agent is not None else None
            why = "" if state.status == "completed" else decision.reason
            summary = acceptance.summary(result_text, accepted, why)

        def change(m: Manifest) -> None:
            m.status = state.status  # type: ignore[assignment]
            m.retry_count = state.retry_count
            m.last_checked_at = utc_iso(now)
            if m.started_at is None and state.started_at is not None:  # a lost launch write
                m.started_at = utc_iso(state.started_at)
            m.pid = pid if pid is not None or A.RESUME in decision.actions else m.pid
            m.resume_at = utc_iso(state.resume_at) if state.resume_at else None
            if state.launched_at:
                m.launched_at = utc_iso(state.launched_at)
            for key, value in report.items():
                setattr(m, key, value)
            m.limit_waits = state.limit_waits
            m.transient_waits = state.transient_waits
            if finished:
                m.failure_reason = state.failure_reason  # type: ignore[assignment]
                m.finished_at = finished_at
                m.exit_code = exit_code
                m.signal = task.read_int("signal")
                m.output_tail = tail
                m.verdict = state.verdict  # type: ignore[assignment]
                m.summary = summary
                if accepted is not None:
                    m.acceptance = accepted
            if state.status == "abandoned":
                m.abandoned_at = utc_iso(now)
                m.abandon_reason = state.abandon_reason

        # A check that changed nothing but last_checked_at need not survive a power cut,
        # and is written at most every QUIET_WRITE seconds (200 agents with 1 s checks
        # would otherwise rewrite 200 manifests a second).
        quiet = not decision.events and not decision.actions and previous == state
        quiet = quiet and pid in (None, runtime.manifest.pid)  # a new run's PID is news
        # While the disk is full a held decision has nothing worth a write that must fail.
        held = self.disk.is_full and not decision.events and not decision.actions
        if held or (quiet and time.monotonic() - runtime.last_written < QUIET_WRITE):
            self._schedule_check(runtime, decision.next_check)
            return
        runtime.last_written = time.monotonic()
        try:
            runtime.manifest = task.update_manifest(
                change, durable=not quiet, fallback=runtime.manifest
            )
        except OSError as exc:
            log.error("%s: cannot write %s: %s; the previous manifest is intact",
                      task.task_id, task.file("manifest.json"), exc)  # fmt: skip
            if state.status in TERMINAL:  # keep watching so the final write is retried
                runtime.state = previous
                self._schedule_check(runtime, runtime.policy.base_interval)
                return
        if previous.status != state.status:
            log.info("%s: %s -> %s (%s)", task.task_id, previous.status, state.status,
                     decision.reason)  # fmt: skip
        if A.NOTIFY in decision.actions and runtime.policy.notifier:
            self._start_notifier(runtime, decision)
        if state.status in TERMINAL:
            self._retire(runtime)
        else:
            self._schedule_check(runtime, decision.next_check)

    def _start_notifier(self, runtime: Runtime, decision: policy.Decision) -> None:
        """Run the notifier on the notify pool for each of the decision's events it wants."""
        for event in decision.events:
            if event in runtime.policy.notify_on:
                self.scheduler.add_job(
                    self._notify,
                    executor="notify",
                    args=[runtime, runtime.manifest.model_copy(), event, decision.reason],
                )

    def _retire(self, runtime: Runtime) -> None:
        task_id = runtime.task.task_id
        self.live.pop(task_id, None)
        self.stats["finished"] += 1
        self._kicked.discard(task_id)
        if self.watcher is not None:
            self.watcher.forget_task(task_id)
        with contextlib.suppress(JobLookupError):
            self.scheduler.remove_job(f"check:{task_id}")
        self._fill_slots()

    def _notify(self, runtime: Runtime, manifest: Manifest, event_name: str, why: str) -> None:
        """Run the notifier for one event (on the notify pool; bounded by its timeout)."""
        event = {
            "event": event_name,
            "task_id": manifest.task_id,
            "task_name": manifest.task_name,
            "status": manifest.status,
            "reason": manifest.abandon_reason or why,
            "failure_reason": manifest.failure_reason,
            "exit_code": manifest.exit_code,
            "retry_count": manifest.retry_count,
            "task_dir": manifest.tmpdir,
            "session_id": manifest.session_id,
            "last_lines": "\n".join((manifest.output_tail or "").splitlines()[-10:]),
        }
        code = notify.run_notifier(
            runtime.policy.notifier, event, timeout=runtime.policy.notifier_timeout
        )
        runtime.task.append_event(
            "notified", status=manifest.status, notified_event=event_name, notifier_exit_code=code
        )

    # ------------------------------------------------------------------ actions
    @staticmethod
    def _tail_pending(task: TaskDir, now: float) -> bool:
        """True while the wrapper's end line has not reached ``output.log`` yet, for at most
        :data:`TAIL_SETTLE` seconds after the agent ended (then the tail is taken as is)."""
        ended = task.done_mtime()
        if ended is None:
            try:
                ended = task.file("exit_code").stat().st_mtime
            except FileNotFoundError:
                return False  # the wrapper did not end normally: no end line will come
        if now - ended >= TAIL_SETTLE:
            return False
        last = task.output_tail(lines=1).rstrip().splitlines()[-1:] or [""]
        return not last[0].startswith(END_MARK)

    def _start_acceptance(self, runtime: Runtime) -> None:
        """Run ``[acceptance]`` on the notify pool; its result file wakes the task's check."""
        spec = runtime.resolved.acceptance
        if spec is None or runtime.accepting:
            return
        runtime.accepting = True
        runtime.task.file(acceptance.RESULT).unlink(missing_ok=True)

        def body() -> None:
            try:
                result = acceptance.run(runtime.task, Path(runtime.manifest.project_dir), spec)
                runtime.task.append_event("acceptance", **result)
            except Exception:
                log.exception("%s: acceptance check failed to run", runtime.task.task_id)
            finally:
                runtime.accepting = False
                self._kicked.add(runtime.task.task_id)
                self._kick(f"check:{runtime.task.task_id}")

        self.scheduler.add_job(body, executor="notify")

    def _sweep(self, runtime: Runtime, session: int | None) -> None:
        """End whatever the task left running (its tmux pane's session members and every
        carrier of its ``SUPERVISE_TASK_DIR``, see :mod:`supervisor.processes`) on the
        notify pool: SIGTERM, then SIGKILL after STOP_TIMEOUT s, never on this worker."""
        task, started = runtime.task, runtime.state.started_at

        def body() -> None:
            found = processes.task_processes(task.path, [session] if session else [], started)
            if found:
                ended, killed = processes.reap(found, STOP_TIMEOUT)
                task.append_event("processes_ended", pids=ended, killed=killed)
                log.info("%s: ended %d leftover process(es) %s", task.task_id, len(ended), ended)

        self.scheduler.add_job(body, executor="notify")

    @staticmethod
    def _signal_agent(task: TaskDir, signum: int) -> None:
        """Send ``signum`` to the agent's process group (pause/continue an escalation)."""
        pid = task.read_int("pid")
        pgid = stopping.group_of(pid) if pid is not None else None
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signum)
            task.append_event("agent_signalled", pid=pid, signal=signal.Signals(signum).name)

    def _stop_agent(self, runtime: Runtime, then: Callable[[], None]) -> bool:
        """SIGTERM the agent's process group now (:func:`stopping.begin`).

        Returns False when it is already gone (or there was none): the caller goes on.
        True: the stop is in progress on ``runtime.stopping``; ``then`` runs from
        :meth:`_advance_stop` once the group is gone (SIGKILL after STOP_TIMEOUT s).
        """
        stop = stopping.begin(runtime.task.read_int("pid"), then)
        if stop is None:
            return False
        if stop.advance():
            self._record_stop(runtime.task, stop)
            return False
        runtime.stopping = stop
        self._schedule_check(runtime, stop.next_look())
        return True

    def _advance_stop(self, runtime: Runtime) -> None:
        """A check while the agent is being stopped: look at its process group; once it is
        gone, record ``agent_stopped`` and run the rest of the decision, else look again."""
        stop = runtime.stopping
        assert stop is not None
        self._kicked.discard(runtime.task.task_id)
        if not stop.advance():
            self._schedule_check(runtime, stop.next_look())
            return
        runtime.stopping = None
        self._record_stop(runtime.task, stop)
        stop.then()

    def _finish_stops(self) -> None:
        """At shutdown: see every stop in progress through (up to 2 x STOP_TIMEOUT s), so no
        agent is left half-stopped and each decision's manifest is written."""
        for runtime in list(self.live.values()):
            while runtime.stopping is not None:
                if runtime.stopping.advance():
                    self._advance_stop(runtime)
                else:
                    time.sleep(runtime.stopping.next_look())

    @staticmethod
    def _record_stop(task: TaskDir, stop: StopInProgress) -> None:
        try:
            task.append_event("agent_stopped", pid=stop.pid, killed=stop.killed)
        except OSError as exc:  # the stop happened; its record is informational
            log.error("%s: cannot record the agent's stop: %s", task.task_id, exc)

    def _prepare_resume(self, runtime: Runtime, previous: policy.TaskState) -> bool:
        """Write the resume's ``launch.json`` before the decision is recorded. If it cannot
        be written (a full disk, EIO), the decision is held: nothing recorded, no retry
        counted, the task unchanged and looked at again in ``base_interval`` seconds."""
        try:
            self._write_launch(runtime, resume=True)
            return True
        except OSError as exc:
            log.error("%s: cannot write %s: %s; the resume waits for the next check",
                      runtime.task.task_id, runtime.task.file("launch.json"), exc)  # fmt: skip
            runtime.state = previous
            self._schedule_check(runtime, runtime.policy.base_interval)
            return False

    def _resume(self, runtime: Runtime, launch_written: bool = False) -> None:
        task = runtime.task
        if not launch_written:
            self._write_launch(runtime, resume=True)
        task.clear_run_files()
        project = Path(runtime.manifest.project_dir)
        self._sessions_cache = None
        try:
            self.tmux.respawn(task.task_id, task.path, project)
        except TmuxTimeout as exc:  # tmux may yet carry it out: no second session now
            log.error("%s: cannot resume in tmux: %s", task.task_id, exc)
            return
        except TmuxError:
            try:  # the session (or the whole tmux server) is gone: start a new one
                self.tmux.launch(task.task_id, task.path, project)
            except TmuxError as exc:
                log.error("%s: cannot resume in tmux: %s", task.task_id, exc)
                return
        # No wait for the new agent's pid file here: its inotify event wakes a check, and
        # until it exists the policy counts the agent as starting (START_TIMEOUT).


def run_profile(profile: LoadedProfile, exit_when_idle: bool = False) -> int:
    """Convenience for the CLI: build an :class:`Engine` and run it."""
    return Engine(profile, exit_when_idle=exit_when_idle).run()
