"""Several hosts on one machine: dispatch latency, fleet throughput, lost-host detection.

    .venv/bin/python benchmarks/cluster.py [--engines 3] [--slots 4] [--latency 40]
        [--tasks 150] [--host-timeout 3] [--out FILE]

A throwaway PostgreSQL server (``tests/support/cluster_support.py``), ``supervise cluster init``,
then ``--engines`` real engines (``supervise run``: own state dir, tmux socket, host id
``h0``...; ``heartbeat`` 0.5 s, ``host_timeout`` ``--host-timeout`` s) running the fake
agent (``tests/support/fake_agent.py``). Three phases:

1. **submit -> running**, with a free slot: ``--latency`` tasks (``exit: 0``) submitted one
   by one (``supervisor.cluster.submit.submit``, as ``supervise submit`` does), each after the
   previous one launched. Per task: the submit call's start (this process's clock), the
   claim (``supervise_tasks.claimed_at``, the database's clock: the same machine) and the
   launch (the ``launched`` event in the host's local ``events.jsonl``). p50 / p95 / max of
   submit -> launched, split into submit -> claimed (the submit call: connect, validate,
   insert, defer; then NOTIFY, fetch and claim) and claimed -> launched (materialize, hand
   to the engine, start in tmux); the submit call alone is shown too.
2. **Throughput**: ``--tasks`` short tasks (``exit: 0``) submitted at once; tasks per second
   from the first submit to the last terminal row, and the engines' own CPU per task
   (psutil, user + system of the ``supervise run`` processes over the phase).
3. **Lost-host detection**: one engine running a long task is killed (SIGKILL by PID); the
   seconds until its ``supervise_hosts.state`` turns ``dead`` and its task ``host_lost``
   (the sweeper's work). Nothing turning dead within ``--host-timeout`` + 30 s is reported
   ``n/a (no sweeper)``.

Output: a table and ``--out`` (JSON; default ``benchmarks/results/cluster.json``), with the
machine (``run.py``'s ``machine_info``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))

import psutil  # noqa: E402
import tomli_w  # noqa: E402
from conftest import Setup, wait_for  # noqa: E402
from run import machine_info  # noqa: E402
from support.cluster_engines import (  # noqa: E402
    _epoch,
    cluster_profile,
    rows,
    start_engine,
    stop_engines,
    supervise,
)
from support.cluster_support import postgres_server  # noqa: E402

from supervisor.cluster.submit import submit  # noqa: E402
from supervisor.config import load_profile, load_task  # noqa: E402

TERMINAL = ("completed", "failed", "abandoned")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``, in ms, rounded to 0.1."""
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def summary(values: list[float]) -> dict[str, float]:
    """p50 / p95 / max in ms of seconds ``values``."""
    return {"p50_ms": percentile(values, 0.5), "p95_ms": percentile(values, 0.95),
            "max_ms": round(1000 * max(values), 1), "n": len(values)}  # fmt: skip


def launches(hosts: dict[str, Setup]) -> dict[str, float]:
    """task id -> epoch seconds of its ``launched`` event, over every host's local logs."""
    found = {}
    for setup in hosts.values():
        for log in (setup.state / "tasks").glob("*/events.jsonl"):
            for line in log.read_text().splitlines():
                event = json.loads(line)
                if event["event"] == "launched":
                    found[log.parent.name] = _epoch(event["ts"])
                    break
    return found


class Fleet:
    """The engines of one run, and a task file writer for submissions."""

    def __init__(self, root: Path, dsn: str, count: int, slots: int, host_timeout: float):
        self.dsn = dsn
        self.hosts: dict[str, Setup] = {}
        self.procs: dict[str, Any] = {}
        for i in range(count):
            (root / f"h{i}").mkdir()
            setup = Setup(root / f"h{i}", f"sv-bench-{uuid.uuid4().hex[:10]}")
            cluster_profile(setup, dsn, f"h{i}", max_concurrent=slots,
                            host_timeout=host_timeout)  # fmt: skip
            self.hosts[f"h{i}"] = setup
        self.profile = load_profile(self.hosts["h0"].profile)
        self.file = root / "task.toml"
        self.count = 0

    def start(self) -> None:
        for host_id, setup in self.hosts.items():
            self.procs[host_id] = start_engine(setup)
        wait_for(lambda: len(rows(self.dsn, "SELECT 1 FROM supervise_hosts")) == len(self.hosts),
                 timeout=60)  # fmt: skip

    def stop(self) -> None:
        stop_engines(list(self.procs.values()))
        for setup in self.hosts.values():
            setup.tmux("kill-server")
            Path(f"/tmp/tmux-{os.getuid()}/{setup.socket_name}").unlink(missing_ok=True)

    def submit(self, prompt: str, **extra: Any) -> str:
        self.count += 1
        setup = self.hosts["h0"]
        self.file.write_text(tomli_w.dumps(setup.task(f"b{self.count}", prompt, **extra)))
        return submit(self.dsn, self.profile, load_task(self.file, self.profile)).task_id

    def cpu(self) -> float:
        """User + system CPU seconds of the running engines."""
        total = 0.0
        for proc in self.procs.values():
            try:
                times = psutil.Process(proc.pid).cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
        return total


def latency(fleet: Fleet, count: int) -> dict[str, Any]:
    """Phase 1 (see the module docstring)."""
    submitted, returned, ids = {}, {}, []
    for _ in range(count):
        begin = time.time()
        task_id = fleet.submit("exit: 0")
        returned[task_id] = time.time()
        submitted[task_id] = begin
        ids.append(task_id)
        wait_for(lambda t=task_id: t in launches(fleet.hosts), timeout=30, every=0.005)
        time.sleep(0.05)
    launched = launches(fleet.hosts)
    claimed = dict(rows(fleet.dsn, "SELECT id, extract(epoch FROM claimed_at)::float8 "
                                   "FROM supervise_tasks WHERE id = ANY(%s)", ids))  # fmt: skip
    return {
        "submit_to_running": summary([launched[t] - submitted[t] for t in ids]),
        "submit_call": summary([returned[t] - submitted[t] for t in ids]),
        "submit_to_claimed": summary([claimed[t] - submitted[t] for t in ids]),
        "claimed_to_running": summary([launched[t] - claimed[t] for t in ids]),
    }


def throughput(fleet: Fleet, count: int) -> dict[str, Any]:
    """Phase 2 (see the module docstring)."""
    done_sql = "SELECT count(*) FROM supervise_tasks WHERE state = ANY(%s)"
    before = rows(fleet.dsn, done_sql, list(TERMINAL))[0][0]
    cpu0, begin = fleet.cpu(), time.monotonic()
    for _ in range(count):
        fleet.submit("exit: 0")
    submitted = time.monotonic() - begin
    wait_for(lambda: rows(fleet.dsn, done_sql, list(TERMINAL))[0][0] >= before + count,
             timeout=60 + count, every=0.1)  # fmt: skip
    took = time.monotonic() - begin
    cpu = fleet.cpu() - cpu0
    return {"tasks": count, "seconds": round(took, 2), "submit_seconds": round(submitted, 2),
            "tasks_per_s": round(count / took, 2),
            "engine_cpu_ms_per_task": round(1000 * cpu / count, 1)}  # fmt: skip


def detection(fleet: Fleet, host_timeout: float) -> dict[str, Any]:
    """Phase 3 (see the module docstring)."""
    victim = sorted(fleet.hosts)[-1]
    task_id = fleet.submit("sleep: 600\nexit: 0", host=victim)
    wait_for(lambda: task_id in launches(fleet.hosts), timeout=30)
    time.sleep(1.0)  # a heartbeat with the task running
    proc = fleet.procs.pop(victim)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed = time.monotonic()
    bound = host_timeout + 30
    dead = lost = None
    while time.monotonic() - killed < bound and (dead is None or lost is None):
        if dead is None and rows(fleet.dsn, "SELECT state FROM supervise_hosts WHERE "
                                 "host_id = %s", victim) == [("dead",)]:  # fmt: skip
            dead = time.monotonic() - killed
        if lost is None and rows(fleet.dsn, "SELECT state FROM supervise_tasks WHERE id = %s",
                                 task_id) == [("host_lost",)]:  # fmt: skip
            lost = time.monotonic() - killed
        time.sleep(0.05)
    fleet.hosts[victim].tmux("kill-server")  # its task: the engine that ran it is gone

    def shown(value: float | None) -> str:
        return f"{value:.2f} s" if value is not None else "n/a (no sweeper)"

    return {"host_timeout_s": host_timeout, "kill_to_dead_s": shown(dead),
            "kill_to_host_lost_s": shown(lost), "bound_s": bound}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, default=3)
    parser.add_argument("--slots", type=int, default=4, help="max_concurrent of each engine")
    parser.add_argument("--latency", type=int, default=40, help="tasks of phase 1")
    parser.add_argument("--tasks", type=int, default=150, help="tasks of phase 2")
    parser.add_argument("--host-timeout", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "cluster.json")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"machine": machine_info(), "engines": args.engines,
                              "slots": args.slots}  # fmt: skip
    with postgres_server() as dsn, tempfile.TemporaryDirectory(prefix="sv-cluster-") as tmp:
        init = supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn})
        if init.returncode != 0:
            raise SystemExit(f"supervise cluster init failed: {init.stderr.strip()}")
        fleet = Fleet(Path(tmp), dsn, args.engines, args.slots, args.host_timeout)
        fleet.start()
        try:
            result["latency"] = latency(fleet, args.latency)
            result["throughput"] = throughput(fleet, args.tasks)
            result["detection"] = detection(fleet, args.host_timeout)
        finally:
            fleet.stop()
    result["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    lat, thr, det = result["latency"], result["throughput"], result["detection"]
    machine = result["machine"]
    load = machine["load_average_before"]
    print(f"\n{args.engines} engines x {args.slots} slots on one machine: {machine['cpus']} "
          f"cores, {machine['platform']}, load before {load}")  # fmt: skip
    for label, key in (("submit -> running", "submit_to_running"),
                       ("  the submit call", "submit_call"),
                       ("  submit -> claimed", "submit_to_claimed"),
                       ("  claimed -> running", "claimed_to_running")):  # fmt: skip
        s = lat[key]
        print(f"  {label:28} p50 {s['p50_ms']:7.1f} ms  p95 {s['p95_ms']:7.1f} ms  "
              f"max {s['max_ms']:7.1f} ms  ({s['n']} tasks, a free slot each)")  # fmt: skip
    print(
        f"  {'throughput':28} {thr['tasks_per_s']} tasks/s ({thr['tasks']} tasks in "
        f"{thr['seconds']} s; engines' CPU {thr['engine_cpu_ms_per_task']} ms/task)"
    )
    print(
        f"  {'kill -> host dead':28} {det['kill_to_dead_s']} "
        f"(host_timeout {det['host_timeout_s']:g} s)"
    )
    print(f"  {'kill -> task host_lost':28} {det['kill_to_host_lost_s']}")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
