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
on: a task never ends or starts twice because of an outage.

:meth:`Health.watch` checks the LISTEN connection itself every :data:`CHECK_EVERY`
seconds: it sends a NOTIFY on the host queue's channel (``procrastinate_queue_v1#host.<id>``,
the channel procrastinate's ``defer`` trigger notifies) with its own token and waits
:data:`ECHO_TIMEOUT` seconds for it to come back through the listener. No echo while the
NOTIFY went through: the listener is re-established (only the listener: the worker and
its jobs go on). The ping is typed ``job_inserted`` (the worker reads only ``type``), so
each echo also makes the worker fetch once: the first echo after an outage is what
resumes dispatch at once, without waiting for the polling interval.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from procrastinate import exceptions
from procrastinate.manager import JobManager
from procrastinate.worker import FETCH_JOB_POLLING_INTERVAL
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.pool_async import AddConnection

from supervisor.cluster.db import ClusterError, connect, one_line
from supervisor.cluster.sqlfiles import query

log = logging.getLogger("supervise.cluster")
# psycopg_pool logs each failed reconnection (every RECONNECT_EVERY s while the database is
# down); "database unreachable" / "database back" below say it once per outage.
logging.getLogger("psycopg.pool").setLevel(logging.ERROR)

#: Environment variable (seconds, for tests and benchmarks only) overriding procrastinate's
#: ``fetch_job_polling_interval``: a long interval proves dispatch runs on LISTEN/NOTIFY.
FETCH_POLL_ENV = "SUPERVISE_CLUSTER_FETCH_POLL"
#: Seconds between tries of the listener's connect, and of a job's completion, while the
#: database is down.
RECONNECT_EVERY = 1.0
#: Seconds between two checks of the LISTEN connection.
CHECK_EVERY = 2.0
#: Seconds a check waits for its NOTIFY to come back through the listener.
ECHO_TIMEOUT = 3.0
#: Seconds to the next check after one that failed (the database down, or the listener
#: just replaced): its echo is what makes the worker fetch again.
RECHECK_AFTER = 0.5
#: The key of the ping's token in the notification's JSON payload.
PING_KEY = "supervise_ping"
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


class ReconnectingPool(AsyncConnectionPool):
    """procrastinate's connection pool (``PsycopgConnector(pool_factory=...)``), trying to
    reconnect every :data:`RECONNECT_EVERY` seconds at most. psycopg_pool's own backoff
    doubles from 1 s (``AttemptWithBackoff``): measured here, after a 10 s outage the pool's
    next try came up to 5 s after the server's return, and every fetch and job completion
    waited for it."""

    async def schedule_task(self, task: Any, delay: float) -> None:
        """psycopg_pool's maintenance scheduler, with reconnections capped."""
        if isinstance(task, AddConnection):
            delay = min(delay, RECONNECT_EVERY)
        await super().schedule_task(task, delay)


class Health:
    """The worker's database calls made outage-proof, and its LISTEN connection checked.

    Args:
        manager: the worker's app's ``JobManager`` (its methods are wrapped on the instance).
        dsn: the database (for the check's NOTIFY; each call bounded, see
            :func:`supervisor.cluster.db.connect`).
        channel: the LISTEN channel the check pings.
        stopping: set when the engine stops (a completion then stops waiting).
    """

    def __init__(
        self, manager: JobManager, dsn: str, channel: str, stopping: threading.Event
    ) -> None:
        self.manager = manager
        self.dsn = dsn
        self.channel = channel
        self.stopping = stopping
        self.down_since: float | None = None  # monotonic seconds; None: reachable
        self.echoes = 0  # checks answered (tests read it through the log)
        self._conn: psycopg.Connection | None = None  # the check's, used in to_thread
        self._waiting: dict[str, asyncio.Future[None]] = {}
        self._attempt: asyncio.Task[None] | None = None
        self._relisten = False
        self._unheard_since: float | None = None  # first NOTIFY sent and not heard since
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
        """procrastinate's listener, started again whenever it fails or a check finds it
        deaf; never returns (cancelled with the worker)."""

        async def handle(*, channel: str, notification: Any) -> None:
            token = notification.get(PING_KEY) if isinstance(notification, dict) else None
            if isinstance(token, str) and token in self._waiting:
                _finish(self._waiting[token])
            await on_notification(channel=channel, notification=notification)

        listen = self._original["listen_for_jobs"]
        failing = False
        while True:
            self._attempt = asyncio.create_task(listen(on_notification=handle, queues=queues))
            try:
                await self._attempt
            except asyncio.CancelledError:
                if not self._relisten:
                    raise  # the worker itself is cancelled
                self._relisten = False
                continue  # a check found it deaf: LISTEN again at once
            except DOWN as exc:
                level = logging.DEBUG if failing else logging.WARNING  # once per outage
                log.log(
                    level,
                    "cluster: the worker's listener failed (%s); reconnecting every %g s",
                    _why(exc),
                    RECONNECT_EVERY,
                )
                failing = True
            else:
                failing = False
            await asyncio.sleep(RECONNECT_EVERY)

    async def _fetch(self, **kwargs: Any) -> Any:
        """One job, or None while the database is down."""
        try:
            return await self._original["fetch_job"](**kwargs)
        except DOWN as exc:
            self._noticed_down(exc)
            return None  # dispatch pauses; the first echo after the outage resumes it

    async def _heartbeat(self, *args: Any, **kwargs: Any) -> None:
        try:
            await self._original["update_heartbeat"](*args, **kwargs)
        except DOWN as exc:
            self._noticed_down(exc)

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
                    self._noticed_down(exc)
                await asyncio.sleep(RECONNECT_EVERY)

        return call

    async def _defer_periodic(self, *args: Any, **kwargs: Any) -> Any:
        """A periodic job's defer; while the database is down the tick is skipped as if
        already queued (procrastinate's deferrer then goes on to the next tick)."""
        try:
            return await self._original["defer_periodic_job"](*args, **kwargs)
        except DOWN as exc:
            self._noticed_down(exc)
            raise exceptions.AlreadyEnqueued(one_line(exc)) from exc

    def _noticed_down(self, exc: BaseException) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.warning("cluster: database unreachable (%s); dispatch paused", _why(exc))

    # ------------------------------------------------------------ the LISTEN check
    async def watch(self) -> None:
        """Check the LISTEN connection every :data:`CHECK_EVERY` seconds, every
        :data:`RECHECK_AFTER` s after a failed check (forever; cancel it). Each check
        costs one NOTIFY on a kept connection."""
        ok = True
        try:
            while True:
                await asyncio.sleep(CHECK_EVERY if ok else RECHECK_AFTER)
                ok = await self.check(ECHO_TIMEOUT if ok else RECHECK_AFTER)
        finally:
            if self._conn is not None:
                await asyncio.to_thread(self._conn.close)

    async def check(self, wait: float = ECHO_TIMEOUT) -> bool:
        """One round trip, waiting ``wait`` seconds for the echo; True: the listener heard
        it. The listener is re-established when NOTIFYs went through for
        :data:`ECHO_TIMEOUT` s without an echo (right after an outage the listener is
        still reconnecting by itself: short checks, no verdict before that)."""
        token = uuid.uuid4().hex
        echo: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[token] = echo
        try:
            if not await asyncio.to_thread(self._notify, token):
                self._unheard_since = None
                return False
            sent = time.monotonic()
            try:
                await asyncio.wait_for(echo, wait)
            except TimeoutError:
                if self._unheard_since is None:
                    self._unheard_since = sent
                if time.monotonic() - self._unheard_since >= ECHO_TIMEOUT:
                    self._relisten_now()
                return False
        finally:
            self._waiting.pop(token, None)
        self._unheard_since = None
        self.echoes += 1
        if self.down_since is not None:
            log.warning(
                "cluster: database back after %.1f s; dispatch resumed on LISTEN",
                time.monotonic() - self.down_since,
            )
            self.down_since = None
        return True

    def _relisten_now(self) -> None:
        """A deaf listener: cancel its attempt; :meth:`_listen` LISTENs again at once."""
        log.warning(
            "cluster: the worker's LISTEN connection did not hear its check "
            "within %g s; listening again",
            ECHO_TIMEOUT,
        )
        self._unheard_since = None
        if self._attempt is not None and not self._attempt.done():
            self._relisten = True
            self._attempt.cancel()

    def _notify(self, token: str) -> bool:
        """NOTIFY the channel (a plain thread; bounded by connect's timeouts). False: the
        database is down."""
        payload = json.dumps({"type": "job_inserted", PING_KEY: token})
        try:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.dsn)
            self._conn.execute(query("notify"), (self.channel, payload))
            return True
        except DOWN as exc:
            self._noticed_down(exc)
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            return False


def _why(exc: BaseException) -> str:
    """The first line of the error, or of its cause (procrastinate wraps psycopg's errors
    in ``ConnectorException("Database error.")``)."""
    return one_line(exc.__cause__ if exc.__cause__ is not None else exc)


def _finish(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def wait_for_database(dsn: str, stopping: threading.Event) -> bool:
    """Block until a connection to ``dsn`` succeeds or ``stopping`` is set, trying every
    :data:`RECONNECT_EVERY` seconds; True if the database was down meanwhile."""
    was_down = False
    while not stopping.is_set():
        try:
            connect(dsn).close()
            return was_down
        except ClusterError:
            was_down = True
            stopping.wait(RECONNECT_EVERY)
    return was_down
