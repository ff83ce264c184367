"""Wall time of short commands: median (min-max) over N runs, commands interleaved.

    .venv/bin/python benchmarks/clitime.py [--runs 10] [--warmup 1] [--json OUT] \\
        'NAME=COMMAND' ['NAME=COMMAND' ...]

Each argument is one command line (split with shlex; ``NAME=`` is an optional label). The
commands take turns (run 1 of every command, then run 2, ...), so a change in the machine's
load during the measurement hits all of them alike. ``--warmup`` runs are made first and not
counted (they fill the page cache and write ``__pycache__``). A command that exits non-zero
stops the measurement. Times are ``time.perf_counter()`` around ``subprocess.run``, with
stdout and stderr captured (so a terminal's speed is not measured); the CPU time
(user + system, from ``getrusage(RUSAGE_CHILDREN)``) is shown too.

Used for the ``validate`` / ``--help`` figures in ``benchmarks/perf-notes.md``; ``run.py``
has its own loop (``cli`` scenario) for the figures taken on a running engine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def clean_env() -> dict[str, str]:
    """Our environment without MONITOR_* (they would change what a profile loads)."""
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("MONITOR_")}


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run; CPU is user + system of the command and its children
    (less sensitive than the wall time to other work on the machine)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(argv)} exited {done.returncode}:\n{done.stderr[-800:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def summary(walls: list[float], cpus: list[float]) -> dict[str, Any]:
    """Wall-time median, min, max and p95 (nearest rank), plus the median CPU time."""
    ordered = sorted(walls)
    p95 = ordered[max(0, -(-95 * len(ordered) // 100) - 1)]
    return {
        "n": len(walls),
        "median": round(statistics.median(walls), 4),
        "min": round(ordered[0], 4),
        "max": round(ordered[-1], 4),
        "p95": round(p95, 4),
        "cpu_median": round(statistics.median(cpus), 4),
        "walls": [round(w, 4) for w in walls],
    }


def measure(
    commands: dict[str, list[str]], runs: int, warmup: int, env: dict[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """``{name: summary}`` for each command, runs interleaved."""
    env = clean_env() if env is None else env
    for _ in range(warmup):
        for argv in commands.values():
            run_once(argv, env)
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            wall, cpu = run_once(argv, env)
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {name: summary(walls[name], cpus[name]) for name in commands}


def parse_commands(items: list[str]) -> dict[str, list[str]]:
    commands: dict[str, list[str]] = {}
    for item in items:
        name, sep, rest = item.partition("=")
        if sep and name and " " not in name and "/" not in name:
            commands[name] = shlex.split(rest)
        else:
            commands[item] = shlex.split(item)
    return commands


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commands", nargs="+", help="'NAME=COMMAND' or 'COMMAND'")
    parser.add_argument("--runs", type=int, default=10, help="counted runs per command (10)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted runs first (1)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be >= 1 and --warmup >= 0")
    results = measure(parse_commands(args.commands), args.runs, args.warmup)
    width = max(len(name) for name in results)
    load = os.getloadavg()[0]
    print(f"{args.runs} runs each (+{args.warmup} warm-up), interleaved; load {load:.2f}")
    for name, s in results.items():
        print(
            f"{name.ljust(width)}  median {s['median']:.3f} s  "
            f"(min {s['min']:.3f} - max {s['max']:.3f}, p95 {s['p95']:.3f}); "
            f"CPU median {s['cpu_median']:.3f} s"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
