"""The ``supervise`` command line: one module per verb group (:mod:`supervisor.cli.app`
builds the parser and dispatches). The entry point ``supervisor.cli:main`` stays light:
the verbs' modules load only when a verb runs.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Run ``supervise`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status
    (:mod:`supervisor.cli.app`)."""
    from supervisor.cli.app import main as run

    return run(argv)
