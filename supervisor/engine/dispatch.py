"""Due checks, run side by side: one APScheduler tick instead of one interval job per task,
and a pool of check workers on which each task has at most one check in flight (issue 24).

Until issue 24 one APScheduler worker ran intake, launches, checks and closes in series, and
every check was an interval job of its own, moved by a ``modify_job`` per check: under load a
done-file waited seconds behind other tasks' tmux calls (``benchmarks/README.md``: 5.1–5.6 s
p95 with 200 live agents on 16 cores, the other 15 idle).

Here a task's next check is a due time (CLOCK_MONOTONIC, so a step of the wall clock moves
nothing) in one table. APScheduler stays the clock: one ``tick`` job runs at the earliest due
time and hands every due task to the pool. An event (a done-file, a pidfd, a finished
background job) hands its task to the pool at once, without the scheduler. Ordering per task:
a task already in flight is marked to run once more right after its check ends, never twice at
once, so one task's decisions never interleave while different tasks' checks (and the tmux,
git and file work inside them) run concurrently.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import threading
import time
from collections.abc import Callable
from concurrent import futures
from datetime import UTC, datetime, timedelta

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.base import BaseScheduler

from supervisor.engine import clock

log = logging.getLogger("supervise.engine")

#: Threads running checks. The work is I/O (tmux over the control pipe, file reads and writes,
#: git), so more threads than cores pay; each holds one task at a time.
CHECK_WORKERS = 8
#: Seconds between ticks when nothing is due sooner: the safety net under the due table.
TICK_MAX = 1.0
#: A due time this close (seconds) to the tick's does not move the tick (each move wakes the
#: scheduler thread once more; 18 % of the engine's CPU at 200 agents with 1 s checks when
#: every check moved its own job, ``benchmarks/README.md``).
TICK_SLACK = 0.005
#: The APScheduler job id of the tick.
TICK_JOB = "tick"


class Gate:
    """Lets job bodies (checks, intake, startup) run side by side until the engine stops,
    then lets none in and waits for those inside: the stop sees every running body through
    before it shuts the scheduler down (``shutdown(wait=True)`` holds APScheduler's job-store
    lock while it waits, so a body calling ``modify_job`` then would deadlock).

    Args:
        stopping: set when the engine stops; a body that starts after it returns at once.
    """

    def __init__(self, stopping: threading.Event) -> None:
        self.stopping = stopping
        self._cond = threading.Condition()
        self._active = 0
        self._closed = False

    def run(self, body: Callable[..., None], *args: str) -> None:
        """Run ``body(*args)`` unless the engine is stopping."""
        with self._cond:
            if self._closed or self.stopping.is_set():
                return
            self._active += 1
        try:
            body(*args)
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def close(self) -> None:
        """Admit no more bodies and wait for the ones running (each bounded by its own
        timeouts)."""
        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: self._active == 0)


class Dispatcher:
    """Due times of task checks, and the pool that runs them.

    Args:
        run: the check of one task (``run(task_id)``), called on a pool thread; whatever it
            raises is logged and counted with ``failed``, never stops the dispatcher.
        failed: called once per check that raised.
        workers: pool threads (:data:`CHECK_WORKERS`).

    Thread-safe: every method may be called from any thread (checks, the watcher, background
    pools, the intake job). Its lock is a leaf: no callback runs while it is held.
    """

    def __init__(
        self,
        run: Callable[[str], None],
        failed: Callable[[], None],
        workers: int = CHECK_WORKERS,
    ) -> None:
        self._run, self._failed = run, failed
        self._lock = threading.Lock()
        self._due: dict[str, float] = {}  # task id -> monotonic due time
        self._heap: list[tuple[float, str]] = []  # (due, task id); stale entries skipped
        self._in_flight: set[str] = set()
        self._again: set[str] = set()  # kicked while in flight: run once more after
        self._tick_at = float("inf")  # monotonic time the tick job is set to run
        self._tick_lock = threading.Lock()  # one move of the tick job at a time, the latest wins
        self._scheduler: BaseScheduler | None = None
        self._closed = False
        self._pool = futures.ThreadPoolExecutor(workers, thread_name_prefix="supervise-check")

    # ------------------------------------------------------------------ the clock
    def start(self, scheduler: BaseScheduler, gate: Gate) -> None:
        """Add the tick job to ``scheduler`` (running): the clock of every due check. The
        tick runs through ``gate`` like every job body: a tick inside ``modify_job`` while
        APScheduler's ``shutdown(wait=True)`` holds the job-store lock would deadlock the
        stop (seen: the stop bound's exit 143 after 30 s)."""
        self._scheduler = scheduler
        with self._lock:
            self._tick_at = time.monotonic()
        scheduler.add_job(
            gate.run,
            clock.Interval(TICK_MAX),  # the safety net; each tick moves the job to the next due
            args=[self.tick],
            id=TICK_JOB,
            next_run_time=datetime.now(UTC),
        )

    def tick(self) -> None:
        """APScheduler's job: hand every due task to the pool, then set the next tick to the
        earliest due time (at most :data:`TICK_MAX` s away)."""
        now = time.monotonic()
        ready: list[str] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now + TICK_SLACK:
                when, task_id = heapq.heappop(self._heap)
                if self._due.get(task_id) == when:
                    del self._due[task_id]
                    ready.append(task_id)
            following = self._heap[0][0] if self._heap else now + TICK_MAX
            self._tick_at = min(following, now + TICK_MAX)
        for task_id in ready:
            self.run_now(task_id)
        self._move_tick()

    def _move_tick(self) -> None:
        """Set the tick job to :attr:`_tick_at`, read under the tick lock: of two threads
        moving it at once, the last write carries the latest (earliest) due time."""
        scheduler = self._scheduler
        if scheduler is None or self._closed:
            return
        with self._tick_lock:
            with self._lock:
                at = self._tick_at
            when = datetime.now(UTC) + timedelta(seconds=max(at - time.monotonic(), 0.0))
            with contextlib.suppress(JobLookupError):  # stopping: the scheduler dropped it
                scheduler.modify_job(TICK_JOB, next_run_time=when)

    # ------------------------------------------------------------------ due times
    def schedule(self, task_id: str, delay: float) -> None:
        """Check ``task_id`` in ``delay`` seconds (≤ 0: now), replacing its due time."""
        if delay <= 0.0:
            self.cancel(task_id)
            self.run_now(task_id)
            return
        when = time.monotonic() + delay
        with self._lock:
            self._due[task_id] = when
            heapq.heappush(self._heap, (when, task_id))
            move = when < self._tick_at - TICK_SLACK
            if move:
                self._tick_at = when
        if move:
            self._move_tick()

    def cancel(self, task_id: str) -> None:
        """Forget ``task_id``'s due time (a check in flight finishes)."""
        with self._lock:
            self._due.pop(task_id, None)
            self._again.discard(task_id)

    def is_due(self, task_id: str) -> bool:
        """Whether ``task_id`` has a due time or a check about to run."""
        with self._lock:
            return task_id in self._due or task_id in self._again

    # ------------------------------------------------------------------ the pool
    def run_now(self, task_id: str) -> None:
        """Check ``task_id`` on the pool now; if its check is in flight, once more right
        after it (never two at once)."""
        with self._lock:
            if self._closed:
                return
            if task_id in self._in_flight:
                self._again.add(task_id)
                return
            self._in_flight.add(task_id)
        self._submit(task_id)

    def _submit(self, task_id: str) -> None:
        try:
            self._pool.submit(self._body, task_id)
        except RuntimeError:  # the pool was shut down between the lock and here
            with self._lock:
                self._in_flight.discard(task_id)

    def _body(self, task_id: str) -> None:
        try:
            self._run(task_id)
        except Exception:
            log.exception("check of %s failed", task_id)
            self._failed()
        with self._lock:
            again = task_id in self._again and not self._closed
            self._again.discard(task_id)
            if not again:
                self._in_flight.discard(task_id)
        if again:
            self._submit(task_id)

    def in_flight(self) -> int:
        """Checks running or waiting for a pool thread now."""
        with self._lock:
            return len(self._in_flight)

    def shutdown(self) -> None:
        """Take no more checks and wait for the ones in flight (each bounded by its own
        tmux, file and process timeouts)."""
        with self._lock:
            self._closed = True
            self._again.clear()
        self._pool.shutdown(wait=True)
