"""Engine CPU of several ``supervisor/`` trees on the same running agents, interleaved.

    .venv/bin/python benchmarks/ab_load.py --variant head=/tmp/a --variant fix=/tmp/b
        [--agents 200] [--base 1] [--seconds 60] [--rounds 2] [--settle 10] [--out FILE] [--keep]

Each ``--variant NAME=DIR`` names a folder that holds a ``supervisor/`` package (a copy of
the tree with one change, say); ``NAME=`` with no folder means the installed package. One
set of fake agents is launched as in ``run.py``'s ``load`` scenario (a line every 3 s,
``stale_threshold`` 90 s). Then, ``--rounds`` times, for each variant in turn, the engine is
restarted with ``PYTHONPATH=DIR`` and ``base_interval = --base``, re-adopts the agents,
settles for ``--settle`` s (10), and its CPU (user + system, psutil; per thread too) and
``checks`` are measured over ``--seconds`` between two ``engine-stats.json`` writes. Taking
turns spreads the machine's other load over all variants alike; each round starts with the
next variant, so none is always measured right after the same one. Output: a table of the
median (min–max) CPU % of one core and CPU ms per check per variant, and the raw windows as
JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
import run
from profile_load import window


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--base", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settle", type=float, default=10.0, help="s after re-adoption (10)")
    parser.add_argument("--out", type=Path, default=run.REPO / "benchmarks" / "results" / "ab.json")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    variants: dict[str, str] = {}
    for item in args.variant:
        name, _, folder = item.partition("=")
        if folder and not (Path(folder) / "supervisor" / "__init__.py").exists():
            parser.error(f"{folder} has no supervisor/ package")
        variants[name] = folder
    original = os.environ.get("PYTHONPATH")
    windows: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    settings = {"max_concurrent": args.agents, "stale_threshold": 90, "grace_period": 30}
    began = time.time()
    load_before = [round(x, 2) for x in os.getloadavg()]
    try:
        with run.Scenario("ab", args.keep) as sc:
            sc.write_profile(base_interval=30, max_interval=300, **settings)
            sc.start()
            names = [f"load-{i:03d}" for i in range(args.agents)]
            total = args.rounds * len(variants) * (args.seconds + 40) + 900
            for name in names:
                sc.drop(name, f"print: hello\ntick: 3\nsleep: {total:.0f}\nexit: 0\n")
            sc.wait_events(names, "launched", timeout=60 + 2 * args.agents)
            print(f"{args.agents} agents launched", flush=True)
            order = list(variants)
            for rnd in range(1, args.rounds + 1):
                shift = (rnd - 1) % len(order)  # each round starts with the next variant
                for name in order[shift:] + order[:shift]:
                    folder = variants[name]
                    sc.stop()
                    if folder:
                        os.environ["PYTHONPATH"] = folder
                    else:
                        os.environ.pop("PYTHONPATH", None)
                    sc.write_profile(
                        base_interval=args.base, max_interval=max(300.0, args.base), **settings
                    )
                    sc.start()
                    run.wait_for(lambda: sc.stats().get("live") == args.agents, 60, "re-adoption")
                    assert sc.engine is not None
                    proc = psutil.Process(sc.engine.pid)
                    time.sleep(args.settle)
                    got = window(sc, proc, args.seconds)
                    got["round"] = rnd
                    windows[name].append(got)
                    print(
                        f"round {rnd} {name}: {got['cpu_pct']} % of a core, "
                        f"{got['cpu_ms_per_check']} ms/check, {got['checks_per_s']} checks/s, "
                        f"load {got['load_average'][0]}",
                        flush=True,
                    )
            sc.stop()
    finally:
        if original is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = original
    summary = {}
    for name, got in windows.items():
        pcts = [w["cpu_pct"] for w in got]
        per = [w["cpu_ms_per_check"] for w in got if w["cpu_ms_per_check"]]
        summary[name] = {
            "cpu_pct_median": round(statistics.median(pcts), 2),
            "cpu_pct_min": min(pcts),
            "cpu_pct_max": max(pcts),
            "cpu_ms_per_check_median": round(statistics.median(per), 3) if per else None,
            "checks_per_s_median": statistics.median(w["checks_per_s"] for w in got),
            "jobs_missed": sum(w["jobs_missed"] for w in got),
        }
    result = {
        "variants": variants,
        "agents": args.agents,
        "base_interval_s": args.base,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "settle_s": args.settle,
        "wall_s": round(time.time() - began, 1),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "machine": run.machine_info(),
        "summary": summary,
        "windows": windows,
        "engine_log": sc.log,
        "engine_exits": sc.exits,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\n{'variant':12} {'CPU % of a core, median (min-max)':36} ms/check  checks/s  missed")
    for name, s in summary.items():
        span = f"{s['cpu_pct_median']} ({s['cpu_pct_min']}-{s['cpu_pct_max']})"
        print(
            f"{name:12} {span:36} {s['cpu_ms_per_check_median']:<9} "
            f"{s['checks_per_s_median']:<9} {s['jobs_missed']}"
        )
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
