"""What the engine holds in memory for one non-terminal task, and how it is read back from
its folder (``spec.json``, ``prompt``, ``manifest.json``).

A leaf of :mod:`supervisor.engine`: every other module of the package may import it, it
imports none of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from supervisor import policy
from supervisor.agents import AgentAdapter, Keys, adapter_for
from supervisor.config import LoadedProfile, MonitorPolicy, ResolvedTask, TaskSpec, resolve_task
from supervisor.config.approvalrules import default_message
from supervisor.engine import clock
from supervisor.engine.signals import RunView
from supervisor.engine.stopping import StopInProgress
from supervisor.policy.timebase import Seen
from supervisor.taskdir import layout
from supervisor.taskdir.folder import TURN_PROMPT, Manifest, TaskDir
from supervisor.taskdir.states import Status
from supervisor.tmux import Tmux
from supervisor.workspace import lifecycle


@dataclass(frozen=True)
class Outcome:
    """What performing (part of) a decision changed, for the scheduler to act on.

    ``next_check``: seconds until the task's next check (``None``: no new time);
    ``retired``: the task ended (no more checks, its slot is free); ``resumed``: its agent
    was resumed (counted in the engine's stats).
    """

    next_check: float | None = None
    retired: bool = False
    resumed: bool = False


@dataclass
class Runtime:
    """What the engine holds in memory for one non-terminal task."""

    task: TaskDir
    resolved: ResolvedTask
    state: policy.TaskState
    manifest: Manifest
    requests: set[str] = field(default_factory=set)
    agent: AgentAdapter | None = None  # the [agent] kind's hooks (supervisor.agents)
    accepting: bool = False  # the acceptance check runs on the background pool
    stopping: StopInProgress | None = None  # its agent is being stopped (no decision meanwhile)
    pending: Callable[[], Outcome] | None = None  # a decision's rest, to retry (tmux silent)
    launching: bool = False  # its launch runs on the launch thread (engine/starts.py)
    preparing: bool = False  # its worktree is being made on the background pool (queued)
    finishing: bool = False  # its worktree is being committed before the manifest's ending
    # The engine clock's offset its remembered times were taken with (engine/clock.py):
    # a step since moves them at the next check (clock.rebase).
    clock_offset: float = field(default_factory=lambda: clock.CLOCK.offset)
    output_seen: Seen | None = None  # when the engine saw its output change (clock.output_seen)
    restart_step: float = 0.0  # the clock step found when it was adopted (seconds)
    # Its run files as last read and its agent's process, kept between checks (signals.py).
    run: RunView = field(default_factory=RunView)

    @property
    def policy(self) -> MonitorPolicy:
        return self.resolved.policy

    @property
    def workdir(self) -> Path:
        """The agent's working directory: its worktree (the same sub-folder of it when
        ``project_dir`` is below its repository's top), or ``project_dir`` when shared."""
        return lifecycle.agent_dir(self.manifest.workspace, self.manifest.project_dir)


def prompt_file(task: TaskDir) -> Path:
    """The file holding the prompt of the task's current turn: ``turn.prompt`` once a
    follow-up opened turn 2 or later (:mod:`supervisor.engine.followups`), else ``prompt``."""
    turn = task.file(TURN_PROMPT)
    return turn if turn.exists() else task.file(layout.PROMPT)


def reload(profile: LoadedProfile, task: TaskDir) -> ResolvedTask:
    """The task as validated at claim time (``spec.json``), with the prompt of its current
    turn (:func:`prompt_file`).

    Raises:
        OSError: a file of the task folder cannot be read.
        ValueError: ``spec.json`` is not a valid spec (pydantic's ValidationError).
        ConfigError: the spec no longer resolves against the profile.
    """
    spec = TaskSpec.model_validate_json(task.file(layout.SPEC).read_bytes())
    spec.prompt, spec.prompt_file = "-", None
    resolved = resolve_task(spec, profile, task.path, task.file(layout.SPEC))
    prompt = prompt_file(task).read_bytes().decode("utf-8", errors="replace")
    return dataclasses.replace(resolved, prompt=prompt)


def build(
    profile: LoadedProfile,
    tmux: Tmux,
    task: TaskDir,
    resolved: ResolvedTask,
    state: policy.TaskState,
    manifest: Manifest,
) -> Runtime:
    """A task's runtime with its agent adapter (:func:`supervisor.agents.adapter_for`),
    whose keystrokes go to the task's tmux session."""
    runtime = Runtime(task, resolved, state, manifest)
    message, _ = default_message(profile.spec, resolved.spec)
    session = task.task_id

    def send_keys(keys: Keys) -> None:
        tmux.send_keys(session, *keys.keys, literal=keys.literal)

    runtime.agent = adapter_for(profile.spec.agent, task, resolved, manifest, message, send_keys)
    return runtime


def load_queued(profile: LoadedProfile, tmux: Tmux, task: TaskDir) -> Runtime:
    """A queued task's runtime, read back from its folder (queued tasks are kept on disk,
    not in memory, so a burst of thousands of files costs almost no RAM).

    Raises:
        OSError, ValueError, ConfigError: as :func:`reload`, or an unreadable manifest.
    """
    manifest = task.read_manifest()
    state = policy.TaskState(status=Status.QUEUED)
    return build(profile, tmux, task, reload(profile, task), state, manifest)
