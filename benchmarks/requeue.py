"""A lost host's tasks with a backlog (issue 25, part 3): seconds from the loss to each of
its tasks running elsewhere while ``--tasks`` short tasks wait.

    .venv/bin/python benchmarks/requeue.py [--tasks 150] [--host-timeout 5] [--slots 4]
        [--lost 4] [--out FILE]

A throwaway PostgreSQL (``tests/support/cluster_support.py``), three engines (``supervise
run``: own state dir, tmux socket, host id; ``heartbeat`` 0.5 s, ``max_concurrent``
``--slots``). ``h0`` (``on_host_lost = "restart"``) starts alone and runs ``--lost`` long
tasks; ``h1`` and ``h2`` start; ``--tasks`` tasks of one second (``sleep: 1``) are
submitted and ``h0`` is SIGKILLed with its tmux server (by PID) once they are. Per lost
task: the seconds from the kill to its ``launched`` event on another host (that host's
local ``events.jsonl``: one machine, one clock), and how many backlog tasks launched after
the kill and before it; and the seconds from the kill to ``h0``'s ``lost_at``. Before issue
25 they waited behind the backlog (36-38 s with ``host_timeout`` 5 and 150 tasks queued, the
issue's figure).
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

import tomli_w  # noqa: E402
from cluster import launches  # noqa: E402
from conftest import Setup, wait_for  # noqa: E402
from run import machine_info  # noqa: E402
from support.cluster_engines import (  # noqa: E402
    cluster_profile,
    rows,
    start_engine,
    stop_engines,
    supervise,
)
from support.cluster_support import postgres_server  # noqa: E402

from supervisor.cluster.submit import submit  # noqa: E402
from supervisor.config import load_profile, load_task  # noqa: E402


def _submit(setup: Setup, dsn: str, name: str, prompt: str) -> str:
    profile = load_profile(setup.profile)
    file = setup.root / f"{name}.toml"
    file.write_text(tomli_w.dumps(setup.task(name, prompt)))
    return submit(dsn, profile, load_task(file, profile)).task_id


def run(root: Path, dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement (see the module docstring)."""
    hosts: dict[str, Setup] = {}
    for i in range(3):
        (root / f"h{i}").mkdir()
        hosts[f"h{i}"] = Setup(root / f"h{i}", f"sv-bench-{uuid.uuid4().hex[:10]}")
        cluster_profile(hosts[f"h{i}"], dsn, f"h{i}", max_concurrent=args.slots,
                        host_timeout=args.host_timeout,
                        on_host_lost="restart" if i == 0 else "report")  # fmt: skip
    procs = {"h0": start_engine(hosts["h0"])}
    try:
        wait_for(lambda: rows(dsn, "SELECT host_id FROM supervise_hosts") == [("h0",)], 60)
        lost = [_submit(hosts["h0"], dsn, f"long{n}", "sleep: 600\nexit: 0")
                for n in range(args.lost)]  # fmt: skip
        wait_for(lambda: all(t in launches({"h0": hosts["h0"]}) for t in lost), timeout=60)
        for host_id in ("h1", "h2"):
            procs[host_id] = start_engine(hosts[host_id])
        wait_for(lambda: len(rows(dsn, "SELECT 1 FROM supervise_hosts")) == 3, timeout=60)
        backlog = [_submit(hosts["h1"], dsn, f"q{n}", "sleep: 1\nexit: 0")
                   for n in range(args.tasks)]  # fmt: skip
        queued = rows(dsn, "SELECT count(*) FROM supervise_tasks WHERE state = 'queued'")[0][0]
        server = hosts["h0"].tmux("display-message", "-p", "#{pid}").stdout.strip()
        victim = procs.pop("h0")
        victim.send_signal(signal.SIGKILL)
        killed = time.time()
        if server:
            os.kill(int(server), signal.SIGKILL)
        victim.wait()
        others = {k: v for k, v in hosts.items() if k != "h0"}
        wait_for(lambda: all(t in launches(others) for t in lost), timeout=args.tasks + 120)
        started = launches(others)
        [(lost_at,)] = rows(dsn, "SELECT lost_at FROM supervise_hosts WHERE host_id = 'h0'")
    finally:
        stop_engines(list(procs.values()))
        for setup in hosts.values():
            setup.tmux("kill-server")
            Path(f"/tmp/tmux-{os.getuid()}/{setup.socket_name}").unlink(missing_ok=True)
    after = [round(started[t] - killed, 2) for t in lost]
    ahead_after_kill = [sum(1 for q in backlog if q in started and killed < started[q]
                            < started[t]) for t in lost]  # fmt: skip
    return {"queued_at_kill": queued, "kill_to_dead_s": round(lost_at.timestamp() - killed, 2),
            "kill_to_running_s": after,
            "backlog_launched_after_the_kill_before": ahead_after_kill}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=150)
    parser.add_argument("--host-timeout", type=float, default=5.0)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--lost", type=int, default=4)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "requeue.json")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"machine": machine_info(), "args": vars(args) | {"out": None}}
    with postgres_server() as dsn, tempfile.TemporaryDirectory(prefix="sv-requeue-") as tmp:
        init = supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn})
        if init.returncode != 0:
            raise SystemExit(f"supervise cluster init failed: {init.stderr.strip()}")
        result["run"] = run(Path(tmp), dsn, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    got = result["run"]
    print(f"{got['queued_at_kill']} tasks queued at the kill, host_timeout "
          f"{args.host_timeout:g} s: kill -> dead {got['kill_to_dead_s']} s, -> running "
          f"elsewhere {got['kill_to_running_s']} s; "
          f"backlog tasks launched after the kill and before each: "
          f"{got['backlog_launched_after_the_kill_before']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
