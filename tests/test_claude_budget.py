"""Budget and stream rotation (issue 14) with the real Claude Code CLI (pinned 2.1.328)
against the mock Messages API.

The CLI computes ``total_cost_usd`` from the usage the mock reports (a few thousand input
tokens a request, about 0.009 USD a turn at Sonnet prices, see
tests/fixtures/claude/headless/), so a budget of 0.0001 USD is spent by one turn. Each run
is cut after one turn (``--max-turns 1``: the CLI ends ``error_max_turns`` and exits 1),
and exit 1 is a resume exit code, so the task is due a resume after its first run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.claude_harness import Harness
from support.claude_support import start_mock, stop_mock

from supervisor.agents.claude.stream import CARRY, StreamState

pytestmark = pytest.mark.e2e

PROMPT = "[[write: out.txt | spent]] [[final: DONE]] write out.txt"


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    mock = start_mock()
    h = Harness(tmp_path, mock)
    yield h
    h.close()
    stop_mock(mock)


def _result_costs(task_dir: Path) -> list[float]:
    """``total_cost_usd`` of every ``result`` line in ``stream.jsonl`` and its backups."""
    costs = []
    for path in sorted(task_dir.glob("stream.jsonl*"), reverse=True):
        for line in path.read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            if obj.get("type") == "result":
                costs.append(float(obj["total_cost_usd"]))
    return costs


def test_a_task_over_its_budget_is_not_resumed_and_the_stream_rotates(harness: Harness) -> None:
    h = harness
    project = h.project()
    h.write_profile(
        agent={"extra_args": ["--max-turns", "1"]},
        monitor={
            "resume_exit_codes": [1],
            "max_retries": 2,
            "max_log_bytes": 4096,
            "log_backups": 2,
        },
        approval={"rules": [{"tool": "Write", "action": "approve"}]},
    )
    h.submit("capped", PROMPT, project, monitor={"max_cost_usd": 0.0001})
    h.submit("free", PROMPT, h.project("other"))
    h.start()
    h.finish()
    manifests = h.manifests()
    info = json.dumps(manifests, indent=1) + h.diagnostics()

    capped = manifests["capped"]
    assert (capped["status"], capped["abandon_reason"], capped["verdict"]) == (
        "abandoned", "budget", "ABANDONED"), info  # fmt: skip
    assert capped["retry_count"] == 0, info
    events = [e["event"] for e in h.events("capped")]
    assert "resumed" not in events and events[-1] in ("abandoned", "notified"), events
    spent = capped["claude"]["total_cost_usd"]
    assert spent > 0.0001, info
    assert [r for r in h.mock.message_requests() if r.offers_tools
            and r.session_id == capped["session_id"]], info  # fmt: skip
    notified = [json.loads(line) for line in h.notified.read_text().splitlines()]
    budget = [n for n in notified if n["task_id"] == capped["task_id"]]
    assert budget and budget[-1]["reason"] == "budget", notified

    # Without a budget the same task is resumed once and completes: the run's cost is
    # summed over both runs although stream.jsonl was rotated between them.
    free = manifests["free"]
    assert (free["status"], free["verdict"], free["retry_count"]) == ("completed", "PASS", 1), info
    task_dir = Path(free["tmpdir"])
    assert (task_dir / "stream.jsonl.1").exists(), sorted(p.name for p in task_dir.iterdir())
    costs = _result_costs(task_dir)
    assert len(costs) == 2 and all(c > 0 for c in costs), costs
    assert free["claude"]["total_cost_usd"] == pytest.approx(sum(costs), abs=1e-6)
    # A reader starting over (an engine restart) sums the same from the carry line.
    lines = (task_dir / "stream.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["type"] == CARRY
    fresh = StreamState()
    for line in lines:
        fresh.feed_line(line)
    assert fresh.total_cost_usd == pytest.approx(sum(costs), abs=1e-6)
    assert fresh.runs == 2
