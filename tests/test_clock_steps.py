"""The wall clock stepped by an hour under a live engine, with libfaketime (issue 20, Time).

libfaketime (Debian package ``faketime``; its thread-safe build ``libfaketimeMT``, as the
engine runs several threads: with the plain build a restarted engine once read an unfaked
time for a moment) is preloaded into the engine; it reads its offset
from a file on every call (``FAKETIME_TIMESTAMP_FILE``, ``FAKETIME_NO_CACHE=1``), so a test
steps the engine's wall clock by rewriting that file. ``DONT_FAKE_MONOTONIC=1`` keeps
CLOCK_MONOTONIC and CLOCK_BOOTTIME true, as on a machine whose clock NTP steps. The tmux
server, the wrapper and the agent inherit the preload and are stepped too (the whole machine
steps); file mtimes come from the kernel and are not faked, like files written before a step.

libfaketime 0.9.10 answers Python's ``time.sleep`` (``clock_nanosleep`` on CLOCK_MONOTONIC
with TIMER_ABSTIME) with EINVAL when it leaves the monotonic clock alone, so the faked
processes get a ``sitecustomize`` that sleeps on an ``Event`` instead (a test-only shim; the
wrapper runs isolated, ``-I -S``, and sleeps only when retrying a full disk).

Without libfaketime the tests skip, except under ``CI`` where they fail: CI must run them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.faketime_support import SLEEP_SHIM, require_libfaketime, step_clock

from tests.conftest import Setup, wait_for

#: The tasks' deadline, seconds: far above the few seconds they run (a stalled CI machine, a
#: paused VM, must not abandon them) and far below the one-hour steps, so a step that were
#: not rebased would still abandon them ("deadline passed").
DEADLINE = 600


@pytest.fixture
def fake_clock(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """``(offset file, environment)`` for a process whose wall clock follows the file."""
    library = require_libfaketime(threaded=True)
    offset = tmp_path / "faketime"
    offset.write_text("+0\n")
    shim = tmp_path / "faketime-site"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SLEEP_SHIM)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), env.get("PYTHONPATH")]))
    env.update(
        LD_PRELOAD=str(library),
        FAKETIME_TIMESTAMP_FILE=str(offset),
        FAKETIME_NO_CACHE="1",
        DONT_FAKE_MONOTONIC="1",
    )
    yield offset, env


def test_libfaketime_steps_the_wall_clock_but_not_the_monotonic_one(
    fake_clock: tuple[Path, dict[str, str]],
) -> None:
    offset, env = fake_clock
    probe = (
        "import time, pathlib, sys\n"
        "f = pathlib.Path(sys.argv[1])\n"
        "w0, m0, b0 = time.time(), time.monotonic(), time.clock_gettime(time.CLOCK_BOOTTIME)\n"
        "f.write_text('+1h\\n')\n"
        "w1, m1, b1 = time.time(), time.monotonic(), time.clock_gettime(time.CLOCK_BOOTTIME)\n"
        "print(w1 - w0, m1 - m0, b1 - b0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(offset)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    wall, mono, boot = (float(x) for x in out.stdout.split())
    assert 3590 < wall < 3610
    assert abs(mono) < 5 and abs(boot) < 5


def _engine(setup: Setup, env: dict[str, str]) -> subprocess.Popen[str]:
    return setup.start(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _stop(engine: subprocess.Popen[str], how: signal.Signals = signal.SIGTERM) -> str:
    """Signal the engine (by its PID; SIGTERM by default) and return what it logged."""
    if engine.poll() is None:
        engine.send_signal(how)
    try:
        out, _ = engine.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        engine.kill()
        out, _ = engine.communicate(timeout=10)
    return out


def _running(setup: Setup, name: str) -> dict:
    """The task's manifest once it runs and its agent wrote its PID."""

    def ready() -> dict | None:
        m = setup.manifests().get(name)
        started = m and m["status"] == "running"
        return m if started and (setup.state / "tasks" / m["task_id"] / "pid").exists() else None

    return wait_for(ready, timeout=30)


def _event_names(setup: Setup, name: str) -> list[str]:
    task_id = setup.manifests()[name]["task_id"]
    return [e["event"] for e in setup.events(task_id)]


@pytest.mark.parametrize("step", ["+1h", "-1h"])
def test_a_running_task_survives_a_step_and_completes(
    setup: Setup, fake_clock: tuple[Path, dict[str, str]], step: str
) -> None:
    """A task a few seconds into its run, a 600 s deadline: the step neither abandons it
    ("deadline passed") nor stalls the engine; it completes as its agent ends."""
    offset, env = fake_clock
    setup.write_profile(deadline=DEADLINE, stale_threshold=20)
    setup.drop("work.toml", setup.task("work", "tick: 0.5\nsleep: 5\nexit: 0"))
    engine = _engine(setup, env)
    ended = False
    try:
        _running(setup, "work")
        step_clock(offset, step)
        wait_for(
            lambda: setup.manifests()["work"]["status"] not in ("queued", "running"), timeout=45
        )
        ended = True
    except AssertionError:
        pass  # said below, with what the engine logged
    finally:
        log = _stop(engine)
    m = setup.manifests()["work"]
    assert ended, f"no end within 45 s of the step: {m}\nengine log:\n{log[-4000:]}"
    assert m["status"] == "completed", (m, log)
    assert "clock stepped" in log
    assert "abandoned" not in _event_names(setup, "work")


def test_a_hung_agent_is_still_detected_after_a_backward_step(
    setup: Setup, fake_clock: tuple[Path, dict[str, str]]
) -> None:
    """-1 h left a hung agent ``running`` for an hour: it is hung after stale + grace."""
    offset, env = fake_clock
    setup.write_profile(deadline=120, stale_threshold=2, grace_period=2, max_retries=1)
    setup.drop("hang.toml", setup.task("hang", "hang_runs: 5"))
    engine = _engine(setup, env)
    try:
        _running(setup, "hang")
        step_clock(offset, "-1h")
        wait_for(lambda: "hung" in _event_names(setup, "hang"), timeout=40)
    finally:
        log = _stop(engine)
    assert "clock stepped" in log


def _heartbeat(setup: Setup) -> dict:
    return json.loads((setup.state / "engine-stats.json").read_text())


@pytest.mark.parametrize(
    ("step", "how"),
    [("+1h", signal.SIGTERM), ("-1h", signal.SIGTERM), ("+1h", signal.SIGKILL)],
    ids=["+1h", "-1h", "+1h-SIGKILL"],
)
def test_a_step_while_the_engine_is_down_is_rebased_at_restart(
    setup: Setup, fake_clock: tuple[Path, dict[str, str]], step: str, how: signal.Signals
) -> None:
    """The engine stops (or is SIGKILLed: its last mark is at most a second old), the clock
    steps, a new engine adopts the running task: it logs the step once, the task is not
    abandoned by the deadline and completes."""
    offset, env = fake_clock
    setup.write_profile(deadline=DEADLINE, stale_threshold=20)
    setup.drop("work.toml", setup.task("work", "tick: 0.5\nsleep: 10\nexit: 0"))
    first = _engine(setup, env)
    try:
        _running(setup, "work")
        time.sleep(1.5)  # one mark written while it runs, whatever the stop
    finally:
        _stop(first, how)
    assert setup.manifests()["work"]["status"] == "running"
    step_clock(offset, step)
    second = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile), "--exit-when-idle"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    m = setup.manifests()["work"]
    assert m["status"] == "completed", (m, second.stdout, second.stderr)
    log = second.stdout + second.stderr
    assert log.count("while no engine ran") == 1, log


def test_a_hung_agent_is_detected_after_a_backward_step_while_down(
    setup: Setup, fake_clock: tuple[Path, dict[str, str]]
) -> None:
    """Adopted after -1 h: the hung agent's old output is still old; hung after stale + grace."""
    offset, env = fake_clock
    setup.write_profile(deadline=120, stale_threshold=3, grace_period=2, max_retries=1)
    setup.drop("hang.toml", setup.task("hang", "hang_runs: 5"))
    first = _engine(setup, env)
    try:
        _running(setup, "hang")
    finally:
        before = _stop(first)
    step_clock(offset, "-1h")
    second = _engine(setup, env)
    try:
        wait_for(lambda: "hung" in _event_names(setup, "hang"), timeout=40)
    finally:
        log = _stop(second)
    assert log.count("while no engine ran") == 1, before + log


def test_a_step_of_years_forward_neither_hangs_nor_abandons(
    setup: Setup, fake_clock: tuple[Path, dict[str, str]]
) -> None:
    """NTP's first sync on a machine that booted in 1970: APScheduler's interval jobs
    counted every missed interval (years / intake_interval: billions) before running."""
    offset, env = fake_clock
    setup.write_profile(deadline=DEADLINE, stale_threshold=20)
    setup.drop("work.toml", setup.task("work", "tick: 0.5\nsleep: 5\nexit: 0"))
    engine = _engine(setup, env)
    try:
        _running(setup, "work")
        step_clock(offset, "+20y")
        wait_for(lambda: setup.manifests()["work"]["status"] != "running", timeout=45)
    finally:
        log = _stop(engine)
    assert setup.manifests()["work"]["status"] == "completed", log
