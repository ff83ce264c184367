"""No serial worker (issue 24): due checks run on a pool, at most one in flight per task, and
one task's slow check never delays another task's record."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from conftest import Setup, wait_for

from supervisor.config import load_profile
from supervisor.engine import observe
from supervisor.engine.dispatch import Dispatcher, Gate
from supervisor.engine.scheduler import Engine


class Recorder:
    """A check body that records overlap per task and can hold one task's checks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.runs: Counter[str] = Counter()
        self.hold: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}

    def __call__(self, task_id: str) -> None:
        with self.lock:
            self.running[task_id] += 1
            self.most[task_id] = max(self.most[task_id], self.running[task_id])
        self.entered.setdefault(task_id, threading.Event()).set()
        if task_id in self.hold:
            self.hold[task_id].wait(30)
        with self.lock:
            self.running[task_id] -= 1
            self.runs[task_id] += 1


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def dispatcher(recorder: Recorder) -> Any:
    failed: list[int] = []
    dispatch = Dispatcher(recorder, lambda: failed.append(1), workers=8)
    yield dispatch
    for event in recorder.hold.values():
        event.set()
    dispatch.shutdown()


def test_one_task_never_has_two_checks_in_flight(
    dispatcher: Dispatcher, recorder: Recorder
) -> None:
    recorder.hold["a"] = threading.Event()
    dispatcher.run_now("a")
    assert recorder.entered.setdefault("a", threading.Event()).wait(10)
    kickers = [threading.Thread(target=dispatcher.run_now, args=("a",)) for _ in range(50)]
    for thread in kickers:
        thread.start()
    for thread in kickers:
        thread.join()
    recorder.hold.pop("a").set()
    wait_for(lambda: dispatcher.in_flight() == 0)
    assert recorder.most["a"] == 1
    # the 50 kicks during the held check ran it once more, not 50 times and not never
    assert recorder.runs["a"] == 2


def test_a_held_check_does_not_delay_another_task(
    dispatcher: Dispatcher, recorder: Recorder
) -> None:
    recorder.hold["slow"] = threading.Event()
    dispatcher.run_now("slow")
    assert recorder.entered.setdefault("slow", threading.Event()).wait(10)
    for index in range(20):
        dispatcher.run_now(f"fast{index}")
    wait_for(lambda: sum(recorder.runs[f"fast{i}"] for i in range(20)) == 20)
    assert recorder.runs["slow"] == 0  # still held while the others ran
    recorder.hold.pop("slow").set()
    wait_for(lambda: recorder.runs["slow"] == 1)


def test_due_times_run_from_one_tick_in_order(recorder: Recorder) -> None:
    order: list[str] = []

    def body(task_id: str) -> None:
        order.append(task_id)

    scheduler = BackgroundScheduler()
    scheduler.start()
    dispatch = Dispatcher(body, lambda: None, workers=1)
    try:
        # Paused while the due times are set: on a loaded machine the test thread may stall
        # between two lines for longer than the 0.3 s due time, and "cancelled" would run
        # before its cancel (an order of the test's, not of the product's).
        scheduler.pause()
        dispatch.start(scheduler, Gate(threading.Event()))
        dispatch.schedule("late", 1.2)  # a gap no stall between these two lines bridges
        dispatch.schedule("early", 0.2)  # moves the tick forward
        dispatch.schedule("cancelled", 0.3)
        dispatch.cancel("cancelled")
        scheduler.resume()
        wait_for(lambda: len(order) >= 2, timeout=60)
        assert order == ["early", "late"]
        assert [job.id for job in scheduler.get_jobs()] == ["tick"]  # no job per task
    finally:
        dispatch.shutdown()
        scheduler.shutdown(wait=True)


def test_a_check_that_raises_is_counted_and_the_task_runs_again() -> None:
    failed: list[str] = []
    runs: list[str] = []

    def body(task_id: str) -> None:
        runs.append(task_id)
        if len(runs) == 1:
            raise RuntimeError("boom")

    dispatch = Dispatcher(body, lambda: failed.append("x"), workers=2)
    try:
        dispatch.run_now("a")
        wait_for(lambda: failed and dispatch.in_flight() == 0)
        dispatch.run_now("a")
        wait_for(lambda: len(runs) == 2)
    finally:
        dispatch.shutdown()
    assert failed == ["x"]


def test_the_gate_waits_for_bodies_inside_and_admits_none_after() -> None:
    stopping = threading.Event()
    gate = Gate(stopping)
    inside, release, ran = threading.Event(), threading.Event(), []

    def body() -> None:
        inside.set()
        release.wait(10)
        ran.append("first")

    worker = threading.Thread(target=gate.run, args=(body,))
    worker.start()
    assert inside.wait(10)
    closer = threading.Thread(target=gate.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # waits for the body inside
    release.set()
    closer.join(10)
    worker.join(10)
    gate.run(lambda: ran.append("late"))
    assert ran == ["first"]


def test_a_slow_check_of_one_task_does_not_delay_another_tasks_record(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine itself: the `slow` task's check blocks (as on a tmux, git or file call
    that hangs) while the `quick` task's agent ends; `quick` is recorded `completed` first."""
    setup.write_profile(max_concurrent=4, base_interval=0.2)
    setup.drop("slow.toml", setup.task("slow", "sleep: 60", setup.project / "s"))
    setup.drop("quick.toml", setup.task("quick", "sleep: 2\nexit: 0", setup.project / "q"))
    held, release = threading.Event(), threading.Event()
    signals = observe.Observer.signals

    def slow_signals(self: observe.Observer, runtime: Any, disk_full: bool) -> Any:
        if runtime.resolved.spec.name == "slow":
            held.set()
            release.wait(60)
        return signals(self, runtime, disk_full)

    monkeypatch.setattr(observe.Observer, "signals", slow_signals)
    engine = Engine(load_profile(setup.profile))
    seen: dict[str, Any] = {}

    def drive() -> None:
        try:
            seen["held"] = held.wait(60)
            wait_for(lambda: setup.manifests().get("quick", {}).get("status") == "completed", 60)
            seen["slow"] = setup.manifests()["slow"]["status"]
        except BaseException as exc:  # reported by the test thread
            seen["error"] = exc
        finally:
            release.set()
            engine.stopping.set()

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        assert engine.run() == 0  # signal handlers need the main thread
    finally:
        release.set()
        driver.join(60)
        setup.tmux("kill-server")
    assert "error" not in seen, seen.get("error")
    assert seen["held"]
    assert seen["slow"] == "running"  # its check was held all along


def test_the_engine_has_no_job_per_task(setup: Setup) -> None:
    setup.write_profile(max_concurrent=4)
    for index in range(3):
        setup.drop(
            f"t{index}.toml", setup.task(f"t{index}", "sleep: 30", setup.project / str(index))
        )
    engine = Engine(load_profile(setup.profile))
    jobs: dict[str, Any] = {}

    def drive() -> None:
        try:
            wait_for(
                lambda: (
                    len(engine.live) == 3 and not any(r.launching for r in engine.live.values())
                ),
                60,
            )
            jobs["ids"] = sorted(job.id for job in engine.scheduler.get_jobs())
        except BaseException as exc:
            jobs["error"] = exc
        finally:
            engine.stopping.set()

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        engine.run()
    finally:
        driver.join(60)
        setup.tmux("kill-server")
    assert "error" not in jobs, jobs.get("error")
    assert jobs["ids"] == ["intake", "tick"]
