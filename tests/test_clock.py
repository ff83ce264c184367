"""The engine's clock and its pure arithmetic (issue 20, Time): step detection, re-basing the
policy's remembered times, and when output was seen to change. The live steps are in
``tests/test_clock_steps.py`` (libfaketime)."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.engine import clock
from supervisor.policy import TaskState
from supervisor.policy.timebase import (
    TIME_FIELDS,
    Mark,
    Seen,
    clamped,
    drift,
    is_step,
    seen_change,
    shifted,
    shifted_seen,
)

moments = st.floats(min_value=0, max_value=4e9, allow_nan=False)
deltas = st.floats(min_value=-1e8, max_value=1e8, allow_nan=False)
maybe = st.one_of(st.none(), moments)
states = st.builds(
    TaskState,
    status=st.sampled_from(["running", "crashed", "hung", "waiting", "escalated"]),
    **{name: maybe for name in TIME_FIELDS},
)


@given(wall=moments, boot=st.floats(0, 1e7), elapsed=st.floats(0, 1e6), step=deltas)
def test_drift_is_the_step_whatever_the_elapsed_time(
    wall: float, boot: float, elapsed: float, step: float
) -> None:
    before = Mark(wall, boot, "b")
    after = Mark(wall + elapsed + step, boot + elapsed, "b")
    found = drift(before, after)
    assert found is not None and math.isclose(found, step, abs_tol=1e-3)
    assert is_step(found, 1.0) == (abs(found) > 1.0)


def test_drift_across_a_reboot_is_unknown() -> None:
    assert drift(Mark(100.0, 50.0, "a"), Mark(100.0, 50.0, "b")) is None
    assert drift(Mark(100.0, 60.0, "a"), Mark(100.0, 50.0, "a")) is None  # boottime went back
    assert drift(Mark(100.0, -1.0, "a"), Mark(100.0, 50.0, "a")) is None
    assert not is_step(None, 1.0)
    assert drift(Mark(math.inf, 0.0, "a"), Mark(math.inf, 0.0, "a")) is None


@given(state=states, delta=deltas, now=moments)
def test_shifting_keeps_every_interval_to_now(state: TaskState, delta: float, now: float) -> None:
    moved = shifted(state, delta)
    for name in TIME_FIELDS:
        old, new = getattr(state, name), getattr(moved, name)
        assert (old is None) == (new is None)
        if old is not None:
            assert math.isclose((now + delta) - new, now - old, abs_tol=1e-3)
    assert moved.status == state.status and moved.retry_count == state.retry_count


@given(state=states, delta=deltas)
def test_shifting_back_and_forth_is_the_identity(state: TaskState, delta: float) -> None:
    back = shifted(shifted(state, delta), -delta)
    for name in TIME_FIELDS:
        old, new = getattr(state, name), getattr(back, name)
        assert old is None or math.isclose(old, new, abs_tol=1e-3)


@given(state=states, now=moments, ahead=st.floats(0, 1e7))
def test_clamped_puts_nothing_in_the_future(state: TaskState, now: float, ahead: float) -> None:
    fixed = clamped(state, now, ahead)
    for name in TIME_FIELDS:
        old, new = getattr(state, name), getattr(fixed, name)
        if old is None:
            assert new is None
            continue
        limit = now + ahead if name == "resume_at" else now
        assert new <= limit and (new == old or old > limit)


@given(
    stamps=st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=20),
    steps=st.lists(st.floats(0.0, 100.0), min_size=20, max_size=20),
    lag=deltas,
)
def test_seen_change_never_leaves_what_the_engine_saw(
    stamps: list[float], steps: list[float], lag: float
) -> None:
    """Whatever the stamps (a stepped wall clock writes any), the moment taken as the
    change is never after the check, never before the previous check when the stamp
    changed, and unchanged when the stamp is."""
    now, seen = 1000.0, None
    for stamp, step in zip(stamps, steps, strict=False):
        now += step
        previous = seen
        seen = seen_change(previous, stamp, now, lag)
        assert seen.at <= now and seen.checked == now
        if previous is not None and stamp == previous.stamp:
            assert seen.at == previous.at
        elif previous is not None:
            assert seen.at >= previous.checked


def test_seen_change_trusts_a_plausible_stamp() -> None:
    first = seen_change(None, 95.0, 100.0, 0.0)
    assert first.at == 95.0
    later = seen_change(first, 103.0, 105.0, 0.0)
    assert later.at == 103.0  # between the checks: the file's own time
    stepped = seen_change(later, 103.0 - 3600, 106.0, 0.0)  # written after a -1 h step
    assert stepped.at == 105.0  # not an hour stale: the previous check
    ahead = seen_change(stepped, 106.5 + 3600, 107.0, 0.0)  # after a +1 h step
    assert ahead.at == 107.0  # not in the future
    assert shifted_seen(ahead, -5.0) == Seen(ahead.stamp, 102.0, 102.0)
    assert shifted_seen(None, 3.0) is None


def test_the_engine_clock_follows_boottime_not_the_wall_clock(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A step of time.time() moves neither an interval measured on the engine's clock
    nor, once noticed, the offset between the two; it is logged once."""
    engine = clock.EngineClock()
    first = engine.now()
    real = time.time
    monkeypatch.setattr(clock.time, "time", lambda: real() + 3600)
    assert engine.now() - first < 5  # not noticed yet: still the old scale
    with caplog.at_level(logging.WARNING, "supervise.engine"):
        assert engine.tick() == pytest.approx(3600, abs=5)
        assert engine.tick() is None
    assert sum("clock stepped" in r.message for r in caplog.records) == 1
    assert engine.now() == pytest.approx(real() + 3600, abs=1)
    assert engine.wall_to_engine() == pytest.approx(0, abs=1)


def test_restarted_reads_the_previous_mark_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    previous = clock.EngineClock()
    assert previous.restarted(tmp_path) != previous.restarted(tmp_path)  # nan: no mark
    previous.write_mark(tmp_path, force=True)
    mark = json.loads((tmp_path / clock.MARK_FILE).read_text())
    assert mark["boot_id"] == clock.boot_id()
    real = time.time
    monkeypatch.setattr(clock.time, "time", lambda: real() - 3600)
    engine = clock.EngineClock()
    with caplog.at_level(logging.INFO, "supervise.engine"):
        assert engine.restarted(tmp_path) == pytest.approx(-3600, abs=5)
        assert engine.restarted(tmp_path) == pytest.approx(-3600, abs=5)
    assert sum("clock stepped" in r.message for r in caplog.records) == 1


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        '{"wall": "x"}',
        "[]",
        '{"wall": 1}',
        "\x00" * 10,
        '{"wall": NaN, "boot": 1, "boot_id": "x"}',
        '{"wall": 1e308, "boot": 1e308, "boot_id": "x"}',
        "x" * 100_000,
    ],
)
def test_a_damaged_mark_is_an_unknown_step(tmp_path: Path, content: str) -> None:
    (tmp_path / clock.MARK_FILE).write_text(content)
    assert math.isnan(clock.EngineClock().restarted(tmp_path))


@pytest.mark.parametrize("kind", ["fifo", "directory", "dangling symlink"])
def test_an_odd_mark_file_never_blocks_the_restart(tmp_path: Path, kind: str) -> None:
    """A FIFO at ``clock.json`` (open() would wait for a writer), a directory, a dangling
    symlink: an unknown step, at once."""
    path = tmp_path / clock.MARK_FILE
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "nowhere")
    assert math.isnan(clock.EngineClock().restarted(tmp_path))


def test_a_restart_leaves_its_mark_at_once(tmp_path: Path) -> None:
    """An engine stopped before its main loop's first look still leaves the next engine a
    baseline: the mark is written as soon as the previous one was read (seen in a full
    run: the next engine found none, and a -1 h step while down went unknown)."""
    clock.EngineClock().restarted(tmp_path)
    mark = json.loads((tmp_path / clock.MARK_FILE).read_text())
    assert mark["boot_id"] == clock.boot_id()


def test_a_mark_is_left_only_after_the_previous_one_was_read(tmp_path: Path) -> None:
    engine = clock.EngineClock()
    engine.write_mark(tmp_path, force=True)
    assert not (tmp_path / clock.MARK_FILE).exists()
    engine.restarted(tmp_path)
    engine.write_mark(tmp_path)
    assert (tmp_path / clock.MARK_FILE).exists()


def test_a_late_interval_job_catches_up_in_one_step() -> None:
    """Twenty years late (a step forward): the next fire time is ``now``, not each missed
    interval (APScheduler lists them all before it runs the job)."""
    from datetime import UTC, datetime, timedelta

    trigger = clock.Interval(0.2)
    now = datetime.now(UTC)
    late = now - timedelta(days=365 * 20)
    assert trigger.get_next_fire_time(late, now) == now
    assert trigger.get_next_fire_time(now, now) == now + timedelta(seconds=0.2)
    first = trigger.get_next_fire_time(None, now)
    assert first is not None and first >= now


def test_a_preempted_pair_of_reads_is_no_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded machine the thread may stop for seconds between its reads of the two
    clocks: that pair is not a step (it is read again at the next look)."""
    engine = clock.EngineClock()
    base = clock.boottime()
    reads = iter([base + 0.0, base + 4.0])
    monkeypatch.setattr(clock, "boottime", lambda: next(reads))
    monkeypatch.setattr(clock.time, "time", lambda: base + engine.offset + 4.0)
    assert engine.tick() is None
