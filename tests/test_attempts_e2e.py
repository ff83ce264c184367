"""Issue 26, part 2, with the real Claude Code CLI against tests/mock_anthropic.py: two
attempts of one task with different ``models`` run in their own worktrees; the mock API sees
both model names, one per attempt's session, and ``supervise attempts`` sums their cost."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.claude_harness import MODEL_ID, harness  # noqa: F401  (the fixture)

pytestmark = pytest.mark.e2e

OTHER_MODEL = "claude-opus-4-6"


def test_two_attempts_with_different_models_reach_the_api_with_each_model(harness) -> None:  # noqa: F811
    h = harness()
    project = h.project()
    (project / "README").write_text("base\n", encoding="utf-8")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["add", "-A"], [*ident, "commit", "-q", "-m", "base"]):
        subprocess.run(["git", *args], cwd=project, check=True, capture_output=True)
    h.write_profile(approval={"rules": [{"tool": "Write", "action": "approve"}]}, workspace={})
    check = "import sys; sys.exit(open('result.txt').read() != 'done\\n')"
    h.submit(
        "pair",
        "[[write: result.txt | done]] [[final: pair done]] write the result",
        project,
        attempts=2,
        models=["sonnet", OTHER_MODEL],
        pick="all",
        acceptance={"command": [sys.executable, "-c", check]},
    )
    h.start()
    out = h.finish()
    (record_path,) = h.state.glob("plans/*/group.json")
    record = json.loads(record_path.read_text())
    print(out[-3000:])
    manifests = {}
    for row in record["attempts"]:
        path = h.state / "tasks" / row["task_id"] / "manifest.json"
        manifests[row["task_id"]] = json.loads(path.read_text())
    seen = {}
    for task_id, m in manifests.items():
        info = json.dumps(m, indent=1) + h.diagnostics()
        assert (m["status"], m["verdict"]) == ("completed", "PASS"), info
        requests = h.mock.message_requests(m["session_id"])
        assert requests, info
        seen[task_id] = {r.body["model"] for r in requests if r.body and r.body.get("model")}
    by_row = {row["task_id"]: row["model"] for row in record["attempts"]}
    assert sorted(by_row.values()) == sorted([MODEL_ID, OTHER_MODEL])
    for task_id, models in seen.items():
        assert by_row[task_id] in models, (task_id, models)
    all_seen = set().union(*seen.values())
    assert {MODEL_ID, OTHER_MODEL} <= all_seen
    listed = h.cli("attempts", "-c", str(h.profile), record["group"], "--json")
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    costs = [a["cost_usd"] for a in found["attempts"]]
    print(json.dumps(found, indent=1))
    if all(c is not None for c in costs):
        assert found["cost_usd"] == pytest.approx(sum(costs))
        assert record["cost_usd"] == pytest.approx(sum(costs))
    assert record["outcome"] == "ended" and record["closed"] is True
