"""The recovery matrix of the real-CLI tests (moved from tests/test_claude_recovery.py): the
``matrix`` fixture and the readers of its outcome."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.claude_harness import Harness
from support.claude_support import start_mock, stop_mock
from support.mock_anthropic import MockAnthropic

FINISH_TIMEOUT = 90.0
"""Seconds a case's ``supervise run --exit-when-idle`` may take after the last action."""


@pytest.fixture
def matrix(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    """Make a :class:`Harness` whose CLI retries an API error once; cleans up every part."""
    made: list[tuple[Harness, MockAnthropic]] = []

    def make(**mock_args: Any) -> Harness:
        mock = start_mock(**mock_args)
        h = Harness(tmp_path, mock)
        h.cli_retries = 1
        made.append((h, mock))
        return h

    yield make
    for h, mock in made:
        h.close()
        stop_mock(mock)


def outcome(m: dict[str, Any]) -> tuple[Any, Any, Any]:
    return (m["status"], m["verdict"], m["retry_count"])


def kinds(h: Harness, name: str) -> list[str]:
    return [e["event"] for e in h.events(name)]


def launch_argv(m: dict[str, Any]) -> list[str]:
    """The argv of the task's last run (the wrapper's ``launch.json``)."""
    data = json.loads((Path(m["tmpdir"]) / "launch.json").read_text(encoding="utf-8"))
    return list(data["argv"])


def assert_resumed_by_id(h: Harness, m: dict[str, Any], info: str) -> None:
    """The last run continued the task's own session: ``--resume ID`` in its argv, and every
    main request the mock saw came with that session id."""
    argv = launch_argv(m)
    assert "--resume" in argv and argv[argv.index("--resume") + 1] == m["session_id"], argv
    assert "--session-id" not in argv, argv
    seen = {r.session_id for r in h.mock.message_requests() if r.offers_tools}
    assert seen == {m["session_id"]}, (seen, info)


def report(h: Harness, name: str) -> None:
    m = h.manifests()[name]
    print(f"\n{name}: status={m['status']} verdict={m['verdict']} "
          f"retry_count={m['retry_count']} failure_reason={m.get('failure_reason')} "
          f"events={kinds(h, name)}")  # fmt: skip
