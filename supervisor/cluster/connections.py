"""An engine's connections to the fleet's database: two steady ones (issue 25).

* **The pool** (:class:`EnginePool`, a ``psycopg_pool.ConnectionPool``; ``application_name``
  ``supervise:<host_id>:pool``): :data:`POOL_MIN` connection kept, at most :data:`POOL_MAX`
  for a burst, each returned to one after :data:`POOL_IDLE` seconds unused. Everything
  the engine sends goes through it: procrastinate's worker (:class:`SharedConnector`: its
  statements run on a pooled connection in a small thread pool of its own), the writer, the
  claims, the control listener's reads and answers, the sweeps.
* **The LISTEN connection** (``supervise:<host_id>:listen``): procrastinate's channels for
  this host's queues (:meth:`SharedConnector.listen_notify`); control requests for this
  host ride on the host queue's channel (:func:`~supervisor.cluster.control.host_channel`).
  Its health is a round trip on it (``SELECT 1``) every :data:`CHECK_EVERY` seconds without traffic,
  bounded by :data:`CHECK_TIMEOUT`: no NOTIFY of ours (a NOTIFY wakes every listening
  backend of the database, PostgreSQL's ``async.c`` ``SignalBackends``). A broken or deaf
  connection raises out; :mod:`~supervisor.cluster.health` listens again.

:class:`Outage` turns every failure of any of them into one log line when the database
stops answering (naming the cause, and the fix when PostgreSQL is out of connection slots)
and one when it answers again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from procrastinate import connector as base
from procrastinate import exceptions
from procrastinate.sync_psycopg_connector import SyncPsycopgConnector
from psycopg import sql
from psycopg_pool import ConnectionPool
from psycopg_pool.pool import AddConnection

from supervisor.cluster.control import CONTROL_TYPE
from supervisor.cluster.db import CONNECT_TIMEOUT, application_name, connect_kwargs, one_line
from supervisor.cluster.sqlfiles import listen, query

log = logging.getLogger("supervise.cluster")
# psycopg_pool logs each failed reconnection; Outage says it once per outage.
logging.getLogger("psycopg.pool").setLevel(logging.ERROR)

#: Connections the pool keeps open (the steady one), and its most for a moment (less in a
#: large fleet: :func:`burst_size`).
POOL_MIN = 1
POOL_MAX = 4
#: Connection slots a fleet's engines leave free for ``supervise`` commands (submit,
#: ``status --cluster``, ``hosts``: one each while they run) and an operator's psql.
CLI_HEADROOM = 10
#: Seconds an extra connection stays unused before the pool closes it (psycopg_pool's
#: ``max_idle``: it shrinks by one per such period).
POOL_IDLE = 30.0
#: Seconds a borrower waits for a busy connection before the pool opens another: the
#: engine's borrowers (sweeps, heartbeats, fetches) hold one for milliseconds, and psycopg_pool
#: grows at the first wait, so two overlapping by chance kept a second one open for good.
GROW_AFTER = 0.2
#: Seconds a caller waits for a pooled connection (then psycopg_pool's ``PoolTimeout``).
POOL_WAIT = CONNECT_TIMEOUT * 2.0
#: Seconds between reconnection tries while the database is down; while PostgreSQL has no
#: connection slot left, psycopg_pool's doubling backoff up to :data:`FULL_BACKOFF`.
RECONNECT_EVERY = 1.0
FULL_BACKOFF = 8.0
#: Seconds without a notification after which the LISTEN connection makes a round trip,
#: and the most that round trip may take.
CHECK_EVERY = 10.0
CHECK_TIMEOUT = 3.0
#: Seconds between two looks at which channels to listen on (no server round trip).
LISTEN_STEP = 0.5
#: The payload of a fetch the connector asks of the worker (procrastinate's type).
_FETCH = json.dumps({"type": "job_inserted"})
#: PostgreSQL's words when it has no connection slot left (SQLSTATE 53300,
#: ``too_many_connections``: "sorry, too many clients already", "remaining connection
#: slots are reserved for ..."); a failed connect carries the text, not always the code.
_FULL_WORDS = ("too many clients", "too many connections", "remaining connection slots")


def out_of_slots(exc: BaseException) -> bool:
    """True when ``exc`` (or its cause) says PostgreSQL has no connection slot left."""
    while exc is not None:
        if getattr(exc, "sqlstate", None) == "53300":
            return True
        if any(words in str(exc).lower() for words in _FULL_WORDS):
            return True
        exc = exc.__cause__  # type: ignore[assignment]
    return False


def describe(exc: BaseException) -> str:
    """One line: the error, and the fix when PostgreSQL is out of connection slots."""
    inner = exc.__cause__ if isinstance(exc, exceptions.ConnectorException) else None
    line = one_line(inner if inner is not None else exc)
    if out_of_slots(exc):
        return (
            f"PostgreSQL has no connection slot left ({line}); raise its max_connections, "
            "or put a pooler (PgBouncer, session mode) in front of it"
        )
    return line


def burst_size(alive_hosts: int, max_connections: int, reserved: int) -> int:
    """The most connections one engine's pool may open: its equal share of the server's
    slots for logins that are not superusers (``max_connections - reserved``, PostgreSQL's
    ``superuser_reserved_connections``), less :data:`CLI_HEADROOM` for the fleet, less its
    LISTEN connection; between :data:`POOL_MIN` and :data:`POOL_MAX`.

    Measured (issue 25, ``benchmarks/cluster.py --hosts 40 --slots 2`` on PostgreSQL's
    default 100, 2 cores): with a burst of 4 for every engine, 40 engines held all 93 slots
    they could get, at idle and under load; with this share (1), 80 under load, 2 each.

    Args:
        alive_hosts: the fleet's hosts alive now (at least 1 is assumed).
        max_connections: the server's ``max_connections``.
        reserved: the server's ``superuser_reserved_connections``.
    """
    share = (max_connections - reserved - CLI_HEADROOM) // max(1, alive_hosts)
    return max(POOL_MIN, min(POOL_MAX, share - 1))


class Outage:
    """The engine's one account of the database being unreachable: the first failure of
    an outage logs one line (what failed, the cause), the first success after it one
    more; every other failure meanwhile is silent. PostgreSQL out of connection slots is
    said once per outage too, with the fix, also when the outage began with another
    failure (a connection the server ended). Any thread.

    ``error`` is the line of the outage under way (None: none), for the heartbeat's
    ``last_error`` (``supervise hosts``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None  # monotonic seconds; None: answering
        self.error: str | None = None
        self.full = False  # the outage is PostgreSQL out of connection slots
        self.count = 0  # outages seen (tests read them through the log)
        self.ended: float | None = None  # monotonic seconds the last outage ended

    def failed(
        self, exc: BaseException, what: str = "the database", began: float | None = None
    ) -> None:
        """``what`` failed with ``exc``: logged if it starts an outage. ``began``: when the
        failed call started (monotonic seconds); a call that started before the last
        outage ended belongs to that outage and is silent (the writer's wait for a pooled
        connection, 10 s, can end just after another part saw the database answer: a
        second pair of lines for one outage, seen in CI for the writer, then the sweeper).
        Every call that fails after a wait passes it; a long-lived LISTEN does not (its
        failure is news whenever it began)."""
        line = describe(exc)
        with self._lock:
            full = out_of_slots(exc)
            if self.since is not None and not (full and not self.full):
                return
            if began is not None and self.ended is not None and began < self.ended and not full:
                return
            self.since = self.since if self.since is not None else time.monotonic()
            self.error, self.full = line, full
            self.count += 1
        if full:  # the cause and the fix, once, even when the outage began otherwise
            log.warning("cluster: %s (%s); retrying with backoff, dispatch paused", line, what)
        else:
            log.warning(
                "cluster: database unreachable (%s: %s); retrying with backoff, dispatch paused",
                what,
                line,
            )

    def ok(self, connected: bool = False) -> None:
        """A statement got through (``connected``: a new connection was made): logged if
        it ends an outage. An outage of connection slots ends only with a new connection
        (the ones kept may go on answering meanwhile)."""
        if self.since is None or (self.full and not connected):
            return
        with self._lock:
            since, self.since, self.error, self.full = self.since, None, None, False
            self.ended = time.monotonic()
        if since is not None:
            log.warning(
                "cluster: database answering again after %.1f s; dispatch resumed",
                time.monotonic() - since,
            )


class EnginePool(ConnectionPool):
    """The engine's shared pool (see the module docstring): a failed connect is told to the
    :class:`Outage`, a successful one ends it; reconnections are tried every
    :data:`RECONNECT_EVERY` s while the server is down (psycopg_pool's backoff doubles from
    1 s: measured here, after a 10 s outage its next try came up to 5 s after the server's
    return), doubling up to :data:`FULL_BACKOFF` s while it has no slot left.

    No ``check`` on lending (procrastinate's own pool sets psycopg_pool's
    ``check_connection``): its empty statement is a transaction of its own on every borrow,
    measured here as 1.6 of an idle engine's 3.3 transactions per second (1.7 without).
    A connection the server dropped fails its next statement instead (every borrower
    retries: the writer, the sweeps, procrastinate's calls through
    :class:`~supervisor.cluster.health.Health`) and psycopg_pool discards it on return.

    Args:
        dsn: the database.
        host_id: this host (the connections' ``application_name``).
        outage: the engine's :class:`Outage`.
    """

    def __init__(self, dsn: str, host_id: str, outage: Outage) -> None:
        self.outage = outage
        self._grow_timer_set = False
        super().__init__(
            dsn,
            kwargs={"autocommit": True, **connect_kwargs(application_name(host_id, "pool"))},
            min_size=POOL_MIN,
            max_size=POOL_MAX,
            max_idle=POOL_IDLE,
            timeout=POOL_WAIT,
            reconnect_timeout=365 * 86400.0,  # never give up: the engine has no other way
            name=application_name(host_id, "pool"),
            open=False,
        )

    def _maybe_grow_pool(self) -> None:
        """psycopg_pool's growth (called under its lock when a borrower has to wait),
        deferred by :data:`GROW_AFTER` seconds while the pool has a connection: a wait that
        ends sooner (the connection came back) opens none."""
        if self._nconns < 1:
            super()._maybe_grow_pool()
        elif not self._grow_timer_set and self._nconns < self._max_size:
            self._grow_timer_set = True
            timer = threading.Timer(GROW_AFTER, self._grow_if_waiting)
            timer.daemon = True
            timer.start()

    def _grow_if_waiting(self) -> None:
        with self._lock:
            self._grow_timer_set = False
            if self._waiting and not self.closed:
                super()._maybe_grow_pool()

    def _connect(self, timeout: float | None = None) -> Any:
        began = time.monotonic()
        try:
            conn = super()._connect(timeout)
        except psycopg.Error as exc:
            self.outage.failed(exc, "a new pooled connection", began)
            raise
        self.outage.ok(connected=True)
        return conn

    def schedule_task(self, task: Any, delay: float) -> None:
        """psycopg_pool's maintenance scheduler, with reconnections capped."""
        if isinstance(task, AddConnection):
            delay = min(delay, FULL_BACKOFF if self.outage.full else RECONNECT_EVERY)
        super().schedule_task(task, delay)

    def _shrink_pool(self) -> None:
        """psycopg_pool's periodic shrink (every ``max_idle`` s), made to work for a pool
        shared by a few threads: psycopg_pool closes a connection only when one was idle
        for the whole period, which its first-in-first-out reuse (``popleft`` to lend,
        ``append`` to return: every connection kept warm) and any two overlapping
        borrowers prevent, so a pool grown by one burst stayed at its size. Here, one
        connection above :data:`POOL_MIN` that is idle now (the least recently returned)
        is closed each period: a pool back at rest has one connection within two
        :data:`POOL_IDLE` periods; a busy one reopens at most one per period."""
        to_close = None
        with self._lock:
            if self._nconns > self._min_size and self._pool:
                to_close = self._pool.popleft()
                self._nconns -= 1
                self._nconns_min = min(self._nconns_min, len(self._pool))
        if to_close is not None:
            self._close_connection(to_close)

    def fit(self, alive_hosts: int, max_connections: int, reserved: int) -> None:
        """Size the pool's burst to this engine's share of the server's slots
        (:func:`burst_size`; called by the writer after each heartbeat). Idle connections
        above a smaller burst are closed at once, busy ones as they come back idle (the
        periodic shrink). One log line when the size changes."""
        size = burst_size(alive_hosts, max_connections, reserved)
        if size == self.max_size:
            return
        self.resize(POOL_MIN, size)
        extra = []
        with self._lock:
            while self._nconns > self._max_size and self._pool:
                extra.append(self._pool.popleft())
                self._nconns -= 1
        for conn in extra:
            self._close_connection(conn)
        log.info(
            "cluster: the pool opens at most %d connection(s): %d host(s) alive share "
            "max_connections %d (%d reserved, %d left for commands)",
            size,
            alive_hosts,
            max_connections,
            reserved,
            CLI_HEADROOM,
        )

    def connections(self) -> int:
        """Connections open in the pool now (in use or idle)."""
        return int(self.get_stats().get("pool_size", 0))


class SharedConnector(base.BaseAsyncConnector):
    """procrastinate's connector on the engine's :class:`EnginePool` (procrastinate's own
    ``SyncPsycopgConnector`` on that pool, its calls run in a thread pool of
    :data:`POOL_MAX` threads) and one LISTEN connection (:meth:`listen_notify`).

    Args:
        pool: the engine's pool (opened and closed by the engine, not by procrastinate).
        dsn: the database (for the LISTEN connection).
        host_id: this host (its ``application_name``).
        host_channel: the host queue's channel (control requests ride on it: kept
            whatever :attr:`full` says).
        on_control: called (on the loop) for each control request's notification.
        full: called (on the loop) before each look at the channels: True while the
            host has no free slot, when it listens on its host channel only (a submitted
            task then wakes only the hosts that can take it).
    """

    def __init__(
        self,
        pool: EnginePool,
        dsn: str,
        host_id: str,
        host_channel: str,
        on_control: Callable[[], None],
        full: Callable[[], bool],
    ) -> None:
        self.pool = pool
        self.dsn = dsn
        self.host_channel = host_channel
        self.on_control = on_control
        self.full = full
        self.listen_name = application_name(host_id, "listen")
        self._sync = SyncPsycopgConnector()
        self._executor: ThreadPoolExecutor | None = None
        self.on_listening: Callable[[], Awaitable[None]] | None = None  # set by Health
        self.listening = False  # the LISTEN connection is open (the engine's count)

    def get_sync_connector(self) -> base.BaseConnector:
        """procrastinate's sync calls (none on the worker's path) use the pool too."""
        return self._sync

    async def open_async(self, pool: Any = None) -> None:
        """Open on the engine's pool (``pool`` is ignored)."""
        self._sync.open(self.pool)
        self._executor = ThreadPoolExecutor(POOL_MAX, thread_name_prefix="supervise-sql")

    async def close_async(self) -> None:
        """Let the threads go (the pool stays open: the engine's)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    async def _run(self, call: Callable[..., Any], query: Any, arguments: dict) -> Any:
        if self._executor is None:
            raise exceptions.AppNotOpen
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: call(query, **arguments))

    async def execute_query_async(self, query: Any, **arguments: Any) -> None:
        """procrastinate's statement on a pooled connection."""
        await self._run(self._sync.execute_query, query, arguments)

    async def execute_query_one_async(self, query: Any, **arguments: Any) -> dict[str, Any]:
        """procrastinate's statement on a pooled connection: its one row."""
        return await self._run(self._sync.execute_query_one, query, arguments)

    async def execute_query_all_async(self, query: Any, **arguments: Any) -> list[dict[str, Any]]:
        """procrastinate's statement on a pooled connection: its rows."""
        return await self._run(self._sync.execute_query_all, query, arguments)

    async def listen_notify(self, on_notification: base.Notify, channels: Iterable[str]) -> None:
        """LISTEN on ``channels`` on one connection of its own until cancelled; a round
        trip every :data:`CHECK_EVERY` s without a notification.

        Raises:
            psycopg.Error, TimeoutError: the connection broke, or its round trip took
                longer than :data:`CHECK_TIMEOUT` (a deaf connection): the caller
                listens again on a new one.
        """
        shared = [c for c in channels if c != self.host_channel]
        async with await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, **connect_kwargs(self.listen_name)
        ) as conn:
            try:
                self.listening = True
                await self._hear(conn, shared, on_notification)
            finally:
                self.listening = False

    async def _hear(
        self, conn: psycopg.AsyncConnection, shared: list[str], on_notification: base.Notify
    ) -> None:
        """LISTEN, tell :attr:`on_listening`, then deliver notifications (forever)."""
        heard: set[str] = set()
        await self._listen_to(conn, heard, shared)
        if self.on_listening is not None:
            await self.on_listening()
        last = time.monotonic()
        while True:
            async for note in conn.notifies(timeout=LISTEN_STEP):
                last = time.monotonic()
                await self._dispatch(note.channel, note.payload, on_notification)
            if await self._listen_to(conn, heard, shared):
                # A slot freed: what was submitted while the host did not listen on the
                # shared queues is fetched now (the worker's own fetch may have come first).
                await on_notification(channel=self.host_channel, payload=_FETCH)
            if time.monotonic() - last >= CHECK_EVERY:
                await asyncio.wait_for(conn.execute(query("round_trip")), CHECK_TIMEOUT)
                last = time.monotonic()

    async def _listen_to(
        self, conn: psycopg.AsyncConnection, heard: set[str], shared: list[str]
    ) -> bool:
        """LISTEN / UNLISTEN so that ``heard`` is the host channel, plus ``shared`` while
        the host has a free slot; True when it listens on a shared channel again."""
        again = bool(heard)
        wanted = {self.host_channel} | (set() if self.full() else set(shared))
        for channel in sorted(wanted - heard):
            await conn.execute(listen(channel))
        for channel in sorted(heard - wanted):
            await conn.execute(sql.SQL(query("unlisten")).format(channel=sql.Identifier(channel)))
        added = wanted - heard
        heard.clear()
        heard.update(wanted)
        return again and bool(added)

    async def _dispatch(self, channel: str, payload: str, on_notification: base.Notify) -> None:
        try:
            kind = json.loads(payload).get("type")
        except (ValueError, AttributeError):
            return  # not a notification of procrastinate's or ours
        if kind == CONTROL_TYPE:
            self.on_control()
        else:
            await on_notification(channel=channel, payload=payload)
