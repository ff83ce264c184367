"""The engine's side of the profile's daily cap (issue 26, ``[budget] daily_usd``):
:class:`DailySpend` keeps the running total of the profile's spend per local day, holds new
launches once today's reaches the cap (the decision is :func:`supervisor.policy.spend.daily_hold`),
marks each held queued task's manifest with why it waits (``budget_hold``), and calls the
notifier once per day the cap is reached.

The total is never re-read from every manifest on a tick: it is built once from the task
folders (:func:`supervisor.costs.scan`, at the engine's first intake tick; only when the
profile has a cap) and then kept up to date from each manifest the engine writes
(:meth:`DailySpend.saw`, called by :meth:`supervisor.engine.checks.Checks._settle`), each
task's pieces of spend (:func:`supervisor.costs.pieces`) replacing its earlier ones. The sums
are whole micro-dollars, so adding and taking back a task's pieces never drifts.

The notification is written ahead in ``state_dir/daily-budget.json``
(:data:`supervisor.taskdir.layout.DAILY_BUDGET`): ``notifying`` for the day before the
notifier runs, ``notified`` after it; an engine killed in between calls it again at its next
start, and one restarted after it does not (:func:`supervisor.policy.spend.notify_due`). Its
``days`` keeps the last days notified, so a wall clock stepped back over midnight does not
notify the day before again (nor the day after, once the clock is right again).

Limits: a task archived (``supervise archive``) on the day it spent leaves the total at the
engine's next start; in a fleet each host counts the task folders of its own state dir.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from supervisor import costs
from supervisor.config import LoadedProfile, effective_policy
from supervisor.diskio import atomic_write, read_regular
from supervisor.engine import notify
from supervisor.engine.pools import Submit
from supervisor.policy import spend
from supervisor.taskdir import layout
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import Manifest, TaskDir

log = logging.getLogger("supervise.engine")

#: The states of the notification's record (the words of the task notifications' events).
NOTIFYING, NOTIFIED = Event.NOTIFYING.value, Event.NOTIFIED.value

DayPieces = tuple[tuple[str, int], ...]


def day_pieces(found: tuple[tuple[float | None, float], ...]) -> DayPieces:
    """A task's pieces of spend as ``(local day, micro-dollars)``."""
    return tuple((costs.day_of(when), costs.micro(usd)) for when, usd in found)


class DailySpend:
    """The profile's spend per local day and the hold on new launches.

    Args:
        profile: the profile (its ``[budget] daily_usd``, its state dir, its notifier:
            the profile's ``[monitor] notifier``).
        submit: runs a callable on an engine pool (the notifier runs on ``notify``).

    Thread-safe: :meth:`saw` comes from the check threads, :meth:`holds` from the intake.
    """

    def __init__(self, profile: LoadedProfile, submit: Submit) -> None:
        self.limit = profile.spec.budget.daily_usd
        self.profile = profile
        self.submit = submit
        self._lock = threading.Lock()
        self._tasks: dict[str, DayPieces] = {}
        self._days: dict[str, int] = {}
        self._built = False
        self._marked: dict[str, str] = {}  # task id -> the day its manifest says it is held
        self._unwritten: set[str] = set()  # tasks whose mark failed (logged once each)
        self._holding = False  # a hold was seen since the last "new day" line
        self._record: dict[str, Any] = {}
        self._unsaved = False  # the record could not be written yet
        # days whose notifier call runs now; the record and this set change together under
        # _told (reentrant: a submit that runs the call at once settles it inside _notify)
        self._in_flight: set[str] = set()
        self._told = threading.RLock()

    # ------------------------------------------------------------------ the running total
    def saw(self, task_id: str, manifest: Manifest) -> None:
        """Take a task's manifest as the engine just wrote it (its spend replaces what the
        task counted before). Nothing without a cap."""
        if self.limit is None:
            return
        found = day_pieces(costs.pieces(costs.manifest_fields(manifest)))
        with self._lock:
            self._put(task_id, found)

    def _put(self, task_id: str, found: DayPieces) -> None:
        for day, micro in self._tasks.get(task_id, ()):
            self._days[day] -= micro
        for day, micro in found:
            self._days[day] = self._days.get(day, 0) + micro
        self._tasks[task_id] = found

    def _build(self) -> None:
        """The totals from every task folder, once; a task :meth:`saw` meanwhile keeps
        what it saw (newer than the folder read)."""
        found: dict[str, DayPieces] = {}
        unreadable = 0
        for item in costs.scan(self.profile.tasks_dir):
            if isinstance(item, costs.Unreadable):
                unreadable += 1
            else:
                found[item.task_id] = day_pieces(item.pieces)
                if item.held:  # an earlier engine's mark: cleared once the hold lifts
                    self._marked[item.task_id] = "-"
        with self._lock:
            for task_id, pieces in found.items():
                if task_id not in self._tasks:
                    self._put(task_id, pieces)
            self._built = True
        self._record = self._read_record()
        if unreadable:
            log.warning("daily budget: %d task manifest(s) unreadable, not counted", unreadable)

    def today(self, now: float) -> float:
        """USD the profile spent in the local day of ``now`` (as far as known)."""
        day = spend.local_day(now, costs.utc_offset(now))
        with self._lock:
            return self._days.get(day, 0) / costs.MICRO

    # ------------------------------------------------------------------ the hold
    def holds(self, queue: Iterable[TaskDir], now: float) -> spend.Hold | None:
        """The hold on new launches at ``now`` (epoch s), or ``None``: queued tasks may
        start. Asked on every intake tick, queue or not, so the day's notification comes
        when the cap is reached, not when a task next waits. While it holds, each queued
        task's manifest says why (once per task and day); when it lifts, the marks go."""
        if self.limit is None:
            return None
        if not self._built:
            self._build()
        hold = spend.daily_hold(now, costs.utc_offset(now), self.today(now), self.limit)
        if hold is None:
            if self._marked or self._holding:
                self._clear(queue)
            return None
        self._holding = True
        with self._told:
            if self._unsaved and not self._in_flight:
                self._write_record(self._record)
        self._mark(queue, hold)
        with self._told:
            if self._due(hold):
                self._notify(hold)
        return hold

    def _due(self, hold: spend.Hold) -> bool:
        """Whether ``hold``'s day is to be told now (:func:`spend.notify_due`); a day whose
        call runs now counts as told, whichever day the record names (a clock stepped
        back over midnight while the new day's call ran)."""
        settled = self._record.get("state") == NOTIFIED or hold.day in self._in_flight
        days = [*spend.told(self._record.get("days")), *self._in_flight]
        return spend.notify_due(hold, self._record.get("day"), settled, days)

    def _mark(self, queue: Iterable[TaskDir], hold: spend.Hold) -> None:
        record = {
            "day": hold.day,
            "reason": hold.reason,
            "spent_usd": round(hold.spent_usd, 6),
            "daily_usd": hold.daily_usd,
            "until": datetime.fromtimestamp(hold.until, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        for task in queue:
            if self._marked.get(task.task_id) != hold.day and self._write_mark(task, record):
                self._marked[task.task_id] = hold.day

    def _clear(self, queue: Iterable[TaskDir]) -> None:
        """Take the marks off the queued tasks; one that cannot be written (a full disk)
        stays known and is tried again at the next look."""
        if self._holding:
            log.info("daily budget: a new day; queued tasks may launch again")
            self._holding = False
        left = {}
        for task in queue:
            day = self._marked.get(task.task_id)
            if day is not None and not self._write_mark(task, None):
                left[task.task_id] = day
        self._marked = left  # the others are cleared, or left the queue
        self._unwritten &= set(left)

    def _write_mark(self, task: TaskDir, record: dict[str, Any] | None) -> bool:
        """Write (or clear) a task's ``budget_hold``; False when it could not be written
        (a full disk: tried again at the next look, the line logged once per task)."""

        def change(m: Manifest) -> None:
            m.budget_hold = record

        try:
            task.update_manifest(change, durable=False)
        except (OSError, ValueError) as exc:  # shown where the manifest can be read
            if task.task_id not in self._unwritten:
                log.warning("%s: cannot record the daily budget hold: %s", task.task_id, exc)
            self._unwritten.add(task.task_id)
            return False
        self._unwritten.discard(task.task_id)
        return True

    # ------------------------------------------------------------------ the notification
    def _read_record(self) -> dict[str, Any]:
        path = self.profile.state_dir / layout.DAILY_BUDGET
        try:
            data = json.loads(read_regular(path, 64 * 1024, follow=False))
        except (OSError, ValueError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_record(self, record: dict[str, Any]) -> None:
        """Keep ``record`` and write it; one that cannot be written (a full disk) is logged
        once and written again at the next look (:meth:`holds`): a restarted engine must
        find the day notified."""
        self._record = record
        path = self.profile.state_dir / layout.DAILY_BUDGET
        try:
            atomic_write(path, json.dumps(record).encode() + b"\n")
        except OSError as exc:
            if not self._unsaved:
                log.error("cannot write %s: %s", path, exc)
            self._unsaved = True
            return
        self._unsaved = False

    def _notify(self, hold: spend.Hold) -> None:
        """Record the day (write-ahead), then run the notifier on the notify pool."""
        until = datetime.fromtimestamp(hold.until).astimezone().strftime("%Y-%m-%d %H:%M %Z")
        log.warning("%s; queued tasks wait until %s", hold.reason, until)
        record = {"day": hold.day, "state": NOTIFYING, "spent_usd": round(hold.spent_usd, 6)}
        record |= {"daily_usd": hold.daily_usd, "until": until, "days": self._record.get("days")}
        self._write_record(record)
        self._in_flight.add(hold.day)
        policy, _ = effective_policy(self.profile.spec.monitor, None)
        payload = {
            "event": Event.DAILY_BUDGET.value,
            "status": "held",
            "reason": hold.reason,
            "day": hold.day,
            "spent_usd": round(hold.spent_usd, 6),
            "daily_usd": hold.daily_usd,
            "until": until,
            "profile": str(self.profile.path),
        }

        def body() -> None:
            code = None
            try:
                code = notify.run_notifier(policy.notifier, payload, policy.notifier_timeout)
            finally:
                self._settle(hold.day, code)

        self.submit("notify", body)

    def _settle(self, day: str, code: int | None) -> None:
        """The notifier call for ``day`` ended (its exit code; ``None``: none): the day
        joins the record's told days, and the record says ``notified`` if it still names
        this day. A clock stepped back over midnight while the call ran may have begun the
        other day's call and record: that record is kept (an overwrite would end the other
        call's in-flight mark, and the other day would be told twice)."""
        with self._told:
            current = self._record
            told: dict[str, Any] = {"days": spend.remember(current.get("days"), day)}
            if current.get("day") == day:
                told |= {"state": NOTIFIED, "notifier_exit_code": code}
            self._write_record({**current, **told})
            self._in_flight.discard(day)
