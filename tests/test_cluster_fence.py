"""Fencing in the fleet (issue 20): a task runs on at most one host at any moment, also
when only an engine dies (its tmux server and agents live on), and a returning host checks
ownership before it records an ending, notifies or runs acceptance.

Real PostgreSQL (``tests/support/cluster_support.py``), real engines, real tmux, the fake agent's
brain; each agent run stamps its start and end (``stamp:`` cue of ``tests/support/fake_agent.py``).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for
from support import cluster_engines, cluster_hosts
from support.cluster_engines import rows, start_engine, stop_engines, wait_beats
from support.cluster_hosts import HOST_TIMEOUT, cleanup, host, state_of, submit
from support.faketime_support import require_libfaketime, step_clock

from supervisor.cluster.lease import fence_of
from supervisor.taskdir.layout import CLUSTER_LEASE

psycopg = pytest.importorskip("psycopg")

server, dsn = cluster_engines.server, cluster_hosts.dsn


def runs(stamps: Path) -> list[dict[str, Any]]:
    """The agent runs a ``stamp:`` file records, in start order: ``host`` (the task folder's
    host directory name), ``start`` and ``end`` (epoch s; ``None``: no end line)."""
    found: list[dict[str, Any]] = []
    for line in stamps.read_text().splitlines():
        what, at, task_dir = line.split(" ", 2)
        name = Path(task_dir).parents[2].name  # <host>/state/tasks/<id>
        if what == "start":
            found.append({"host": name, "start": float(at), "end": None})
        else:  # a second end line (a SIGTERM right after the exit's) adds nothing
            open_runs = [r for r in found if r["host"] == name and r["end"] is None]
            if open_runs:
                open_runs[-1]["end"] = float(at)
    return found


# ---------------------------------------------------------------- the wrapper's fence

WRAPPER = Path(__file__).resolve().parent.parent / "supervisor" / "wrapper.py"
#: An agent that stamps its start and how it ended; ``ignore`` makes it ignore SIGTERM.
AGENT = (
    "import signal, sys, time, os\n"
    "out = open(sys.argv[1], 'a', buffering=1)\n"
    "def term(*_):\n"
    "    os.write(out.fileno(), b'term\\n')\n"
    "    if sys.argv[2] != 'count': os._exit(143)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN if sys.argv[2] == 'ignore' else term)\n"
    "out.write('start\\n')\n"
    "time.sleep(float(sys.argv[3])); out.write('end\\n')\n"
)


def _wrapped(tmp_path: Path, lease: Path, mode: str, runs_for: float, expiry: float = 1.5,
             env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path, Path]:  # fmt: skip
    """The wrapper run as tmux would (a session and process group of its own) over
    :data:`AGENT`, fenced by ``lease``; returns it, its task folder and the agent's log."""
    task_dir, log = tmp_path / "task", tmp_path / "agent.log"
    task_dir.mkdir()
    fence = {"path": str(lease), "expiry": expiry, "poll": 0.05, "grace": 0.5}
    # The agent never sees the wrapper's LD_PRELOAD (libfaketime): only the wrapper's clock
    # is under test.
    spec = {"argv": [sys.executable, "-c", AGENT, str(log), mode, str(runs_for)],
            "env": {"LD_PRELOAD": ""},
            "cwd": str(tmp_path), "resume_exit_codes": [], "lease": fence}  # fmt: skip
    (task_dir / "launch.json").write_text(json.dumps(spec))
    wrapper = subprocess.Popen([sys.executable, "-I", "-S", str(WRAPPER), str(task_dir)],
                               stdout=subprocess.DEVNULL, start_new_session=True,
                               env={**os.environ, **(env or {})})  # fmt: skip
    wait_for(lambda: log.exists() and "start" in log.read_text(), timeout=60)
    return wrapper, task_dir, log


def test_wrapper_stops_its_agent_when_the_lease_is_not_renewed(tmp_path: Path) -> None:
    """Renewed (the record changes), the agent runs on past the expiry; once renewals stop,
    it gets SIGTERM within expiry + a poll, and no done-file is written."""
    lease = tmp_path / "lease"
    lease.write_bytes(b"held 1 0")
    wrapper, task_dir, log = _wrapped(tmp_path, lease, "trap", 30)
    try:
        for n in range(1, 61):  # 3 s of renewals: twice the expiry
            lease.write_bytes(f"held 1 {n}".encode())
            time.sleep(0.05)  # the renewal cadence under test (expiry 1.5 s)
        assert "term" not in log.read_text()
        stopped = time.monotonic()
        assert wrapper.wait(timeout=60) == 143
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
    assert log.read_text().splitlines() == ["start", "term"]
    assert time.monotonic() - stopped >= 1.5
    assert (task_dir / "exit_code").read_text() == "143\n"
    assert not (task_dir / "done").exists()


def test_wrapper_kills_an_agent_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    """A stubborn agent (SIGTERM ignored) is SIGKILLed after the grace; the wrapper, spared,
    records signal 9 and no done-file."""
    lease = tmp_path / "lease"
    lease.write_bytes(b"held 1 0")
    wrapper, task_dir, _ = _wrapped(tmp_path, lease, "ignore", 30)
    try:
        assert wrapper.wait(timeout=10) == 128 + 9
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
    assert (task_dir / "signal").read_text() == "9\n"
    assert not (task_dir / "done").exists()


def test_wrapper_fence_ignores_wall_clock_steps(tmp_path: Path) -> None:
    """The wrapper's wall clock stepped an hour forward, then back (libfaketime; the
    monotonic clock untouched, as NTP leaves it) while the lease is renewed: the agent runs
    on. Renewals stopping still stop it."""
    library = require_libfaketime()
    lease, step = tmp_path / "lease", tmp_path / "faketime"
    lease.write_bytes(b"held 1 0")
    step.write_text("+0")
    env = {
        "LD_PRELOAD": str(library),
        "FAKETIME_TIMESTAMP_FILE": str(step),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    wrapper, task_dir, log = _wrapped(tmp_path, lease, "trap", 30, env=env)
    try:
        for n, offset in enumerate(["+1h", "+1h", "-1h", "-1h", "+0"] * 12, 1):
            step_clock(step, offset)
            lease.write_bytes(f"held 1 {n}".encode())
            time.sleep(0.06)  # the cadence of renewals and clock steps under test
        assert "term" not in log.read_text() and wrapper.poll() is None
        assert wrapper.wait(timeout=60) == 143
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
    assert log.read_text().splitlines() == ["start", "term"]
    assert not (task_dir / "done").exists()


def test_a_fenced_agent_gets_one_sigterm(tmp_path: Path) -> None:
    """The fence signals the agent's whole process group, the wrapper included: the wrapper
    does not pass that SIGTERM on a second time (an agent that handles the first slowly,
    as the test agent's buffered log once did, met the second inside its handler)."""
    lease = tmp_path / "lease"
    lease.write_bytes(b"held 1 0")
    wrapper, _task_dir, log = _wrapped(tmp_path, lease, "count", 5, expiry=0.3)
    try:
        wrapper.wait(timeout=10)
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
    assert log.read_text().splitlines() == ["start", "term"]


@pytest.mark.parametrize("kind", ["released", "fifo"])
def test_wrapper_released_lease_runs_on_a_fifo_never_blocks(tmp_path: Path, kind: str) -> None:
    """A released lease (a clean stop) never expires: the agent ends on its own with its
    done-file. A lease path swapped for a FIFO does not block the wrapper's look: it reads
    as not renewed and the agent is stopped."""
    lease = tmp_path / "lease"
    if kind == "fifo":
        os.mkfifo(lease)
    else:
        lease.write_bytes(b"released 1")
    wrapper, task_dir, log = _wrapped(tmp_path, lease, "trap", 1.5, expiry=0.3)
    try:
        code = wrapper.wait(timeout=60)
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
    if kind == "released":
        assert (code, log.read_text().splitlines()) == (0, ["start", "end"])
        assert (task_dir / "done").exists()
    else:
        assert (code, log.read_text().splitlines()) == (143, ["start", "term"])
        assert not (task_dir / "done").exists()


def test_engine_only_crash_fences_the_orphan_before_the_task_runs_elsewhere(
    tmp_path: Path, dsn: str
) -> None:
    """h0's engine alone is SIGKILLed; its tmux server and agent live on. The wrapper stops
    the orphaned agent once the engine's lease has gone unrenewed, before the sweeper
    (host_timeout later) restarts the task on h1: the two runs never overlap, and the orphan
    ran no longer after its engine died than the stated bound (lease + 2 polls + grace)."""
    h0 = host(tmp_path, dsn, "h0", on_host_lost="restart")
    h1 = host(tmp_path, dsn, "h1")
    stamps = tmp_path / "stamps"
    engines: dict[str, Any] = {"h0": start_engine(h0)}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 30)
        task = submit(dsn, h0, "long", f"stamp: {stamps}\nsleep: 12\nexit: 0")
        wait_for(lambda: state_of(dsn, task)[:2] == ("running", "h0"), timeout=30)
        wait_for(lambda: stamps.exists(), timeout=60)
        engines["h1"] = start_engine(h1)
        wait_for(lambda: len(rows(dsn, "SELECT 1 FROM supervise_hosts")) == 2, timeout=30)
        killed = time.time()
        engines["h0"].kill()
        engines.pop("h0").wait()
        wait_for(lambda: state_of(dsn, task)[:2] == ("completed", "h1"), timeout=60)
    finally:
        cleanup([h0, h1], list(engines.values()))
    found = runs(stamps)
    assert [r["host"] for r in found] == ["h0", "h1"], found
    orphan, new = found
    assert orphan["end"] is not None, "the orphan on h0 was never stopped"
    fence = fence_of(HOST_TIMEOUT, 0.5)
    ran_on = orphan["end"] - killed
    print(f"orphan ran {ran_on:.2f} s after its engine died (bound {fence.bound:.2f} s, "
          f"host_timeout {HOST_TIMEOUT} s); new run started {new['start'] - killed:.2f} s "
          "after the kill")  # fmt: skip
    assert orphan["end"] < new["start"], found
    assert ran_on <= fence.bound + 1.0  # + scheduling slack on a loaded machine


def test_returning_host_records_no_pass_for_a_superseded_copy(tmp_path: Path, dsn: str) -> None:
    """h0's engine is SIGKILLed; its agent exits 0 while the engine is down, and the sweeper
    (simulated as its contract says) gave the task a newer generation meanwhile. h0 back
    records the copy ``superseded``: never ``completed``, no acceptance run, no PASS
    notified."""
    accepted, notified = tmp_path / "accepted", tmp_path / "notified"
    notifier = [sys.executable, "-c", "import sys, pathlib; pathlib.Path(sys.argv[1]).open('a')"
                ".write(sys.stdin.read() + '\\n')", str(notified)]  # fmt: skip
    h0 = host(tmp_path, dsn, "h0", host_timeout=30.0)
    table = {"host_id": "h0", "dsn": dsn, "heartbeat": 0.5}
    h0.write_profile(max_concurrent=2, max_retries=0, notifier=notifier, extra={"cluster": table})
    check = [sys.executable, "-c", f"open({str(accepted)!r}, 'w').write('ran')"]
    engines: dict[str, Any] = {"h0": start_engine(h0)}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 30)
        task = submit(dsn, h0, "short", "sleep: 3\nexit: 0", acceptance={"command": check})
        wait_for(lambda: state_of(dsn, task)[:2] == ("running", "h0"), timeout=30)
        engines["h0"].kill()
        engines.pop("h0").wait()
        rows(dsn, "UPDATE supervise_tasks SET state = 'host_lost', generation = generation + 1 "
                  "WHERE id = %s RETURNING id", task)  # fmt: skip
        done = h0.state / "tasks" / task / "done"
        wait_for(done.exists, timeout=60)  # the agent ended on its own while no engine ran
        engines["h0"] = start_engine(h0)
        manifest = h0.state / "tasks" / task / "manifest.json"
        wait_for(lambda: json.loads(manifest.read_text())["status"] in ("superseded",
                 "completed", "failed"), timeout=30)  # fmt: skip
        wait_beats(dsn, "h0")  # an acceptance check or notifier started now would have run
    finally:
        cleanup([h0], list(engines.values()))
    record = json.loads(manifest.read_text())
    assert record["status"] == "superseded", record
    assert not accepted.exists()
    assert "PASS" not in (notified.read_text() if notified.exists() else "")
    events = [json.loads(line)["event"] for line in (manifest.parent / "events.jsonl")
              .read_text().splitlines()]  # fmt: skip
    assert "completed" not in events and "verifying" not in events
    assert state_of(dsn, task)[0] == "host_lost"
    assert os.path.exists(manifest)


# ---------------------------------------------------------------- the fleet chaos test


def _lose_whole_host(setup: Any, engine: Any) -> float:
    """A machine lost: its agents, engine and tmux server SIGKILLed by PID, agents first (a
    pane's hangup would let an agent stamp an end no lost machine writes). Returns the
    time of the loss (epoch s)."""
    from support.cluster_hosts import kill_pid

    server_pid = setup.tmux("display-message", "-p", "#{pid}").stdout.strip()
    at = time.time()
    for pid_file in (setup.state / "tasks").glob("*/pid"):
        if pid_file.read_text().strip():
            kill_pid(int(pid_file.read_text()))
    engine.kill()
    engine.wait()
    if server_pid:
        kill_pid(int(server_pid))
    return at


def _overlaps(found: list[dict[str, Any]], ends: dict[str, float]) -> int:
    """Pairs of consecutive runs of one task where the later started before the earlier
    ended; a run with no end line ended at ``ends[host]`` (its machine was lost), or never
    (an orphan nobody stopped: it overlaps whatever came after it)."""
    count = 0
    for before, after in itertools.pairwise(found):
        end = before["end"] if before["end"] is not None else ends.get(before["host"])
        if end is None or end >= after["start"]:
            count += 1
    return count


def _started(stamps: Path, host_id: str) -> int:
    """Agent runs started on ``host_id`` so far, over every task's stamp file."""
    try:
        return sum(r["host"] == host_id for f in stamps.iterdir() for r in runs(f))
    except ValueError:  # a line being written right now
        return 0


@pytest.mark.slow
def test_fleet_chaos_no_task_runs_twice_at_once_and_none_is_lost(tmp_path: Path) -> None:
    """Three engines (restart on host loss) run 9 tasks of 20 s. h0's engine alone is SIGKILLed
    (its tmux server and agents live on), h1 is lost whole (agents, engine, tmux server),
    and PostgreSQL is restarted at once; h0's engine comes back once the sweeper declared
    it dead. Every agent run stamps its start, end and host: no two runs of a task
    overlap, every task completes, and no orphan of h0 ran longer after its engine died
    than README's bound."""
    from support.cluster_engines import supervise
    from support.cluster_support import postgres_executor, wait_ready

    with postgres_executor() as (url, server):
        assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": url}).returncode == 0
        # h0 and h1 fill up first (3 tasks each); h2 runs 3 and keeps 6 slots free, so the
        # sweeper's restarts start at once on a host with room (a full fleet would hide a
        # doubled run: the returning h0 waits for its own copies before running them).
        hosts = [host(tmp_path, url, f"h{i}", max_concurrent=3 if i < 2 else 9,
                      on_host_lost="restart") for i in range(3)]  # fmt: skip
        engines: dict[str, Any] = {}
        stamps = tmp_path / "stamps"
        stamps.mkdir()

        def task(i: int) -> str:
            prompt = f"stamp: {stamps}/t{i}\nsleep: 20\nexit: 0"
            return submit(url, hosts[0], f"t{i}", prompt)

        try:
            for setup in hosts[:2]:
                engines[setup.root.name] = start_engine(setup)
            wait_for(lambda: len(rows(url, "SELECT 1 FROM supervise_hosts")) == 2, timeout=30)
            ids = [task(i) for i in range(6)]
            wait_for(lambda: _started(stamps, "h0") == 3 and _started(stamps, "h1") == 3,
                     timeout=30)  # fmt: skip
            engines["h2"] = start_engine(hosts[2])
            wait_for(lambda: len(rows(url, "SELECT 1 FROM supervise_hosts")) == 3, timeout=30)
            ids += [task(i) for i in range(6, 9)]
            wait_for(lambda: _started(stamps, "h2") == 3, timeout=30)
            killed_h0 = time.time()
            engines.pop("h0").kill()
            killed_h1 = _lose_whole_host(hosts[1], engines.pop("h1"))
            server.stop()
            time.sleep(1.0)  # the database outage under test
            server.start()
            wait_ready(url)
            dead = "SELECT 1 FROM supervise_hosts WHERE host_id = 'h0' AND state = 'dead'"
            wait_for(lambda: rows(url, dead), timeout=HOST_TIMEOUT + 20)
            engines["h0"] = start_engine(hosts[0])
            done = "SELECT count(*) FROM supervise_tasks WHERE state = 'completed'"
            wait_for(lambda: rows(url, done) == [(9,)], timeout=75)
            final = dict(rows(url, "SELECT id, state FROM supervise_tasks"))
        finally:
            cleanup(hosts, list(engines.values()))
    by_task = {i: runs(stamps / f"t{n}") for n, i in enumerate(ids)}
    assert sorted(r["host"] for f in by_task.values() for r in f[:1]) == ["h0"] * 3 + [
        "h1"] * 3 + ["h2"] * 3  # fmt: skip
    ends = {"h1": killed_h1}
    overlapping = sum(_overlaps(found, ends) for found in by_task.values())
    lost = [i for i in ids if final.get(i) != "completed"
            or not any(r["end"] is not None and r["host"] != "h1" for r in by_task[i])]  # fmt: skip
    orphans = [None if r["end"] is None else r["end"] - killed_h0 for found in by_task.values()
               for r in found if r["host"] == "h0" and r["start"] < killed_h0]  # fmt: skip
    bound = fence_of(HOST_TIMEOUT, 0.5).bound
    longest = max([o for o in orphans if o is not None], default=0.0)
    print(f"\nfleet chaos: {len(ids)} tasks, {sum(len(f) for f in by_task.values())} runs, "
          f"hosts killed 2 (h0 engine only, h1 whole), PostgreSQL restarted; overlapping "
          f"runs {overlapping}, lost {len(lost)}; longest orphan run after its engine died "
          f"{longest:.2f} s (README bound lease + 2 polls + grace = {bound:.2f} s at "
          f"host_timeout {HOST_TIMEOUT} s, heartbeat 0.5 s)")  # fmt: skip
    assert overlapping == 0, by_task
    assert lost == [], by_task
    assert orphans and None not in orphans
    assert longest <= bound + 1.0  # + scheduling slack on a loaded machine


def test_a_heartbeat_that_would_spin_the_lease_is_one_line(setup: Any) -> None:
    """``heartbeat = 1e-9`` would rewrite the lease (and beat) without pause: refused in one
    line naming the file and the key, with the floor."""
    from support.cluster_engines import supervise

    profile = setup.write_profile(extra={"cluster": {"heartbeat": 1e-9, "host_timeout": 1}})
    result = supervise("validate", str(profile))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert str(profile) in line and "cluster.heartbeat" in line and "0.1" in line


def test_a_host_timeout_too_close_to_the_heartbeat_is_one_line(setup: Any) -> None:
    """The fence needs a gap between heartbeat and host_timeout (it renews every eighth of
    it): 0.15 s against 0.1 s is refused in one line."""
    from support.cluster_engines import supervise

    profile = setup.write_profile(extra={"cluster": {"heartbeat": 0.1, "host_timeout": 0.15}})
    result = supervise("validate", str(profile))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert str(profile) in line and "must exceed heartbeat (0.1 s) by at least 0.4 s" in line


# ---------------------------------------------------------------- a clean stop (issue 25)


def test_a_released_lease_with_seconds_stops_the_agent_after_them(tmp_path: Path) -> None:
    """``released PID SECONDS``: the agent runs on for those seconds, then the wrapper stops
    it as an expired lease does (SIGTERM, no done-file). Without seconds it runs on (the
    fence test's released case)."""
    lease = tmp_path / "lease"
    lease.write_bytes(b"released 1 0.3")
    wrapper, task_dir, log = _wrapped(tmp_path, lease, "trap", 30, expiry=60)
    try:
        assert wrapper.wait(timeout=20) == 143
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
    assert log.read_text().splitlines() == ["start", "term"]
    assert not (task_dir / "done").exists()


def test_a_stopped_hosts_task_runs_elsewhere_after_the_grace_never_twice(
    tmp_path: Path, dsn: str
) -> None:
    """h0 (restart, stopped_host_grace 5 s) is stopped cleanly while its task runs: it is
    ``stopped``, the task ``running`` on it; after the grace its agent is stopped (the
    released lease), then the sweeper queues the task again and h1 runs it to the end. The
    two runs never overlap (the agent's own start/end stamps)."""
    stamps = tmp_path / "stamps"
    h0 = host(tmp_path, dsn, "h0", on_host_lost="restart", stopped_host_grace=5.0)
    h1 = host(tmp_path, dsn, "h1")
    engines = {"h0": start_engine(h0)}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 30)
        task = submit(dsn, h0, "long", f"stamp: {stamps}\nsleep: 20\nexit: 0")
        wait_for(lambda: state_of(dsn, task)[:2] == ("running", "h0"), timeout=30)
        stop_engines([engines.pop("h0")])
        assert rows(dsn, "SELECT state FROM supervise_hosts WHERE host_id = 'h0'") == [("stopped",)]
        released = (h0.state / CLUSTER_LEASE).read_bytes().split()
        run_on = 5.0 - fence_of(HOST_TIMEOUT, 0.5).bound  # stopped_run_on: about 1.94 s
        assert released[0] == b"released" and float(released[2]) == pytest.approx(run_on, 1e-3)
        engines["h1"] = start_engine(h1)
        wait_for(lambda: state_of(dsn, task) == ("completed", "h1", 3), timeout=60)
        restarted = rows(dsn, "SELECT restarted_from FROM supervise_tasks")[0][0]
    finally:
        cleanup([h0, h1], list(engines.values()))
    assert [r["host_id"] for r in restarted] == ["h0"]
    first, second = runs(stamps)
    assert (first["host"], second["host"]) == ("h0", "h1")
    assert first["end"] is not None and first["end"] <= second["start"]
    assert json.loads((h1.state / "tasks" / task / "manifest.json").read_text())["status"] == (
        "completed"
    )
