"""What a SIGKILLed engine leaves running (issue 20): the children it started (acceptance,
notifier, setup, git) run in process groups only the engine would have ended at their
timeout. Each live group is recorded in ``state_dir/children/<pgid>`` before the child can
run anything, and the next engine ends the recorded groups before it adopts a task."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import Setup, alive, read_line, wait_for

from supervisor import childledger, children

#: The acceptance command (argv[1]: a log file). The first run logs its PID and sleeps; the
#: second logs whether the first still runs, then passes.
CHECK = """
import os, pathlib, sys, time
log = pathlib.Path(sys.argv[1])
lines = log.read_text().split() if log.exists() else []
if not lines:
    log.write_text(f"{os.getpid()}\\n")
    time.sleep(120)
    sys.exit(3)
try:  # a zombie (ended, not yet reaped by PID 1) runs nothing
    stat = pathlib.Path(f"/proc/{lines[0]}/stat").read_text()
    alive = "gone" if stat.rsplit(")", 1)[1].split()[0] == "Z" else "alive"
except FileNotFoundError:
    alive = "gone"
with log.open("a") as out:
    out.write(f"{os.getpid()} {alive}\\n")
"""


def _end(pid: int) -> None:
    """End a group this test started (by its PID), if it still runs."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _end_engine_and(engine: subprocess.Popen, group: int) -> None:
    """SIGKILL the engine this test started (by its PID) if it still runs, and end the
    child ``group`` it left (0: none seen yet)."""
    if engine.poll() is None:
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait(30)
    if group:
        _end(group)


def test_a_restarted_engine_ends_the_acceptance_check_a_killed_engine_left(
    setup: Setup, tmp_path: Path
) -> None:
    log = tmp_path / "checks.log"
    setup.write_profile()
    check = {"command": [sys.executable, "-c", CHECK, str(log)], "timeout": 300}
    setup.drop("t.toml", setup.task("t", "exit: 0", acceptance=check))
    engine = setup.start()
    first = 0
    try:
        wait_for(lambda: log.exists() and log.read_text().strip(), 60)
        first = int(log.read_text().split()[0])
        records = list((setup.state / childledger.FOLDER).iterdir())
        assert [r.name for r in records] == [str(first)]
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait(30)
        time.sleep(0.5)  # a moment for a group kill to land, if the engine's death sent one
        assert alive(first), "the check should outlive its killed engine"
        done = setup.run(timeout=120)
        assert done.returncode == 0, done.stderr
        lines = log.read_text().split("\n")
        # the old check was ended before the new one started
        assert lines[1].split()[1] == "gone", (lines, done.stderr)
        assert not alive(first)
        assert f"process group {first}" in done.stderr
        manifest = setup.manifests()["t"]
        assert (manifest["status"], manifest["verdict"]) == ("completed", "PASS")
        assert list((setup.state / childledger.FOLDER).iterdir()) == []
    finally:
        _end_engine_and(engine, first)


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def test_a_record_whose_leader_started_at_another_time_is_only_removed(tmp_path: Path) -> None:
    proc = _sleeper()
    try:
        folder = tmp_path / childledger.FOLDER
        folder.mkdir()
        start = psutil.Process(proc.pid).create_time()
        record = {"pid": proc.pid, "start": start - 50.0, "what": "acceptance: old"}
        (folder / str(proc.pid)).write_text(json.dumps(record))
        assert children.end_recorded(tmp_path) == 0
        assert alive(proc.pid)  # a reused PID: not ours to end
        assert list(folder.iterdir()) == []
    finally:
        proc.kill()
        proc.wait()


def test_a_matching_record_has_its_whole_group_ended(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdout is not None
    member = int(read_line(proc.stdout))
    try:
        ledger = childledger.Ledger(tmp_path, "acceptance")
        ledger.record(proc.pid, ["sh", "-c", "..."], None, "t0")
        assert children.end_recorded(tmp_path) == 1
        proc.wait(10)
        wait_for(lambda: not alive(member), 60)
        assert list((tmp_path / childledger.FOLDER).iterdir()) == []
    finally:
        _end(proc.pid)
        proc.wait()


@pytest.mark.parametrize("carries", [True, False])
def test_a_group_whose_leader_exited_is_ended_only_when_a_member_carries_the_token(
    tmp_path: Path, carries: bool
) -> None:
    env = {**os.environ, childledger.TOKEN_VAR: "t1"} if carries else None
    proc = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, env=env,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    member = int(read_line(proc.stdout))
    proc.wait(10)  # the leader is gone; its background child holds the group
    try:
        record = {"pid": proc.pid, "start": 1.0, "token": "t1", "what": "acceptance: x"}
        folder = tmp_path / childledger.FOLDER
        folder.mkdir()
        (folder / str(proc.pid)).write_text(json.dumps(record))
        assert children.end_recorded(tmp_path) == (1 if carries else 0)
        if carries:
            wait_for(lambda: not alive(member), 60)
        else:
            assert alive(member)  # another group under a reused id: not ours
        assert list(folder.iterdir()) == []
    finally:
        _end(proc.pid)


@pytest.mark.parametrize(
    "text", ["", "not json", '{"pid": "x"}', '{"pid": 1, "start": 0}', "fifo", "symlink"]
)
def test_a_damaged_or_foreign_record_is_removed_without_a_signal(tmp_path: Path, text: str) -> None:
    folder = tmp_path / childledger.FOLDER
    folder.mkdir()
    if text == "fifo":  # never waited on
        os.mkfifo(folder / "1")
    elif text == "symlink":
        (tmp_path / "elsewhere").write_text('{"pid": 2, "start": 0}')
        (folder / "1").symlink_to(tmp_path / "elsewhere")
    else:
        (folder / "1").write_text(text)
    assert children.end_recorded(tmp_path) == 0
    assert list(folder.iterdir()) == []


def test_the_record_exists_before_the_child_runs_and_is_gone_after(tmp_path: Path) -> None:
    ledger = childledger.Ledger(tmp_path, "acceptance")
    probe = (
        "import os, sys; print(os.path.exists(sys.argv[1] + '/' + str(os.getpid())), "
        f"'{childledger.TOKEN_VAR}' in os.environ)"
    )
    childledger.bind(ledger)
    try:
        out = children.Capture()
        done = children.run(
            [sys.executable, "-c", probe, str(ledger.folder)], timeout=30, stdout=out
        )
    finally:
        childledger.bind(None)
    assert (done.returncode, done.stdout.strip()) == (0, b"True True")
    assert list(ledger.folder.iterdir()) == []
    assert stat.S_IMODE(ledger.folder.stat().st_mode) == 0o700  # another user reads nothing


def test_a_recorded_child_gets_its_stdin_and_reports_a_missing_program(tmp_path: Path) -> None:
    ledger = childledger.Ledger(tmp_path, "notify")
    childledger.bind(ledger)
    try:
        out = children.Capture()
        done = children.run(["cat"], timeout=30, stdin=b"payload\n", stdout=out)
        missing = children.run(["no-such-program-here"], timeout=30)
        bad_cwd = children.run(["true"], timeout=30, cwd=tmp_path / "gone")
    finally:
        childledger.bind(None)
    assert (done.returncode, done.stdout) == (0, b"payload\n")
    assert missing.returncode is None and missing.error == "No such file or directory"
    assert bad_cwd.error is not None
    assert list(ledger.folder.iterdir()) == []


def test_a_gated_child_whose_engine_dies_before_its_record_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc = subprocess.Popen(
        ["/bin/sh", "-c", children.GATE, "gate", "touch", str(marker)], stdin=subprocess.PIPE
    )
    assert proc.stdin is not None
    proc.stdin.close()  # the engine died: no "go" line ever comes
    assert proc.wait(10) == children.GATE_CLOSED
    assert not marker.exists()


def test_cli_verbs_without_an_engine_record_nothing(tmp_path: Path) -> None:
    done = children.run(["true"], timeout=30)
    assert done.returncode == 0
    assert childledger.bound() is None


def test_records_that_cannot_be_written_are_logged_once_and_the_child_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / childledger.FOLDER).write_text("a file where the folder goes")
    ledger = childledger.Ledger(tmp_path, "workspace")
    childledger.bind(ledger)
    try:
        codes = [children.run(["true"], timeout=30).returncode for _ in range(3)]
    finally:
        childledger.bind(None)
    assert codes == [0, 0, 0]
    lines = [r for r in caplog.records if "cannot record children" in r.getMessage()]
    assert len(lines) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [childledger.FOLDER]


#: The notifier (argv[1]: a log file): logs its PID; the first run then sleeps a minute.
SLOW_NOTIFIER = """
import os, pathlib, sys, time
log = pathlib.Path(sys.argv[1])
with log.open("a") as out:
    out.write(f"{os.getpid()}\\n")
if len(log.read_text().split()) == 1:
    time.sleep(60)
"""


def test_a_notifier_ended_at_restart_is_run_again(setup: Setup, tmp_path: Path) -> None:
    log = tmp_path / "notified.log"
    notifier = [sys.executable, "-c", SLOW_NOTIFIER, str(log)]
    setup.write_profile(notifier=notifier, notify_on=["completed"], notifier_timeout=120)
    setup.drop("t.toml", setup.task("t", "exit: 0"))
    engine = setup.start()
    first = 0
    try:
        wait_for(lambda: log.exists() and log.read_text().strip(), 60)
        first = int(log.read_text().split()[0])
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait(30)
        done = setup.run(timeout=120)
        assert done.returncode == 0, done.stderr
        assert not alive(first)  # ended at restart
        assert len(log.read_text().split()) == 2  # and sent again
    finally:
        _end_engine_and(engine, first)
