"""Stopping is a state with a deadline (supervisord's STOPPING), not a sleep on the engine's
one worker: while an agent that ignores SIGTERM is being stopped, the other tasks' checks
run; the stubborn agent gets SIGKILL when STOP_TIMEOUT passes and is then resumed.
Real tmux, real processes, the real ``supervise run`` CLI."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from conftest import Setup, alive, wait_for

from supervisor.engine.stopping import STOP_TIMEOUT

#: Seconds from a done-file to the ``completed`` manifest (issue 11: no other task's check
#: delayed by more than 50 ms; 250 ms is the done → manifest target under load). A target
#: that ``benchmarks/mixed.py`` measures; here it is printed beside the figure, and the test
#: asserts the order (recorded while the stop still ran), which a loaded CI cannot break.
RECORD_WITHIN = 0.25


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def named(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["event"] == name]


def _task_id(setup: Setup, name: str) -> str | None:
    return (setup.manifests().get(name) or {}).get("task_id")


def test_a_stubborn_stop_delays_no_other_task(setup: Setup, tmp_path: Path) -> None:
    setup.write_profile(
        base_interval=0.3, max_interval=1, stale_threshold=1.0, grace_period=1.0, max_retries=2
    )
    stubborn, quick = tmp_path / "stubborn", tmp_path / "quick"
    setup.drop("s.toml", setup.task("stubborn", "ignore_term\nhang_runs: 1\nexit: 0", stubborn))
    log = tmp_path / "engine.log"
    with open(log, "wb") as handle:
        engine = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile),
             "--exit-when-idle"],
            stdout=handle, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        stubborn_id = wait_for(lambda: _task_id(setup, "stubborn"))
        # hung: the stop begins (SIGTERM, ignored); SIGKILL follows STOP_TIMEOUT s later.
        wait_for(lambda: named(setup.events(stubborn_id), "hung"), timeout=30, every=0.02)
        first = int((stubborn / "agent_pid").read_text())
        # As short as a task gets: its whole launch must fit in the stop's STOP_TIMEOUT s
        # on a loaded machine too.
        setup.drop("q.toml", setup.task("quick", "print: quick\nexit: 0", quick))
        assert engine.wait(timeout=60) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait(timeout=10)
            print(log.read_text(errors="replace")[-6000:])
    events = setup.events(stubborn_id)
    hung, stopped = named(events, "hung")[0], named(events, "agent_stopped")[0]
    resumed = named(events, "resumed")[0]

    # The other task ended while the stubborn agent was being stopped, and was recorded
    # while it still was (done-file mtime -> manifest file mtime): the stop did not hold it
    # up. How soon is printed, not asserted (a loaded machine).
    m = setup.manifests()["quick"]
    folder = setup.state / "tasks" / m["task_id"]
    done = (folder / "done").stat().st_mtime
    recorded = (folder / "manifest.json").stat().st_mtime
    assert m["status"] == "completed", m
    assert ts(hung["ts"]) < done < ts(stopped["ts"]), "quick ended outside the stop"
    took = recorded - done
    print(f"\nquick: done -> manifest {took:.3f} s during the stop (target {RECORD_WITHIN:g} s)")
    assert done <= recorded < ts(stopped["ts"]), "quick was recorded only after the stop"

    # The stubborn agent: SIGKILL once STOP_TIMEOUT passed, then resumed; run 2 completes.
    assert stopped["killed"] is True, stopped
    assert ts(stopped["ts"]) - ts(hung["ts"]) >= STOP_TIMEOUT - 0.05, (hung, stopped)
    assert ts(resumed["ts"]) >= ts(stopped["ts"])
    assert not alive(first)
    final = setup.manifests()["stubborn"]
    assert (final["status"], final["retry_count"]) == ("completed", 1), final
    assert int((stubborn / "fake_runs").read_text()) == 2
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "raised an exception" not in text, text[-4000:]


def test_engine_shutdown_sees_a_stop_through(setup: Setup, tmp_path: Path) -> None:
    """SIGTERM to the engine while an agent is being stopped: the stop is finished (SIGKILL
    after STOP_TIMEOUT), the decision's manifest written, and the engine exits 0."""
    setup.write_profile(base_interval=0.3, stale_threshold=1.0, grace_period=0.5)
    setup.drop("s.toml", setup.task("stubborn", "ignore_term\nhang_runs: 1\nexit: 0"))
    log = tmp_path / "engine.log"
    with open(log, "wb") as handle:
        engine = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile)],
            stdout=handle, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        task_id = wait_for(lambda: _task_id(setup, "stubborn"))
        wait_for(lambda: named(setup.events(task_id), "hung"), timeout=30, every=0.02)
        first = int((setup.project / "agent_pid").read_text())
        engine.send_signal(signal.SIGTERM)
        assert engine.wait(timeout=60) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait(timeout=10)
    assert named(setup.events(task_id), "agent_stopped")[0]["killed"] is True
    assert not alive(first)
    assert setup.manifests()["stubborn"]["status"] == "hung"
