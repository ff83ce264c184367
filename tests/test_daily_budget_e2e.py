"""The daily budget (issue 26) with the real Claude Code CLI (pinned 2.1.328) against the mock
Messages API: the first task's run costs what the CLI computes from the mock's usage (about
0.009 USD a turn), past a ``daily_usd`` of 0.0001, so the second task is held ``queued`` with
the reason, the notifier runs once, and ``supervise cost --json`` gives the first task's
``claude.total_cost_usd`` as the day's spend."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.claude_harness import Harness
from support.claude_support import start_mock, stop_mock

pytestmark = pytest.mark.e2e


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    mock = start_mock()
    h = Harness(tmp_path, mock)
    yield h
    h.close()
    stop_mock(mock)


def test_a_real_run_s_cost_holds_the_next_launch(harness: Harness) -> None:
    h = harness
    h.write_profile(max_concurrent=1, budget={"daily_usd": 0.0001})
    h.submit("first", "[[final: DONE]] say done", h.project("one"))
    h.submit("second", "[[final: DONE]] say done", h.project("two"))
    h.start()  # one slot, oldest first: the second waits for the first, then for tomorrow
    check = lambda: h.manifests().get("second", {}).get("budget_hold")  # noqa: E731
    hold = h.wait_for("second held", check, 180)
    # the spend counts once the run reports its cost, which may come a moment before the
    # first task's ending is recorded: the hold may be seen while it is still running
    h.wait_for("first completed", lambda: h.status("first") == "completed", 60)
    first = h.manifests()["first"]
    spent = first["claude"]["total_cost_usd"]
    assert spent > 0.0001, h.diagnostics()
    assert hold["reason"].startswith("daily budget reached: $0.0")
    assert hold["reason"].endswith(" of $0.0001")
    assert h.status("second") == "queued"
    assert "launched" not in [e["event"] for e in h.events("second")]
    done = h.cli("cost", "-c", str(h.profile), "--json", "--days", "1")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["total_usd"] == pytest.approx(spent, abs=1e-6)
    assert [r["task_id"] for r in out["by_task"]] == [first["task_id"]]
    assert out["budgets"][0]["reached"] is True
    h.wait_for("the notification", lambda: "daily_budget" in h.notified.read_text())
    events = [json.loads(line) for line in h.notified.read_text().splitlines()]
    assert [e["event"] for e in events].count("daily_budget") == 1, events
