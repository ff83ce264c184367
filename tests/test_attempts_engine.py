"""Issue 26, part 2 (must show): attempts of one task run by a real engine, real tmux, the
fake agent (one brain per model: its ``as_model:`` cue) and a git repository for the
worktrees."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from conftest import Setup, stop_engine, wait_for
from support.attempt_groups import ACCEPT, claimed_group, group, manifest, status
from support.repos import make_repo

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
    # nothing a user has not seen is deleted: the discarded worktree stays, and prune
    # keeps it (its branch holds a commit nobody merged) unless forced
    assert Path(c["workspace"]["path"]).is_dir()
    pruned = setup.supervise("prune", "-c", str(setup.profile))
    print(pruned.stdout, pruned.stderr)
    assert Path(c["workspace"]["path"]).is_dir()
    kept = [line for line in pruned.stdout.splitlines() if line.startswith(c["task_id"])]
    assert kept and kept[0].split()[1] == "keep" and "unmerged" in kept[0], pruned.stdout
    # found by attack: merging the discarded loser went through without a word
    merged = setup.supervise("merge", "-c", str(setup.profile), c["task_id"])
    print(merged.stdout, merged.stderr)
    note = f"note: {c['task_id']} is attempt 3 of 3 of {record['group']}, discarded"
    assert note in merged.stdout and f"because {b['task_id']} passed first" in merged.stdout


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
    assert "pick all" in text.stdout and "model-y" in text.stdout and "branch" in text.stdout
    status = setup.supervise("status", "-c", str(setup.profile), "--json")
    rows = {r["task_id"]: r for r in json.loads(status.stdout)}
    for row in found["attempts"]:
        assert rows[row["task_id"]]["attempt"] == f"{row['index']}/2 {record['group']}"
    chosen = found["attempts"][1]
    merged = setup.supervise("merge", "-c", str(setup.profile), chosen["task_id"])
    assert merged.returncode == 0, merged.stderr
    print(merged.stdout)
    assert "model-y" in (setup.project / "received_argv.json").read_text()
    # the listing says which attempt was merged, and where
    after = setup.supervise("attempts", "-c", str(setup.profile), record["group"], "--json")
    into = {r["task_id"]: r["merged_into"] for r in json.loads(after.stdout)["attempts"]}
    assert into == {found["attempts"][0]["task_id"]: None, chosen["task_id"]: "main"}
    text = setup.supervise("attempts", "-c", str(setup.profile), record["group"])
    print(text.stdout)
    assert [line.split()[-1] for line in text.stdout.splitlines()[3:]] == ["-", "main"]
    # found by attack: merging a second attempt said nothing of the first one merged
    other = setup.supervise("merge", "-c", str(setup.profile), found["attempts"][0]["task_id"])
    print(other.stdout, other.stderr)
    note = f"note: attempt 2 of {record['group']} ({chosen['task_id']}) was already merged"
    assert f"{note} into main" in other.stdout


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


def _launched(setup: Setup, task_id: str) -> bool:
    return any(e["event"] == "launched" for e in setup.events(task_id))


def test_a_kill_after_the_winner_passed_still_discards_the_loser_on_restart(
    setup: Setup,
) -> None:
    """The engine records the winner, then cannot leave the loser's discard request (its
    control folder is a file: the request fails), and is SIGKILLed. On restart the loser
    is still discarded and the recorded winner stays the winner."""
    profile(setup)
    prompt = "as_model: model-b sleep: 3\nas_model: model-c sleep: 120\nexit: 0"
    accept = {"command": [sys.executable, "-c", ACCEPT]}
    setup.drop("k.toml", setup.task("k", prompt, attempts=2, models=["model-b", "model-c"],
                                    acceptance=accept))  # fmt: skip
    engine = setup.start()
    try:
        b, c = (row["task_id"] for row in claimed_group(setup)["attempts"])
        wait_for(lambda: _launched(setup, b) and _launched(setup, c), timeout=60)
        (setup.state / "control").rmdir() if (setup.state / "control").is_dir() else None
        (setup.state / "control").write_text("not a folder")  # the requests fail
        wait_for(lambda: group(setup)["winner"] == b, timeout=60)
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait(timeout=10)
    finally:
        stop_engine(engine)
    assert manifest(setup, c)["status"] == "running"  # not stopped before the kill
    assert "discard_requested" not in [e["event"] for e in setup.events(c)]
    (setup.state / "control").unlink()
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    record = group(setup)
    assert (record["winner"], record["outcome"], record["closed"]) == (b, "passed", True)
    m = manifest(setup, c)
    assert (m["status"], m["abandon_reason"]) == ("abandoned", "discarded")
    assert [e["event"] for e in setup.events(c)].count("discard_requested") == 1
    assert manifest(setup, b)["verdict"] == "PASS"


def test_stop_of_the_group_id_stops_every_live_attempt(setup: Setup) -> None:
    profile(setup)
    setup.drop("s.toml", setup.task("s", "sleep: 120\nexit: 0", attempts=3, pick="all"))
    engine = setup.start()
    try:
        record = claimed_group(setup)
        ids = [row["task_id"] for row in record["attempts"]]
        wait_for(lambda: all(_launched(setup, i) for i in ids[:2]), timeout=60)
        out = setup.supervise("stop", "-c", str(setup.profile), record["group"])
        assert out.returncode == 0, out.stderr
        assert sorted(line.split(":")[0] for line in out.stdout.splitlines()) == sorted(ids)
        again = setup.supervise("stop", "-c", str(setup.profile), record["group"])
        assert again.returncode == 1 and "every attempt already ended" in again.stderr
        wait_for(lambda: group(setup)["closed"], timeout=60)
    finally:
        stop_engine(engine)
    for task_id in ids:
        m = manifest(setup, task_id)
        assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped")
    assert group(setup)["outcome"] == "ended"


def test_a_queued_attempt_is_discarded_without_launching(setup: Setup) -> None:
    """One slot: attempt 1 runs and passes while attempts 2 and 3 wait queued; they end
    ``abandoned``/``discarded`` and never launch (no ``launch.json``)."""
    make_repo(setup.project)
    setup.write_profile(max_concurrent=1)
    setup.drop("q.toml", setup.task("q", "print: x\nexit: 0", attempts=3))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    record = group(setup)
    first, *rest = (row["task_id"] for row in record["attempts"])
    launched = [i for i in (first, *rest) if _launched(setup, i)]
    assert len(launched) == 1 and record["winner"] == launched[0]
    for task_id in (first, *rest):
        if task_id == record["winner"]:
            continue
        m = manifest(setup, task_id)
        assert (m["status"], m["abandon_reason"], m["launched_at"]) == (
            "abandoned",
            "discarded",
            None,
        )
        assert not (setup.state / "tasks" / task_id / "launch.json").exists()
        assert [e["event"] for e in setup.events(task_id)] == [
            "queued",
            "discard_requested",
            "abandoned",
        ]


def test_two_attempts_passing_together_give_one_winner(setup: Setup) -> None:
    """Both attempts end at once (often in the same intake tick): one winner, the first
    the engine's look finds passed (of several found at one look: the earlier
    ``finished_at``, then the lower index; the policy tests pin that tie). The other keeps
    its ``completed``/``PASS`` when it passed before the discard was taken (the discard is
    then ignored), or ends ``discarded`` when its own pass was not decided yet: never two
    winners, never a passed attempt discarded."""
    profile(setup)
    setup.drop("w.toml", setup.task("w", "print: x\nexit: 0", attempts=2))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    record = group(setup)
    ids = [row["task_id"] for row in record["attempts"]]
    ms = [manifest(setup, i) for i in ids]
    print(done.stderr[-2500:], event_lines(setup, record))
    passed = [m for m in ms if (m["status"], m["verdict"]) == ("completed", "PASS")]
    assert record["winner"] in {m["task_id"] for m in passed} and record["outcome"] == "passed"
    assert record["closed"] is True
    for m in ms:
        if m not in passed:
            assert (m["status"], m["abandon_reason"]) == ("abandoned", "discarded")
            assert not any(e["event"] == "completed" for e in setup.events(m["task_id"]))


def test_the_group_fails_when_no_attempt_passes(setup: Setup) -> None:
    profile(setup)
    accept = {"command": [sys.executable, "-c", "raise SystemExit(1)"]}
    setup.drop("n.toml", setup.task("n", "exit: 0", attempts=2, acceptance=accept))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    record = group(setup)
    assert (record["winner"], record["outcome"], record["closed"]) == (None, "none_passed", True)
    for row in record["attempts"]:
        m = manifest(setup, row["task_id"])
        assert (m["status"], m["verdict"]) == ("completed", "FAIL")
    text = setup.supervise("attempts", "-c", str(setup.profile), record["group"])
    assert "outcome none_passed" in text.stdout and "winner -" in text.stdout
    assert f"attempts {record['group']}: none_passed" in done.stderr


def test_a_successor_of_an_attempt_builds_on_its_group_s_winner(setup: Setup) -> None:
    """A task whose ``after`` names an attempt (by id, or by the name all attempts share)
    waits for its group's winner and builds on it: found by trying it, a successor of the
    attempt that failed its check was abandoned ``dependency`` though its group passed."""
    make_repo(setup.project)
    may = ["model", "acceptance", "workspace"]
    setup.write_profile(max_concurrent=4, extra={"security": {"task_may_set": may}})
    prompt = "as_model: model-b sleep: 4\nprint: working\nexit: 0"
    accept = {"command": [sys.executable, "-c", ACCEPT]}
    task = setup.task("fix", prompt, attempts=2, models=["model-a", "model-b"], acceptance=accept)
    setup.drop("fix.toml", task)
    engine = setup.start()
    try:
        wait_for(lambda: len(group(setup).get("attempts", [])) == 2, timeout=60)
        ids = {row["model"]: row["task_id"] for row in group(setup)["attempts"]}
        failed = ids["model-a"]
        wait_for(lambda: status(setup, failed) == "completed", timeout=60)
        assert manifest(setup, failed)["verdict"] == "FAIL"
        after = {"after": [failed], "workspace": {"base": f"after:{failed}"}}
        setup.drop("next.toml", setup.task("next", "print: n\nexit: 0", **after))
        wait_for(lambda: "next" in setup.manifests(), timeout=60)
        nxt = setup.manifests()["next"]["task_id"]
        wait_for(lambda: manifest(setup, nxt)["status"] in ("completed", "abandoned"), 60)
    finally:
        stop_engine(engine)
    winner = manifest(setup, ids["model-b"])
    successor = manifest(setup, nxt)
    assert group(setup)["winner"] == winner["task_id"]
    assert (successor["status"], successor["verdict"]) == ("completed", "PASS"), successor
    # it waited for the winner, and its worktree started at the winner's final commit
    assert first_ts(setup, nxt, "unblocked") >= first_ts(setup, winner["task_id"], "completed")
    assert successor["workspace"]["base_commit"] == winner["workspace"]["head_commit"]


def first_ts(setup: Setup, task_id: str, event: str) -> str:
    return next(e["ts"] for e in setup.events(task_id) if e["event"] == event)
