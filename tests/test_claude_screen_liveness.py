"""Issue 21, "Interactive screen": liveness of the real Claude Code TUI (pinned 2.1.328) judged
from its screen (``stale_signal = "screen"``, the interactive default), against the mock API.

A Bash tool that runs longer than ``stale_threshold + grace_period`` shows its own advancing
timer (``● … · 16s``, ``⎿  $ cmd (16s)``): it is progress, so the task is never ``hung``.
An API stall shows only the turning spinner and the status line's timer: it is still
``hung`` and resumed by its session id. Both with the hooks on and off: the screen evidence
(:mod:`supervisor.agents.claude.evidence`) holds without any hook.

Without hooks nothing tells the engine that the TUI's turn ended (that is the ``Stop``
hook), so the ``hooks = false`` cases check the run up to the tool's result and the resumed
request, then stop the task.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.claude_harness import Harness
from support.claude_matrix import assert_resumed_by_id, kinds, outcome, report
from support.claude_support import REPO_ROOT, agent_env, stop_mock
from support.mock_anthropic import MockAnthropic
from support.mock_drip import DripMock

pytestmark = pytest.mark.e2e

SHORT = {"stale_threshold": 15, "grace_period": 5, "max_retries": 2}
"""Monitor values of the CI cases: a tool of 45 s outlasts stale + grace (20 s) twice over."""

SLEEPER = "import sys, time\ntime.sleep(float(sys.argv[1]))\nopen('slept.txt', 'w').write('done')\n"
"""A tool that works in silence. Run as ``python3 sleeper.py S`` (one command: a rule never
approves a chained one, and Claude Code 2.1.328 blocks a standalone ``sleep 60``)."""

BASH_TIMEOUT_MS = 600_000
"""Claude Code's Bash tool ends a command after 2 minutes unless the call sets a ``timeout``
(the mock's calls do not) or ``BASH_DEFAULT_TIMEOUT_MS`` raises it (measured: a command of
200 s got its ``PostToolUse`` at 120 s). 10 minutes is the tool's own maximum."""

APPROVE = {"rules": [{"tool": "Bash", "action": "approve"}, {"tool": "Write", "action": "approve"}]}

FINISH_TIMEOUT = 150.0
"""Seconds ``supervise run --exit-when-idle`` may take (the tool alone runs 45 s)."""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    """Make a :class:`Harness` on a :class:`DripMock`; cleans up every part."""
    made: list[tuple[Harness, MockAnthropic]] = []

    def make(**mock_args: Any) -> Harness:
        mock = DripMock(**mock_args).start()
        h = Harness(tmp_path, mock)
        h.cli_retries = 1
        made.append((h, mock))
        return h

    yield make
    for h, mock in made:
        h.close()
        stop_mock(mock)


def _interactive(h: Harness, hooks: bool, monitor: dict[str, Any]) -> Path:
    project = h.project()
    (project / "sleeper.py").write_text(SLEEPER, encoding="utf-8")
    env = agent_env(h.home, h.mock.base_url, max_retries=h.cli_retries)
    env["BASH_DEFAULT_TIMEOUT_MS"] = str(BASH_TIMEOUT_MS)
    agent = {"mode": "interactive", "hooks": hooks, "env": env}
    h.write_profile(agent=agent, monitor=monitor, approval=APPROVE)
    return project


def _answered_tool(h: Harness) -> bool:
    """The mock got the request that carries the tool's result (the final answer's)."""
    return any(r.reply_kind == "final" for r in h.mock.message_requests() if r.offers_tools)


def _stop(h: Harness, name: str) -> dict[str, Any]:
    done = h.cli("stop", "-c", str(h.profile), h.manifests()[name]["task_id"])
    assert done.returncode == 0, done.stdout + done.stderr
    h.finish(FINISH_TIMEOUT)
    return h.manifests()[name]


def _tool_run(h: Harness, hooks: bool, seconds: float, monitor: dict[str, Any]) -> None:
    """One interactive task whose Bash tool runs ``seconds``: never ``hung``, retry 0."""
    project = _interactive(h, hooks, monitor)
    h.submit("tool", f"[[bash: python3 sleeper.py {seconds:g}]] run the slow tool", project)
    h.start()
    h.wait_for("the tool's result", lambda: _answered_tool(h), timeout=seconds + 120)
    assert (project / "slept.txt").exists(), h.diagnostics()
    if hooks:
        h.finish(FINISH_TIMEOUT)  # the Stop hook ends the turn: the task completes
    m = h.manifests()["tool"] if hooks else _stop(h, "tool")
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "tool")
    assert "hung" not in kinds(h, "tool"), info
    assert m["retry_count"] == 0, info
    if hooks:
        assert outcome(m) == ("completed", "PASS", 0), info
    else:
        assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped"), info


@pytest.mark.parametrize("hooks", [True, False], ids=["hooks", "no_hooks"])
def test_interactive_tool_longer_than_stale_and_grace_is_not_hung(world, hooks: bool) -> None:
    """A Bash tool of 45 s with stale 15 + grace 5: its timer on screen is progress."""
    _tool_run(world(final_text="slept"), hooks, 45, SHORT)


@pytest.mark.parametrize("hooks", [True, False], ids=["hooks", "no_hooks"])
def test_interactive_api_stall_is_still_hung_then_resumed_by_id(world, hooks: bool) -> None:
    """The stream starts and goes silent: spinner and timer turn, the token counter stands,
    so the screen is stale, the task ``hung`` and resumed with ``--resume <its id>``."""
    h = world(final_text="done after the stall")
    project = _interactive(h, hooks, SHORT)
    h.submit("stall", "[[stall_stream: 1]] write hello.txt", project)
    h.start()
    if hooks:
        h.finish(FINISH_TIMEOUT)
        m = h.manifests()["stall"]
    else:
        h.wait_for("the resumed request", lambda: _answered_tool(h), timeout=FINISH_TIMEOUT)
        m = _stop(h, "stall")
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "stall")
    events = kinds(h, "stall")
    assert events.index("hung") < events.index("resumed"), events
    assert m["retry_count"] == 1, info
    if hooks:
        assert outcome(m) == ("completed", "PASS", 1), info
    assert (project / "hello.txt").exists(), info
    assert_resumed_by_id(h, m, info)


def test_interactive_tool_input_streaming_longer_than_stale_and_grace_is_not_hung(world) -> None:
    """A Write whose input streams for 30 s (after 30 s of its text) shows nothing on
    screen but a growing token counter (``↓ 3.5k tokens``): that is progress, even without
    hooks."""
    h = world(final_text="written")
    project = _interactive(h, False, SHORT)
    text = " ".join(f"line{i} of the report" for i in range(300))
    h.submit("drip", f"[[drip: 60]] [[write: big.txt | {text}]] write it", project)
    h.start()
    h.wait_for("the Write's result", lambda: _answered_tool(h), timeout=FINISH_TIMEOUT)
    m = _stop(h, "drip")
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "drip")
    assert (project / "big.txt").exists(), info
    assert "hung" not in kinds(h, "drip") and m["retry_count"] == 0, info


def _long_monitor() -> dict[str, Any]:
    """The shipped ``profiles/long.toml`` monitor values but the notifier (stale 90, grace 30)."""
    data = tomllib.loads((REPO_ROOT / "profiles" / "long.toml").read_text(encoding="utf-8"))
    keys = ("base_interval", "max_interval", "deadline", "grace_period", "max_retries")
    monitor = {k: data["monitor"][k] for k in keys}
    monitor["stale_threshold"] = data["monitor"].get("stale_threshold", 90)
    return monitor


@pytest.mark.skipif(
    os.environ.get("SUPERVISE_LONG_E2E") != "1",
    reason="long real-CLI run; SUPERVISE_LONG_E2E=1 runs it",
)
@pytest.mark.parametrize("hooks", [True, False], ids=["hooks", "no_hooks"])
def test_interactive_bash_of_200_s_with_long_profile_is_not_hung(world, hooks: bool) -> None:
    """Issue 21, "Must show": with long.toml's values a Bash tool of 200 s ends with retry 0
    and no ``hung`` (it was judged hung 150 s into the tool before)."""
    _tool_run(world(final_text="slept"), hooks, 200, _long_monitor())
