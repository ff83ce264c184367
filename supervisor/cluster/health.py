"""procrastinate's worker kept on LISTEN/NOTIFY, and alive, through database outages.

Measured here with procrastinate 3.10 and PostgreSQL 15 (``/work/shared/notes``): after a
server restart a worker may silently fall back to polling, or stop when one of its side
tasks fails. Its source says why (``worker.py``, ``psycopg_connector.py``):

* the listener (``JobManager.listen_for_jobs``) reconnects when its connection breaks, but
  a failed *connect* (the server still down) raises out of it; the side-task monitor then
  stops the worker, or, when the periodic deferrer has already returned (no periodic task),
  nobody watches it any more and the worker polls every ``fetch_job_polling_interval``;
* ``fetch_job``, ``update_heartbeat`` and a job's ``finish_job`` raise while the server is
  down, which ends the worker's loop or leaves the job ``doing``;
* a worker that stops aborts every job it runs: here a job lives as long as its task, so
  the host would lose the slots' bookkeeping and fetch more than it can run.

:class:`Health` wraps those methods of the worker's own ``JobManager`` instance (their
public signatures, nothing else of procrastinate's is touched) so that while the database
is down **dispatch pauses** (``fetch_job`` answers "no job"), job completions wait and are
written when it returns, heartbeats are skipped, and the listener reconnects every
:data:`RECONNECT_EVERY` seconds instead of dying. The worker, and with it every job, lives
on: a task never ends or starts twice because of an outage. Every failure goes to the
engine's :class:`~supervisor.cluster.connections.Outage` (one log line per outage).

The LISTEN connection is checked by a round trip on it
(:meth:`~supervisor.cluster.connections.SharedConnector.listen_notify`, issue 25: no
periodic NOTIFY); one that broke or went deaf raises out and is listened again at once.
Each time it LISTENs (again), :meth:`Health.listening` makes the worker fetch once and the
control listener read its pending rows: what was submitted or asked while it was not
listening is taken at once, not at the next poll.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from procrastinate import exceptions
from procrastinate.manager import JobManager
from procrastinate.worker import FETCH_JOB_POLLING_INTERVAL

from supervisor.cluster.connections import RECONNECT_EVERY, Outage
from supervisor.cluster.db import ClusterError, Source, borrow, one_line
from supervisor.cluster.sqlfiles import query

log = logging.getLogger("supervise.cluster")

#: Environment variable (seconds, for tests and benchmarks only) overriding procrastinate's
#: ``fetch_job_polling_interval``: a long interval proves dispatch runs on LISTEN/NOTIFY.
FETCH_POLL_ENV = "SUPERVISE_CLUSTER_FETCH_POLL"
#: What a database call may raise when the server is down or restarting.
DOWN = (exceptions.ConnectorException, psycopg.Error, ClusterError, OSError, TimeoutError)


def fetch_polling_interval() -> float:
    """Seconds between two polls of the queue when no notification comes:
    ``SUPERVISE_CLUSTER_FETCH_POLL`` if set (tests), else procrastinate's default (5 s).

    Raises:
        ValueError: the variable is not a positive number (one line naming it).
    """
    text = os.environ.get(FETCH_POLL_ENV)
    if text is None:
        return FETCH_JOB_POLLING_INTERVAL
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise ValueError(f"{FETCH_POLL_ENV}={text!r}: expected a positive number of seconds")
    return value


class Health:
    """The worker's database calls made outage-proof, and its listener kept listening.

    Args:
        manager: the worker's app's ``JobManager`` (its methods are wrapped on the instance).
        outage: the engine's :class:`~supervisor.cluster.connections.Outage`.
        stopping: set when the engine stops (a completion then stops waiting).
        on_listening: called (on the loop) each time the LISTEN connection listens (again).
    """

    def __init__(
        self,
        manager: JobManager,
        outage: Outage,
        stopping: threading.Event,
        on_listening: Callable[[], None],
    ) -> None:
        self.manager = manager
        self.outage = outage
        self.stopping = stopping
        self.on_listening = on_listening
        self.echoes = 0  # times the LISTEN connection listened (tests)
        self._on_notification: Callable[..., Awaitable[None]] = _ignore
        self._original: dict[str, Callable[..., Awaitable[Any]]] = {}

    def install(self) -> None:
        """Wrap the manager's methods (see the module docstring)."""
        for name in (
            "listen_for_jobs",
            "fetch_job",
            "update_heartbeat",
            "finish_job",
            "retry_job",
            "defer_periodic_job",
        ):
            self._original[name] = getattr(self.manager, name)
        manager: Any = self.manager
        manager.listen_for_jobs = self._listen
        manager.fetch_job = self._fetch
        manager.update_heartbeat = self._heartbeat
        manager.finish_job = self._until_written("finish_job")
        manager.retry_job = self._until_written("retry_job")
        manager.defer_periodic_job = self._defer_periodic

    # ------------------------------------------------------------ the wrapped calls
    async def _listen(
        self, *, on_notification: Callable[..., Awaitable[None]], queues: Any = None
    ) -> None:
        """procrastinate's listener, started again whenever it fails or its round trip
        finds it deaf; never returns (cancelled with the worker)."""

        self._on_notification = on_notification
        listen = self._original["listen_for_jobs"]
        while True:
            try:
                await listen(on_notification=on_notification, queues=queues)
            except DOWN as exc:
                if isinstance(exc, TimeoutError):
                    log.warning(
                        "cluster: the worker's LISTEN connection did not answer its check; "
                        "listening again on a new one"
                    )
                else:
                    self.outage.failed(exc, "the LISTEN connection")
            await asyncio.sleep(RECONNECT_EVERY)

    async def _fetch(self, **kwargs: Any) -> Any:
        """One job, or None while the database is down."""
        began = time.monotonic()
        try:
            job = await self._original["fetch_job"](**kwargs)
        except DOWN as exc:
            self.outage.failed(exc, "the task worker", began)
            return None  # dispatch pauses; the first LISTEN after the outage resumes it
        self.outage.ok()
        return job

    async def _heartbeat(self, *args: Any, **kwargs: Any) -> None:
        try:
            await self._original["update_heartbeat"](*args, **kwargs)
        except DOWN as exc:
            self.outage.failed(exc, "the task worker")

    def _until_written(self, name: str) -> Callable[..., Awaitable[Any]]:
        """A job's completion, tried again every :data:`RECONNECT_EVERY` seconds until the
        database takes it (the job keeps its slot meanwhile), or until the engine stops."""

        async def call(*args: Any, **kwargs: Any) -> Any:
            while True:
                try:
                    return await self._original[name](*args, **kwargs)
                except DOWN as exc:
                    if self.stopping.is_set():
                        raise
                    self.outage.failed(exc, "the task worker")
                await asyncio.sleep(RECONNECT_EVERY)

        return call

    async def _defer_periodic(self, *args: Any, **kwargs: Any) -> Any:
        """A periodic job's defer; while the database is down the tick is skipped as if
        already queued (procrastinate's deferrer then goes on to the next tick)."""
        try:
            return await self._original["defer_periodic_job"](*args, **kwargs)
        except DOWN as exc:
            self.outage.failed(exc, "the task worker")
            raise exceptions.AlreadyEnqueued(one_line(exc)) from exc

    # ------------------------------------------------------------ (re)listening
    async def listening(self) -> None:
        """The LISTEN connection listens (again): the database answers; the worker fetches
        once and the control listener reads its pending rows."""
        self.outage.ok(connected=True)
        self.echoes += 1
        await self._on_notification(channel="", notification={"type": "job_inserted"})
        self.on_listening()


async def _ignore(**kwargs: Any) -> None:
    """Before the listener started: nobody to tell."""


def wait_for_database(source: Source, stopping: threading.Event) -> bool:
    """Block until a connection from ``source`` answers or ``stopping`` is set, trying
    every :data:`RECONNECT_EVERY` seconds; True if the database was down meanwhile."""
    was_down = False
    while not stopping.is_set():
        try:
            with borrow(source) as conn:
                conn.execute(query("round_trip"))
            return was_down
        except (ClusterError, psycopg.Error):
            was_down = True
            stopping.wait(RECONNECT_EVERY)
    return was_down
