"""A fleet at scale on one machine (issue 25, part 7), shared by ``tests/test_cluster_scale.py``
and ``benchmarks/cluster.py``: N real engines (``supervise run``, separate processes with
their own profile, state dir, tmux socket and host id) against one throwaway PostgreSQL
started with its **default** ``max_connections`` (100, of which
``superuser_reserved_connections`` = 3 are kept for superusers), running the project's fake
agent (``tests/support/fake_agent.py``).

Each engine logs in as a login role of its own (``sv_scale_<host id>``, member of
``supervise_engine`` from ``supervise cluster roles``), as a host of a real fleet would: its
connections are counted exactly by ``pg_stat_activity.usename`` (whatever
``application_name`` each connection sets), and because the engines are not superusers the
harness itself (user ``postgres``) always finds one of the 3 reserved slots to read the
figures and submit, even when the engines took every other connection. Tasks are submitted
with :func:`supervisor.cluster.submit.submit`, what ``supervise submit`` calls.

Figures: :func:`engine_connections` (``pg_stat_activity`` per engine), :class:`Sampler` (the
same, sampled on a thread: steady and peak), :class:`Notifications` (a LISTEN of the
harness's own on the fleet's channels, :func:`fleet_channels`), :func:`xact_commit`
(``pg_stat_database.xact_commit``). :func:`scale_fleet` cleans up everything it started
(engines by PID, their tmux servers, the server and the temp folders), also when the block
raises.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomli_w
from conftest import Setup, wait_for

from support.cluster_engines import (
    TERMINAL,
    cluster_profile,
    rows,
    start_engine,
    stop_engines,
    supervise,
    wait_beats,
)
from support.cluster_support import postgres_executor

#: The environment variable that sets the test's engine count.
HOSTS_ENV = "SUPERVISE_SCALE_HOSTS"
#: Engines of the test by default: what a 2-core CI machine runs beside the rest of the suite
#: (the issue's 40 run by ``benchmarks/cluster.py --hosts 40``; figures in benchmarks/README).
DEFAULT_HOSTS = 12
#: Each engine's login role is this plus its host id.
LOGIN_PREFIX = "sv_scale_"
#: PostgreSQL's default ``max_connections`` (its docs, "Connections and Authentication"),
#: named here because the shared server helper starts its servers with 200.
DEFAULT_MAX_CONNECTIONS = 100
#: The target of issue 25: steady connections per engine.
MAX_STEADY = 2
#: Seconds an idle engine may take to close the connections a burst opened: a pool closes
#: its extra connections over time (psycopg_pool's ``max_idle``, one per period).
SETTLE = 180.0
#: Tries of one submit (its own connection) while the engines take every slot.
SUBMIT_TRIES = 10
#: procrastinate jobs running.
DOING = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'"
#: Connections of the harness's own server session count not (``pid <> pg_backend_pid()``).
ENGINE_SESSIONS = (
    "SELECT usename, count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND backend_type = 'client backend' AND pid <> pg_backend_pid() GROUP BY usename"
)


def scale_hosts(default: int = DEFAULT_HOSTS) -> int:
    """The engine count: :data:`HOSTS_ENV` when set (a positive integer), else ``default``.

    Raises:
        ValueError: the variable is set but not a positive integer.
    """
    value = os.environ.get(HOSTS_ENV, "").strip()
    if not value:
        return default
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise ValueError(f"{HOSTS_ENV}={value!r}: give a positive number of engines")
    return int(value)


@contextlib.contextmanager
def default_postgres() -> Iterator[str]:
    """A throwaway server at PostgreSQL's default ``max_connections`` (100) with the
    fleet's schema and roles (``supervise cluster init``, ``cluster roles --apply``); yields
    the superuser's DSN. Stopped and removed afterwards."""
    with postgres_executor(max_connections=DEFAULT_MAX_CONNECTIONS) as (dsn, _):
        env = {"SUPERVISE_CLUSTER_DSN": dsn}
        for args in (("cluster", "init"), ("cluster", "roles", "--apply")):
            done = supervise(*args, env=env)
            if done.returncode != 0:
                raise RuntimeError(f"supervise {' '.join(args)} failed: {done.stderr.strip()}")
        limit = rows(dsn, "SHOW max_connections")
        assert limit == [(str(DEFAULT_MAX_CONNECTIONS),)], limit
        yield dsn


def engine_login(dsn: str, host_id: str) -> str:
    """A login role for ``host_id``'s engine, in ``supervise_engine`` (trust auth on the
    throwaway server); returns the engine's DSN."""
    import psycopg

    name = LOGIN_PREFIX + host_id.replace("-", "_").replace(".", "_")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN IN ROLE supervise_engine")
    return dsn.replace("user=postgres", f"user={name}")


class ScaleFleet:
    """``count`` hosts ``h0``... on one server, each its own folder, tmux socket, host id
    and login. Nothing runs until :meth:`start`; :func:`scale_fleet` stops it.

    Args:
        root: a folder for the hosts' folders.
        dsn: the superuser's DSN (:func:`default_postgres`).
        slots: ``max_concurrent`` of each engine.
        cluster: more ``[cluster]`` keys (``heartbeat``, ``host_timeout``, ``on_host_lost``).
    """

    def __init__(self, root: Path, dsn: str, count: int, slots: int = 2, **cluster: Any) -> None:
        from supervisor.config import load_profile

        self.dsn = dsn
        self.root = root
        self.hosts: dict[str, Setup] = {}
        self.procs: dict[str, Any] = {}
        self.logins: dict[str, str] = {}  # login role -> host id
        for i in range(count):
            host_id = f"h{i}"
            (root / host_id).mkdir()
            setup = Setup(root / host_id, f"sv-scale-{uuid.uuid4().hex[:10]}")
            login = engine_login(dsn, host_id)
            cluster_profile(setup, login, host_id, max_concurrent=slots, **cluster)
            self.logins[LOGIN_PREFIX + host_id] = host_id
            self.hosts[host_id] = setup
        self.profile = load_profile(self.hosts["h0"].profile)
        self.submitted = 0
        # Opened before any engine starts: engines that use up the server's connections
        # (their failing attempts hold even the superuser's reserved slots for a moment)
        # cannot lock the harness out.
        import psycopg

        self._conn = psycopg.connect(dsn, autocommit=True)
        self._lock = threading.Lock()

    def rows(self, sql: str, *params: Any) -> list[tuple]:
        """``sql``'s rows on the harness's own connection (kept open for the fleet's life)."""
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def start(self, timeout: float | None = None) -> None:
        """Start every engine; wait until each has its row in ``supervise_hosts``.

        Raises:
            AssertionError: not every host beat within ``timeout`` (default 60 s + 3 s a
                host: 40 engines start on 2 cores), naming those missing and their logs' end.
        """
        for host_id, setup in self.hosts.items():
            self.procs[host_id] = start_engine(setup)
        bound = timeout if timeout is not None else 60 + 3 * len(self.hosts)
        try:
            wait_for(lambda: len(self.beating()) == len(self.hosts), timeout=bound, every=0.5)
        except AssertionError:
            missing = sorted(set(self.hosts) - set(self.beating()))
            raise AssertionError(
                f"hosts without a heartbeat row: {missing}; {self.log_tail(missing[0])}"
            ) from None

    def beating(self) -> list[str]:
        """Host ids with a row in ``supervise_hosts`` (any state)."""
        return [h for (h,) in self.rows("SELECT host_id FROM supervise_hosts")]

    def log_tail(self, host_id: str, lines: int = 5) -> str:
        """The last ``lines`` lines of ``host_id``'s engine log, one string."""
        log = self.hosts[host_id].root / "engine.log"
        text = log.read_text(errors="replace").splitlines() if log.exists() else []
        return f"{host_id}'s engine log ends: " + " | ".join(text[-lines:])

    def stop(self) -> None:
        """SIGTERM every engine by PID (SIGKILL after 30 s), then kill their tmux servers."""
        stop_engines(list(self.procs.values()))
        self.procs.clear()
        self._conn.close()
        for setup in self.hosts.values():
            setup.tmux("kill-server")
            Path(f"/tmp/tmux-{os.getuid()}/{setup.socket_name}").unlink(missing_ok=True)

    def kill(self, host_id: str) -> None:
        """A host's loss: SIGKILL of its engine by PID, then its tmux server killed."""
        proc = self.procs.pop(host_id)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        self.hosts[host_id].tmux("kill-server")

    def dead_engines(self) -> list[str]:
        """Host ids whose engine process has exited (it should not have)."""
        return sorted(h for h, proc in self.procs.items() if proc.poll() is not None)

    def submit(self, prompt: str, **extra: Any) -> str:
        """Submit one task as ``supervise submit`` does; its id."""
        from supervisor.cluster.db import ClusterError
        from supervisor.cluster.submit import submit
        from supervisor.config import load_task

        self.submitted += 1
        setup = self.hosts["h0"]
        file = self.root / "task.toml"
        file.write_text(tomli_w.dumps(setup.task(f"s{self.submitted}", prompt, **extra)))
        resolved = load_task(file, self.profile)
        for attempt in range(SUBMIT_TRIES):
            try:
                return submit(self.dsn, self.profile, resolved).task_id
            except ClusterError:  # no connection slot for a moment: the engines' attempts
                if attempt == SUBMIT_TRIES - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def launches(self) -> dict[str, list[str]]:
        """task id -> the host ids whose local event logs launched it, one entry a launch."""
        found: dict[str, list[str]] = {}
        for host_id, setup in self.hosts.items():
            for log in (setup.state / "tasks").glob("*/events.jsonl"):
                for line in log.read_text().splitlines():
                    if json.loads(line)["event"] == "launched":
                        found.setdefault(log.parent.name, []).append(host_id)
        return found


@contextlib.contextmanager
def scale_fleet(dsn: str, count: int, slots: int = 2, **cluster: Any) -> Iterator[ScaleFleet]:
    """A started :class:`ScaleFleet` in a temp folder; on leaving (also on an error) every
    engine is stopped by PID, its tmux server killed and the folder removed."""
    root = Path(tempfile.mkdtemp(prefix="sv-scale-"))
    fleet: ScaleFleet | None = None
    try:
        fleet = ScaleFleet(root, dsn, count, slots, **cluster)
        fleet.start()
        yield fleet
    finally:
        if fleet is not None:
            fleet.stop()
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- the figures


def engine_connections(conn: Any, logins: dict[str, str]) -> dict[str, int]:
    """Client sessions on ``conn``'s database per host id (0 for a host with none), and
    every other session (the harness's own but this one, submits) under ``"other"``."""
    by_user = dict(conn.execute(ENGINE_SESSIONS).fetchall())
    counts = {host_id: by_user.pop(login, 0) for login, host_id in logins.items()}
    counts["other"] = sum(by_user.values())
    return counts


def xact_commit(conn: Any) -> int:
    """``pg_stat_database.xact_commit`` of ``conn``'s database. PostgreSQL 15 backends flush
    their counters at most once a second and within 10 s of going idle (``pgstat.c``): read
    it over windows of several seconds."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    return int(conn.execute(sql).fetchone()[0])


def fleet_channels(host_ids: list[str], queues: tuple[str, ...] = ("supervise",)) -> list[str]:
    """Every NOTIFY channel of the fleet: procrastinate's (``procrastinate_any_queue_v1``
    and ``procrastinate_queue_v1#<queue>`` for the shared queues and each ``host.<id>``,
    which also carries that host's control requests: :func:`supervisor.cluster.control.
    host_channel`; its ``schema.sql`` triggers) and the control replies' channel. A new
    channel of the fleet belongs here too."""
    from supervisor.cluster.control import REPLY_CHANNEL, host_channel

    shared = [f"procrastinate_queue_v1#{q}" for q in queues]
    return ["procrastinate_any_queue_v1", *shared, *map(host_channel, host_ids), REPLY_CHANNEL]


class Notifications(threading.Thread):
    """Counts the notifications sent on ``channels`` (a LISTEN of its own, as superuser),
    until :meth:`close`: ``between(t0, t1)`` is how many arrived in that monotonic window."""

    def __init__(self, dsn: str, channels: list[str]) -> None:
        super().__init__(daemon=True, name="scale-notifications")
        import psycopg
        from psycopg import sql

        self.conn = psycopg.connect(dsn, autocommit=True)
        for channel in channels:
            self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        self.seen: list[tuple[float, str]] = []
        self._done = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._done.is_set():
            for note in self.conn.notifies(timeout=0.2):
                self.seen.append((time.monotonic(), note.channel))

    def between(self, begin: float, end: float) -> Counter[str]:
        """Notifications per channel that arrived in ``[begin, end)`` (monotonic s)."""
        return Counter(c for t, c in list(self.seen) if begin <= t < end)

    def close(self) -> None:
        self._done.set()
        self.join(timeout=5)
        self.conn.close()


class Sampler(threading.Thread):
    """:func:`engine_connections` every ``every`` seconds on a connection of its own, kept
    with its monotonic time, until :meth:`close`."""

    def __init__(self, dsn: str, logins: dict[str, str], every: float = 0.25) -> None:
        super().__init__(daemon=True, name="scale-sampler")
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.logins, self.every = logins, every
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._done = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._done.wait(self.every):
            self.samples.append((time.monotonic(), engine_connections(self.conn, self.logins)))

    def between(self, begin: float, end: float) -> list[dict[str, int]]:
        """The samples taken in ``[begin, end)`` (monotonic s)."""
        return [counts for t, counts in list(self.samples) if begin <= t < end]

    def close(self) -> None:
        self._done.set()
        self.join(timeout=5)
        self.conn.close()


def connection_figures(samples: list[dict[str, int]], hosts: list[str]) -> dict[str, Any]:
    """Steady and peak connections of ``samples`` (each :func:`engine_connections`):
    per engine its median (steady) and its most; over the fleet the median and the most of
    the engines' total, and the most any one engine held.

    Raises:
        ValueError: no samples.
    """
    if not samples:
        raise ValueError("no connection samples in the window")
    steady = {h: int(statistics.median_low([s[h] for s in samples])) for h in hosts}
    peak = {h: max(s[h] for s in samples) for h in hosts}
    totals = [sum(s[h] for h in hosts) for s in samples]
    return {
        "samples": len(samples),
        "per_engine_steady": steady,
        "per_engine_peak": peak,
        "total_steady": int(statistics.median_low(totals)),
        "total_peak": max(totals),
        "engine_steady_max": max(steady.values()),
        "engine_peak_max": max(peak.values()),
        "other_peak": max(s["other"] for s in samples),
    }


def idle_connections(fleet: ScaleFleet, settle: float = SETTLE) -> dict[str, Any]:
    """The fleet's connections once idle: sampled until one sample has every engine at
    :data:`MAX_STEADY` or fewer (at most ``settle`` seconds), then over 3 more heartbeats of
    ``h0`` (at least 8 samples). :func:`connection_figures` of those last samples, plus
    ``settled_s``: how long the engines took to get there (``None``: not within ``settle``;
    the figures then show how many they kept)."""
    sampler = Sampler(fleet.dsn, fleet.logins)

    def settled() -> bool:
        last = sampler.samples[-1:]
        return bool(last) and max(last[0][1][h] for h in fleet.hosts) <= MAX_STEADY

    try:
        began = time.monotonic()
        took = None
        with contextlib.suppress(AssertionError):
            wait_for(settled, timeout=settle, every=0.5)
            took = round(time.monotonic() - began, 1)
        mark = time.monotonic()
        wait_beats(fleet.dsn, "h0", count=3)
        wait_for(lambda: len(sampler.between(mark, math.inf)) >= 8, timeout=30)
        figures = connection_figures(sampler.between(mark, math.inf), list(fleet.hosts))
    finally:
        sampler.close()
    return {**figures, "settled_s": took}


def progress(fleet: ScaleFleet) -> dict[str, int]:
    """``supervise_tasks`` rows per state: what dispatch has done so far."""
    return dict(fleet.rows("SELECT state, count(*) FROM supervise_tasks GROUP BY state"))


def wait_all_ended(fleet: ScaleFleet, total: int, stall: float = 90.0) -> dict[str, int]:
    """Until ``total`` tasks are in a final state, failing when the rows stop moving: no
    state count changed for ``stall`` seconds (a stalled dispatch, issue 25: 12 jobs stayed
    ``doing`` and their tasks ``queued`` with no log line). No overall bound: a loaded
    machine is slow, but it moves. Returns the final counts.

    Raises:
        AssertionError: a stall, with the counts and the jobs ``doing``.
    """
    last, moved = progress(fleet), time.monotonic()
    while sum(last.get(state, 0) for state in TERMINAL) < total:
        time.sleep(0.5)
        now = progress(fleet)
        if now != last:
            last, moved = now, time.monotonic()
        elif time.monotonic() - moved > stall:
            doing = fleet.rows(DOING)
            raise AssertionError(
                f"dispatch stalled: no task changed state for {stall:g} s: "
                f"{last}; procrastinate jobs doing: {doing[0][0]}"
            )
    return last
