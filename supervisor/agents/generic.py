"""``[agent] kind = "generic"``: any command, run from the profile's argv templates.

``command`` starts a run and ``resume_command`` (``command`` when absent) resumes one; both
are argv lists whose ``{placeholder}`` elements the engine fills (``config.AgentSpec``).
The agent tells supervise nothing beyond its process, its output and its done-file, so
every other hook keeps the default of :class:`supervisor.agents.AgentAdapter`.
"""

from __future__ import annotations

from typing import Any

from supervisor.agents import AgentAdapter, LaunchPart, kinds


class Adapter(AgentAdapter):
    """Argv templates only."""

    kind = "generic"

    def launch(self, resume: bool) -> LaunchPart:
        """``resume_command`` on a resume when given, else ``command``."""
        agent = self.context.agent
        assert agent.command is not None  # AgentSpec's validator
        template = agent.resume_command if resume and agent.resume_command else agent.command
        return LaunchPart(argv=list(template))


def check(agent: Any) -> None:
    """The ``[agent]`` rules of ``kind = "generic"`` (an ``AgentSpec``): ``command`` is
    required and ``mode`` stays headless. Raises ``ValueError``."""
    if agent.command is None:
        raise ValueError(
            "kind 'generic' needs 'command' (an argv list); or set kind = \"claude\" "
            "to let supervise build the Claude Code command line"
        )
    if agent.mode == "interactive":
        raise ValueError("mode 'interactive' needs kind = \"claude\"")


KIND = kinds.register(kinds.Kind(name="generic", adapter=lambda: Adapter, check=check))
