"""Recovery with real tmux and the fake agent: crash, hang, backoff, retry limit, deadline,
notifier limits, the done-file race and stubborn agents. Intervals are about a second."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from conftest import Setup, wait_for

from supervisor.taskdir.folder import TaskDir


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def named(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["event"] == name]


def report(setup: Setup, name: str) -> None:
    """Print the final manifest facts and the event timeline (run pytest with -s to see)."""
    m = setup.manifests()[name]
    events = setup.events(m["task_id"])
    start = ts(events[0]["ts"])
    timeline = ", ".join(f"{e['event']}@{ts(e['ts']) - start:.2f}s" for e in events)
    print(
        f"\n[{name}] status={m['status']} abandon_reason={m['abandon_reason']} "
        f"retry_count={m['retry_count']} exit_code={m['exit_code']}\n  events: {timeline}"
    )


def test_crash_resume_completed(setup: Setup) -> None:
    setup.write_profile(base_interval=0.3, max_interval=2, max_retries=3, stale_threshold=30)
    setup.drop("c.toml", setup.task("crashy", "crash_runs: 1\nprint: working\nexit: 0"))
    assert setup.run().returncode == 0
    m = setup.manifests()["crashy"]
    report(setup, "crashy")
    assert (m["status"], m["retry_count"], m["exit_code"]) == ("completed", 1, 0)
    events = setup.events(m["task_id"])
    kinds = [e["event"] for e in events]
    assert kinds.index("crashed") < kinds.index("resumed") < kinds.index("completed")
    assert kinds.count("launched") == 1 and kinds.count("resumed") == 1
    # The resumed run used resume_command with this task's own session id.
    assert f"resumed session {m['session_id']}" in m["output_tail"]
    assert m["pid"] == int((setup.project / "agent_pid").read_text())
    crashed, resumed = named(events, "crashed")[0], named(events, "resumed")[0]
    # backoff base_interval * 2**0: never sooner (a loaded machine may make it later)
    assert ts(resumed["ts"]) - ts(crashed["ts"]) >= 0.25


def test_hang_grace_resume_completed(setup: Setup, signal_cue: str) -> None:
    """A hung agent is stopped and resumed, whether it exits 143 on the SIGTERM (as Claude
    Code does) or dies from it: the stop supervise caused is never the task's own ending."""
    # The resumed run must print within stale_threshold + grace_period of its launch, a
    # Python start included: 4 s, so a loaded machine does not make it a second hang.
    setup.write_profile(
        base_interval=0.3, max_interval=2, stale_threshold=1.0, grace_period=3.0, max_retries=2
    )
    prompt = f"{signal_cue}hang_runs: 1\ntick: 0.2\nsleep: 1\nexit: 0"
    setup.drop("h.toml", setup.task("hangs", prompt))
    assert setup.run().returncode == 0
    m = setup.manifests()["hangs"]
    report(setup, "hangs")
    assert (m["status"], m["retry_count"], m["exit_code"]) == ("completed", 1, 0)
    assert m["verdict"] == "PASS", m
    events = setup.events(m["task_id"])
    stale, hung = named(events, "stale")[0], named(events, "hung")[0]
    # The first stale check never acts; the hang is declared only after the grace period.
    assert ts(hung["ts"]) - ts(stale["ts"]) >= 3.0
    assert named(events, "agent_stopped"), "the hung agent was stopped before the resume"
    assert ts(named(events, "resumed")[0]["ts"]) > ts(hung["ts"])


def test_fresh_output_cancels_the_grace_period(setup: Setup) -> None:
    # Output every 0.6 s with a stale threshold of 0.5 s: stale checks happen, but fresh
    # output always arrives within the 10 s grace period (generous: a loaded machine may
    # stall the agent or its capture for seconds), so the agent is never resumed.
    setup.write_profile(base_interval=0.2, stale_threshold=0.5, grace_period=10)
    setup.drop("f.toml", setup.task("slowprint", "tick: 0.6\nsleep: 3\nexit: 0"))
    assert setup.run().returncode == 0
    m = setup.manifests()["slowprint"]
    report(setup, "slowprint")
    assert (m["status"], m["retry_count"]) == ("completed", 0)
    kinds = [e["event"] for e in setup.events(m["task_id"])]
    assert "stale" in kinds and "fresh" in kinds and "hung" not in kinds


def test_crash_every_run_is_abandoned_after_max_retries(setup: Setup) -> None:
    setup.write_profile(base_interval=0.25, max_interval=0.8, max_retries=3, stale_threshold=30)
    setup.drop("x.toml", setup.task("doomed", "crash_runs: 99"))
    assert setup.run().returncode == 0
    m = setup.manifests()["doomed"]
    report(setup, "doomed")
    assert (m["status"], m["abandon_reason"], m["retry_count"]) == ("abandoned", "max_retries", 3)
    assert m["abandoned_at"] and m["finished_at"]
    events = setup.events(m["task_id"])
    crashed, resumed = named(events, "crashed"), named(events, "resumed")
    assert len(resumed) == 3 and len(crashed) == 3
    waits = [ts(r["ts"]) - ts(c["ts"]) for c, r in zip(crashed, resumed, strict=True)]
    # base * 2**n capped at max: 0.25, 0.5, 0.8, each a floor (never sooner); how much later
    # a check lands depends on the machine's load, so it is not asserted.
    for wait, expected in zip(waits, (0.25, 0.5, 0.8), strict=True):
        assert wait >= expected - 0.05, waits
    assert int((setup.project / "fake_runs").read_text()) == 4  # 1 launch + 3 resumes


def test_done_file_while_output_is_stale_is_completed(setup: Setup) -> None:
    # Silent for longer than stale_threshold, then exits 0: the done-file (layer 1) must win
    # over the stale output (layer 3); nothing is resumed. The grace period is generous: a
    # loaded machine must not turn the quiet 1.5 s (and the start) into a hang.
    setup.write_profile(base_interval=0.2, stale_threshold=0.3, grace_period=30)
    setup.drop("q.toml", setup.task("quiet", "sleep: 1.5\nexit: 0"))
    assert setup.run().returncode == 0
    m = setup.manifests()["quiet"]
    report(setup, "quiet")
    assert (m["status"], m["retry_count"], m["exit_code"]) == ("completed", 0, 0)
    kinds = [e["event"] for e in setup.events(m["task_id"])]
    assert "stale" in kinds and "resumed" not in kinds and "hung" not in kinds


def test_resume_exit_code_resumes_instead_of_failing(setup: Setup) -> None:
    setup.write_profile(base_interval=0.3, resume_exit_codes=[75], max_retries=1)
    setup.drop("r.toml", setup.task("tempfail", "exit: 75"))
    assert setup.run().returncode == 0
    m = setup.manifests()["tempfail"]
    report(setup, "tempfail")
    assert (m["status"], m["abandon_reason"], m["retry_count"]) == ("abandoned", "max_retries", 1)
    assert m["exit_code"] == 75


def test_deadline_stop_ends_abandoned_whatever_the_agent_exits_with(
    setup: Setup, signal_cue: str
) -> None:
    """At the deadline the agent is stopped; an agent that then exits 143 by itself (as Claude
    Code does on SIGTERM) is still ``abandoned``/``deadline``, never ``failed``."""
    setup.write_profile(base_interval=0.3, deadline=1.5, stale_threshold=30)
    setup.drop("d.toml", setup.task("overdue", f"{signal_cue}tick: 0.3\nsleep: 120"))
    assert setup.run(timeout=60).returncode == 0
    m = setup.manifests()["overdue"]
    report(setup, "overdue")
    assert (m["status"], m["abandon_reason"], m["verdict"]) == (
        "abandoned",
        "deadline",
        "TIMEOUT",
    ), m
    kinds = [e["event"] for e in setup.events(m["task_id"])]
    assert "failed" not in kinds and "completed" not in kinds, kinds
    assert named(setup.events(m["task_id"]), "agent_stopped")[0]["killed"] is False


def test_agent_that_ignores_sigterm_is_still_stopped(setup: Setup) -> None:
    setup.write_profile(base_interval=0.3, deadline=1.5, stale_threshold=30)
    setup.drop("s.toml", setup.task("stubborn", "ignore_term\ntick: 0.3\nsleep: 120"))
    assert setup.run(timeout=60).returncode == 0
    m = setup.manifests()["stubborn"]
    report(setup, "stubborn")
    assert (m["status"], m["abandon_reason"]) == ("abandoned", "deadline")
    pid = int((setup.project / "agent_pid").read_text())
    assert not _alive(pid)
    stopped = named(setup.events(m["task_id"]), "agent_stopped")[0]
    assert stopped["killed"] is True  # SIGTERM was ignored, so SIGKILL was needed
    assert setup.tmux("has-session", "-t", f"={m['task_id']}").returncode != 0


def test_hanging_notifier_does_not_delay_cleanup(setup: Setup, tmp_path: Path) -> None:
    started = tmp_path / "notifier-started"
    # A shell, not Python: on a loaded machine a Python start can outlast the timeout, and
    # the notifier would be killed before it marked that it ran.
    notifier = ["sh", "-c", ': > "$1"; exec sleep 600', "sh", str(started)]
    setup.write_profile(base_interval=0.3, notifier=notifier, notifier_timeout=3.0)
    setup.drop("n.toml", setup.task("notified", "exit: 0"))
    result = setup.run(timeout=60)
    assert result.returncode == 0
    m = setup.manifests()["notified"]
    report(setup, "notified")
    assert m["status"] == "completed"
    assert started.exists(), "the notifier ran"
    notified = named(setup.events(m["task_id"]), "notified")[0]
    assert notified["notifier_exit_code"] is None  # killed at the timeout
    # Cleanup did not wait for the notifier: the session was gone before it was killed.
    finished = ts(m["finished_at"])
    assert ts(notified["ts"]) - finished >= 2.9


def test_notify_on_selects_events_and_failure_is_only_logged(setup: Setup, tmp_path: Path) -> None:
    seen = tmp_path / "seen.jsonl"
    notifier = [sys.executable, "-c",
                f"import sys; open({str(seen)!r}, 'a').write(sys.stdin.read() + '\\n'); "
                "sys.exit(4)"]  # fmt: skip
    setup.write_profile(
        base_interval=0.3, notifier=notifier, notify_on=["crashed", "failed"], stale_threshold=30
    )
    setup.drop("a.toml", setup.task("ok", "exit: 0", setup.project / "a"))
    setup.drop("b.toml", setup.task("bad", "crash_runs: 1\nexit: 2", setup.project / "b"))
    assert setup.run().returncode == 0
    events = [json.loads(line) for line in seen.read_text().splitlines()]
    assert sorted((e["task_name"], e["event"]) for e in events) == [
        ("bad", "crashed"),
        ("bad", "failed"),
    ]
    failed = next(e for e in events if e["event"] == "failed")
    assert failed["exit_code"] == 2 and failed["status"] == "failed"
    assert "exit 2" in failed["message"] and Path(failed["task_dir"]).is_dir()
    manifests = setup.manifests()
    assert manifests["bad"]["status"] == "failed" and manifests["ok"]["status"] == "completed"


def test_operator_stop_resume_tail_and_config(
    setup: Setup, tmp_path: Path, signal_cue: str
) -> None:
    """``resume`` goes on to a new run and ``stop`` ends ``abandoned``/``stopped`` whether the
    agent exits 143 on SIGTERM (as Claude Code does) or dies from it."""
    setup.write_profile(base_interval=0.3, stale_threshold=30)
    work = f"{signal_cue}tick: 0.2\nsleep: 60"
    setup.drop("a.toml", setup.task("long-a", work, setup.project / "a"))
    setup.drop("b.toml", setup.task("long-b", work, setup.project / "b"))
    engine = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile), "--exit-when-idle"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(lambda: len(setup.manifests()) == 2, timeout=60)
        wait_for(lambda: all(m["status"] == "running" for m in setup.manifests().values()))
        ids = {name: m["task_id"] for name, m in setup.manifests().items()}
        conf = str(setup.profile)

        resumed = setup.supervise("resume", "-c", conf, ids["long-a"])
        assert resumed.returncode == 0, resumed.stderr
        assert "running (retry_count 1)" in resumed.stdout
        wait_for(lambda: (setup.project / "a" / "fake_runs").read_text() == "2")

        wait_for(lambda: setup.manifests()["long-a"]["status"] == "running")
        tail = setup.supervise("tail", "-c", conf, ids["long-a"], "-n", "50")
        assert f"resumed session {setup.manifests()['long-a']['session_id']}" in tail.stdout

        for name in ("long-a", "long-b"):
            stopped = setup.supervise("stop", "-c", conf, ids[name])
            assert stopped.returncode == 0, stopped.stderr
            assert "abandoned" in stopped.stdout
        assert engine.wait(timeout=30) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
    manifests = setup.manifests()
    assert manifests["long-a"]["retry_count"] == 1
    for m in manifests.values():
        assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped")
        assert setup.tmux("has-session", "-t", f"={m['task_id']}").returncode != 0
    again = setup.supervise("stop", "-c", str(setup.profile), ids["long-b"])
    assert again.returncode == 1 and "already ended" in again.stderr

    task = tmp_path / "t.toml"
    task.write_text(f'name = "t"\nprompt = "x"\nproject_dir = "{setup.project}"\n'
                    "[monitor]\ndeadline = 99\n")  # fmt: skip
    env = {**os.environ, "MONITOR_GRACE_PERIOD": "7"}
    shown = setup.supervise("config", "-c", str(setup.profile), "--task", str(task), "--json",
                            env=env)  # fmt: skip
    values = json.loads(shown.stdout)
    assert values["deadline"] == {"value": 99.0, "source": "task"}
    assert values["grace_period"] == {"value": 7.0, "source": "env"}
    assert values["base_interval"] == {"value": 0.3, "source": "profile"}
    assert values["max_retries"] == {"value": 3, "source": "default"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _cut_resume(setup: Setup, second_run: str, down_for: float = 0.0) -> dict:
    """Run a task whose first run hangs, stop the engine and leave what a SIGKILL between
    ``resumed`` and the respawn leaves; ``down_for`` seconds later, run an engine to the
    end. Returns the task's manifest."""
    setup.drop("cut.toml", setup.task("cut", f"hang_runs: 1\n{second_run}"))
    engine = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: (setup.manifests().get("cut") or {}).get("pid"), timeout=60)
        engine.send_signal(signal.SIGTERM)
        assert engine.wait(timeout=60) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
    m = setup.manifests()["cut"]
    task = TaskDir(Path(m["tmpdir"]))
    # What the dead engine had done: the agent stopped, "resumed" logged, run files cleared.
    os.kill(m["pid"], signal.SIGKILL)
    dead = ["list-panes", "-t", f"={m['task_id']}:", "-F", "#{pane_dead}"]
    wait_for(lambda: setup.tmux(*dead).stdout.strip() == "1", timeout=60)
    task.append_event("resumed", status="running", retry_count=1, reason="test: cut off")
    task.clear_run_files()
    time.sleep(down_for)  # the engine stays down (a slow restart, a reboot)
    assert setup.run(timeout=60).returncode == 0
    return setup.manifests()["cut"]


def test_restart_redoes_a_resume_cut_off_before_the_agent_started(setup: Setup) -> None:
    """The engine logs ``resumed`` before it respawns the agent. If it dies in between, the
    restarted engine must perform that resume (not call the dead pane a crash or a hang,
    which cost a retry and, at max_retries, the task). Chaos seed 4275908639 found it."""
    setup.write_profile(max_retries=1)
    m = _cut_resume(setup, "print: second run\nexit: 0")
    assert (m["status"], m["retry_count"]) == ("completed", 1), m
    names = [e["event"] for e in setup.events(m["task_id"])]
    assert "resume_redone" in names, names
    after = names[names.index("resume_redone") :]
    assert "crashed" not in after and "hung" not in after and "resumed" not in after, names


def test_a_redone_resume_counts_its_silence_from_the_redo(setup: Setup) -> None:
    """Seen in CI's chaos test (seed 2191081942): the engine was down 4.6 s between a
    ``resumed`` event and the respawn; the restarted engine redid the resume, then measured
    the new run's silence from the old decision and abandoned it as hung 0.6 s after its
    start. The redone run gets the whole stale threshold and grace period: silent for 2 s
    (under the 3 s threshold), then done."""
    setup.write_profile(max_retries=1, stale_threshold=3, grace_period=1)
    m = _cut_resume(setup, "sleep: 2\nexit: 0", down_for=5.0)
    assert (m["status"], m["retry_count"]) == ("completed", 1), m
    names = [e["event"] for e in setup.events(m["task_id"])]
    after = names[names.index("resume_redone") :]
    assert "stale" not in after and "hung" not in after, names
