"""Starting an agent: argv values, ``launch.json`` (a :class:`LaunchSpec`), and creating or
respawning the task's tmux session.

The wrapper (:mod:`supervisor.wrapper`) reads ``launch.json`` inside the pane and runs the
agent; this module only writes it and asks tmux for the pane. It returns what happened
(:class:`Started`) and records :func:`supervisor.policy.launched`'s decision; the scheduler
decides what follows.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from supervisor import accounts, policy
from supervisor.config import LoadedProfile
from supervisor.config.argv import expand_placeholders
from supervisor.config.fence import host_fence
from supervisor.engine import clock, projection, turnmark
from supervisor.engine import runtime as runtimes
from supervisor.engine.panes import Sessions
from supervisor.engine.runtime import Runtime
from supervisor.taskdir import layout, repair
from supervisor.taskdir.folder import Manifest, TaskDir, atomic_write
from supervisor.tmux import Tmux, TmuxError, TmuxTimeout

log = logging.getLogger("supervise.engine")

#: ``{placeholder}`` expansion of the agent's argv (one definition, with the notifier's).
expand_argv = expand_placeholders


@dataclass(frozen=True)
class LaunchSpec:
    """The content of a task's ``launch.json``, read by the wrapper in the pane.

    ``argv`` is expanded, ``env`` goes on top of the supervisor's own environment, ``cwd``
    is the agent's working directory (:attr:`Runtime.workdir`: the task's worktree, or the
    project dir when shared), ``resume_exit_codes`` are the exit codes the wrapper reports as a
    resumable stop, ``stream`` (optional) names the file in the task folder the wrapper
    copies the agent's stdout to, ``lease`` (a fleet task only) what the wrapper fences
    the agent by (:func:`lease_for`), ``stdin`` and ``paste``
    how a prompt too long for argv reaches the agent (:class:`supervisor.agents.LaunchPart`).
    ``account`` is the fingerprint of the credentials this environment gives the agent
    (:func:`supervisor.accounts.of_task` over the engine's environment with ``env`` on
    top); it is not written to ``launch.json`` (:func:`record_account` keeps it in the
    manifest).
    """

    argv: list[str]
    env: dict[str, str]
    cwd: str
    resume_exit_codes: list[int]
    stream: str | None = None
    lease: dict[str, object] | None = None
    stdin: str | None = None
    paste: dict[str, object] | None = None
    account: str | None = None

    def to_json(self) -> bytes:
        """UTF-8 JSON, one key per line; ``stream`` only when the agent has one."""
        data: dict[str, object] = {
            "argv": self.argv,
            "env": self.env,
            "cwd": self.cwd,
            "resume_exit_codes": self.resume_exit_codes,
        }
        if self.stream:
            data["stream"] = self.stream
        if self.lease:
            data["lease"] = self.lease
        if self.stdin:
            data["stdin"] = self.stdin
        if self.paste:
            data["paste"] = self.paste
        return json.dumps(data, ensure_ascii=False, indent=1).encode()


def argv_values(profile: LoadedProfile, runtime: Runtime) -> dict[str, str]:
    """The values of the ``{placeholder}`` names an argv template may use.

    ``{project_dir}`` is the folder the agent works in (:attr:`Runtime.workdir`): its
    worktree in ``worktree`` mode, so an agent told where to work edits its own branch
    (the manifest's ``project_dir`` keeps the folder the task named)."""
    manifest = runtime.manifest
    return {
        "prompt": runtime.resolved.prompt,
        "prompt_file": str(runtimes.prompt_file(runtime.task)),  # the current turn's
        "model": runtime.resolved.model,
        "session_id": manifest.session_id,
        "project_dir": str(runtime.workdir),
        "task_id": manifest.task_id,
        "python": sys.executable,
        "profile_dir": str(profile.path.parent),
    }


def lease_for(profile: LoadedProfile, task_dir: Path) -> dict[str, object] | None:
    """``launch.json``'s ``lease`` for the task in ``task_dir`` (read by the wrapper, step 6
    of :mod:`supervisor.wrapper`): the lease file's path and the fence's ``expiry``,
    ``poll`` and ``grace`` seconds (:mod:`supervisor.config.fence`); ``None`` for a single
    host or a task not claimed from the fleet (no ``layout.CLUSTER_CLAIM`` record), which
    runs on while its engine restarts. The fleet's :class:`~supervisor.cluster.lease.
    LeaseKeeper` renews the file; the engine only names it, so it imports no fleet code."""
    spec = profile.spec.cluster
    if spec is None or not (task_dir / layout.CLUSTER_CLAIM).exists():
        return None
    fence = host_fence(spec)
    path = profile.state_dir / layout.CLUSTER_LEASE
    return {"path": str(path), "expiry": fence.lease, "poll": fence.poll, "grace": fence.grace}


def launch_spec(profile: LoadedProfile, runtime: Runtime, resume: bool) -> LaunchSpec:
    """What the wrapper runs for this task: the agent adapter's argv and env (a first run
    or a resume; the first run of a follow-up's turn continues the session with the turn's
    prompt), then the profile's ``[agent] env`` and the task's ``env`` on top. Its
    ``account`` is computed from that environment now, not taken from the claim: an engine
    restarted with another ``HOME``, ``CLAUDE_CONFIG_DIR`` or ``[agent] env`` launches
    with other credentials."""
    assert runtime.agent is not None  # set by runtime.build
    follow_up = not resume and runtime.manifest.turn > 1
    part = runtime.agent.follow_up() if follow_up else runtime.agent.launch(resume)
    env = {
        **part.env,
        **profile.spec.agent.env,
        **runtime.resolved.spec.env,
        "SUPERVISE_TASK_ID": runtime.manifest.task_id,
        "SUPERVISE_TASK_DIR": str(runtime.task.path),
        "SUPERVISE_SESSION_ID": runtime.manifest.session_id,
    }
    argv = expand_argv(part.argv, argv_values(profile, runtime))
    codes = list(runtime.policy.resume_exit_codes)
    lease = lease_for(profile, runtime.task.path)
    account = accounts.of_task(env, {})
    cwd = str(runtime.workdir)
    return LaunchSpec(
        argv, env, cwd, codes, part.stream or None, lease, part.stdin, part.paste, account
    )


def record_account(task: TaskDir, manifest: Manifest, account: str | None) -> Manifest:
    """Keep ``account`` (the credentials the task launches with now) in the task's
    manifest when it differs from the one recorded (at claim, or at an earlier launch), with
    one log line; returns the manifest as it is now. A failed write is logged and the
    recorded manifest returned (the next launch tries again)."""
    old = manifest.account
    if account is None or account == old:
        return manifest

    def change(m: Manifest) -> None:
        m.account = account

    try:
        new = task.update_manifest(change, fallback=manifest)
    except OSError as exc:
        log.error("%s: cannot record its account %s: %s", task.task_id, account, exc)
        return manifest
    log.warning(
        "%s: account %s -> %s: the credentials of its launch environment (the engine's, "
        "[agent] env, the task's env) changed since it was recorded; it launches with the "
        "new ones",
        task.task_id,
        old or "none",
        account,
    )
    return new


def write_launch(profile: LoadedProfile, runtime: Runtime, resume: bool) -> None:
    """Write the task's ``launch.json`` atomically, mode 0600 (it holds the prompt and env).

    No fsync: only the wrapper of the run it starts reads it, a power cut ends that run,
    and every launch and resume writes it again first (a resume after the cut too).

    Raises:
        OSError: the write failed (a full disk, EIO); the previous file is intact.
    """
    spec = launch_spec(profile, runtime, resume)
    runtime.manifest = record_account(runtime.task, runtime.manifest, spec.account)
    path = runtime.task.file(layout.LAUNCH)
    atomic_write(path, spec.to_json(), durable=False)
    os.chmod(path, 0o600)


@dataclass(frozen=True)
class Started:
    """What :func:`start` did: ``decision`` is :func:`supervisor.policy.launched`'s, taken at
    ``now`` (seconds since the epoch); ``error`` is why tmux refused the session (then the
    task failed to launch), else ``None`` (launched, or its existing session adopted)."""

    decision: policy.Decision
    now: float
    error: TmuxError | None = None


def start(
    profile: LoadedProfile,
    tmux: Tmux,
    sessions: Sessions,
    runtime: Runtime,
    watch: Callable[[Runtime], None],
) -> Started:
    """Start a queued task: write ``launch.json``, create its tmux session.

    ``watch`` is called with the runtime before the agent starts, so no file event of the
    new run is missed.

    Raises:
        OSError: ``launch.json`` cannot be written (ENOSPC, EDQUOT: the task stays queued).
    """
    task = runtime.task
    now, runtime.clock_offset = clock.reading()  # the engine's clock (engine/clock.py)
    started = policy.launched(runtime.state, now, runtime.policy)
    write_launch(profile, runtime, resume=False)
    runtime.run.clear(task)
    if runtime.manifest.turn > 1:
        _mark_turn(runtime)
    watch(runtime)
    try:
        tmux.launch(task.task_id, task.path, runtime.workdir)
    except TmuxTimeout:
        # tmux may still create the session: watch the task (the policy calls a session
        # that never shows up lost and resumes it), never start the agent twice.
        log.warning("%s: tmux did not answer while creating the session; watching it", task.task_id)
        sessions.forget()
    except TmuxError as exc:
        try:
            exists = task.task_id in tmux.panes()  # ours only (the owner mark)
        except TmuxError:
            exists = True  # cannot tell: watch it, as above
        if not exists:
            return Started(started, now, exc)
        # A session of this name exists: launched by an engine that died before recording
        # it. Watch it; never start the agent twice.
        log.warning("%s already has a session; adopting it", task.task_id)
        sessions.forget()
    return Started(started, now)


def _mark_turn(runtime: Runtime) -> None:
    """A follow-up's turn starts: its mark in ``output.log`` (:mod:`supervisor.engine.turnmark`);
    a failed write is logged and the turn runs unmarked."""
    task_id, turn = runtime.task.task_id, runtime.manifest.turn
    try:
        turnmark.mark_turn(runtime.task.path, turn, runtime.resolved.prompt)
    except OSError as exc:
        log.warning("%s: cannot mark turn %d in its output: %s", task_id, turn, exc)


def record_launch(runtime: Runtime, started: policy.Decision, now: float) -> None:
    """Perform :func:`supervisor.policy.launched`'s decision ``started``: its events (the
    write-ahead record, fsynced), then the manifest, without an fsync where the log restores
    it (:func:`supervisor.taskdir.repair.restorable`). A failed manifest write is logged;
    the next check writes it again."""
    task = runtime.task
    runtime.state = started.state
    change = projection.launched(started.state, now)
    # stamped with the manifest's started_at, so repair.rebuild restores it exactly
    for event in started.events:
        task.append_event(event, at=now, status=started.state.status, session_name=task.task_id)
    try:
        runtime.manifest = task.update_manifest(
            change, durable=repair.needs_fsync, fallback=runtime.manifest
        )
    except OSError as exc:
        log.error(
            "%s: cannot write %s: %s; the next check writes it again",
            task.task_id,
            task.file(layout.MANIFEST),
            exc,
        )


def respawn(
    profile: LoadedProfile,
    tmux: Tmux,
    sessions: Sessions,
    runtime: Runtime,
    launch_written: bool = False,
) -> None:
    """Resume a task: its ``launch.json`` for a resume (unless written already), then the
    agent again in its pane, or in a new session when the pane or the tmux server is gone.

    Raises:
        OSError: ``launch.json`` cannot be written (only when ``launch_written`` is false).
    """
    task = runtime.task
    if not launch_written:
        write_launch(profile, runtime, resume=True)
    runtime.run.clear(task)
    project = runtime.workdir
    sessions.forget()
    try:
        tmux.respawn(task.task_id, task.path, project)
    except TmuxTimeout as exc:  # tmux may yet carry it out: no second session now
        log.error("%s: cannot resume in tmux: %s", task.task_id, exc)
        return
    except TmuxError:
        try:  # the session (or the whole tmux server) is gone: start a new one
            tmux.launch(task.task_id, task.path, project)
        except TmuxError as exc:
            log.error("%s: cannot resume in tmux: %s", task.task_id, exc)
            return
    # No wait for the new agent's pid file here: its inotify event wakes a check, and
    # until it exists the policy counts the agent as starting (START_TIMEOUT).
