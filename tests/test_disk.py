"""A full state filesystem, the event log's integrity, and output_tail across a rotation.

The disk-full tests use a real tmpfs (``mount -t tmpfs -o size=…``), real tmux, a real
``supervise run`` and the fake agent; they need root to mount and skip, saying so, without.
The event-log tests make the kernel itself cut a write short (``RLIMIT_FSIZE``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Setup, wait_for
from support import small_fs as small_fs_module
from support.engine_in_process import (
    END_LINE,
    _run_engine_in_process,
    end_engine,
    kinds,
    start_engine,
)

from supervisor.config import MonitorPolicy
from supervisor.engine import launch as engine_launch
from supervisor.policy import Signals, TaskState, decide, logged_ending
from supervisor.taskdir.folder import TaskDir, parse_iso

small_fs = small_fs_module.small_fs  # pytest fixtures, found by name in this module

T0 = 1_700_000_000.0
P = MonitorPolicy(base_interval=10.0, max_interval=80.0, deadline=10_000.0, grace_period=20.0,
                  stale_threshold=30.0, max_retries=3)  # fmt: skip


# --------------------------------------------------------------------------- policy


@pytest.mark.parametrize(
    ("state", "signals", "unheld"),
    [
        # An agent that exited 0 while the wrapper could not write its files: no crash.
        (TaskState("running", T0, T0, gone_since=T0 + 5), Signals(T0 + 10, agent_alive=False),
         "crashed"),
        # The done-file may be one the wrapper wrote empty before exit_code failed.
        (TaskState("running", T0, T0), Signals(T0 + 10, done=True, agent_alive=False),
         "failed"),
        # output.log cannot grow: silence is not a hang.
        (TaskState("running", T0, T0, stale_since=T0 + 40),
         Signals(T0 + 100, agent_alive=True, output_mtime=T0), "hung"),
        # A resume could not write launch.json: not counted, not attempted.
        (TaskState("crashed", T0, T0, retry_count=1, resume_at=T0 + 5),
         Signals(T0 + 10, agent_alive=False), "running"),
        (TaskState("waiting", T0, T0, resume_at=T0 + 5), Signals(T0 + 10), "running"),
    ],
)  # fmt: skip
def test_full_state_disk_holds_the_decision(
    state: TaskState, signals: Signals, unheld: str
) -> None:
    assert decide(state, signals, P).state.status == unheld  # the fact the hold is about
    held = decide(state, Signals(**{**signals.__dict__, "state_disk_full": True}), P)
    assert held.state.status == state.status
    assert held.state.retry_count == state.retry_count
    assert (held.actions, held.events) == ((), ())
    # The time spent full never counts as silence or absence.
    assert held.state.stale_since is None and held.state.gone_since is None
    assert 0 < held.next_check <= P.base_interval


def test_logged_terminal_event_is_final() -> None:
    events = [{"event": "crashed"}, {"event": "abandoned", "abandon_reason": "max_retries",
                                     "exit_code": None, "verdict": "ABANDONED"}]  # fmt: skip
    again = TaskState("abandoned", abandon_reason="tmux_lost", verdict="ABANDONED")
    assert logged_ending(again, events).abandon_reason == "max_retries"
    done = TaskState("completed", exit_code=0, verdict="PASS")
    assert logged_ending(done, events).status == "abandoned"
    assert logged_ending(done, events[:1]) == done


# --------------------------------------------------------------------------- event log


def test_append_event_writes_whole_lines_or_nothing(tmp_path: Path) -> None:
    """The kernel cuts the third append short (RLIMIT_FSIZE, as a disk that fills up
    mid-write does); it must leave no fragment, raise, and the next append must be read."""
    task = tmp_path / "t"
    task.mkdir()
    code = f"""
import resource, signal, sys
from pathlib import Path
from supervisor.taskdir.folder import TaskDir, parse_iso
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
task = TaskDir(Path({str(task)!r}))
task.append_event("one")
task.append_event("two")
size = task.file("events.jsonl").stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 20, resource.RLIM_INFINITY))
try:
    task.append_event("cut_short", detail="x" * 200)
    print("no error")
except OSError as exc:
    print("error", exc.errno)
print(task.file("events.jsonl").stat().st_size - size)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["error", str(errno.ENOSPC), "0"], result.stdout
    task_dir = TaskDir(task)
    task_dir.append_event("after")
    assert [e["event"] for e in task_dir.events()] == ["one", "two", "after"]


def test_torn_tail_is_closed_before_the_next_event(tmp_path: Path) -> None:
    """A crash left half a line; the next event must not be glued to it (and lost)."""
    task = TaskDir(tmp_path)
    task.append_event("one")
    with open(task.file("events.jsonl"), "ab") as handle:
        handle.write(b'{"ts": "2026-11-22T00:00:00.000Z", "event": "to')
    task.append_event("two")
    task.append_event("three")
    assert [e["event"] for e in task.events()] == ["one", "two", "three"]
    assert task.file("events.jsonl").read_bytes().count(b"\n") == 4  # the fragment is kept


# --------------------------------------------------------------------------- output_tail


def test_output_tail_reaches_into_the_rotated_file(tmp_path: Path) -> None:
    task = TaskDir(tmp_path)
    task.file("output.log.1").write_text("".join(f"line {i}\n" for i in range(300)))
    assert task.output_tail(lines=5).splitlines() == [f"line {i}" for i in range(295, 300)]
    task.file("output.log").write_text("after 1\nafter 2\n")
    tail = task.output_tail(lines=4).splitlines()
    assert tail == ["line 298", "line 299", "after 1", "after 2"]
    task.file("output.log").write_text("".join(f"new {i}\n" for i in range(10)))
    assert task.output_tail(lines=3).splitlines() == ["new 7", "new 8", "new 9"]


def test_output_tail_after_a_rotation_at_the_last_check(setup: Setup) -> None:
    """The agent floods and exits; the check the done-file triggers rotates output.log
    first (it is past max_log_bytes), so the fresh output.log holds at most the end line."""
    setup.write_profile(
        base_interval=5, max_interval=5, stale_threshold=30, max_log_bytes=65536, log_backups=2
    )
    setup.drop("f.toml", setup.task("flood-end", "flood: 300000\nexit: 0"))
    result = setup.run(timeout=60)
    assert result.returncode == 0, result.stderr
    m = setup.manifests()["flood-end"]
    task = setup.state / "tasks" / m["task_id"]
    assert (task / "output.log.1").exists()  # the rotation this test is about happened
    assert (m["status"], m["exit_code"]) == ("completed", 0)
    tail = m["output_tail"].rstrip()
    assert "flood done 300000 bytes" in tail, tail[-300:]
    assert tail.endswith(END_LINE), tail[-300:]
    assert len(tail.splitlines()) > 50


def test_rotation_keeps_output_log_within_one_check_of_max(setup: Setup) -> None:
    """output.log never holds more than max_log_bytes + what the agent prints in one check
    interval (+ the bytes in flight when the capture is re-piped)."""
    max_bytes, interval = 65536, 0.3
    setup.write_profile(
        base_interval=interval, stale_threshold=30, max_log_bytes=max_bytes, log_backups=1
    )
    flood, seconds = 2_000_000, 3.0
    setup.drop("r.toml", setup.task("steady", f"flood: {flood} {seconds}\nexit: 0"))
    biggest = [0]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            for log in (setup.state / "tasks").glob("*/output.log"):
                with contextlib.suppress(FileNotFoundError):
                    biggest[0] = max(biggest[0], log.stat().st_size)
            time.sleep(0.005)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        result = setup.run(timeout=60)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert result.returncode == 0, result.stderr
    took = float((setup.project / "flood_times").read_text().split()[1])
    rate = flood / took  # bytes/s the agent achieved
    # One check interval (+0.2 s of scheduling slack), + one 64 KiB write and one pipe buffer.
    bound = max_bytes + rate * (interval + 0.2) + 2 * 65536
    assert biggest[0] > max_bytes  # it did fill between checks: the bound is exercised
    assert biggest[0] <= bound, (biggest[0], bound, rate)


# --------------------------------------------------------------------------- resume write


def test_resume_that_cannot_write_launch_json_is_not_counted(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The resume's launch.json fails (ENOSPC that statvfs does not show, e.g. a quota):
    no uncaught OSError, no retry counted, and the resume happens once it can be written."""
    caplog.set_level(logging.INFO, logger="supervise")
    setup.write_profile(base_interval=0.3, max_interval=0.3, max_retries=2, stale_threshold=30)
    setup.drop("c.toml", setup.task("crash-once", "crash_runs: 1\ntick: 0.2\nsleep: 0.5\nexit: 0"))
    failures: list[float] = []
    real = engine_launch.atomic_write

    def write(path: Path, data: bytes, *args: Any, **kwargs: Any) -> None:
        if path.name == "launch.json" and path.exists() and len(failures) < 5:
            failures.append(time.time())
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data, *args, **kwargs)

    monkeypatch.setattr(engine_launch, "atomic_write", write)
    _run_engine_in_process(setup, lambda engine: None)
    m = setup.manifests()["crash-once"]
    assert len(failures) == 5
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 1)
    assert kinds(setup, m["task_id"]).count("resumed") == 1
    assert not [r for r in caplog.records if r.exc_info], "an exception escaped a job"


# --------------------------------------------------------------------------- real tmpfs


def _fill(folder: Path) -> Path:
    """Write a file into ``folder`` until the filesystem refuses (ENOSPC)."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with open(filler, "ab", buffering=0) as handle:  # what a smaller write could still use
        try:
            while True:
                handle.write(b"\0")
        except OSError:
            pass
    return filler


def _captures(state: Path) -> set[str]:
    """How the capture processes writing under ``state`` run: "stdbuf sed" or "sed -u"."""
    import psutil

    found = set()
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if proc.info["name"] != "sed" or not any(
                str(state) in f.path for f in proc.open_files()
            ):
                continue
            found.add("sed -u" if "-u" in proc.info["cmdline"] else "stdbuf sed")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.mark.parametrize("capture", ["stdbuf sed", "sed -u"])
def test_full_state_disk_never_turns_a_success_into_a_crash(
    setup: Setup, small_fs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capture: str
) -> None:
    """The state filesystem (a real tmpfs) fills up while the agent runs; the agent exits 0
    into the full disk; space comes back. The task ends completed / PASS / retry_count 0,
    the condition is logged once each way, and events.jsonl holds whole lines only.

    Both captures: ``stdbuf -oL sed`` drops lines while the disk is full and goes on;
    ``sed -u`` (used where coreutils' stdbuf is missing) exits on its first failed write
    (measured here, GNU sed 4.9: "couldn't flush stdout", exit 4), so the engine must
    re-attach it once there is room."""
    if capture == "sed -u":  # a PATH without stdbuf: only what the capture command needs
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        for tool in ("tmux", "sed", "env"):
            found = shutil.which(tool)
            assert found is not None
            (bin_dir / tool).symlink_to(found)
        monkeypatch.setenv("PATH", str(bin_dir))
    setup.spool, setup.state = small_fs / "spool", small_fs / "state"
    setup.write_profile(
        base_interval=0.3, max_interval=1, max_retries=3, stale_threshold=2, grace_period=1,
        extra={"paths": {"spool_dir": str(setup.spool), "state_dir": str(setup.state)}},
    )  # fmt: skip
    setup.spool.mkdir(mode=0o700)
    setup.drop("d.toml", setup.task("diskfull", "tick: 0.2\nsleep: 2.5\nexit: 0",
                                    setup.project / "d"))  # fmt: skip
    # Prints through the full period and past it (64 KiB every 0.6 s, then ticks), so its
    # capture meets failing writes; neither may count as a hang, and the capture must
    # work again once there is room.
    setup.drop("s.toml", setup.task("steady", "flood: 1000000 9\ntick: 0.2\nsleep: 10\n"
                                    "exit: 0", setup.project / "s"))  # fmt: skip
    log = tmp_path / "engine.log"  # outside the full filesystem
    engine = start_engine(setup, log, "--exit-when-idle", "-v")
    try:
        pid_file = wait_for(
            lambda: next(setup.state.glob("tasks/diskfull-*/pid"), None), timeout=30
        )
        wait_for(lambda: len(list(setup.state.glob("tasks/*/pid"))) == 2, timeout=30)
        task = pid_file.parent
        wait_for(lambda: b"tick" in (task / "output.log").read_bytes(), timeout=60)
        assert _captures(setup.state) == {capture}  # the capture this run is about
        filler = _fill(small_fs)
        agent = int(pid_file.read_text())
        wait_for(lambda: not Path(f"/proc/{agent}").exists(), timeout=60)
        # Full for longer than the crash settle time and the stale threshold + grace.
        time.sleep(4.0)
        assert not (task / "done").exists() and not (task / "exit_code").exists()
        held_kinds = kinds(setup, task.name)
        freed_at = time.time()
        filler.unlink()
        engine.wait(timeout=60)
    finally:
        end_engine(engine, log)
    text = log.read_text(errors="replace")
    assert engine.returncode == 0, text[-3000:]
    manifests = setup.manifests()
    m, steady = manifests["diskfull"], manifests["steady"]
    for one in (m, steady):
        assert (one["status"], one["verdict"], one["retry_count"], one["exit_code"]) == (
            "completed", "PASS", 0, 0), (one, text[-3000:])  # fmt: skip
    events = kinds(setup, m["task_id"])
    for bad in ("crashed", "hung", "resumed", "stale", "abandoned"):
        assert bad not in events and bad not in held_kinds, (events, text[-3000:])
    # (Its first check with room may see output.log old and start a grace period: "stale"
    # then "fresh" is fine; a hang is not.)
    for bad in ("crashed", "hung", "resumed", "abandoned"):
        assert bad not in kinds(setup, steady["task_id"]), kinds(setup, steady["task_id"])
    # The capture was re-attached when space came back: ticks printed after that are there.
    ticks = [float(line.split()[1]) for line in steady["output_tail"].splitlines()
             if line.startswith("tick ")]  # fmt: skip
    assert ticks and max(ticks) > freed_at + 2, (ticks, freed_at)
    lines = (task / "events.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1] if line)
    assert text.count("is full") == 1 and text.count("has room again") == 1, text[-3000:]
    assert "Traceback" not in text and "raised an exception" not in text, text[-3000:]
    # finished_at is when the agent ended (kept in tmux while the disk was full).
    finished = parse_iso(m["finished_at"])
    assert finished is not None and finished < freed_at - 3.0, (m["finished_at"], freed_at)
    assert m["output_tail"]  # what was captured before the disk filled


def test_wrapper_keeps_pid_and_end_in_tmux_when_the_disk_is_full(
    small_fs: Path, socket_name: str
) -> None:
    """The wrapper, in a real tmux pane, on a full tmpfs: its ``pid``, ``exit_code`` and
    ``done`` go to pane options, which one ``list-panes`` returns and which the engine
    turns back into the files (done's mtime = the recorded end) once there is room."""
    from supervisor.engine import statefs
    from supervisor.tmux import Tmux

    folder = small_fs / "task"
    folder.mkdir()
    argv = [sys.executable, "-c", "import time; time.sleep(0.5); raise SystemExit(3)"]
    (folder / "launch.json").write_text(json.dumps({"argv": argv, "cwd": str(small_fs)}))
    filler = _fill(small_fs)
    tmux = Tmux(socket_name)
    began = time.time()
    tmux.launch("w", folder, small_fs)
    pane = wait_for(
        lambda: (p := tmux.panes().get("w")) is not None and p.recorded.get("done") and p,
        timeout=60,
    )
    assert sorted(f.name for f in folder.iterdir()) == ["launch.json", "output.log"]
    recorded = pane.recorded
    assert recorded["exit_code"] == "3" and int(recorded["pid"]) > 0, recorded
    ended = float(recorded["done"])
    assert began < ended < time.time()
    task = TaskDir(folder)
    with pytest.raises(OSError):  # still full: nothing written, values kept in tmux
        statefs.restore_run_files(task, pane)
    filler.unlink()
    assert statefs.restore_run_files(task, pane)
    assert (task.read_int("pid"), task.read_int("exit_code")) == (int(recorded["pid"]), 3)
    assert task.done_mtime() == pytest.approx(ended, abs=1e-3)
    assert not list(folder.glob(".*.tmp"))
    # A resume in the same pane starts from a clean slate.
    tmux.respawn("w", folder, small_fs)
    assert tmux.panes()["w"].recorded == {}


def test_abandon_reason_is_the_same_in_the_event_and_the_manifest(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent is killed with no retries left: ``abandoned`` (max_retries) is logged and
    the session cleaned up, but the manifest write fails (ENOSPC). The next check finds the
    session gone, which alone would read ``tmux_lost``; the logged ending is final."""
    from support.engine_in_process import _failing_manifest_writes

    setup.write_profile(base_interval=0.3, max_retries=0, stale_threshold=30)
    setup.drop("k.toml", setup.task("killed", "tick: 0.2\nsleep: 1\ncrash"))
    failing, attempts = _failing_manifest_writes(monkeypatch)

    def helper(engine: Any) -> None:
        pid = wait_for(lambda: next(setup.state.glob("tasks/*/pid"), None), timeout=60)
        failing.set()
        task = pid.parent.name
        wait_for(lambda: "abandoned" in kinds(setup, task), timeout=60)
        logged = len(attempts)
        wait_for(lambda: len(attempts) >= logged + 2, timeout=60)  # re-decided while failing
        failing.clear()

    _run_engine_in_process(setup, helper)
    m = setup.manifests()["killed"]
    ended = [e for e in setup.events(m["task_id"]) if e["event"] == "abandoned"]
    assert len(ended) == 1
    assert (m["status"], m["abandon_reason"]) == ("abandoned", ended[0]["abandon_reason"])
    assert m["abandon_reason"] == "max_retries"
    assert m["verdict"] == ended[0]["verdict"] == "ABANDONED"


def test_engine_restarted_on_a_full_disk_adopts_and_waits(
    setup: Setup, small_fs: Path, tmp_path: Path
) -> None:
    """``supervise run`` is stopped (the agents keep running in tmux), the state filesystem
    fills up, and ``supervise run --exit-when-idle`` starts again: it must adopt the running
    task although it cannot log the adoption, hold while full, and finish the task once
    there is room (not call itself idle and leave the task ``running`` forever)."""
    setup.spool, setup.state = small_fs / "spool", small_fs / "state"
    setup.write_profile(
        base_interval=0.3, max_interval=1, max_retries=3, stale_threshold=30,
        extra={"paths": {"spool_dir": str(setup.spool), "state_dir": str(setup.state)}},
    )  # fmt: skip
    setup.spool.mkdir(mode=0o700)
    setup.drop("a.toml", setup.task("adopted", "tick: 0.2\nsleep: 4\nexit: 0"))
    first_log, second_log = tmp_path / "engine1.log", tmp_path / "engine2.log"
    engine = start_engine(setup, first_log)
    try:
        pid_file = wait_for(lambda: next(setup.state.glob("tasks/*/pid"), None), timeout=30)
        engine.terminate()
        engine.wait(timeout=30)
    finally:
        end_engine(engine, first_log)
    filler = _fill(small_fs)
    second = start_engine(setup, second_log, "--exit-when-idle")
    try:
        agent = int(pid_file.read_text())
        wait_for(lambda: not Path(f"/proc/{agent}").exists(), timeout=60)
        time.sleep(2.5)  # longer than the crash settle time, while full
        assert second.poll() is None, second_log.read_text(errors="replace")[-3000:]
        filler.unlink()
        second.wait(timeout=60)
    finally:
        end_engine(second, second_log)
    text = second_log.read_text(errors="replace")
    m = setup.manifests()["adopted"]
    assert (m["status"], m["verdict"], m["retry_count"], m["exit_code"]) == (
        "completed", "PASS", 0, 0), text[-3000:]  # fmt: skip
    assert "crashed" not in kinds(setup, m["task_id"])
    assert "Traceback" not in text and "cannot adopt" not in text, text[-3000:]


def test_a_task_dropped_while_the_state_disk_is_full_waits_in_the_spool(
    setup: Setup, small_fs: Path, tmp_path: Path
) -> None:
    """A valid task file that lands while the state filesystem is full is never rejected
    for want of space: it stays in the spool and is claimed (and completes) once there is
    room. The spool is on another filesystem (tmp_path), the state on the full tmpfs."""
    setup.state = small_fs / "state"
    setup.write_profile(
        base_interval=0.3, max_interval=1, stale_threshold=30,
        extra={"paths": {"spool_dir": str(setup.spool), "state_dir": str(setup.state)}},
    )  # fmt: skip
    setup.spool.mkdir(mode=0o700, exist_ok=True)
    (setup.state / "tasks").mkdir(parents=True, mode=0o700)
    filler = _fill(small_fs)
    log_path = tmp_path / "engine.log"
    engine = start_engine(setup, log_path, "--exit-when-idle")
    try:
        setup.drop("late.toml", setup.task("late", "print: made it\nexit: 0"))
        time.sleep(2.0)  # several intake runs while full
        assert (setup.spool / "late.toml").exists(), log_path.read_text(errors="replace")
        assert not (setup.spool / "rejected").exists() or not any(
            (setup.spool / "rejected").iterdir()
        )
        filler.unlink()
        engine.wait(timeout=60)
    finally:
        end_engine(engine, log_path)
    m = setup.manifests()["late"]
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0)
