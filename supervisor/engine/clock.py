"""The engine's clock: every interval, grace period, backoff and deadline is measured on it
(issue 20, Time).

``now = boottime() + offset``, where ``offset`` is ``wall - boottime`` at the engine's start:
a reading looks like the wall clock (epoch s, so the manifests and events keep times people
read), but it advances with CLOCK_BOOTTIME, which no one can set (it counts suspend, like
the wall clock, unlike CLOCK_MONOTONIC).

A step of the wall clock (NTP's first sync on a machine without a real-time clock, a VM
snapshot restored) is found in two places, and logged once each:

- **During a life**, the main loop's :func:`watch` compares ``wall - boottime`` with the
  offset every 0.1 s. On a step the offset takes it (the engine's readings follow the wall
  clock again), every task's remembered times move with it at its next check
  (:func:`rebase`), and every APScheduler job (whose times are wall times) runs now and
  schedules itself again.
- **After a restart**, :func:`restarted` compares the mark the previous engine left in
  ``state_dir/clock.json`` (wall time, CLOCK_BOOTTIME, boot id) with now. A step between
  the two moves the adopted tasks' recorded times (:func:`adopted`) and the first reading
  of their output's mtime. From another boot (or with no mark) the step is unknown: no
  recorded time may then lie in the future, so a timer starts again rather than misfires.

The pure arithmetic is :mod:`supervisor.policy.timebase`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from apscheduler.jobstores.base import JobLookupError
from apscheduler.triggers.interval import IntervalTrigger

from supervisor.diskio import atomic_write, read_regular
from supervisor.policy.timebase import (
    Mark,
    clamped,
    drift,
    is_step,
    seen_change,
    shifted,
    shifted_seen,
)
from supervisor.taskdir import layout

if TYPE_CHECKING:
    from apscheduler.schedulers.base import BaseScheduler

    from supervisor.engine.runtime import Runtime

log = logging.getLogger("supervise.engine")

#: Seconds of drift between the wall clock and CLOCK_BOOTTIME that count as a step, within
#: a life and across a restart.
STEP_TOLERANCE = 1.0
#: Seconds two CLOCK_BOOTTIME reads around one wall-clock read may lie apart for the pair
#: to count (more: the thread was preempted in between, and the pair would show a step).
PAIR_SLACK = 0.05
#: File in ``state_dir`` holding the latest :class:`Mark` (JSON), rewritten every
#: :data:`MARK_EVERY` seconds and at once after a step.
MARK_FILE = layout.CLOCK
#: Seconds between writes of :data:`MARK_FILE`.
MARK_EVERY = 1.0
#: Largest :data:`MARK_FILE` read, in bytes (it holds about 100).
MARK_MAX_BYTES = 4096
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boottime() -> float:
    """Seconds of CLOCK_BOOTTIME (since boot, suspend included; never stepped)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def boot_id() -> str:
    """The kernel's id of this boot (``""`` where ``/proc`` does not say)."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


class EngineClock:
    """The process's engine clock (one per process: a step is a fact of the machine)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.offset = time.time() - boottime()
        self._boot_id = boot_id()
        self._restarts: dict[Path, float] = {}  # state_dir -> step found at its restart
        self._marked: dict[Path, float] = {}  # state_dir -> boottime() of its latest mark

    def now(self) -> float:
        """The engine's reading (epoch s; follows the wall clock, never its steps)."""
        return boottime() + self.offset

    def reading(self) -> tuple[float, float]:
        """``(now, offset)`` of one moment: the reading and the offset it was made with."""
        offset = self.offset
        return boottime() + offset, offset

    def wall_to_engine(self) -> float:
        """Seconds to add to a wall time read now to place it on the engine's clock (0
        except between a step and :meth:`tick` noticing it)."""
        return self.now() - time.time()

    def mark(self) -> Mark:
        """Both clocks now, on the engine's scale."""
        boot = boottime()
        return Mark(wall=boot + self.offset, boot=boot, boot_id=self._boot_id)

    def tick(self) -> float | None:
        """Look for a step of the wall clock since the last look; on one, take it into the
        offset, log it once and return it (seconds, + forward); else ``None``."""
        with self._lock:
            before = boottime()
            wall = time.time()
            after = boottime()
            if after - before > PAIR_SLACK:
                return None  # preempted between the reads (a loaded machine): look again
            found = wall - (before + after) / 2 - self.offset
            if not is_step(found, STEP_TOLERANCE):
                return None
            self.offset += found
        log.warning(
            "clock stepped %+.1f s (wall clock against CLOCK_BOOTTIME); intervals "
            "are measured across it unchanged",
            found,
        )
        return found

    def restarted(self, state_dir: Path) -> float:
        """The step of the wall clock since the previous engine on ``state_dir`` left its
        mark (seconds; 0 when within :data:`STEP_TOLERANCE`), found once per state dir and
        logged once; ``nan`` when unknown (another boot, no mark)."""
        with self._lock:
            if state_dir in self._restarts:
                return self._restarts[state_dir]
            step = self._step_since(state_dir)
            self._restarts[state_dir] = step
        # The next engine's baseline from now on: an engine stopped before its main loop
        # wrote a mark would otherwise leave the next one none (a step then unknown).
        self.write_mark(state_dir, force=True)
        if step != step:
            log.info(
                "clock: no mark of this boot in %s; recorded times later than now are taken as now",
                state_dir / MARK_FILE,
            )
        elif step:
            log.warning(
                "clock stepped %+.1f s while no engine ran (wall clock against "
                "CLOCK_BOOTTIME); recorded times are moved by it",
                step,
            )
        return step

    def _step_since(self, state_dir: Path) -> float:
        try:
            data = json.loads(read_regular(state_dir / MARK_FILE, MARK_MAX_BYTES))
            before = Mark(float(data["wall"]), float(data["boot"]), str(data["boot_id"]))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            if not isinstance(exc, FileNotFoundError):
                log.warning(
                    "clock: cannot read %s (%s); it is written again", state_dir / MARK_FILE, exc
                )
            return float("nan")
        found = drift(before, self.mark())
        if found is None:
            return float("nan")
        return found if is_step(found, STEP_TOLERANCE) else 0.0

    def write_mark(self, state_dir: Path, force: bool = False) -> None:
        """Leave the mark for the next engine (at most every :data:`MARK_EVERY` s unless
        ``force``); only once :meth:`restarted` read the previous one."""
        if state_dir not in self._restarts:
            return
        mark = self.mark()
        if not force and mark.boot - self._marked.get(state_dir, 0.0) < MARK_EVERY:
            return
        self._marked[state_dir] = mark.boot
        data = {"wall": mark.wall, "boot": mark.boot, "boot_id": mark.boot_id}
        with contextlib.suppress(OSError):  # informative; a full disk must not stop us
            atomic_write(state_dir / MARK_FILE, json.dumps(data).encode(), durable=False)


class Interval(IntervalTrigger):
    """APScheduler's interval trigger (UTC), except that a job more than one interval
    late fires next at ``now`` instead of at every interval it missed.

    APScheduler 3.11 lists every missed fire time before it runs a late job (coalesced
    into one run, but counted one by one): after the wall clock stepped forward by years
    (NTP's first sync on a machine that booted in 1970) that list has billions of entries
    and the scheduler thread never gets through it.

    Args:
        seconds: the interval in seconds.
    """

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds=seconds, timezone=UTC)

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """The next fire time after ``previous_fire_time``, never before ``now`` once the
        job has fired (a late job catches up in one step)."""
        following = super().get_next_fire_time(previous_fire_time, now)
        if previous_fire_time is not None and following is not None and following < now:
            return now
        return following


CLOCK = EngineClock()


def now() -> float:
    """:meth:`EngineClock.now` of the process's clock."""
    return CLOCK.now()


def reading() -> tuple[float, float]:
    """:meth:`EngineClock.reading` of the process's clock."""
    return CLOCK.reading()


def watch(scheduler: BaseScheduler, state_dir: Path) -> None:
    """One look of the main loop (every 0.1 s): on a step, run every job now (their
    ``next_run_time`` are wall times, now off by the step: -1 h would delay every check by
    an hour; each check then schedules itself on the new scale) and leave a new mark in
    ``state_dir``; else leave the mark every :data:`MARK_EVERY` s."""
    step = CLOCK.tick()
    CLOCK.write_mark(state_dir, force=step is not None)
    if step is None:
        return
    for job in scheduler.get_jobs():
        with contextlib.suppress(JobLookupError):
            scheduler.modify_job(job.id, next_run_time=datetime.now(UTC))


def rebase(runtime: Runtime) -> float:
    """Move ``runtime``'s remembered times by the steps since they were taken, and return
    the engine's reading to check it with (consistent with them)."""
    now, offset = CLOCK.reading()
    delta = offset - runtime.clock_offset
    if delta:
        runtime.state = shifted(runtime.state, delta)
        runtime.output_seen = shifted_seen(runtime.output_seen, delta)
        runtime.clock_offset = offset
    return now


def output_seen(runtime: Runtime, stamp: float | None, now: float) -> float | None:
    """When the engine saw ``runtime``'s output stamp (an mtime, epoch s on the wall
    clock) change, on the engine's clock (:func:`timebase.seen_change`). The first reading
    after a restart is moved by a forward step found then (an agent's files may have been
    written before or after the step: a backward one is left to the clamp at ``now``, so an
    unknown step can make output look fresh, never stale)."""
    if stamp is None:
        return None
    shift = CLOCK.wall_to_engine()
    if runtime.output_seen is None:
        shift += max(runtime.restart_step, 0.0)
    runtime.output_seen = seen_change(runtime.output_seen, stamp, now, shift)
    return runtime.output_seen.at


def adopted(runtime: Runtime, state_dir: Path) -> None:
    """Put an adopted task's recorded times (``runtime.state``) on this engine's clock:
    moved by the step found at the restart (:meth:`EngineClock.restarted`; they were all
    written before the previous engine's last mark), and none in the future
    (``resume_at`` at most ``deadline`` s ahead) where the step is unknown."""
    step = CLOCK.restarted(state_dir)
    state = runtime.state
    if step == step:  # not nan
        state = shifted(state, step)
        runtime.restart_step = step
    runtime.state = clamped(state, CLOCK.now(), runtime.policy.deadline)
