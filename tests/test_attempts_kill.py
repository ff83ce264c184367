"""Issue 26, part 2, attacked: the engine SIGKILLed while a loser's discard is under way
(its request taken and logged, its agent ignoring SIGTERM, so the stop waits). Restarted,
the engine finishes the decision exactly once: one winner (unchanged), the loser ends
``abandoned``/``discarded`` once, nothing launched twice. Also: ``supervise stop GROUP``
twice at once, and a file in place of the requests folder. Real engine, tmux, git and the
fake agent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from conftest import Setup, stop_engine, wait_for
from support.attempt_groups import b_wins_over_c, claimed_group, group, manifest
from support.repos import make_repo

from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TaskDir


def _events(setup: Setup, task_id: str) -> list[str]:
    return [e["event"] for e in setup.events(task_id)]


def test_a_kill_while_the_loser_is_being_discarded_ends_it_once(setup: Setup) -> None:
    # model-b passes after 3 s; model-c works on and ignores SIGTERM (a stubborn stop)
    engine = b_wins_over_c(setup, "ignore_term\n")
    try:
        b, c = (row["task_id"] for row in claimed_group(setup)["attempts"])
        wait_for(lambda: "discard_requested" in _events(setup, c), timeout=90, every=0.01)
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait(timeout=10)
    finally:
        stop_engine(engine)
    assert group(setup)["winner"] == b
    # the ending is logged first (write-ahead); its agent, ignoring SIGTERM, still runs
    assert manifest(setup, c)["status"] != "abandoned" or "abandoned" in _events(setup, c)
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    record = group(setup)
    assert (record["winner"], record["outcome"], record["closed"]) == (b, "passed", True)
    mb, mc = manifest(setup, b), manifest(setup, c)
    assert (mb["status"], mb["verdict"]) == ("completed", "PASS")
    assert (mc["status"], mc["abandon_reason"]) == ("abandoned", "discarded")
    for task_id in (b, c):
        names = _events(setup, task_id)
        print(task_id, names)
        assert names.count("launched") == 1
        assert sum(n in ("completed", "abandoned", "failed") for n in names) == 1
    assert _events(setup, c).count("discard_requested") == 1


def _kill(engine: subprocess.Popen[bytes]) -> None:
    os.kill(engine.pid, signal.SIGKILL)
    engine.wait(timeout=10)


def test_a_discard_logged_but_not_carried_out_is_carried_out_once_on_restart(
    setup: Setup,
) -> None:
    """The exact point: the winner recorded, the loser's ``discard`` taken and logged, the
    engine killed before the check that performs it (the request file is gone then). The
    log is left so by hand: the requests fail (``control`` is a file) until the kill,
    then the taken request's line is appended. Before: the restart asked the discard again
    (two ``discard_requested`` lines)."""
    engine = b_wins_over_c(setup)
    try:
        b, c = (row["task_id"] for row in claimed_group(setup)["attempts"])
        wait_for(lambda: "launched" in _events(setup, c), timeout=120)
        if (setup.state / "control").is_dir():
            (setup.state / "control").rmdir()
        (setup.state / "control").write_text("not a folder")  # the requests fail
        wait_for(lambda: group(setup)["winner"] == b, timeout=120)
        _kill(engine)
    finally:
        stop_engine(engine)
    (setup.state / "control").unlink()
    TaskDir(setup.state / "tasks" / c).append_event(Event.DISCARD_REQUESTED, status="running")
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    mc = manifest(setup, c)
    assert (mc["status"], mc["abandon_reason"]) == ("abandoned", "discarded"), done.stderr
    names = _events(setup, c)
    assert names.count("discard_requested") == 1 and names.count("abandoned") == 1, names
    assert names.count("launched") == 1
    assert group(setup)["winner"] == b


def test_a_file_in_place_of_the_control_folder_holds_back_no_launch(setup: Setup) -> None:
    """Found by attack (the test above, flaky): a file where ``state_dir/control`` should
    be made every intake run raise before it started any queued task (a traceback every
    0.2 s, nothing launched any more). Now: one line naming it and the fix; the tasks run;
    ``status`` and ``stop`` still answer."""
    setup.write_profile()
    setup.state.mkdir(parents=True)
    (setup.state / "control").write_text("not a folder")
    for name in ("a", "b"):
        setup.drop(f"{name}.toml", setup.task(name, "print: hi\nexit: 0"))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    assert {m["status"] for m in setup.manifests().values()} == {"completed"}, done.stderr
    lines = [x for x in done.stderr.splitlines() if "cannot read the requests folder" in x]
    assert len(lines) == 1 and "mv " in lines[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    status = setup.supervise("status", "-c", str(setup.profile), "--json")
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    # `supervise stop` of a task it takes for live (its manifest edited so): one line
    path = setup.state / "tasks" / setup.manifests()["a"]["task_id"] / "manifest.json"
    path.write_text(path.read_text().replace('"completed"', '"running"', 1))
    stop = setup.supervise("stop", "-c", str(setup.profile), path.parent.name)
    assert stop.returncode == 1 and "Traceback" not in stop.stderr, stop.stderr
    assert "cannot write the requests folder" in stop.stderr and "mv " in stop.stderr


def test_two_stops_of_a_group_at_once_end_each_attempt_once(setup: Setup) -> None:
    """``supervise stop GROUP`` twice at once (with ``supervise attempts`` beside them):
    both answer, each attempt ends ``abandoned``/``stopped`` once, and no request is logged
    after its ending (found by attack: the second stop, taken while the first one's agent
    was still being stopped, logged a ``stop_requested`` after ``abandoned``)."""
    make_repo(setup.project)
    setup.write_profile(max_concurrent=4)
    setup.drop("s.toml", setup.task("s", "sleep: 120\nexit: 0", attempts=3, pick="all"))
    engine = setup.start()
    try:
        record = claimed_group(setup)
        ids = [row["task_id"] for row in record["attempts"]]
        wait_for(lambda: all("launched" in _events(setup, i) for i in ids), timeout=120)
        base = [sys.executable, "-m", "supervisor.cli"]
        verbs = [("stop", "-c", str(setup.profile), record["group"])] * 2
        verbs += [("attempts", "-c", str(setup.profile), record["group"])] * 2
        pipe = subprocess.PIPE
        runs = [subprocess.Popen([*base, *v], stdout=pipe, stderr=pipe, text=True) for v in verbs]
        outs = [run.communicate(timeout=120) for run in runs]
        wait_for(lambda: group(setup).get("closed"), timeout=120)
    finally:
        stop_engine(engine)
    codes = [run.returncode for run in runs]
    assert codes[0] == 0 or codes[1] == 0, outs
    for code, (out, errs) in zip(codes, outs, strict=True):
        assert "Traceback" not in errs, errs
        # a stop that started after the other one ended every attempt says so
        assert code == 0 or "every attempt already ended" in errs, (code, out, errs)
    for task_id in ids:
        names = _events(setup, task_id)
        assert names.count("abandoned") == 1 and names.count("launched") == 1, names
        after = names[names.index("abandoned") :]
        assert not [n for n in after if n.endswith("_requested")], names
        m = manifest(setup, task_id)
        assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped")


def test_a_damaged_group_record_is_rebuilt_and_the_group_still_decided(setup: Setup) -> None:
    """SIGKILL, then ``group.json`` truncated (a damaged disk, a bad hand edit). Before,
    the restarted engine read it as no group: model-c ran on for 120 s beside the winner and
    nothing closed the group. Now the record is rebuilt from the plan's files (the damaged
    one kept beside it), b wins again and c is discarded."""
    engine = b_wins_over_c(setup)
    try:
        record = claimed_group(setup)
        b, c = (row["task_id"] for row in record["attempts"])
        wait_for(lambda: _launched(setup, b) and _launched(setup, c), timeout=60)
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait(timeout=10)
    finally:
        stop_engine(engine)
    path = setup.state / "plans" / record["group"] / "group.json"
    path.write_bytes(path.read_bytes()[:40])
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    assert "could not be read; rebuilt from the plan's files" in done.stderr
    rebuilt = group(setup)
    assert (rebuilt["winner"], rebuilt["outcome"], rebuilt["closed"]) == (b, "passed", True)
    assert (rebuilt["pick"], rebuilt["name"]) == ("first-pass", "k")
    assert [(r["task_id"], r["model"]) for r in rebuilt["attempts"]] == [
        (b, "model-b"),
        (c, "model-c"),
    ]
    mc = manifest(setup, c)
    assert (mc["status"], mc["abandon_reason"]) == ("abandoned", "discarded")
    (damaged,) = path.parent.glob("group.json.damaged-*")
    assert len(damaged.read_bytes()) == 40


def _launched(setup: Setup, task_id: str) -> bool:
    return "launched" in _events(setup, task_id)
