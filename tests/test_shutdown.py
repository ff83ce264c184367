"""Issue 22 item 5: ``supervise shutdown`` stops the engine as SIGTERM does, leaving the
agents in tmux for the next ``run`` to adopt; no engine is one line and exit 1; two at once
neither fail nor cut the engine's stop short."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from conftest import Setup, alive, stop_engine, wait_for

from supervisor.engine_probe import engine_pid


def _running(setup: Setup, name: str) -> str:
    setup.drop(f"{name}.toml", setup.task(name, "tick: 0.5\nsleep: 120\n"))
    wait_for(lambda: setup.manifests().get(name, {}).get("status") == "running", timeout=60)
    return str(setup.manifests()[name]["task_id"])


def test_shutdown_leaves_the_agent_in_tmux_and_the_next_run_adopts_it(setup: Setup) -> None:
    setup.write_profile(base_interval=0.3)
    none = setup.supervise("shutdown", "-c", str(setup.profile))
    assert none.returncode == 1 and none.stdout == ""
    assert "no engine runs on" in none.stderr and len(none.stderr.splitlines()) == 1
    assert not setup.state.exists()  # nothing was created for it
    engine = setup.start()
    try:
        task_id = _running(setup, "long")
        assert engine_pid(setup.state) == engine.pid
        pid_file = setup.state / "tasks" / task_id / "pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=30)
        agent = int(pid_file.read_text())
        done = setup.supervise("shutdown", "-c", str(setup.profile), "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {
            "result": "stopped",
            "pid": engine.pid,
            "state_dir": str(setup.state),
        }
        assert engine.wait(timeout=60) == 0  # a clean SIGTERM stop
        assert engine_pid(setup.state) is None
        assert setup.tmux("has-session", "-t", f"={task_id}").returncode == 0
        assert alive(agent)
        assert setup.manifests()["long"]["status"] == "running"
        again = setup.supervise("shutdown", "-c", str(setup.profile))
        assert again.returncode == 1 and "no engine runs on" in again.stderr
    finally:
        stop_engine(engine)
    engine = setup.start()
    try:
        wait_for(lambda: "adopted" in [e["event"] for e in setup.events(task_id)], timeout=60)
        assert alive(agent) and setup.manifests()["long"]["retry_count"] == 0
        text = setup.supervise("shutdown", "-c", str(setup.profile))
        assert text.returncode == 0, text.stderr
        assert text.stdout.startswith(f"supervise shutdown: engine pid {engine.pid} stopped; ")
        assert "adopts them" in text.stdout
    finally:
        stop_engine(engine)
    assert setup.supervise("stop", "-c", str(setup.profile), task_id).returncode == 3
    engine = setup.start()  # the queued stop ends the agent
    try:
        wait_for(lambda: setup.manifests()["long"]["status"] == "abandoned", timeout=60)
    finally:
        stop_engine(engine)


def test_two_shutdowns_at_once_stop_the_engine_once(setup: Setup) -> None:
    """A second SIGTERM would cut the engine's stop short (exit 143): the copies take turns,
    so the engine exits 0 and both report it stopped. The engine is held (SIGSTOP) until both
    copies have tried the turn file (inotify sees each open), so they truly overlap."""
    from inotify_simple import INotify
    from inotify_simple import flags as F

    from supervisor.cli.shutdown import TURN_FILE

    setup.write_profile(base_interval=0.3)
    engine = setup.start()
    watch = INotify()
    try:
        _running(setup, "one")
        watch.add_watch(str(setup.state), F.OPEN)
        engine.send_signal(signal.SIGSTOP)
        argv = [sys.executable, "-m", "supervisor.cli", "shutdown", "-c", str(setup.profile)]
        copies = [
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        opens = 0
        while opens < 2:  # each copy opens the turn file at its first try
            opens += sum(e.name == TURN_FILE for e in watch.read(timeout=60_000))
        engine.send_signal(signal.SIGCONT)
        results = [(c.communicate(timeout=90), c.returncode) for c in copies]
        for (out, err), code in results:
            assert code == 0, out + err
        assert engine.wait(timeout=60) == 0
        said = "".join(out for (out, _), _ in results)
        assert said.count("stopped by another 'supervise shutdown'") == 1, said
        assert said.count(f"engine pid {engine.pid} stopped; ") == 1, said
    finally:
        watch.close()
        engine.send_signal(signal.SIGCONT)
        stop_engine(engine)


def test_a_stuck_engine_is_reported_not_waited_for_forever(setup: Setup) -> None:
    """SIGSTOPped (it holds its lock and cannot act): exit 4 after --wait, one line."""
    setup.write_profile(base_interval=0.3)
    engine = setup.start()
    try:
        wait_for(lambda: engine_pid(setup.state) == engine.pid, timeout=30)
        engine.send_signal(signal.SIGSTOP)
        began = time.monotonic()
        stuck = setup.supervise("shutdown", "-c", str(setup.profile), "--wait", "1")
        assert time.monotonic() - began >= 1
        assert stuck.returncode == 4, stuck.stdout + stuck.stderr
        assert "still runs after 1 s" in stuck.stderr and "SIGKILL is safe" in stuck.stderr
        bad = setup.supervise("shutdown", "-c", str(setup.profile), "--wait", "nan")
        assert bad.returncode == 2
    finally:
        engine.send_signal(signal.SIGCONT)  # the SIGTERM it holds is delivered now
        assert engine.wait(timeout=60) == 0
        stop_engine(engine)
