"""``supervise status`` on the views fixture: the engine line, spool files, groups, cost,
``--sort``, ``--status``, ``--json`` (every historical key kept) and ``--snapshot``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from support import views_fixture as vf

from supervisor.views.model import GROUPS, Snapshot

#: The keys ``status --json`` rows had before the status model (tests/test_engine.py).
OLD_KEYS = ["task_id", "name", "status", "model", "retries", "exit_code", "verdict", "reason",
            "age_s", "since_output_s", "damaged"]  # fmt: skip


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> vf.Fixture:
    return vf.build(tmp_path_factory.mktemp("views"))


def status(fixture: vf.Fixture, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "status", "-c", str(fixture.profile), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_table_engine_line_spool_groups_cost(fixture: vf.Fixture) -> None:
    out = status(fixture)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "engine: not running"
    assert lines[1].startswith("spool: 2 file(s) waiting to be claimed: incoming-a.toml (")
    assert "cost" in lines[2] and "last line" in lines[2] and "in state" in lines[2]
    body = lines[4:-1]
    groups = [line.split("  ")[0].strip() for line in body]
    assert groups == sorted(groups, key=list(GROUPS.values()).index)  # Needs you first
    assert groups[0] == "Needs you" and len(body) == len(vf.TASKS)
    assert "$1.25" in out.stdout and "3 files +41 -7" in out.stdout
    assert "evil\\x1b[31mname" in out.stdout and "\x1b" not in out.stdout
    assert lines[-1] == ("11 tasks: 1 needs you, 1 waiting, 2 running, 2 recovering, 2 failed, "
                         "1 queued, 1 done; cost $1.67".replace("1 done", "2 done"))  # fmt: skip


def test_status_filter_is_repeatable_and_takes_groups(fixture: vf.Fixture) -> None:
    out = status(fixture, "--status", "failed", "--status", "needs_you", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["task_id"] for r in rows] == ["ask-perm-a1b2c3", "bad-auth-2a3b4c"]
    assert "engine: not running" in out.stderr and "spool: 2 file(s)" in out.stderr
    refused = status(fixture, "--status", "done-ish")
    assert refused.returncode == 2 and "invalid choice: 'done-ish'" in refused.stderr


def test_sort_by_cost(fixture: vf.Fixture) -> None:
    rows = json.loads(status(fixture, "--json", "--sort", "cost").stdout)
    assert [r["cost_usd"] for r in rows[:3]] == [1.25, 0.4213, None]


def test_json_keeps_every_old_key_in_task_id_order(fixture: vf.Fixture) -> None:
    rows = json.loads(status(fixture, "--json").stdout)
    assert [r["task_id"] for r in rows] == sorted(row[0] for row in vf.TASKS)
    for row in rows:
        assert list(row)[: len(OLD_KEYS)] == OLD_KEYS
    evil = next(r for r in rows if r["task_id"] == "evil-name-1d2e3f")
    assert evil["name"] == "evil\x1b[31mname"  # exact in JSON, as before


def test_snapshot_matches_the_schema_model(fixture: vf.Fixture) -> None:
    out = status(fixture, "--snapshot")
    data = json.loads(out.stdout)
    snap = TypeAdapter(Snapshot).validate_python(data)
    assert snap.totals["tasks"] == len(vf.TASKS) and len(snap.spool) == 2
    schema = json.loads((Path(__file__).parent.parent / "schemas/status.schema.json").read_text())
    assert set(schema["$defs"]["Task"]["properties"]) == set(data["tasks"][0])
    assert set(schema["properties"]) == set(data)
