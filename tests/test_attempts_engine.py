"""Issue 26, part 2 (must show): attempts of one task run by a real engine, real tmux, the
fake agent (one brain per model: its ``as_model:`` cue) and a git repository for the
worktrees."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from conftest import Setup
from support.repos import make_repo

#: The acceptance check of every attempt: it fails the work of ``model-a``.
ACCEPT = (
    "import json, sys; argv = json.load(open('received_argv.json')); "
    "sys.exit(1 if 'model-a' in argv else 0)"
)
#: model-a ends at once (its work fails the check), model-b after 2 s (it passes),
#: model-c would work for 120 s (it is discarded meanwhile).
PROMPT = "as_model: model-b sleep: 2\nas_model: model-c sleep: 120\nprint: working\nexit: 0"


def profile(setup: Setup) -> None:
    make_repo(setup.project)
    setup.write_profile(max_concurrent=4)


def attempts_task(setup: Setup, models: list[str], **extra: Any) -> dict[str, Any]:
    accept = {"command": [sys.executable, "-c", ACCEPT]}
    return setup.task(
        "fix", PROMPT, attempts=len(models), models=models, acceptance=accept, **extra
    )


def group(setup: Setup) -> dict[str, Any]:
    """The one group record of the state dir."""
    (path,) = (setup.state / "plans").glob("*/group.json")
    return json.loads(path.read_text())


def manifest(setup: Setup, task_id: str) -> dict[str, Any]:
    return json.loads((setup.state / "tasks" / task_id / "manifest.json").read_text())


def event_lines(setup: Setup, record: dict[str, Any]) -> str:
    """``#K ts event status [reason]`` for every event of the attempts (the report's)."""
    lines = []
    for row in record["attempts"]:
        for e in setup.events(row["task_id"]):
            extra = e.get("abandon_reason") or e.get("verdict") or ""
            line = f"#{row['index']} {e['ts']} {e['event']} {e.get('status', '')} {extra}"
            lines.append(line.rstrip())
    return "\n".join(sorted(lines, key=lambda line: line.split()[1]))


def test_first_pass_the_passing_attempt_wins_and_the_running_one_is_discarded(
    setup: Setup,
) -> None:
    profile(setup)
    setup.drop("fix.toml", attempts_task(setup, ["model-a", "model-b", "model-c"]))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    record = group(setup)
    print(done.stderr[-3000:])
    print(event_lines(setup, record))
    ids = {row["model"]: row["task_id"] for row in record["attempts"]}
    a, b, c = (manifest(setup, ids[m]) for m in ("model-a", "model-b", "model-c"))
    assert (a["status"], a["verdict"]) == ("completed", "FAIL")
    assert (b["status"], b["verdict"]) == ("completed", "PASS")
    assert (c["status"], c["abandon_reason"], c["verdict"]) == (
        "abandoned",
        "discarded",
        "ABANDONED",
    )
    assert record["winner"] == b["task_id"] and record["outcome"] == "passed"
    assert record["pick"] == "first-pass" and record["closed"] is True
    assert [r["index"] for r in record["attempts"]] == [1, 2, 3]
    for k, m in enumerate((a, b, c), 1):
        assert m["attempt"] == {"group": record["group"], "index": k, "of": 3}
        assert m["model"] == f"model-{'abc'[k - 1]}"
    # each attempt had a worktree and branch of its own
    branches = {m["workspace"]["branch"] for m in (a, b, c)}
    paths = {m["workspace"]["path"] for m in (a, b, c)}
    assert len(branches) == len(paths) == 3
    # c was launched and stopped by the discard, after b's pass
    names = [e["event"] for e in setup.events(c["task_id"])]
    assert "launched" in names and "discard_requested" in names
    passed_at = next(e["ts"] for e in setup.events(b["task_id"]) if e["event"] == "completed")
    asked_at = next(
        e["ts"] for e in setup.events(c["task_id"]) if e["event"] == "discard_requested"
    )
    assert asked_at >= passed_at
    # nothing a user has not seen is deleted: the discarded worktree stays (prune rules)
    assert Path(c["workspace"]["path"]).is_dir()


#: pick = "all": both pass; each attempt's work (the files the fake agent leaves, its argv
#: with its model among them) is committed to its own branch.
PROMPT_ALL = "print: working\nexit: 0"


def test_pick_all_runs_both_lists_them_and_one_is_merged(setup: Setup) -> None:
    profile(setup)
    accept = {"command": [sys.executable, "-c", ACCEPT]}
    task = setup.task(
        "both", PROMPT_ALL, attempts=2, models=["model-x", "model-y"], pick="all",
        acceptance=accept,
    )  # fmt: skip
    setup.drop("both.toml", task)
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    record = group(setup)
    print(event_lines(setup, record))
    assert (record["pick"], record["winner"], record["outcome"]) == ("all", None, "ended")
    listed = setup.supervise("attempts", "-c", str(setup.profile), record["group"], "--json")
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    assert [r["model"] for r in found["attempts"]] == ["model-x", "model-y"]
    for row in found["attempts"]:
        assert (row["status"], row["verdict"]) == ("completed", "PASS")
        assert row["files_changed"] is not None and row["files_changed"] >= 1
        assert row["insertions"] >= 1 and row["branch"]
    text = setup.supervise("attempts", "-c", str(setup.profile), found["attempts"][1]["task_id"])
    assert text.returncode == 0, text.stderr
    print(text.stdout)
    assert "pick all" in text.stdout and "model-y" in text.stdout and "BRANCH" in text.stdout
    chosen = found["attempts"][1]
    merged = setup.supervise("merge", "-c", str(setup.profile), chosen["task_id"])
    assert merged.returncode == 0, merged.stderr
    print(merged.stdout)
    assert "model-y" in (setup.project / "received_argv.json").read_text()


def test_attempts_of_an_unknown_id_or_a_plain_task_is_one_line(setup: Setup) -> None:
    profile(setup)
    setup.drop("plain.toml", setup.task("plain", "print: p\nexit: 0"))
    assert setup.run(timeout=120).returncode == 0
    plain = setup.manifests()["plain"]["task_id"]
    for ident, words in (
        ("nosuch-123456", "no attempts group or task"),
        (plain, "is not an attempt"),
        ("../etc", "no attempts group or task"),
        ("bad\x1b[31m", "no attempts group or task"),
    ):
        out = setup.supervise("attempts", "-c", str(setup.profile), ident)
        assert out.returncode == 1 and out.stdout == ""
        assert words in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
        assert "\x1b" not in out.stderr and "Traceback" not in out.stderr
