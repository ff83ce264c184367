"""Issue 21, streaming content: in headless mode a content block that streams is progress, a
stream of pings only is not (the real Claude Code CLI 2.1.328 in tmux, against the mock
Messages API; ``[[slow_write: NAME S]]`` and ``[[ping_stall: N]]`` are in
tests/support/mock_streaming.py).

With ``--include-partial-messages`` the CLI prints a ``stream_event`` line per content delta
as it arrives (tests/fixtures/claude/headless/partial-slow-write.jsonl), where it used to be
silent until the block ended; SSE pings come through as ``stream_event`` ``ping`` lines, at
most one per 10 s (partial-ping-stall.jsonl), and must not keep a stalled run fresh.
"""

from __future__ import annotations

import json
import os
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.claude_harness import Harness
from support.claude_matrix import (  # noqa: F401 - matrix is a fixture
    FINISH_TIMEOUT,
    assert_resumed_by_id,
    kinds,
    matrix,
    outcome,
    report,
)
from support.mock_streaming import slow_content

from supervisor.config import MonitorPolicy
from supervisor.streamcopy import FOLD, FOLD_EVERY

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Short thresholds for CI (issue 21): a block must stream longer than stale + grace.
SHORT = {"stale_threshold": 15, "grace_period": 5, "base_interval": 2, "max_retries": 2}
WRITE_APPROVED = {"rules": [{"tool": "Write", "action": "approve"}]}


def _long_toml_monitor() -> dict[str, Any]:
    """The shipped ``profiles/long.toml`` monitor values that judge liveness, with its
    stale threshold resolved (3 x ``base_interval`` when unset)."""
    data = tomllib.loads((REPO_ROOT / "profiles" / "long.toml").read_text(encoding="utf-8"))
    keys = ("base_interval", "max_interval", "grace_period", "stale_threshold", "max_retries")
    values = {k: v for k, v in data["monitor"].items() if k in keys}
    values["stale_threshold"] = MonitorPolicy(**values).stale_after
    return values


def _stream_lines(m: dict[str, Any]) -> list[dict[str, Any]]:
    path = Path(m["tmpdir"]) / "stream.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _event_at(h: Harness, name: str, event: str) -> float:
    [found] = [e for e in h.events(name) if e["event"] == event]
    return datetime.fromisoformat(found["ts"]).timestamp()


def _slow_write_completes(h: Harness, seconds: float, monitor: dict[str, Any]) -> None:
    """A task whose one Write block streams ``seconds`` ends completed/PASS, retry 0,
    neither stale nor hung; the pane's copy (output.log) holds no delta fragment."""
    project = h.project()
    h.write_profile(monitor={"deadline": seconds + 600, **monitor}, approval=WRITE_APPROVED)
    h.submit("slow", f"[[slow_write: big.txt {seconds:g}]] write the big file", project)
    h.start()
    h.finish(FINISH_TIMEOUT + seconds)
    m = h.manifests()["slow"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "slow")
    assert outcome(m) == ("completed", "PASS", 0), info
    events = kinds(h, "slow")
    assert "hung" not in events and "stale" not in events, events
    assert (project / "big.txt").read_text(encoding="utf-8") == slow_content(seconds), info
    output = (Path(m["tmpdir"]) / "output.log").read_text(encoding="utf-8", errors="replace")
    assert "input_json_delta" not in output and "stream_event" not in output, output[-2000:]
    assert '"type":"result"' in output.replace(" ", ""), output[-2000:]  # the lines of today
    folded = [line for line in _stream_lines(m) if line.get("type") == FOLD]
    # Every fragment arrived (the mock cuts the input into about seconds / 0.25 of them).
    assert sum(line["events"] for line in folded) >= seconds / 0.25 * 0.9, folded[-3:]
    # Folded: about a line a second while the block streams, not a line per fragment.
    assert len(folded) <= seconds / FOLD_EVERY + 10, len(folded)


def test_a_block_streaming_longer_than_stale_and_grace_is_progress(matrix) -> None:  # noqa: F811
    """Stale 15 s + grace 5 s, a Write block streaming 30 s: completed, no retry, no hang
    (before issue 21 the CLI printed nothing for 30 s and the task was hung)."""
    _slow_write_completes(matrix(final_text="slow write done"), 30, SHORT)


@pytest.mark.skipif(
    os.environ.get("SUPERVISE_LONG_E2E") != "1",
    reason="long real-CLI run; SUPERVISE_LONG_E2E=1 runs it",
)
def test_a_block_streaming_165_s_completes_with_long_toml_values(matrix) -> None:  # noqa: F811
    """Must show 1b: the shipped ``long.toml`` values (stale 90 + grace 30), one Write block
    streaming 165 s: completed/PASS, retry 0, no hung (it was cut at 120 s)."""
    _slow_write_completes(matrix(final_text="long write done"), 165, _long_toml_monitor())


def test_a_stall_with_pings_only_is_hung_then_resumed_by_id(matrix) -> None:  # noqa: F811
    """Must show 3: the API sends only pings (the CLI prints a ``ping`` line every 10 s):
    ``hung`` within stale + grace + a check interval of the stall, then resumed with
    ``--resume <its id>``, completed."""
    h = matrix(final_text="done after the pings")
    project = h.project()
    h.write_profile(monitor=SHORT, approval=WRITE_APPROVED)
    h.submit("pings", "[[ping_stall: 1]] write hello.txt", project)
    h.start()
    h.finish(FINISH_TIMEOUT)
    m = h.manifests()["pings"]
    info = json.dumps(m, indent=1) + h.diagnostics()
    report(h, "pings")
    assert outcome(m) == ("completed", "PASS", 1), info
    events = kinds(h, "pings")
    assert events.index("hung") < events.index("resumed") < events.index("completed"), events
    assert_resumed_by_id(h, m, info)
    [stall] = [r for r in h.mock.message_requests() if r.reply_kind == "ping_stalled"]
    # The wrapper dropped the CLI's ping lines and counted them in a fold line.
    pings = sum(line.get("keepalives", 0) for line in _stream_lines(m) if line["type"] == FOLD)
    assert pings >= 1, "the CLI forwarded no ping: the case did not test pings"
    took = _event_at(h, "pings", "hung") - stall.received_at
    bound = SHORT["stale_threshold"] + SHORT["grace_period"] + SHORT["base_interval"]
    print(f"hung {took:.1f} s after the stall began (stale + grace + interval = {bound} s)")
    assert took > 0, (took, info)  # hung after the stall began (the figure is printed)


def test_long_toml_values_are_what_the_long_test_uses() -> None:
    """The gated test runs with stale 90 + grace 30, as issue 21 measured."""
    values = _long_toml_monitor()
    assert (values["stale_threshold"], values["grace_period"]) == (90, 30)
