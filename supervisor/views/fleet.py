"""The fleet on ``supervise serve``'s board, for a profile with ``[cluster]``: every host of
the fleet's database (``supervise_hosts``: state, heartbeat age, capacity, running count,
last error) with its tasks (``supervise_tasks``), and the tasks no host has claimed yet.

The database is read by :class:`FleetCache` on a thread of its own, never on the event
loop nor on the board's poll: :meth:`FleetCache.get` returns the last read at once and
starts a new read when that one is older than :data:`FLEET_S` seconds (so the fleet is
read only while a browser watches, at most once per :data:`FLEET_S`). Each read is one
connection with :mod:`supervisor.cluster.db`'s timeouts (connect 5 s, each statement 10 s)
and at most :data:`TASK_LIMIT` task rows (live tasks first, then the most recently
updated). A database that cannot be reached gives a :class:`Fleet` whose ``error`` is one
line; the board shows it and the local view goes on.

The local host's tasks are this state dir's: the board links them to their full page.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from supervisor.taskdir.states import FINAL

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

log = logging.getLogger(__name__)

#: Seconds between two reads of the database while the board is watched (the page's
#: SSE cadence is :data:`supervisor.views.web.POLL_S`; a fleet change shows within this
#: plus one poll).
FLEET_S = 1.0
#: Task rows read at most (live ones first); the board says how many were left out.
TASK_LIMIT = 500
#: Task states that are final (``rejected``, ``host_lost`` and ``superseded`` included),
#: as the database's query parameter.
ENDED = sorted(str(state) for state in FINAL)


@dataclass(slots=True)
class FleetHost:
    """One host: its ``supervise_hosts`` row (``state`` ``alive``/``stopped``/``dead``, or
    ``unknown`` for an owner with no row; ``age_s``: seconds since its heartbeat), whether
    it is ``local`` (this profile's ``host_id``), and its ``tasks`` (dicts of
    the ``board_tasks`` query's columns (``cluster/sql/queries.sql``)), newest first."""

    host_id: str
    state: str = "unknown"
    age_s: float | None = None
    capacity: int | None = None
    running: int | None = None
    version: str | None = None
    last_error: str | None = None
    local: bool = False
    tasks: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class Fleet:
    """What the board shows of the fleet. ``read``: whether the database answered at least
    once; ``error``: why the last read failed (one line), else ``None``; ``hosts``: every
    host, the local one first; ``unclaimed``: tasks no host owns (``queued``, or rejected
    before a claim); ``shown`` of ``total`` task rows."""

    local_host: str
    read: bool = False
    error: str | None = None
    hosts: list[FleetHost] = field(default_factory=list)
    unclaimed: list[dict[str, Any]] = field(default_factory=list)
    shown: int = 0
    total: int = 0


def host_marker(host_state: str, task_state: str) -> str | None:
    """The host state a task's row shows beside its own (issue 25): its host's ``stopped``,
    ``dead`` or ``unknown`` (no row) while the task has not ended, else None (an alive
    host, or an ended task: its host's state says nothing about it)."""
    if host_state == "alive" or task_state in FINAL:
        return None
    return host_state


def group_by_host(
    local_host: str, host_rows: list[dict[str, Any]], task_rows: list[dict[str, Any]], total: int
) -> Fleet:
    """The fleet from the rows of the ``board_hosts`` and ``board_tasks`` queries (no I/O):
    each task under its ``owner_host`` (a host without a row is added as ``unknown``), the
    local host first, then by host id; tasks without an owner in ``unclaimed``. Each
    owned task gets ``host_marker`` (:func:`host_marker`)."""
    hosts = {
        r["host_id"]: FleetHost(
            **{
                k: r.get(k)
                for k in (
                    "host_id",
                    "state",
                    "age_s",
                    "capacity",
                    "running",
                    "version",
                    "last_error",
                )
            }
        )
        for r in host_rows
    }
    unclaimed = []
    for task in task_rows:
        owner = task.get("owner_host")
        if owner is None:
            unclaimed.append(task)
            continue
        hosts.setdefault(owner, FleetHost(owner)).tasks.append(task)
    if local_host in hosts:
        hosts[local_host].local = True
    for host in hosts.values():
        for task in host.tasks:
            task["host_marker"] = host_marker(host.state, str(task.get("state")))
    order = sorted(hosts.values(), key=lambda h: (not h.local, h.host_id))
    return Fleet(local_host, True, None, order, unclaimed, len(task_rows), total)


def read(dsn: str, local_host: str) -> Fleet:
    """One read of the fleet (a blocking call: a thread's). Never raises: a failure is the
    returned fleet's ``error``."""
    try:
        import psycopg
        from psycopg.rows import dict_row

        from supervisor.cluster.db import NO_TABLES, ClusterError, connect, one_line
        from supervisor.cluster.sqlfiles import query
    except ImportError as exc:
        return Fleet(local_host, error=f"the fleet needs the 'cluster' extra ({exc.name})")
    try:
        with connect(dsn) as conn:
            cur = conn.cursor(row_factory=dict_row)
            host_rows = cur.execute(query("board_hosts")).fetchall()
            task_rows = cur.execute(query("board_tasks"), (ENDED, TASK_LIMIT)).fetchall()
            total = conn.execute(query("board_task_count")).fetchone()
    except ClusterError as exc:
        return Fleet(local_host, error=str(exc))
    except psycopg.errors.UndefinedTable:
        return Fleet(local_host, error=NO_TABLES)
    except psycopg.Error as exc:
        return Fleet(local_host, error=f"cannot read the fleet: {one_line(exc)}")
    return group_by_host(local_host, host_rows, task_rows, int(total[0]) if total else 0)


class FleetCache:
    """The last :class:`Fleet` read, refreshed on a thread of its own (module docstring).

    Args:
        local_host: this profile's ``host_id``.
        reader: ``() -> Fleet``, blocking (``read`` with the DSN bound), or ``None`` when
            the profile names no database: then ``error`` says so.
        every: seconds between reads (:data:`FLEET_S`).
    """

    def __init__(
        self,
        local_host: str,
        reader: Callable[[], Fleet] | None,
        error: str | None = None,
        every: float = FLEET_S,
    ) -> None:
        self.reader, self.every = reader, every
        self.fleet = Fleet(local_host, error=error)
        self.version = 0
        self._read_at = float("-inf")
        self._busy = False
        self._lock = threading.Lock()

    def get(self) -> Fleet:
        """The last read (at once), starting a new one in the background when it is older
        than ``every`` seconds and none runs."""
        with self._lock:
            due = self.reader is not None and not self._busy
            if due and time.monotonic() - self._read_at >= self.every:
                self._busy = True
                threading.Thread(
                    target=self._refresh, name="supervise-serve-fleet", daemon=True
                ).start()
            return self.fleet

    def key(self) -> int:
        """A number that changes with each read that changed the fleet (for the board's
        poll; calling it starts a read when due, as :meth:`get` does)."""
        self.get()
        return self.version

    def _refresh(self) -> None:
        assert self.reader is not None
        try:
            fleet = self.reader()
        except Exception as exc:  # a bug must not stop the refreshes
            log.exception("supervise serve: cannot read the fleet")
            fleet = Fleet(self.fleet.local_host, error=f"cannot read the fleet: {exc!r}")
        with self._lock:
            if fleet != self.fleet:
                self.fleet, self.version = fleet, self.version + 1
            self._read_at = time.monotonic()
            self._busy = False


def cache_for(profile: LoadedProfile) -> FleetCache | None:
    """The cache of a profile with ``[cluster]``, else ``None`` (a single host: no fleet).
    A profile without a DSN gets a cache that only shows why."""
    cluster = profile.spec.cluster
    if cluster is None:
        return None
    from supervisor.config.cluster import cluster_dsn
    from supervisor.errors import ConfigError

    try:
        dsn = cluster_dsn(cluster, profile.path)
    except ConfigError as exc:
        return FleetCache(cluster.host_id, None, error=" ".join(exc.problems))
    return FleetCache(cluster.host_id, lambda: read(dsn, cluster.host_id))
