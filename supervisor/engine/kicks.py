"""The engine's events: inotify and pidfd callbacks (from the watcher's thread) turned
into kicks (:class:`Kicks`, a part of :class:`supervisor.engine.scheduler.Engine`). A task's
kick hands its check to the check pool at once (:mod:`supervisor.engine.dispatch`); the
intake's moves its APScheduler job to now. Due times stay the safety net.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from datetime import UTC, datetime

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler

from supervisor.config import LoadedProfile
from supervisor.engine import acceptance
from supervisor.engine.dispatch import Dispatcher
from supervisor.engine.intake import Intake
from supervisor.engine.runtime import Runtime
from supervisor.engine.watch import Watcher
from supervisor.taskdir import layout
from supervisor.taskdir.folder import TaskDir

#: Files whose appearance in a task folder triggers an immediate check.
WAKE_FILES = frozenset({layout.DONE, layout.EXIT_CODE, layout.SIGNAL, acceptance.RESULT})


class Kicks:
    """Event callbacks of the engine; the attributes are the engine's own."""

    profile: LoadedProfile
    scheduler: BackgroundScheduler
    stopping: threading.Event
    source: Intake
    watcher: Watcher | None
    _kicked: set[str]
    dispatch: Dispatcher

    # ------------------------------------------------------------------ events
    def _kick(self, job_id: str) -> None:
        """Run a job now (from the watcher thread); polling remains the safety net."""
        if self.stopping.is_set():
            return
        with contextlib.suppress(JobLookupError):
            self.scheduler.modify_job(job_id, next_run_time=datetime.now(UTC))

    def _wake(self, task_id: str) -> None:
        """Check ``task_id`` now, and again right after a check already running."""
        if self.stopping.is_set():
            return
        self._kicked.add(task_id)
        self.dispatch.schedule(task_id, 0.0)

    def _on_spool(self, name: str) -> None:
        if self.source.notice(name):
            self._kick("intake")

    def _on_task(self, task_id: str, name: str) -> None:
        if name == layout.PID:
            task = TaskDir(self.profile.tasks_dir / task_id)
            pid = task.read_int(layout.PID)
            if pid is not None and self.watcher is not None:
                self.watcher.watch_pid(task_id, pid)
            self._wake(task_id)  # a new run: its check records the PID
        elif name in WAKE_FILES or (name.startswith("hook-") and name.endswith(".json")):
            self._wake(task_id)

    def _on_exit(self, task_id: str) -> None:
        self._wake(task_id)

    def _watch(self, runtime: Runtime) -> None:
        if self.watcher is None:
            return
        task = runtime.task
        self._watch_folder(runtime)
        pid = task.read_int(layout.PID)
        if pid is not None:
            self.watcher.watch_pid(task.task_id, pid)

    def _watch_folder(self, runtime: Runtime) -> None:
        """Watch a task's folder before its agent starts, so no event is missed; its checks
        then read the run files only when the watcher saw them change
        (:meth:`Watcher.run_files_changed`), and the next check reads them in any case."""
        runtime.run.force = True
        if self.watcher is None:
            return
        task_id = runtime.task.task_id
        if self.watcher.watch_task(task_id, runtime.task.path):
            runtime.run.changed = functools.partial(self.watcher.run_files_changed, task_id)
        else:  # not watched (the watch limit): read them at every check
            runtime.run.changed = None
