"""Issue 22 item 5: ``stop|resume|approve|deny`` take several ids, ``--all`` and ``--status``,
report each task and exit with the worst code; two ``stop --all`` at once neither fail nor
act twice. A real engine runs the fake agent in a private tmux server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from conftest import Setup, stop_engine, wait_for

from supervisor.requests import RequestRefused, apply_request, apply_requests, worst

SLOW = "tick: 0.5\nsleep: 90\n"


@contextmanager
def _engine(setup: Setup) -> Iterator[subprocess.Popen[bytes]]:
    process = setup.start()
    try:
        yield process
    finally:
        stop_engine(process)


def _running(setup: Setup, *names: str) -> list[str]:
    """Submit a slow task per name; their ids once every one runs."""
    for name in names:
        setup.drop(f"{name}.toml", setup.task(name, SLOW))

    def all_running() -> bool:
        found = setup.manifests()
        return all(found.get(n, {}).get("status") == "running" for n in names)

    wait_for(all_running, timeout=60)
    return [setup.manifests()[name]["task_id"] for name in names]


def _verb(setup: Setup, *args: str) -> subprocess.CompletedProcess[str]:
    return setup.supervise(args[0], "-c", str(setup.profile), *args[1:], timeout=90)


def test_several_ids_with_an_unknown_one_report_each_and_exit_with_the_worst(
    setup: Setup,
) -> None:
    setup.write_profile(base_interval=0.3)
    with _engine(setup):
        a, b = _running(setup, "a", "b")
        done = _verb(setup, "stop", a, "nope-123456", b, "--json")
        assert done.returncode == 1, done.stdout + done.stderr
        rows = json.loads(done.stdout)
        assert [(r["task_id"], r["result"]) for r in rows] == [
            (a, "applied"),
            ("nope-123456", "refused"),
            (b, "applied"),
        ]
        assert rows[0]["status"] == rows[2]["status"] == "abandoned"
        assert "no task 'nope-123456'" in rows[1]["error"]
        assert done.stderr.count("no task 'nope-123456'") == 1
        # text: one line per task, the applied ones on stdout; ended ones are refused
        again = _verb(setup, "stop", a, b)
        assert again.returncode == 1
        assert again.stderr.splitlines() == [
            f"supervise stop: task {a} already ended: abandoned",
            f"supervise stop: task {b} already ended: abandoned",
        ]
        both = [setup.manifests()[n] for n in ("a", "b")]
        assert {(m["status"], m["abandon_reason"]) for m in both} == {("abandoned", "stopped")}
    assert worst([0, 3, 4, 1]) == 1 and worst([0, 3, 4]) == 4 and worst([3, 0]) == 3
    assert worst([]) == 0


def test_status_and_all_select_what_the_verb_applies_to(setup: Setup) -> None:
    setup.write_profile(base_interval=0.3)
    setup.drop("done.toml", setup.task("done", "exit: 0"))
    with _engine(setup):
        wait_for(lambda: setup.manifests().get("done", {}).get("status") == "completed")
        ids = _running(setup, "x", "y")
        none = _verb(setup, "approve", "--status", "escalated")
        assert none.returncode == 1 and none.stdout == ""
        assert (
            "no task in" in none.stderr
            and "with status escalated that 'approve' applies to" in none.stderr
        )
        assert len(none.stderr.splitlines()) == 1
        assert _verb(setup, "approve", "--all").returncode == 1  # nothing is escalated
        mixed = _verb(setup, "stop", ids[0], "--all")
        assert mixed.returncode == 2 and "not both" in mixed.stderr
        assert _verb(setup, "stop").returncode == 2
        bad = _verb(setup, "stop", "--status", "no-such")
        assert bad.returncode == 2 and "invalid choice" in bad.stderr
        # resume by group name, as `status --status` takes it: both running ones
        resumed = _verb(setup, "resume", "--status", "running", "--json")
        assert resumed.returncode == 0, resumed.stderr
        assert sorted(r["task_id"] for r in json.loads(resumed.stdout)) == sorted(ids)
        assert all(r["retry_count"] == 1 for r in json.loads(resumed.stdout))
        wait_for(
            lambda: all(
                m["status"] == "running" for n, m in setup.manifests().items() if n != "done"
            )
        )
        stopped = _verb(setup, "stop", "--all")
        assert stopped.returncode == 0, stopped.stderr
        assert sorted(stopped.stdout.splitlines()) == sorted(
            f"{i}: abandoned (retry_count 1)" for i in ids
        )
        assert setup.manifests()["done"]["status"] == "completed"  # an ended one is left alone
        nothing = _verb(setup, "stop", "--all")
        assert nothing.returncode == 1 and len(nothing.stderr.splitlines()) == 1


def test_two_stop_all_at_once_neither_fail_nor_act_twice(setup: Setup) -> None:
    """Both copies select and leave their requests while the engine is held (SIGSTOP; inotify
    sees each copy's three requests renamed into ``control/``), so they truly overlap."""
    from inotify_simple import INotify
    from inotify_simple import flags as F

    setup.write_profile(base_interval=0.3)
    with _engine(setup) as engine:
        ids = _running(setup, "p", "q", "r")
        control = setup.state / "control"
        control.mkdir(exist_ok=True)
        watch = INotify()
        watch.add_watch(str(control), F.MOVED_TO)
        engine.send_signal(signal.SIGSTOP)
        try:
            argv = [
                sys.executable,
                "-m",
                "supervisor.cli",
                "stop",
                "-c",
                str(setup.profile),
                "--all",
                "--json",
                "--wait",
                "60",
            ]
            copies = [
                subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)
            ]
            left = 0
            while left < 2 * len(ids):  # every copy's request for every task
                left += sum(e.name.endswith(".stop") for e in watch.read(timeout=60_000))
        finally:
            engine.send_signal(signal.SIGCONT)
            watch.close()
        outs = [(c.communicate(timeout=90), c.returncode) for c in copies]
        for (out, err), code in outs:
            assert code == 0, out + err
            rows = json.loads(out)
            assert sorted(r["task_id"] for r in rows) == sorted(ids)
            assert {r["result"] for r in rows} == {"applied"}, rows
        for task_id in ids:
            events = [e["event"] for e in setup.events(task_id)]
            assert events.count("abandoned") == 1, events
        assert {(m["status"], m["abandon_reason"]) for m in setup.manifests().values()} == {
            ("abandoned", "stopped")
        }


def test_no_engine_queues_each_and_apply_request_raises_on_a_refusal(setup: Setup) -> None:
    """Without an engine every request is queued (3); the interface other parts call."""
    from supervisor.config import load_profile

    setup.write_profile(base_interval=0.3)
    with _engine(setup) as engine:
        ids = _running(setup, "m", "n")
        engine.send_signal(signal.SIGTERM)
        assert engine.wait(timeout=30) == 0  # the agents live on in tmux
    queued = _verb(setup, "stop", *ids)
    assert queued.returncode == 3, queued.stdout + queued.stderr
    assert [line.split(";")[0] for line in queued.stderr.splitlines()] == [
        f"supervise stop: queued 'stop' for {i}" for i in ids
    ]
    profile = load_profile(setup.profile)
    assert apply_request(profile, ids[0], "resume", 0.1)["result"] == "queued"
    with pytest.raises(RequestRefused, match="not escalated"):
        apply_request(profile, ids[0], "approve", 0.1)
    with pytest.raises(RequestRefused, match="no task"):
        apply_request(profile, "../etc", "stop", 0.1)
    # chosen by --all/--status, then answered by someone else first: skipped, exit 0
    [skipped] = apply_requests(profile, [ids[0]], "approve", 0.1, selected=True)
    assert (skipped.result, skipped.code) == ("skipped", 0)
    assert skipped.as_dict()["error"].endswith("not escalated: nothing to approve")
    with _engine(setup):  # the next run applies the queued stops
        wait_for(
            lambda: all(m["status"] == "abandoned" for m in setup.manifests().values()), timeout=60
        )
