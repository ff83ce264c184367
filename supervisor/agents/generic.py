"""``[agent] kind = "generic"``: any command, run from the profile's argv templates.

``command`` starts a run and ``resume_command`` (``command`` when absent) resumes one; both
are argv lists whose ``{placeholder}`` elements the engine fills (``config.AgentSpec``).
The agent tells supervise nothing beyond its process, its output and its done-file, so
every other hook keeps the default of :class:`supervisor.agents.AgentAdapter`.
"""

from __future__ import annotations

from supervisor.agents import AgentAdapter, LaunchPart


class Adapter(AgentAdapter):
    """Argv templates only."""

    kind = "generic"

    def launch(self, resume: bool) -> LaunchPart:
        """``resume_command`` on a resume when given, else ``command``."""
        agent = self.context.agent
        assert agent.command is not None  # AgentSpec's validator
        template = agent.resume_command if resume and agent.resume_command else agent.command
        return LaunchPart(argv=list(template))
