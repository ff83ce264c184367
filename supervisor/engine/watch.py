"""Event-driven detection: inotify for files, pidfd for agent exits, on one thread.

Polling stays the safety net (every check job still runs at the policy's interval); this
module only makes the engine look *now* when something happens, so a finished or crashed
agent is noticed in milliseconds instead of up to ``base_interval`` seconds later:

- the spool folder (``IN_MOVED_TO`` / ``IN_CLOSE_WRITE``): a task file was dropped;
- each task folder: ``pid``, ``exit_code``, ``signal``, ``done`` and hook signal files
  appear (the wrapper writes them by rename, so ``IN_MOVED_TO``). The same events mark
  the task's run files changed (:meth:`Watcher.run_files_changed`), so a quiet check reads
  none of them; a folder that is not watched (inotify refused it, or it was moved) has
  them read at every check;
- each agent PID through ``os.pidfd_open`` (Linux 5.3+, the mechanism psutil 7.2 uses):
  the fd becomes readable when the process exits. Re-armed for every new PID.

inotify comes from the ``inotify_simple`` library; the watcher needs no thread per task.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inotify_simple import INotify
from inotify_simple import flags as F

from supervisor.errors import SuperviseError
from supervisor.taskdir import layout

log = logging.getLogger("supervise.watch")

FILE_EVENTS = F.MOVED_TO | F.CLOSE_WRITE | F.CREATE
#: A task folder's events that change its run files without waking a check: a respawn
#: removes the last run's files (``TaskDir.clear_run_files``), a rename moves one away.
QUIET_EVENTS = F.DELETE | F.MOVED_FROM
#: The events that end a folder's watch (inotify(7)): the folder was moved or removed, or
#: the watch itself was removed (``IN_IGNORED``). Its run files are then read at each check.
LOST_EVENTS = F.MOVE_SELF | F.DELETE_SELF | F.IGNORED
#: What a task folder's watch asks for (``IN_IGNORED`` comes unasked).
TASK_MASK = FILE_EVENTS | QUIET_EVENTS | F.MOVE_SELF | F.DELETE_SELF
#: The names whose events mark a task's run files changed (:meth:`Watcher.run_files_changed`):
#: the wrapper's run files and its ``launch_error``.
RUN_FILE_NAMES = frozenset({*layout.RUN_FILES, layout.LAUNCH_ERROR})


class WatchUnavailable(SuperviseError, RuntimeError):
    """No inotify instance could be had: the engine cannot start; ``str()`` is the line."""


class Watcher:
    """One thread that turns filesystem and process events into callbacks.

    Args:
        on_spool: called with a file name dropped into the spool folder.
        on_task: called with ``(task_id, file_name)`` for a file written in a task folder.
        on_exit: called with ``task_id`` when the watched agent PID exits.

    Callbacks run on the watcher thread and must be quick (the engine only reschedules a
    job). Every method is thread-safe.
    """

    def __init__(
        self,
        on_spool: Callable[[str], None],
        on_task: Callable[[str, str], None],
        on_exit: Callable[[str], None],
    ) -> None:
        self.on_spool, self.on_task, self.on_exit = on_spool, on_task, on_exit
        try:
            self._inotify = INotify()
        except OSError as exc:  # EMFILE: the user's inotify instances are used up
            raise WatchUnavailable(
                f"cannot watch the spool and task folders: inotify_init1: {exc.strerror}; "
                "the user's inotify instances are used up (sysctl fs.inotify."
                "max_user_instances): close other watchers or raise the limit"
            ) from exc
        self._lock = threading.Lock()
        self._dirs: dict[int, str | None] = {}  # watch descriptor -> task id (None: spool)
        self._task_wd: dict[str, int] = {}
        self._dirty: set[str] = set()  # task ids whose run files changed since last asked
        self._pidfds: dict[int, str] = {}  # pidfd -> task id
        self._task_pidfd: dict[str, int] = {}
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="supervise-watch", daemon=True)

    # ----------------------------------------------------------------- registration
    def start(self) -> None:
        self._thread.start()

    def watch_spool(self, folder: Path) -> None:
        wd = self._inotify.add_watch(str(folder), F.MOVED_TO | F.CLOSE_WRITE)
        with self._lock:
            self._dirs[wd] = None

    def watch_task(self, task_id: str, folder: Path) -> bool:
        """Watch a task folder (idempotent). False when inotify refused (``ENOSPC``: the
        user's ``fs.inotify.max_user_watches`` is reached; the folder is gone): its run
        files are then read at every check (:meth:`run_files_changed`)."""
        with self._lock:
            if task_id in self._task_wd:
                return True
        try:
            wd = self._inotify.add_watch(str(folder), TASK_MASK)
        except OSError as exc:
            log.warning("cannot watch %s: %s", folder, exc)
            return False
        with self._lock:
            self._dirs[wd] = task_id
            self._task_wd[task_id] = wd
            self._dirty.add(task_id)  # what was written before the watch: read it once
        return True

    def run_files_changed(self, task_id: str) -> bool:
        """Whether the task's run files (:data:`RUN_FILE_NAMES`) may have changed since
        the last call that answered True, and takes that mark: True when an event named
        one of them, when the queue overflowed (events lost), or while the folder is not
        watched (never watched, refused, moved or removed). Called by the check before it
        reads them; an event after this call marks them again for the next check."""
        with self._lock:
            if task_id not in self._task_wd:
                return True
            if task_id in self._dirty:
                self._dirty.discard(task_id)
                return True
            return False

    def watch_pid(self, task_id: str, pid: int) -> bool:
        """Arm a pidfd for ``pid`` (replacing the task's previous one). False if it is gone."""
        self.forget_pid(task_id)
        try:
            fd = os.pidfd_open(pid)
        except (ProcessLookupError, OSError):
            return False
        with self._lock:
            self._pidfds[fd] = task_id
            self._task_pidfd[task_id] = fd
        self._wake()
        return True

    def forget_pid(self, task_id: str) -> None:
        with self._lock:
            fd = self._task_pidfd.pop(task_id, None)
            if fd is not None:
                self._pidfds.pop(fd, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
            self._wake()

    def forget_task(self, task_id: str) -> None:
        """Stop watching a task's folder and PID (at a terminal status)."""
        self.forget_pid(task_id)
        with self._lock:
            wd = self._task_wd.pop(task_id, None)
            self._dirty.discard(task_id)
            if wd is not None:
                self._dirs.pop(wd, None)
        if wd is not None:
            with contextlib.suppress(OSError):
                self._inotify.rm_watch(wd)

    def stop(self) -> None:
        self._stopping = True
        self._wake()
        self._thread.join(timeout=5)
        with self._lock:
            fds = list(self._pidfds)
            self._pidfds.clear()
            self._task_pidfd.clear()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._inotify.close()

    def counts(self) -> tuple[int, int]:
        """(watched task folders, armed pidfds): for tests and benchmarks."""
        with self._lock:
            return len(self._task_wd), len(self._pidfds)

    # ----------------------------------------------------------------- loop
    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _loop(self) -> None:
        while not self._stopping:
            poller = select.poll()
            poller.register(self._inotify.fileno(), select.POLLIN)
            poller.register(self._wake_r, select.POLLIN)
            with self._lock:
                pidfds = dict(self._pidfds)
            for fd in pidfds:
                poller.register(fd, select.POLLIN)
            try:
                ready = poller.poll(1000)
            except OSError:  # a pidfd closed under us: rebuild the set
                continue
            for fd, _ in ready:
                if fd == self._wake_r:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 4096)
                elif fd == self._inotify.fileno():
                    self._drain_inotify()
                elif fd in pidfds:
                    task_id = pidfds[fd]
                    self.forget_pid(task_id)
                    self._call(self.on_exit, task_id)

    def _drain_inotify(self) -> None:
        for event in self._inotify.read(timeout=0):
            if event.mask & F.Q_OVERFLOW:  # events were lost: every folder is suspect
                with self._lock:
                    self._dirty.update(self._task_wd)
                log.warning("inotify queue overflowed; rereading every task's run files")
                continue
            with self._lock:
                owner = self._dirs.get(event.wd, "?")
                if owner and owner != "?":
                    self._mark(owner, event)
            if owner == "?" or not event.name or event.mask & QUIET_EVENTS:
                continue
            if owner is None:
                self._call(self.on_spool, event.name)
            else:
                self._call(self.on_task, owner, event.name)

    def _mark(self, task_id: str, event: Any) -> None:
        """Record what ``event`` (in ``task_id``'s folder) says of its run files; the lock
        is held. A lost watch makes the folder unwatched (read at every check)."""
        if event.mask & LOST_EVENTS:
            wd = self._task_wd.get(task_id)
            if wd == event.wd:
                del self._task_wd[task_id]
                self._dirs.pop(wd, None)
                log.warning("%s: its folder is no longer watched; reading its files", task_id)
        elif event.name in RUN_FILE_NAMES:
            self._dirty.add(task_id)

    @staticmethod
    def _call(callback: Callable[..., None], *args: str) -> None:
        try:
            callback(*args)
        except Exception:  # a callback bug must never kill the watcher
            log.exception("watch callback failed for %s", args)
