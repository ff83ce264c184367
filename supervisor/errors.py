"""The exception root and the errors shared by the CLI and the library, in a module with no
heavy imports (the CLI imports it at start-up; pydantic is loaded only by the commands that
need it).

Every exception class defined in ``supervisor/`` derives from :class:`SuperviseError`
(``tests/test_cli_wing.py`` holds the rule); one that code also catches as a built-in
(``OSError``, ``RuntimeError``, ``ValueError``, ``LookupError``) keeps that base as well.
"""

from __future__ import annotations


class SuperviseError(Exception):
    """The root of every error ``supervise`` raises on purpose: ``except SuperviseError``
    catches each of them and nothing from Python or a library."""


class ConfigError(SuperviseError):
    """Bad profile or task input.

    Attributes:
        problems: one human-readable line per problem, each starting with ``FILE:LINE:``
            (or ``FILE:`` when no line is known, or ``env MONITOR_X:`` for env overrides).
    """

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
