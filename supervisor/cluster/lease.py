"""Fencing in the fleet (issue 20): a cluster task's agent stops when its engine is gone.

The sweeper (:mod:`supervisor.cluster.sweeper`) may restart a silent host's tasks elsewhere
``host_timeout`` seconds after its last heartbeat. An engine SIGKILLed while its tmux
server lives on leaves its agents running: without a fence they would run on two hosts at
once. So each cluster host holds a *lease*: the engine rewrites the lease file
(:data:`LEASE_FILE` in ``state_dir``) every :attr:`Fence.renew` seconds, and the in-pane
wrapper (:mod:`supervisor.wrapper`, ``launch.json``'s ``lease``) of each task this host
claimed from the fleet polls it every :attr:`Fence.poll` seconds. When the content has not
changed for :attr:`Fence.lease` seconds on the wrapper's own monotonic clock (no file
mtimes: a wall-clock step cannot fake or hide a renewal), the wrapper stops the agent's
process group as the engine would: SIGTERM, then SIGKILL after :attr:`Fence.grace`.

The bound (:func:`fence_of`, stated in README "several hosts"): an orphaned agent runs at
most ``lease + 2 * poll + grace`` seconds after its engine died, which is shorter than
``host_timeout - heartbeat`` (the earliest the sweeper can declare the host dead, counted
from the engine's death, since its last heartbeat is at most one ``heartbeat`` older).

The lease is renewed while the engine lives, whether or not the database answers: a
database outage must not stop the fleet's agents (the sweeper counts no silence while it
cannot reach the database either). A restarted engine renews only once a heartbeat has
gone through *and* the ownership check that follows it found none of its adopted tasks
lost (:meth:`LeaseKeeper.confirm`): before that it may have been declared dead. A clean
stop (the host recorded ``stopped``, never declared dead) releases the lease: agents then
run on until the engine comes back, as on a single host, for at most the seconds the
released record names (issue 25: :func:`~supervisor.config.fence.stopped_run_on` of
``[cluster] stopped_host_grace``), so they are gone before the sweeper gives their tasks
up (:mod:`supervisor.cluster.sweeper`, rule (e)).

Only tasks claimed from the fleet's database (a ``cluster.json`` claim record) are
fenced; spool tasks of a cluster host, and every task of a single-host engine, run on
while their engine restarts.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from supervisor.config.fence import (  # noqa: F401 (also from here)
    Fence,
    fence_of,
    host_fence,
    stopped_run_on,
)
from supervisor.leaserecord import LEASE_RECORD, LEASE_RELEASED
from supervisor.taskdir import layout

log = logging.getLogger("supervise.cluster")
#: The lease file in ``state_dir``.
LEASE_FILE = layout.CLUSTER_LEASE
#: The claim record in a cluster task's folder, ``{"host_id", "generation"}`` (defined
#: here, beside no database import, so a launch can tell a fleet task without psycopg).
CLAIM_FILE = layout.CLUSTER_CLAIM


class LeaseKeeper:
    """The engine's side of the lease: a thread that rewrites the lease file's record every
    :attr:`Fence.renew` seconds once :meth:`confirm` was called (see the module docstring).

    The record (:data:`~supervisor.leaserecord.LEASE_RECORD` bytes, ``held PID COUNTER`` or
    ``released PID [SECONDS]``) is rewritten in place with ``pwrite``: no new file or block, so a
    full disk does not stop renewals (the file is made once, at the first write).

    Args:
        state_dir: where :data:`LEASE_FILE` is.
        fence: the host's fence.
    """

    def __init__(self, state_dir: Path, fence: Fence) -> None:
        self.path = state_dir / LEASE_FILE
        self.fence = fence
        self._counter = 0
        self._fd: int | None = None
        self._error: str | None = None  # the last write error logged
        self._lock = threading.Lock()
        self._confirmed = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="supervise-cluster-lease", daemon=True
        )

    def start(self) -> None:
        """Start renewing (nothing is written before :meth:`arm` or :meth:`confirm`)."""
        self._thread.start()

    def arm(self) -> None:
        """Before a heartbeat that may turn this host ``alive`` again (any thread): a
        released lease (the last engine stopped cleanly) becomes held, so the agents fence
        themselves should this engine die without renewing it. A held lease is left as it
        is: an earlier engine's agents keep counting down until :meth:`confirm`."""
        with self._lock:
            if self._confirmed.is_set():
                return
            try:
                with open(self.path, "rb") as handle:
                    released = handle.read(LEASE_RECORD).startswith(LEASE_RELEASED)
            except OSError:
                return
            if released:
                self._write(self._held())

    def confirm(self) -> None:
        """A heartbeat went through and no adopted task was found lost: renew now and from
        now on (any thread)."""
        with self._lock:
            self._confirmed.set()
            self._write(self._held())

    def release(self, run_on: float | None = None) -> None:
        """After the host was recorded ``stopped`` (a clean stop): stop renewing and mark
        the lease released, so the agents run on until the next engine, or for ``run_on``
        seconds at most (None: no limit) from when each wrapper reads the record."""
        self.stop()
        limit = "" if run_on is None else f" {max(0.0, run_on):.3f}"
        with self._lock:
            self._write(LEASE_RELEASED + f" {os.getpid()}{limit}".encode())

    def stop(self) -> None:
        """Stop renewing (the lease expires after :attr:`Fence.lease` seconds)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _held(self) -> bytes:
        self._counter += 1
        return f"held {os.getpid()} {self._counter}".encode()

    def _loop(self) -> None:
        while not self._stopping.wait(self.fence.renew):
            if self._confirmed.is_set():
                with self._lock:
                    if not self._stopping.is_set():
                        self._write(self._held())

    def _write(self, record: bytes) -> None:
        """Overwrite the record in place (lock held); errors are logged, once each."""
        data = record.ljust(LEASE_RECORD - 1)[: LEASE_RECORD - 1] + b"\n"
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.pwrite(self._fd, data, 0)
            self._error = None
        except OSError as exc:
            if exc.strerror != self._error:
                log.error(
                    "cluster: cannot renew the lease %s: %s (this host's fleet tasks "
                    "stop when it expires)",
                    self.path,
                    exc.strerror,
                )
            self._error = exc.strerror
