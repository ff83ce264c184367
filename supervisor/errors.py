"""Exceptions shared by the CLI and the library, in a module with no heavy imports (the CLI
imports it at start-up; pydantic is loaded only by the commands that need it)."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad profile or task input.

    Attributes:
        problems: one human-readable line per problem, each starting with ``FILE:LINE:``
            (or ``FILE:`` when no line is known, or ``env MONITOR_X:`` for env overrides).
    """

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
