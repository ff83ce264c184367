"""``supervise cost`` and the engine's daily-cap total over many task folders (issue 26).

    .venv/bin/python benchmarks/cost.py [--tasks 10000] [--out FILE] [--keep]

A state dir of ``--tasks`` ended task folders, each with a manifest as the engine writes it
(an ``output_tail`` of 100 lines, a ``claude`` object, one task in five with two earlier
turns, three accounts, spend spread over 30 days). Measured:

1. ``supervise cost --json`` and ``supervise cost --days 7`` as commands (wall and CPU of
   the child process, medians of 3; the interpreter's start and the profile's load
   included);
2. in process: :func:`supervisor.costs.scan` + :func:`supervisor.costs.report` (ms);
3. the engine's side (:class:`supervisor.engine.dailyspend.DailySpend`): the one rebuild at
   its first look (ms), then what it costs per manifest written (``saw``, µs) and per
   intake tick with 100 queued tasks held (``holds``, µs).

Output: a table, and ``--out`` (JSON; default ``benchmarks/results/cost.json``), with the
machine's cores and its load at start and end (``benchmarks/hostinfo.py``).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import hostinfo  # noqa: E402

from supervisor import costs  # noqa: E402
from supervisor.config import load_profile  # noqa: E402
from supervisor.engine.dailyspend import DailySpend  # noqa: E402
from supervisor.taskdir.folder import TaskDir, utc_iso  # noqa: E402

DAY = 86400.0
TAIL = "\n".join(f"line {n}: some agent output of a usual width, more or less" for n in range(100))


def manifest(n: int, now: float) -> dict[str, Any]:
    """Task ``n``'s manifest (see the module docstring)."""
    when = now - (n % 30) * DAY - 60
    m: dict[str, Any] = {
        "task_id": f"task-{n:05d}",
        "task_name": f"task {n}",
        "status": "completed",
        "model": "claude-sonnet-4-6",
        "project_dir": "/srv/project",
        "session_name": f"task-{n:05d}",
        "session_id": "00000000-0000-0000-0000-000000000000",
        "tmpdir": f"/srv/state/tasks/task-{n:05d}",
        "created_at": utc_iso(when - 600),
        "started_at": utc_iso(when - 590),
        "finished_at": utc_iso(when),
        "last_checked_at": utc_iso(when),
        "output_tail": TAIL,
        "verdict": "PASS",
        "account": f"acct-{n % 3:012x}",
        "claude": {"total_cost_usd": 0.01 * (n % 97 + 1), "num_turns": 4, "result": "done"},
        "turn": 1,
        "turns": [],
    }
    if n % 5 == 0:
        m["turn"] = 3
        turn = {"prompt": "fix it", "prompt_sha256": "0" * 64, "status": "completed"}
        m["turns"] = [
            {
                **turn,
                "turn": 1,
                "cost_usd": 0.001 * (n % 7),
                "finished_at": utc_iso(when - 2 * DAY),
            },
            {**turn, "turn": 2, "cost_usd": 0.002 * (n % 7), "finished_at": utc_iso(when - DAY)},
        ]
    return m


def make_state(root: Path, count: int) -> Path:
    """A profile and ``count`` task folders under ``root``; returns the profile's path."""
    tasks = root / "state" / "tasks"
    tasks.mkdir(parents=True)
    now = time.time()
    for n in range(count):
        folder = tasks / f"task-{n:05d}"
        folder.mkdir()
        (folder / "manifest.json").write_text(json.dumps(manifest(n, now)))
    profile = root / "profile.toml"
    profile.write_text(
        'max_concurrent = 4\n[paths]\nspool_dir = "spool"\nstate_dir = "state"\n'
        '[agent]\nkind = "claude"\n[budget]\ndaily_usd = 1.0\n'
    )
    return profile


def command(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of ``supervise ARGV`` as a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", *argv],
        capture_output=True,
        check=False,
        cwd=REPO,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"supervise {' '.join(argv)} failed: {done.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def median_of(runs: int, body: Any) -> tuple[float, float]:
    results = [body() for _ in range(runs)]
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)


def engine_side(profile_path: Path) -> dict[str, float]:
    """The rebuild (ms), ``saw`` (µs per manifest) and ``holds`` (µs per tick)."""
    profile = load_profile(profile_path)
    ledger = DailySpend(profile, lambda kind, body: None)
    queue = [TaskDir(profile.tasks_dir / f"task-{n:05d}") for n in range(100)]
    start = time.perf_counter()
    ledger.holds([], time.time())  # the first look builds the total
    rebuild_ms = (time.perf_counter() - start) * 1000
    model = queue[0].read_manifest()
    start = time.perf_counter()
    for _ in range(2000):
        ledger.saw("task-00000", model)
    saw_us = (time.perf_counter() - start) / 2000 * 1e6
    ledger.holds(queue, time.time())  # marks the queue once (writes), as the engine would
    start = time.perf_counter()
    for _ in range(2000):
        ledger.holds(queue, time.time())
    holds_us = (time.perf_counter() - start) / 2000 * 1e6
    return {"rebuild_ms": rebuild_ms, "saw_us": saw_us, "holds_us": holds_us}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "cost.json")
    parser.add_argument("--keep", action="store_true", help="keep the state dir")
    args = parser.parse_args()
    info = hostinfo.host()
    root = Path(tempfile.mkdtemp(prefix="cost-bench-"))
    profile = make_state(root, args.tasks)
    cold = command(["cost", "-c", str(profile), "--json"])  # the page cache warmed once
    json_wall, json_cpu = median_of(3, lambda: command(["cost", "-c", str(profile), "--json"]))
    days_wall, days_cpu = median_of(3, lambda: command(["cost", "-c", str(profile), "--days", "7"]))
    start = time.perf_counter()
    costs.report(costs.scan(root / "state" / "tasks"), costs.Window(), time.time())
    report_ms = (time.perf_counter() - start) * 1000
    engine = engine_side(profile)
    result = {
        "tasks": args.tasks,
        "cost_json_first_wall_s": round(cold[0], 3),
        "cost_json_wall_s": round(json_wall, 3),
        "cost_json_cpu_s": round(json_cpu, 3),
        "cost_days7_wall_s": round(days_wall, 3),
        "cost_days7_cpu_s": round(days_cpu, 3),
        "scan_report_ms": round(report_ms, 1),
        "engine_rebuild_ms": round(engine["rebuild_ms"], 1),
        "engine_saw_us": round(engine["saw_us"], 1),
        "engine_holds_100_queued_us": round(engine["holds_us"], 1),
        "python": sys.version.split()[0],
        **hostinfo.host_end(info),
    }
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    if args.keep:
        print(f"kept {root}")
    else:
        import shutil

        shutil.rmtree(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
