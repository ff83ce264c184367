"""Several hosts on one machine: connections, notifications, transactions, dispatch latency,
fleet throughput, and a host's loss under a backlog (issues 15 and 25).

    .venv/bin/python benchmarks/cluster.py [--hosts 3] [--slots 4] [--latency 40]
        [--tasks 150] [--heartbeat 1] [--host-timeout 5] [--backlog 150]
        [--backlog-sleep S] [--idle 20] [--out FILE]

A throwaway PostgreSQL at its **default** ``max_connections`` (100), ``supervise cluster
init`` and ``cluster roles --apply``, then ``--hosts`` real engines (``supervise run``: own
state dir, tmux socket, host id ``h0``..., and login role ``sv_scale_h0``... in
``supervise_engine``; ``heartbeat`` and ``host_timeout`` as given, ``on_host_lost =
"restart"``) running the fake agent (``tests/support/cluster_scale.py``, shared with
``tests/test_cluster_scale.py``). Submits go through ``supervisor.cluster.submit.submit``
(what ``supervise submit`` calls) as the superuser, who keeps PostgreSQL's 3 reserved slots.

Throughout, a sampler counts each engine's sessions in ``pg_stat_activity`` (by its login)
every 0.25 s, and a LISTEN of the benchmark's own counts the notifications on the fleet's
channels (``fleet_channels``); ``pg_stat_database.xact_commit`` is read at each phase's
ends (less the sampler's own reads; the benchmark's polls of the rows, about 5 a second in
phases 2 and 3, count with the fleet's). Phases, each with the load average (1 min) at its
start and end beside its figures:

0. **idle** (``--idle`` s, after every host beat): connections per engine (steady = the
   median of an engine's samples, peak = its most) and in total; transactions and
   notifications per second, and per engine.
1. **submit -> running**, with a free slot: ``--latency`` tasks (``exit: 0``) one by one,
   each after the previous one launched: p50 / p95 / max of submit -> launched (the
   ``launched`` event in the host's local ``events.jsonl``), split at the claim
   (``supervise_tasks.claimed_at``); the submit call alone too.
2. **throughput** (the load): ``--tasks`` short tasks at once; tasks per second, the
   engines' own CPU per task (psutil), transactions and notifications per second, peak
   connections.
3. **loss under a backlog**: the last host alone takes ``--slots`` long unpinned tasks (the
   other engines are paused with SIGSTOP by PID until it claimed them, well within
   ``host_timeout``); then tasks are submitted until ``--backlog`` of them wait, the other
   hosts' slots full (each sleeps between 0.5 and 1.5 x ``--backlog-sleep`` s, so slots free
   all the time; by default the backlog drains in about 3 x (host_timeout + 2) s where the
   CPU allows); then that host is lost (SIGKILL of its engine by PID, its tmux server
   killed). Seconds from the kill to its row ``dead``, to its tasks queued again, and to
   the first and the last of them running on another host; the queue's length at the kill
   and when the last one ran.

Where the engines cannot all start (the connections run out), that is recorded (hosts with a
heartbeat row, engines alive, the connections, the engines' log lines naming the limit)
with whatever phases still ran. Output: a table and ``--out`` (JSON; default
``benchmarks/results/cluster.json``), with the machine (``run.py``'s ``machine_info``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

import psutil  # noqa: E402
import psycopg  # noqa: E402
from cluster_report import print_report  # noqa: E402
from conftest import wait_for  # noqa: E402
from run import machine_info  # noqa: E402
from support.cluster_engines import _epoch  # noqa: E402
from support.cluster_scale import (  # noqa: E402
    Notifications,
    Sampler,
    ScaleFleet,
    connection_figures,
    default_postgres,
    fleet_channels,
    progress,
    xact_commit,
)

TERMINAL = ("completed", "failed", "abandoned")
#: Log lines of an engine that met PostgreSQL's connection limit (its two messages).
LIMIT_LINES = ("too many clients already", "remaining connection slots are reserved")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``, in ms, rounded to 0.1."""
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def summary(values: list[float]) -> dict[str, float]:
    """p50 / p95 / max in ms of seconds ``values``."""
    return {
        "p50_ms": percentile(values, 0.5),
        "p95_ms": percentile(values, 0.95),
        "max_ms": round(1000 * max(values), 1),
        "n": len(values),
    }


def load() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def launches(fleet: ScaleFleet) -> dict[str, float]:
    """task id -> epoch seconds of its first ``launched`` event, over every host's logs."""
    found = {}
    for setup in fleet.hosts.values():
        for log in (setup.state / "tasks").glob("*/events.jsonl"):
            for line in log.read_text().splitlines():
                event = json.loads(line)
                if event["event"] == "launched":
                    found[log.parent.name] = _epoch(event["ts"])
                    break
    return found


def engine_cpu(fleet: ScaleFleet) -> float:
    """User + system CPU seconds of the running engines."""
    total = 0.0
    for proc in fleet.procs.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            times = psutil.Process(proc.pid).cpu_times()
            total += times.user + times.system
    return total


class Meters:
    """The sampler, the notification counter and a connection for ``xact_commit``:
    :meth:`window` gives a window's rates and connections."""

    def __init__(self, fleet: ScaleFleet) -> None:
        self.fleet = fleet
        self.sampler = Sampler(fleet.dsn, fleet.logins)
        self.notes = Notifications(fleet.dsn, fleet_channels(list(fleet.hosts)))
        self.conn = psycopg.connect(fleet.dsn, autocommit=True)

    def mark(self) -> tuple[float, int, float]:
        """(monotonic s, xact_commit, load average) now."""
        return time.monotonic(), xact_commit(self.conn), load()

    def window(self, begin: tuple[float, int, float]) -> dict[str, Any]:
        """Rates and connections from ``begin`` (:meth:`mark`) to now."""
        end = self.mark()
        seconds = end[0] - begin[0]
        hosts = len(self.fleet.hosts)
        notes = self.notes.between(begin[0], end[0])
        samples = self.sampler.between(begin[0], end[0])
        # Each sample is one transaction of ours: not the fleet's.
        commits = end[1] - begin[1] - len(samples)
        return {
            "seconds": round(seconds, 1),
            "load_at_start": begin[2],
            "load_at_end": end[2],
            "xact_per_s": round(commits / seconds, 1),
            "xact_per_s_per_engine": round(commits / seconds / hosts, 2),
            "notifications_per_s": round(sum(notes.values()) / seconds, 1),
            "notifications_by_channel": dict(notes.most_common()),
            "connections": connection_figures(samples, list(self.fleet.hosts)) if samples else None,
        }

    def close(self) -> None:
        self.sampler.close()
        self.notes.close()
        self.conn.close()


def latency(fleet: ScaleFleet, count: int) -> dict[str, Any]:
    """Phase 1 (see the module docstring)."""
    submitted, returned, ids = {}, {}, []
    for _ in range(count):
        begin = time.time()
        task_id = fleet.submit("exit: 0")
        returned[task_id] = time.time()
        submitted[task_id] = begin
        ids.append(task_id)
        wait_for(lambda t=task_id: t in launches(fleet), timeout=60, every=0.005)
        time.sleep(0.05)
    launched = launches(fleet)
    claimed = dict(
        fleet.rows(
            "SELECT id, extract(epoch FROM claimed_at)::float8 "
            "FROM supervise_tasks WHERE id = ANY(%s)",
            ids,
        )
    )
    return {
        "submit_to_running": summary([launched[t] - submitted[t] for t in ids]),
        "submit_call": summary([returned[t] - submitted[t] for t in ids]),
        "submit_to_claimed": summary([claimed[t] - submitted[t] for t in ids]),
        "claimed_to_running": summary([launched[t] - claimed[t] for t in ids]),
    }


def ended(fleet: ScaleFleet) -> int:
    """Tasks in a final state."""
    sql = "SELECT count(*) FROM supervise_tasks WHERE state = ANY(%s)"
    return fleet.rows(sql, list(TERMINAL))[0][0]


def throughput(fleet: ScaleFleet, count: int) -> dict[str, Any]:
    """Phase 2 (see the module docstring)."""
    before = ended(fleet)
    cpu0, begin = engine_cpu(fleet), time.monotonic()
    for _ in range(count):
        fleet.submit("exit: 0")
    submitted = time.monotonic() - begin
    wait_for(lambda: ended(fleet) >= before + count, timeout=120 + count, every=0.2)
    took = time.monotonic() - begin
    cpu = engine_cpu(fleet) - cpu0
    return {
        "tasks": count,
        "seconds": round(took, 2),
        "submit_seconds": round(submitted, 2),
        "tasks_per_s": round(count / took, 2),
        "engine_cpu_ms_per_task": round(1000 * cpu / count, 1),
    }


def pin_to_victim(fleet: ScaleFleet, victim: str, slots: int, bound: float) -> list[str]:
    """``slots`` long unpinned tasks claimed by ``victim`` alone: every other engine is
    paused (SIGSTOP by PID) until then, at most ``bound`` seconds (less than host_timeout:
    a paused host must not be declared dead)."""
    others = [p for h, p in fleet.procs.items() if h != victim]
    for proc in others:
        os.kill(proc.pid, signal.SIGSTOP)
    try:
        # A line every 5 s: a silent agent would be judged stale (and end) before the kill.
        ids = [fleet.submit("tick: 5\nsleep: 600\nexit: 0") for _ in range(slots)]
        sql = "SELECT count(*) FROM supervise_tasks WHERE id = ANY(%s) AND owner_host = %s"
        wait_for(lambda: fleet.rows(sql, ids, victim) == [(slots,)], timeout=bound)
    finally:
        for proc in others:
            os.kill(proc.pid, signal.SIGCONT)
    wait_for(lambda: set(ids) <= set(launches(fleet)), timeout=60)
    return ids


def loss(
    fleet: ScaleFleet, slots: int, backlog: int, sleep: float | None, host_timeout: float
) -> dict[str, Any]:
    """Phase 3 (see the module docstring)."""
    victim = sorted(fleet.hosts, key=lambda h: int(h[1:]))[-1]
    ids = pin_to_victim(fleet, victim, slots, bound=host_timeout / 2)
    free = (len(fleet.hosts) - 1) * slots
    if sleep is None:  # the backlog drains in about 3 x (host_timeout + 2) s
        sleep = max(1.0, 3 * (host_timeout + 2) * free / backlog)
    queued_sql = "SELECT count(*) FROM supervise_tasks WHERE state = 'queued'"
    # Submitted until `backlog` wait: the other hosts' slots are full, the queue as asked.
    for index in range(free + 3 * backlog):
        fleet.submit(f"sleep: {sleep * (0.5 + (index % 11) / 10):.2f}\nexit: 0")
        if fleet.rows(queued_sql)[0][0] >= backlog:
            break
    queued_at_kill = fleet.rows(queued_sql)[0][0]
    # A CPU-starved victim may have been declared dead (and its tasks moved) before the
    # kill: then the figures below measure nothing, and the report says so.
    before = before_kill(fleet, victim, ids)
    fleet.kill(victim)
    killed = time.monotonic()
    seen = watch_loss(fleet, victim, ids, killed, bound=host_timeout + 300)
    seen["victim_tasks"] = victim_tasks(fleet, ids)
    return {
        "victim": victim,
        "tasks": len(ids),
        "host_timeout_s": host_timeout,
        "backlog_sleep_s": round(sleep, 2),
        "queued_at_kill": queued_at_kill,
        "load_at_kill": load(),
        **before,
        **seen,
    }


def victim_tasks(fleet: ScaleFleet, ids: list[str]) -> list[list[Any]]:
    """The evidence of the victim's tasks at the end: each one's row (state, owner,
    generation) and its events in the fleet's log (host, generation, event, state)."""
    found: list[list[Any]] = []
    for task_id in ids:
        row = fleet.rows(
            "SELECT state, owner_host, generation FROM supervise_tasks WHERE id = %s", task_id
        )
        events = fleet.rows(
            "SELECT host_id, generation, event, state FROM supervise_events "
            "WHERE task_id = %s ORDER BY id",
            task_id,
        )
        found.append([task_id, list(row[0]) if row else None, [list(e) for e in events]])
    return found


def before_kill(fleet: ScaleFleet, victim: str, ids: list[str]) -> dict[str, Any]:
    """The victim's row state and how many of its tasks it still owned, just before the kill."""
    [(state,)] = fleet.rows("SELECT state FROM supervise_hosts WHERE host_id = %s", victim)
    owned_sql = "SELECT count(*) FROM supervise_tasks WHERE id = ANY(%s) AND owner_host = %s"
    [(owned,)] = fleet.rows(owned_sql, ids, victim)
    return {"victim_state_at_kill": state, "victim_owned_at_kill": owned}


def watch_loss(
    fleet: ScaleFleet, victim: str, ids: list[str], killed: float, bound: float
) -> dict[str, Any]:
    """Poll (50 ms) until ``ids`` all run on other hosts, or ``bound`` s after the kill."""
    host_sql = "SELECT state FROM supervise_hosts WHERE host_id = %s"
    task_sql = (
        "SELECT count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = "
        "'running' AND owner_host <> %s) FROM supervise_tasks WHERE id = ANY(%s)"
    )
    queued_sql = "SELECT count(*) FROM supervise_tasks WHERE state = 'queued'"
    seen: dict[str, Any] = {}
    while time.monotonic() - killed < bound:
        now = round(time.monotonic() - killed, 2)
        dead = fleet.rows(host_sql, victim) == [("dead",)]
        if dead and "kill_to_dead_s" not in seen:
            seen["kill_to_dead_s"] = now
        [(queued, elsewhere)] = fleet.rows(task_sql, victim, ids)
        if queued + elsewhere == len(ids):
            seen.setdefault("kill_to_requeued_s", now)
        if elsewhere:
            seen.setdefault("kill_to_first_running_elsewhere_s", now)
        if elsewhere == len(ids):
            seen["kill_to_all_running_elsewhere_s"] = now
            seen["queued_when_all_ran"] = fleet.rows(queued_sql)[0][0]
            return seen
        time.sleep(0.05)
    seen["unfinished"] = f"not all running elsewhere within {bound:g} s"
    return seen


def startup_failure(fleet: ScaleFleet, error: AssertionError) -> dict[str, Any]:
    """What a fleet that could not start looks like: hosts with a row, engines alive,
    the engines' log lines naming PostgreSQL's connection limit, the first such line."""
    hits, first = 0, ""
    for setup in fleet.hosts.values():
        log = setup.root / "engine.log"
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            if any(text in line for text in LIMIT_LINES):
                hits += 1
                first = first or line.strip()[:300]
    return {
        "error": str(error)[:500],
        "hosts_with_row": len(fleet.beating()),
        "engines_alive": len(fleet.procs) - len(fleet.dead_engines()),
        "log_lines_naming_the_limit": hits,
        "first_such_line": first,
    }


def run_phases(fleet: ScaleFleet, args: argparse.Namespace, result: dict[str, Any]) -> None:
    """Start the fleet and run the phases into ``result``; a phase that fails is recorded
    (its message) and the rest skipped."""
    meters = Meters(fleet)  # its connections before the engines': they may take every slot
    try:
        started = time.monotonic()
        try:
            fleet.start(timeout=60 + 3 * args.hosts)
        except AssertionError as exc:
            mark = meters.mark()
            time.sleep(args.idle)
            result["startup_failed"] = {**startup_failure(fleet, exc), **meters.window(mark)}
            return
        result["start_seconds"] = round(time.monotonic() - started, 1)
        time.sleep(2 * args.heartbeat)  # every engine past its first beats
        phase(result, "idle", lambda: (time.sleep(args.idle), None)[1], meters)
        phase(result, "latency", lambda: latency(fleet, args.latency), meters)
        phase(result, "throughput", lambda: throughput(fleet, args.tasks), meters)
        phase(
            result,
            "loss",
            lambda: loss(fleet, args.slots, args.backlog, args.backlog_sleep, args.host_timeout),
            meters,
        )
        result["whole_run"] = meters.window((started, 0, 0.0))["connections"]
    finally:
        meters.close()


def phase(result: dict[str, Any], name: str, body: Any, meters: Meters) -> None:
    """Run one phase unless an earlier one failed; its figures and its window's rates."""
    if any("failed" in value for value in result.values() if isinstance(value, dict)):
        return
    mark = meters.mark()
    try:
        figures = body() or {}
    except AssertionError as exc:
        doing = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'"
        figures = {
            "failed": f"{str(exc)[:300]}; tasks by state {progress(meters.fleet)}, "
            f"jobs doing {meters.fleet.rows(doing)[0][0]}"
        }
    result[name] = {**figures, "window": meters.window(mark)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", "--engines", type=int, default=3, dest="hosts")
    parser.add_argument("--slots", type=int, default=4, help="max_concurrent of each engine")
    parser.add_argument("--latency", type=int, default=40, help="tasks of phase 1")
    parser.add_argument("--tasks", type=int, default=150, help="tasks of phase 2")
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--host-timeout", type=float, default=5.0)
    parser.add_argument("--backlog", type=int, default=150, help="tasks queued at the loss")
    parser.add_argument("--backlog-sleep", type=float, default=None)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of phase 0")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "cluster.json")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {
        "machine": machine_info(),
        "hosts": args.hosts,
        "slots": args.slots,
        "heartbeat_s": args.heartbeat,
        "host_timeout_s": args.host_timeout,
    }
    import tempfile

    with default_postgres() as dsn, tempfile.TemporaryDirectory(prefix="sv-cluster-") as tmp:
        fleet = ScaleFleet(
            Path(tmp),
            dsn,
            args.hosts,
            args.slots,
            heartbeat=args.heartbeat,
            host_timeout=args.host_timeout,
            on_host_lost="restart",
        )
        try:
            run_phases(fleet, args, result)
        finally:
            fleet.stop()
    result["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print_report(result)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
