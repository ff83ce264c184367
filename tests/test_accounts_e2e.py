"""Issue 26, part 3, end to end: the account's limit with the real Claude Code CLI (pinned)
in tmux against the mock Messages API (:mod:`support.mock_anthropic`), through
:mod:`support.claude_harness` as ``tests/test_claude_agent.py``'s limit tests.

The first task meets a 429 whose reset (~20 s away) the CLI reports; four tasks of the same
account queued after it do not launch until the reset; after it they run, staggered, and
each ends ``completed`` with ``retry_count`` 0. Told from the events and the mock's record
of requests, never from a wall-clock bound.
"""

from __future__ import annotations

import itertools
import json
import time

import pytest
from support import claude_harness
from support.mock_anthropic import gateway_token

from supervisor.diskio import parse_iso

harness = claude_harness.harness  # pytest fixtures, found by name in this module

pytestmark = pytest.mark.e2e

STAGGER = 3.0
QUEUED = ("q1", "q2", "q3", "q4")


def _at(event: dict) -> float:
    value = parse_iso(event["ts"])
    assert value is not None, event
    return value


def test_a_limited_account_holds_its_queued_tasks_until_the_reset_then_staggers_them(
    harness,
) -> None:
    h = harness(token=gateway_token(), final_text="finished after the limit")
    projects = {name: h.project(name) for name in ("limited", *QUEUED)}
    h.write_profile(
        max_concurrent=5,
        approval={"rules": [{"tool": "Write", "action": "approve"}]},
        accounts={"stagger": STAGGER},
    )
    h.submit("limited", "[[ratelimit: 1 reset=+20]] write hello.txt", projects["limited"])
    h.start()
    h.wait_for("the limit", lambda: h.status("limited") == "waiting", timeout=90)
    reset_at = parse_iso(h.manifests()["limited"]["resume_at"])
    assert reset_at is not None
    for name in QUEUED:
        h.submit(name, "write hello.txt", projects[name])
    h.wait_for("the four tasks claimed", lambda: all(h.status(n) == "queued" for n in QUEUED))
    shown = h.cli("status", "-c", str(h.profile))
    rows = h.cli("status", "-c", str(h.profile), "--json")
    shown_before_reset = time.time() < reset_at  # (a machine slow enough to pass it: no check)
    h.finish(timeout=180)
    manifests = h.manifests()
    info = json.dumps(manifests, indent=1) + h.diagnostics()
    for name in ("limited", *QUEUED):
        m = manifests[name]
        assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), info
    assert len({m["account"] for m in manifests.values()}) == 1, info
    assert manifests["limited"]["limit_waits"] == 1, info
    events = {name: h.events(name) for name in manifests}
    wait = next(e for e in events["limited"] if e["event"] == "waiting")
    resumed = next(e for e in events["limited"] if e["event"] == "resumed")
    starts = [_at(resumed)]
    for name in QUEUED:
        kinds = [e["event"] for e in events[name]]
        assert kinds.count("launched") == 1 and "waiting" not in kinds, (name, kinds)
        queued = next(e for e in events[name] if e["event"] == "queued")
        launched = next(e for e in events[name] if e["event"] == "launched")
        # queued after the limit was met, launched only after it reset
        assert _at(wait) <= _at(queued) < reset_at <= _at(launched), (name, events[name])
        starts.append(_at(launched))
    # no request of a queued task reached the API before the reset
    for name in QUEUED:
        sent = h.mock.message_requests(manifests[name]["session_id"])
        assert sent and min(r.received_at for r in sent) >= reset_at - 0.05, name
    # five starts of one account after its reset, at least STAGGER s apart
    starts.sort()
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(starts)]
    # Starts are taken STAGGER s apart; each launched event comes a launch later, and two
    # launches' latencies differ by up to a few tenths on a loaded machine.
    assert all(g >= STAGGER - 0.5 for g in gaps), gaps
    after = [round(s - reset_at, 2) for s in starts]
    print(f"\nreset at {reset_at:.1f}; starts after it (s): {after}; gaps {gaps}")
    print(f"status while held:\n{shown.stdout}")
    if shown_before_reset:
        held = {r["name"]: r["held"] for r in json.loads(rows.stdout)}
        assert all((held[n] or "").startswith("account limited until") for n in QUEUED), held
        assert shown.stdout.count("account limited until") == len(QUEUED), shown.stdout
    # issue 26's must-show: `supervise cost --json` on this run: one account, five tasks,
    # and the manifests' own totals, summed
    spent = h.cli("cost", "-c", str(h.profile), "--json")
    assert spent.returncode == 0, spent.stderr
    report = json.loads(spent.stdout)
    print(f"supervise cost --json:\n{json.dumps(report, indent=1)}")
    own = sum(m["claude"]["total_cost_usd"] or 0.0 for m in manifests.values())
    assert report["unreadable"] == [] and report["tasks"] == len(manifests)
    assert abs(report["total_usd"] - own) < 1e-5, (report["total_usd"], own)
    [account] = report["by_account"]
    assert account["account"] == manifests["limited"]["account"]
    assert account["tasks"] == (len(manifests) if own > 0 else 0), account
