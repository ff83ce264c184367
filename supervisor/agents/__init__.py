"""The agent-adapter boundary: what an agent kind adds to the supervision core.

The core (engine, policy, signals) never names an agent kind. Each ``[agent] kind`` is one
module or package here, ``supervisor.agents.<kind>``, whose ``Adapter`` class subclasses
:class:`AgentAdapter` and overrides the hooks its agent needs, the way a circus plugin or a
supervisord event listener plugs named hooks into a fixed loop. Adding a kind means adding
one folder and registering its :class:`supervisor.agents.kinds.Kind` (its settings, manifest
extension and view columns; a built-in kind is listed in :data:`supervisor.agents.kinds.BUILTIN`).

Hooks, in the order the engine calls them:

* :meth:`AgentAdapter.restore`: on creation, pick up the adapter's own manifest fields
  (after an engine restart the manifest is the one record of them).
* :meth:`AgentAdapter.launch`: at each launch and resume, the :class:`LaunchPart`: argv
  template, extra environment, the stream file; per-task files (Claude Code's hook
  settings) are written here. A new run starts: per-run facts are forgotten.
* :meth:`AgentAdapter.follow_up`: instead of :meth:`AgentAdapter.launch` for the first run
  of a follow-up's turn (``supervise continue``): the session goes on with a new prompt.
* :meth:`AgentAdapter.observe`: at each check, the agent's facts for
  :class:`supervisor.policy.Signals` as an :class:`AgentView`.
* :meth:`AgentAdapter.rule`: carry out the rulings on permission requests the last
  :meth:`AgentAdapter.observe` proposed, when the policy's decision holds
  ``RULE_REQUESTS`` (the task is ``running``).
* :meth:`AgentAdapter.recheck_in`: after the check, an earlier next look, if the agent
  wants one (a dialog seen once on screen must be seen again).
* :meth:`AgentAdapter.answer`: carry out an operator's ruling on an escalation
  (``supervise approve|deny``; a paused agent continued; an escalated task ending).
* :meth:`AgentAdapter.end_turn`: the keys that end an interactive session whose turn ended.
* :meth:`AgentAdapter.report` / :meth:`AgentAdapter.result_text`: the adapter's manifest
  fields, and the agent's final answer for the task summary; :meth:`AgentAdapter.unsaved`:
  whether the check must write them now.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from supervisor.agents import kinds

if TYPE_CHECKING:  # config and taskdir ask the registry (kinds) while they load: no cycle
    from supervisor.config import AgentSpec, ResolvedTask
    from supervisor.taskdir.folder import Manifest, TaskDir


@dataclass(frozen=True)
class LaunchPart:
    """What an adapter adds to ``launch.json`` for one run.

    Attributes:
        argv: the argv template; its ``{placeholder}`` elements are filled by the engine
            (``{prompt}``, ``{model}``, ``{session_id}``, ...; see ``config.AgentSpec``).
        env: environment variables the agent kind adds (the profile's and task's come on
            top of them, then the ``SUPERVISE_*`` ones).
        stream: name of a file in the task folder the wrapper copies the agent's stdout to
            (Claude Code's ``stream.jsonl``), or ``None``.
        stdin: a file the wrapper gives the agent as stdin (a prompt too long for argv),
            or ``None``: the pane's terminal.
        paste: a file the wrapper pastes into the agent's TUI once it is ready, with the
            screen patterns it waits for (``launch.json`` ``paste``, see
            :mod:`supervisor.wrapper`), or ``None``.
    """

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stream: str | None = None
    stdin: str | None = None
    paste: dict[str, object] | None = None


@dataclass(frozen=True)
class Keys:
    """One ``tmux send-keys`` call: key names (``Enter``, ``Escape``), or text when
    ``literal`` (``send-keys -l``)."""

    keys: tuple[str, ...]
    literal: bool = False


@dataclass(frozen=True)
class AgentView:
    """The agent's facts for one check (the fields of :class:`supervisor.policy.Signals`
    of the same names; see there). ``output_mtime`` (epoch s) replaces the output.log
    mtime as the staleness signal when the agent chose another one (screen, transcript,
    Claude Code's headless stream: :mod:`supervisor.agents.claude.streamfile`); ``None``
    keeps the output.log mtime. ``requests``: permission requests the agent waits
    on, each with a proposed ruling that :meth:`AgentAdapter.rule` carries out when the
    policy says so. ``spent_usd``: the task's spend so far (USD, all runs), ``None`` when
    the agent does not report one. ``turn_failure``: the error of an interactive turn that
    ended on an API failure while the agent lives on; ``agent_working``: the agent showed
    new evidence of work since the last check; ``tool_since``: when the oldest tool call in
    flight started (epoch s), ``None`` when none runs; ``tool_name``: its tool (issue 21)."""

    escalate: str | None = None
    escalate_pause: bool = False
    limit: bool = False
    limit_resume_at: float | None = None
    limit_reason: str = ""
    turn_ended: bool = False
    failure: str | None = None
    output_mtime: float | None = None
    requests: int = 0
    spent_usd: float | None = None
    turn_failure: str | None = None
    agent_working: bool = False
    tool_since: float | None = None
    tool_name: str | None = None


#: Captures the task's pane (visible text); called only when the agent runs.
ScreenCapture = Callable[[], str]
#: Sends keys to the task's pane.
SendKeys = Callable[[Keys], None]


@dataclass(frozen=True)
class AgentContext:
    """What an adapter is given about its task.

    Attributes:
        task: the task folder.
        resolved: the task (approval rules, monitor policy, prompt).
        agent: the profile's ``[agent]``.
        default_message: the ``[approval] default_message`` that applies to the task.
        send_keys: types into the task's tmux pane.
    """

    task: TaskDir
    resolved: ResolvedTask
    agent: AgentSpec
    default_message: str
    send_keys: SendKeys


class AgentAdapter:
    """The hooks an agent kind implements; every hook but :meth:`launch` has a default that
    adds nothing. One instance per non-terminal task, used on the engine's worker only."""

    #: The ``[agent] kind`` this adapter serves.
    kind: ClassVar[str] = ""
    #: Seconds between the heartbeats the agent prints on its own while it works (Claude
    #: Code's ``tool_progress``), ``None`` when it prints none: ``supervise validate`` warns
    #: when ``stale_threshold + grace_period`` is shorter (:func:`heartbeat_of`).
    heartbeat: ClassVar[float | None] = None

    def __init__(self, context: AgentContext) -> None:
        self.context = context

    def restore(self, manifest: Manifest) -> None:
        """Pick up the adapter's own manifest fields (on creation, adoption included)."""

    def launch(self, resume: bool) -> LaunchPart:
        """The launch part of a new run (``resume``: the same session goes on); writes
        the per-task files the run needs. Called once per launch and resume."""
        raise NotImplementedError

    def follow_up(self) -> LaunchPart:
        """The launch part of a follow-up's first run (``supervise continue``, issue 22):
        the same session goes on with the turn's prompt (``{prompt}``, ``{prompt_file}``).
        Default: the resume command, whose placeholders carry the new prompt."""
        return self.launch(True)

    def observe(self, now: float, status: str, screen: ScreenCapture | None) -> AgentView:
        """The agent's facts for this check.

        Args:
            now: epoch seconds of the check.
            status: the task's status before this check.
            screen: captures the pane; ``None`` when the agent is not alive.
        """
        return AgentView()

    def rule(self, now: float) -> None:
        """Carry out the rulings the last :meth:`observe` proposed (``AgentView.requests``),
        at ``now`` (epoch s)."""

    def recheck_in(self) -> float | None:
        """Seconds until the next check when the agent wants an earlier one, else ``None``."""
        return None

    def answer(self, approve: bool, by: str) -> None:
        """Carry out a ruling on the pending escalation, if any: ``by`` names who ruled
        (:class:`supervisor.audit.By`: ``operator`` only when a person asked)."""

    def unsaved(self) -> bool:
        """Whether a fact of :meth:`report` that a restarted engine needs (Claude Code's
        tool calls in flight) changed since the last call: the check then writes the
        manifest even when nothing else changed. Clears the mark."""
        return False

    def end_turn(self, now: float) -> list[Keys]:
        """The keys that end an interactive session whose turn ended (``[]``: none now)."""
        return []

    def report(self) -> dict[str, Any]:
        """The adapter's manifest fields (``Manifest`` attribute → value)."""
        return {}

    def result_text(self) -> str | None:
        """The agent's final answer of the run, for the task summary, if it gave one."""
        return None


def heartbeat_of(agent: AgentSpec) -> float | None:
    """The heartbeat of ``agent.kind`` in seconds (:attr:`kinds.Kind.heartbeat`, its
    :attr:`AgentAdapter.heartbeat`), for headless runs only
    (a TUI's timer is no output the monitor counts), else ``None``."""
    if agent.mode != "headless":
        return None
    return kinds.get(agent.kind).heartbeat  # the kind's copy: no adapter import


def adapter_for(
    agent: AgentSpec,
    task: TaskDir,
    resolved: ResolvedTask,
    manifest: Manifest,
    default_message: str,
    send_keys: SendKeys,
) -> AgentAdapter:
    """The adapter of ``agent.kind`` for one task, its manifest fields restored.

    The kind (validated against :mod:`supervisor.agents.kinds`) names its adapter class
    (:attr:`supervisor.agents.kinds.Kind.adapter`).
    """
    adapter: AgentAdapter = kinds.get(agent.kind).adapter()(
        AgentContext(task, resolved, agent, default_message, send_keys)
    )
    adapter.restore(manifest)
    return adapter
