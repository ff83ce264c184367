"""The engine's APScheduler: one background scheduler with a few job threads, and a stop
that is quiet.

APScheduler 3.11's ``shutdown`` marks the scheduler stopped *before* it takes the job-store
lock. A one-shot job (the engine's ``startup``) that the scheduler thread is processing at
that moment is then looked up among the pending jobs instead of the store, and the thread
dies with ``JobLookupError`` and a traceback on stderr (seen in CI: a SIGTERM sent as soon
as the engine's heartbeat appeared). After a stop that lookup means nothing, so
:class:`EngineScheduler` ends its loop quietly instead.
"""

from __future__ import annotations

from datetime import UTC

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import STATE_STOPPED


class EngineScheduler(BackgroundScheduler):
    """A :class:`BackgroundScheduler` whose loop ends quietly when a stop races a job."""

    def _process_jobs(self) -> float | None:
        try:
            return super()._process_jobs()  # type: ignore[no-any-return]
        except JobLookupError:
            if self.state == STATE_STOPPED:
                return None  # the stop won the race (module docstring); the loop ends
            raise


def engine_scheduler() -> EngineScheduler:
    """The engine's scheduler: a few job threads (startup, intake, the check tick), missed
    runs coalesced and never dropped as too late, times in UTC."""
    return EngineScheduler(
        # startup, intake and the dispatcher's tick each get a thread (checks run on the
        # dispatcher's own pool); intake and startup serialise on the engine's shared lock
        executors={"default": ThreadPoolExecutor(max_workers=4)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        timezone=UTC,
    )
