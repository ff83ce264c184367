"""``supervise validate``'s warning when output may stay silent for longer than the monitor
allows between two of the agent's own heartbeats (issue 21).

While a tool runs, Claude Code in ``-p`` mode prints a ``tool_progress`` line every 30 s
and nothing else (:data:`supervisor.agents.claude.tools.HEARTBEAT`, measured with CLI
2.1.328); each agent kind names its interval once, as ``AgentAdapter.heartbeat``
(:func:`supervisor.agents.heartbeat_of`). With ``stale_threshold + grace_period`` shorter
than that, a stretch between two heartbeats is judged hung unless other evidence (a tool in
flight reported by the hooks, for up to ``tool_budget``) covers it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor.errors import ConfigError
from supervisor.terminal import escape_controls

if TYPE_CHECKING:  # imported when used: ``supervise`` imports this module at start
    from supervisor.config import AgentSpec, LoadedProfile, MonitorPolicy

#: The keys whose sum is the longest silence a run survives.
KEYS = ("stale_threshold", "grace_period")


def warning(
    where: Path | str, agent: AgentSpec, policy: MonitorPolicy, sources: dict[str, str]
) -> str | None:
    """One ``warning: FILE: ...`` line naming the keys, their values (seconds), where they
    came from and the fix, or ``None`` when the silence allowed covers the heartbeat (or the
    agent has none)."""
    from supervisor.agents import heartbeat_of

    beat = heartbeat_of(agent)
    if beat is None:
        return None
    stale, grace = policy.stale_after, policy.grace_period
    if stale + grace >= beat:
        return None
    origin = ", ".join(f"{key} from {sources.get(key, 'default')}" for key in KEYS)
    return escape_controls(
        f"warning: {where}: [monitor] stale_threshold ({stale:g} s) + grace_period "
        f"({grace:g} s) = {stale + grace:g} s is shorter than the {beat:g} s between the "
        f"heartbeats a headless {agent.kind} agent prints while a tool runs ({origin}); a "
        f"tool in flight counts as work only for tool_budget ({policy.tool_budget:g} s), "
        f"after which the gap between two heartbeats is judged hung. Fix: set "
        f"stale_threshold + grace_period to at least {beat:g} (e.g. "
        f"{_example(max(beat - grace, 0.1), sources)})"
    )


def _example(stale: float, sources: dict[str, str]) -> str:
    """The fix written where the value came from: the ``MONITOR_*`` variable when the
    environment set ``stale_threshold``, else the TOML key."""
    if sources.get("stale_threshold") == "env":
        return f"MONITOR_STALE_THRESHOLD={stale:g}"
    return f"stale_threshold = {stale:g}"


def check(profile: LoadedProfile) -> list[str]:
    """:func:`warning` for a profile's own ``[monitor]`` (with the ``MONITOR_*``
    environment); ``[]`` when none applies or the policy cannot be built (its error is
    reported elsewhere)."""
    from supervisor.config.loading import effective_policy

    try:
        policy, sources = effective_policy(profile.spec.monitor)
    except ConfigError:
        return []
    found = warning(profile.path, profile.spec.agent, policy, sources)
    return [found] if found else []


def task_warning(task_file: Path | str, resolved: Any, profile: LoadedProfile | None) -> str | None:
    """:func:`warning` for a task file whose own ``[monitor]`` sets one of :data:`KEYS`
    (the profile's values are warned about with the profile); ``None`` without a profile."""
    if profile is None or not any(resolved.sources.get(key) == "task" for key in KEYS):
        return None
    return warning(task_file, profile.spec.agent, resolved.policy, resolved.sources)
