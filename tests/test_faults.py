"""Faults around the engine, with real tmux and real processes: the tmux server killed under
running tasks (resumed in a new server, or abandoned as ``tmux_lost``), manifest writes that
fail (disk full), a runaway agent flooding its log (rotation, bounded disk use, staleness
after rotation) and notifiers that fail or cannot be found. Intervals are about 0.3 s."""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import Setup, alive, wait_for
from support.engine_in_process import (
    END_LINE,
    _failing_manifest_writes,
    _run_engine_in_process,
    _text,
    end_engine,
    kinds,
    start_engine,
)

from supervisor.engine.scheduler import Engine
from supervisor.taskdir.folder import atomic_write
from supervisor.wrapper import END_MARK


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def named(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["event"] == name]


def server_pid(setup: Setup) -> int | None:
    result = setup.tmux("display-message", "-p", "#{pid}")
    return int(result.stdout.strip()) if result.returncode == 0 and result.stdout.strip() else None


def has_session(setup: Setup, task_id: str) -> bool:
    return setup.tmux("has-session", "-t", f"={task_id}").returncode == 0


def assert_clean_log(text: str) -> None:
    """No job of the engine died with an exception (APScheduler logs those and goes on)."""
    assert "Traceback" not in text and "raised an exception" not in text, text[-4000:]


# --------------------------------------------------------------------------- tmux killed


def test_tmux_server_killed_under_running_tasks_resumes_them(
    setup: Setup, tmp_path: Path, signal_cue: str
) -> None:
    """The server's death hangs up every pane: Claude Code then exits 129 by itself (the
    ``trap`` variant), an older agent dies from SIGHUP (``die``). Either way the session was
    lost, not finished: each task is resumed."""
    setup.write_profile(base_interval=0.3, max_interval=1, max_retries=3, stale_threshold=30)
    names = ("k1", "k2", "k3")
    for name in names:
        setup.drop(f"{name}.toml", setup.task(name, f"{signal_cue}tick: 0.3\nsleep: 2.5\nexit: 0",
                                              setup.project / name))  # fmt: skip
    log = tmp_path / "engine.log"
    engine = start_engine(setup, log)
    try:
        # All three agents run (each printed a tick) and the manifests say so.
        wait_for(lambda: len(setup.manifests()) == 3, timeout=60)
        ids = {name: m["task_id"] for name, m in setup.manifests().items()}
        tasks = {name: setup.state / "tasks" / ids[name] for name in names}
        wait_for(lambda: all("tick" in _text(t / "output.log") for t in tasks.values()))
        wait_for(lambda: all(m["status"] == "running" and m["pid"]
                             for m in setup.manifests().values()))  # fmt: skip
        first_agents = {n: int((setup.project / n / "agent_pid").read_text()) for n in names}
        old_server = server_pid(setup)
        assert old_server is not None

        assert setup.tmux("kill-server").returncode == 0
        killed_at = time.time()

        # Each task is seen crashed (session lost) and resumed in a new server; while the
        # resumed agent runs, the manifest says running with retry_count 1.
        for name in names:
            wait_for(lambda n=name: "resumed" in kinds(setup, ids[n]), timeout=60)
        for name in names:
            wait_for(lambda n=name: has_session(setup, ids[n]))
            m = wait_for(lambda n=name: (m := setup.manifests()[n])["retry_count"] == 1 and m)
            assert m["status"] in ("running", "completed"), m["status"]
        new_server = server_pid(setup)
        assert new_server is not None and new_server != old_server
        for name in names:
            assert not alive(first_agents[name]), "the first agent died with its server"

        wait_for(lambda: all(m["status"] == "completed" for m in setup.manifests().values()),
                 timeout=30)  # fmt: skip

        # The engine still answers: a task dropped now is claimed and completes.
        setup.drop("later.toml", setup.task("later", "print: after the fault\nexit: 0",
                                            setup.project / "later"))  # fmt: skip
        wait_for(lambda: setup.manifests().get("later", {}).get("status") == "completed",
                 timeout=60)  # fmt: skip

        engine.send_signal(signal.SIGTERM)
        assert engine.wait(timeout=60) == 0
    finally:
        end_engine(engine, log)

    manifests = setup.manifests()
    for name in names:
        m = manifests[name]
        assert (m["status"], m["retry_count"], m["exit_code"]) == ("completed", 1, 0)
        assert m["abandon_reason"] is None
        assert f"resumed session {m['session_id']}" in m["output_tail"]
        assert m["output_tail"].rstrip().endswith(END_LINE)
        events = setup.events(m["task_id"])
        order = [e["event"] for e in events]
        assert order.count("crashed") == 1 and order.count("resumed") == 1, order
        assert order.index("launched") < order.index("crashed") < order.index("resumed")
        assert order.index("resumed") < order.index("completed")
        crashed = named(events, "crashed")[0]
        assert "tmux session lost" in crashed["reason"]
        assert ts(crashed["ts"]) >= killed_at
        assert not has_session(setup, m["task_id"])
    assert (manifests["later"]["status"], manifests["later"]["retry_count"]) == ("completed", 0)
    assert_clean_log(log.read_text(errors="replace"))


def test_tmux_lost_for_good_is_abandoned_as_tmux_lost(setup: Setup, signal_cue: str) -> None:
    setup.write_profile(base_interval=0.3, max_interval=1, max_retries=1, stale_threshold=30)
    setup.drop("t.toml", setup.task("doomed-tmux", f"{signal_cue}tick: 0.3\nsleep: 30\nexit: 0"))
    kills: list[float] = []
    done = threading.Event()

    def killer() -> None:
        """Kill the tmux server each time it comes back with a running agent (bounded)."""
        end = time.time() + 40
        while not done.is_set() and time.time() < end and len(kills) < 5:
            # Only once this run's agent is up (it counted its run), so each kill hits a
            # running agent rather than one still starting.
            for folder in (setup.state / "tasks").glob("*"):
                runs = _text(setup.project / "fake_runs")
                if (
                    runs == str(len(kills) + 1)
                    and _text(folder / "pid").strip() == _text(setup.project / "agent_pid")
                    and has_session(setup, folder.name)
                ):
                    setup.tmux("kill-server")
                    kills.append(time.time())
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        result = setup.run(timeout=60)
    finally:
        done.set()
        thread.join(timeout=5)
    assert result.returncode == 0, result.stderr
    m = setup.manifests()["doomed-tmux"]
    assert (m["status"], m["abandon_reason"], m["retry_count"]) == ("abandoned", "tmux_lost", 1)
    assert m["abandoned_at"] and m["finished_at"]
    assert len(kills) == 2, kills  # the first launch and the one resume
    order = kinds(setup, m["task_id"])
    assert order.count("resumed") == 1 and order[-1] == "abandoned", order
    assert order.index("crashed") < order.index("resumed") < order.index("abandoned")
    assert int((setup.project / "fake_runs").read_text()) == 2
    assert not alive(int((setup.project / "agent_pid").read_text()))
    assert_clean_log(result.stderr)


def test_sigterm_while_a_check_is_busy_still_stops_the_engine(setup: Setup, tmp_path: Path) -> None:
    """SIGTERM arrives while a check job runs (here: stopping an agent that ignores
    SIGTERM, which takes STOP_TIMEOUT = 5 s). The engine lets that job finish, records its
    result, and exits 0: it never hangs on shutdown."""
    setup.write_profile(base_interval=0.3, deadline=1.0, stale_threshold=30)
    setup.drop("s.toml", setup.task("stubborn", "ignore_term\ntick: 0.3\nsleep: 60"))
    log = tmp_path / "engine.log"
    engine = start_engine(setup, log)
    try:
        task_id = wait_for(lambda: next(iter(setup.manifests().values()), {}).get("task_id"))
        # The terminal event is appended before the actions run: the check is now busy
        # stopping the agent (SIGTERM ignored, SIGKILL after 5 s).
        wait_for(lambda: "abandoned" in kinds(setup, task_id), timeout=60)
        engine.send_signal(signal.SIGTERM)
        code = engine.wait(timeout=60)
    finally:
        end_engine(engine, log)
    assert code == 0
    m = setup.manifests()["stubborn"]
    assert (m["status"], m["abandon_reason"]) == ("abandoned", "deadline")
    assert named(setup.events(task_id), "agent_stopped")[0]["killed"] is True
    assert not alive(int((setup.project / "agent_pid").read_text()))
    assert "engine stopped" in _text(log)
    assert_clean_log(_text(log))


def test_manifest_write_fails_with_enospc_then_recovers(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="supervise")
    setup.write_profile(base_interval=0.3, stale_threshold=30)
    setup.drop("w.toml", setup.task("diskfull", "tick: 0.2\nsleep: 1.5\nexit: 0"))
    failing, attempts = _failing_manifest_writes(monkeypatch)
    seen: dict[str, Any] = {"changed": [], "snapshot": None}

    def helper(engine: Engine) -> None:
        path = wait_for(lambda: next(setup.state.glob("tasks/*/manifest.json"), None))
        task = path.parent
        wait_for(lambda: json.loads(path.read_bytes())["pid"], timeout=60)
        snapshot = path.read_bytes()
        seen["snapshot"] = snapshot
        failing.set()
        # The disk stays full until the agent has ended and the engine has tried (and
        # failed) to record the final status a few times.
        end = time.time() + 30
        while time.time() < end:
            current = path.read_bytes()
            if current != snapshot:
                seen["changed"].append(current)
            if (task / "done").exists() and len(
                [t for t in attempts if t > (task / "done").stat().st_mtime]
            ) >= 3:
                break
            time.sleep(0.01)
        seen["events_while_full"] = kinds(setup, task.name)
        failing.clear()

    _run_engine_in_process(setup, helper)

    snapshot = json.loads(seen["snapshot"])
    assert snapshot["status"] == "running"
    assert seen["changed"] == [], "manifest.json changed while every write failed"
    assert "completed" in seen["events_while_full"]  # the write-ahead event came first
    m = setup.manifests()["diskfull"]
    path = setup.state / "tasks" / m["task_id"] / "manifest.json"
    assert (m["status"], m["exit_code"], m["retry_count"]) == ("completed", 0, 0)
    # finished_at is when the agent ended (the done-file), not when the disk had room again.
    done_at = (path.parent / "done").stat().st_mtime
    assert abs(ts(m["finished_at"]) - done_at) < 0.01
    # Manifest times have millisecond resolution (utc_iso): a check in the millisecond of
    # the last failed attempt reads back as up to 1 ms before it.
    assert ts(m["last_checked_at"]) > max(attempts) - 0.001
    assert m["output_tail"].rstrip().endswith(END_LINE)
    assert kinds(setup, m["task_id"]).count("completed") == 1  # never recorded twice
    assert not list(path.parent.glob(".manifest.json.*.tmp"))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors, "the failed writes were not logged"
    for message in errors:
        assert str(path) in message and "No space left on device" in message, message
    assert not [r for r in caplog.records if r.exc_info], "an exception escaped a job"
    assert not has_session(setup, m["task_id"])


def test_manifest_write_fails_at_launch_then_recovers(
    setup: Setup, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk is full right when the task is launched (its manifest exists: written at
    the claim). The launch must not be lost: the task is watched and reaches its end."""
    caplog.set_level(logging.INFO, logger="supervise")
    setup.write_profile(base_interval=0.3, stale_threshold=30)
    failing, attempts = _failing_manifest_writes(monkeypatch)
    failing.set()
    setup.drop("l.toml", setup.task("fullatlaunch", "tick: 0.2\nsleep: 1.5\nexit: 0"))

    def helper(engine: Engine) -> None:
        path = wait_for(lambda: next(setup.state.glob("tasks/*/manifest.json"), None))
        wait_for(lambda: (path.parent / "pid").exists(), timeout=60)
        wait_for(lambda: len(attempts) >= 3, timeout=60)  # it tried again, and again
        assert json.loads(path.read_bytes())["status"] == "queued"  # old manifest intact
        failing.clear()

    _run_engine_in_process(setup, helper)

    m = setup.manifests()["fullatlaunch"]
    assert (m["status"], m["exit_code"]) == ("completed", 0), m["status"]
    assert m["output_tail"].rstrip().endswith(END_LINE)
    assert not has_session(setup, m["task_id"])
    assert not [r for r in caplog.records if r.exc_info], [
        r.getMessage() for r in caplog.records if r.exc_info
    ]


def _old_file_and_no_temp(path: Path, old: bytes) -> None:
    assert path.read_bytes() == old
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_atomic_write_failure_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    path = tmp_path / "d" / "manifest.json"
    path.parent.mkdir()
    old = b'{"status": "running"}\n'
    atomic_write(path, old)

    def enospc(*_: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, step, enospc)
    with pytest.raises(OSError) as caught:
        atomic_write(path, b'{"status": "completed"}\n')
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    _old_file_and_no_temp(path, old)


def test_atomic_write_real_write_error_keeps_the_old_file(tmp_path: Path) -> None:
    """A real failing write(2): the file size limit (RLIMIT_FSIZE) makes the kernel refuse
    the write with EFBIG, as a full disk refuses it with ENOSPC. In a child process, so the
    limit does not touch pytest."""
    path = tmp_path / "d" / "manifest.json"
    path.parent.mkdir()
    old = b'{"status": "running"}\n'
    atomic_write(path, old)
    code = f"""
import errno, resource, signal, sys
from pathlib import Path
from supervisor.taskdir.folder import atomic_write
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, {resource.RLIM_INFINITY}))
try:
    atomic_write(Path({str(path)!r}), b"x" * 100_000)
except OSError as exc:
    print(errno.errorcode[exc.errno], exc)
    sys.exit(0)
sys.exit("the write did not fail")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("EFBIG"), result.stdout
    _old_file_and_no_temp(path, old)


# --------------------------------------------------------------------------- runaway output


def _sizes(task: Path) -> dict[str, int]:
    out = {}
    for p in task.glob("output.log*"):
        try:
            out[p.name] = p.stat().st_size
        except FileNotFoundError:
            continue
    return out


def test_runaway_output_is_rotated_and_staleness_still_works(setup: Setup) -> None:
    max_bytes, backups, interval = 65536, 2, 0.25
    setup.write_profile(
        base_interval=interval, max_interval=1, stale_threshold=1.0, grace_period=0.5,
        max_retries=2, max_log_bytes=max_bytes, log_backups=backups,
    )  # fmt: skip
    # Each run prints 3 MB at up to 1.5 MB/s (slower if the capture cannot keep up): about
    # 45 times max_log_bytes, over at least 8 checks.
    flood, flood_seconds = 3_000_000, 2.0
    setup.drop("a.toml", setup.task("runaway", f"flood: {flood} {flood_seconds}\ntick: 0.2\n"
                                    "sleep: 1.5\nexit: 0", setup.project / "a"))  # fmt: skip
    setup.drop("b.toml", setup.task("flood-hang", f"flood: {flood} {flood_seconds}\n"
                                    "hang_runs: 1\ntick: 0.2\nsleep: 1\nexit: 0",
                                    setup.project / "b"))  # fmt: skip
    samples: dict[str, dict[str, int]] = {}  # task folder -> the largest values seen
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            for task in (setup.state / "tasks").glob("*"):
                sizes = _sizes(task)
                seen = samples.setdefault(task.name, {"total": 0, "files": 0})
                seen["total"] = max(seen["total"], sum(sizes.values()))
                seen["files"] = max(seen["files"], len(sizes))
            time.sleep(0.01)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        result = setup.run(timeout=80)
    finally:
        stop.set()
        thread.join(timeout=5)
    assert result.returncode == 0, result.stderr
    manifests = setup.manifests()
    a, b = manifests["runaway"], manifests["flood-hang"]
    a_events, b_events = kinds(setup, a["task_id"]), kinds(setup, b["task_id"])
    # An agent that never stops printing is never stale, however often its log rotates.
    assert "stale" not in a_events and "hung" not in a_events, a_events
    assert (a["status"], a["retry_count"], a["exit_code"]) == ("completed", 0, 0)
    # Staleness still works after rotations: the agent that went silent after its flood is
    # found stale, then hung after the grace period, and resumed (and only that once).
    assert (b["status"], b["retry_count"], b["exit_code"]) == ("completed", 1, 0)
    assert (b_events.count("stale"), b_events.count("hung")) == (1, 1), b_events
    assert b_events.index("stale") < b_events.index("hung") < b_events.index("resumed")
    assert b_events.index("resumed") < b_events.index("completed")

    for m, project in ((a, setup.project / "a"), (b, setup.project / "b")):
        task = setup.state / "tasks" / m["task_id"]
        sizes = _sizes(task)
        # Rotation happened, and never more than log_backups old files were kept.
        assert set(sizes) == {"output.log", "output.log.1", "output.log.2"}, sizes
        assert samples[m["task_id"]]["files"] <= backups + 1
        # The agent's last lines are in output.log and in output_tail.
        text = (task / "output.log").read_text()
        last_tick = [line for line in text.splitlines() if line.startswith("tick ")][-1]
        ending = f"{last_tick}\nfake-agent done, exit 0\n\n{END_LINE}"
        assert text.rstrip().endswith(ending), text[-500:]
        assert m["output_tail"].rstrip().endswith(ending)
        # After the flood the agent printed only short lines for several checks, and
        # output.log is rotated at the first check past max_log_bytes: it holds only those.
        assert sizes["output.log"] <= max_bytes
        # Bound on disk use. output.log is rotated at every check where it is past
        # max_log_bytes, so a file holds at most max_log_bytes (its size at the previous
        # check) + B, what the flood writes in one check period, + C, what was in flight
        # (one 64 KiB write of the agent and one 64 KiB pipe buffer) when the re-pipe
        # closed the old capture. B = R * P: R is the rate the agent measured, P is
        # base_interval + 0.5 s (a check may wait behind the other task's check on the
        # single worker, e.g. a stop or a resume that waits for the new PID).
        runs = [line.split() for line in (project / "flood_times").read_text().splitlines()]
        rate = max(int(n) / float(took) for n, took in runs)
        per_file = max_bytes + rate * (interval + 0.5) + 2 * 65536
        # At the end: the small output.log and log_backups rotated files.
        kept = sum(sizes.values())
        assert kept <= max_bytes + backups * per_file, (sizes, rate)
        # At any moment: output.log and the backups.
        assert samples[m["task_id"]]["total"] <= (backups + 1) * per_file, (samples, rate)
        # The bound means something: most of the flood is gone.
        assert kept < flood / 2, (sizes, rate)

    # No capture process (sed) is left writing into any task's files.
    for proc in psutil.process_iter(["name"]):
        try:
            files = [f.path for f in proc.open_files()]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        assert not [f for f in files if str(setup.state) in f], (proc.info, files)
    assert_clean_log(result.stderr)


# --------------------------------------------------------------------------- notifiers


@pytest.mark.parametrize("kind", ["fails", "missing"])
def test_broken_notifier_does_not_block_cleanup(setup: Setup, tmp_path: Path, kind: str) -> None:
    if kind == "fails":
        ran = tmp_path / "notifier-ran"
        notifier = [sys.executable, "-c", f"import sys; open({str(ran)!r}, 'a').write('x'); "
                    "print('notifier broke', file=sys.stderr); sys.exit(3)"]  # fmt: skip
    else:
        notifier = [str(tmp_path / "no-such-notifier"), "{message}"]
    setup.write_profile(base_interval=0.3, notifier=notifier, stale_threshold=30,
                        notify_on=["completed", "failed"])  # fmt: skip
    setup.drop("ok.toml", setup.task("ok", "print: fine\nexit: 0", setup.project / "ok"))
    setup.drop("bad.toml", setup.task("bad", "print: broken\nexit: 5", setup.project / "bad"))
    result = setup.run(timeout=60)
    assert result.returncode == 0, result.stderr
    manifests = setup.manifests()
    expected = {"ok": ("completed", 0), "bad": ("failed", 5)}
    for name, (status, code) in expected.items():
        m = manifests[name]
        assert (m["status"], m["exit_code"]) == (status, code)
        assert m["finished_at"] and m["output_tail"].rstrip().endswith(
            f"{END_MARK} agent exited with code {code}"
        )
        assert not has_session(setup, m["task_id"]), "cleanup still happened"
        notified = named(setup.events(m["task_id"]), "notified")
        assert len(notified) == 1, notified
        assert notified[0]["notified_event"] == status
        assert notified[0]["notifier_exit_code"] == (3 if kind == "fails" else None)
    if kind == "fails":
        assert ran.read_text() == "xx"
        assert result.stderr.count("exited 3: notifier broke") == 2, result.stderr
    else:
        assert result.stderr.count(f"notifier {notifier[0]} could not run") == 2, result.stderr
        assert "No such file or directory" in result.stderr
    assert_clean_log(result.stderr)
