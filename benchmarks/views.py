"""CPU of the live views on a 1,000-task state dir, and the engine's CPU with and without them.

    .venv/bin/python benchmarks/views.py [--tasks 1000] [--agents 20] [--seconds 20]
        [--churn 10] [--out FILE] [--keep]

1. **Model and status** (no engine): a state dir of ``--tasks`` tasks in every group
   (``tests/support/views_fixture.many``). CPU ms of one snapshot read cold (a new
   :class:`~supervisor.views.model.Reader`), warm with nothing changed, and warm with
   ``--churn`` manifests rewritten (medians of 20); ``supervise status`` as a command (CPU
   and wall, of the child process).
2. **top refresh** (no engine): ``supervise top``'s app runs headless at 80×24 in a child
   process for ``--seconds``, refreshing every 0.5 s, while this process rewrites ``--churn``
   manifests (atomically, as the engine does) every 0.5 s. CPU per update = the child's
   CPU over the window / the refreshes it made (rendering included).
3. **Engine CPU with and without top**: a real engine (``benchmarks/run.py``'s Scenario)
   with ``--agents`` fake agents printing a line every 3 s, plus finished task folders up to
   ``--tasks`` in its state dir. The engine's CPU (psutil, user + system) over three windows
   of ``--seconds``: without top, with top running on the same profile, without again.

Output: a table and ``--out`` (JSON; default ``benchmarks/results/views.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
sys.path.insert(0, str(REPO / "tests"))

import psutil  # noqa: E402

from supervisor.taskdir.folder import atomic_write  # noqa: E402
from supervisor.views import model  # noqa: E402


def churn(tasks_dir: Path, names: list[str], count: int, tick: int) -> None:
    """Rewrite ``count`` manifests (a changed ``last_checked_at``), atomically."""
    for i in range(count):
        path = tasks_dir / names[(tick * count + i) % len(names)] / "manifest.json"
        data = json.loads(path.read_bytes())
        data["last_checked_at"] = f"2026-11-23T12:00:{tick % 60:02d}.000Z"
        atomic_write(path, json.dumps(data, indent=2).encode(), durable=False)


def cpu_ms(fn: Any, rounds: int = 20) -> float:
    """Median CPU ms (this process) of ``fn()`` over ``rounds`` calls."""
    took = []
    for _ in range(rounds):
        t0 = time.process_time()
        fn()
        took.append(1000 * (time.process_time() - t0))
    return round(statistics.median(took), 2)


def model_figures(state: Path, spool: Path, churn_n: int) -> dict[str, Any]:
    names = sorted(p.name for p in (state / "tasks").iterdir())
    cold = cpu_ms(lambda: model.Reader(state, spool).snapshot(), rounds=5)
    reader = model.Reader(state, spool)
    reader.snapshot()
    warm = cpu_ms(reader.snapshot)
    ticks = iter(range(10**6))

    def changed() -> None:
        churn(state / "tasks", names, churn_n, next(ticks))
        reader.snapshot()

    with_churn = cpu_ms(changed)
    write_only = cpu_ms(lambda: churn(state / "tasks", names, churn_n, next(ticks)))
    return {
        "snapshot_cold_cpu_ms": cold,
        "snapshot_warm_cpu_ms": warm,
        f"snapshot_after_{churn_n}_changes_cpu_ms": round(with_churn - write_only, 2),
    }


def status_figures(profile: Path) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "supervisor.cli", "status", "-c", str(profile)],
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"status_wall_s": round(wall, 3), "status_cpu_s": round(cpu, 3),
            "status_lines": len(out.stdout.splitlines())}  # fmt: skip


def top_child(state: str, spool: str, seconds: float) -> None:
    """Run the app headless for ``seconds``; print its CPU per refresh as JSON."""
    from supervisor.views.tui import TopApp

    class Counting(TopApp):
        refreshes = 0

        def refresh_view(self) -> None:
            Counting.refreshes += 1
            super().refresh_view()

    async def main() -> dict[str, Any]:
        app = Counting(Path(state), Path(spool), "bench", title="bench")
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(1.0)  # the first (cold) read and layout are not counted
            n0, c0, t0 = Counting.refreshes, time.process_time(), time.monotonic()
            await pilot.pause(seconds)
            n1, c1, t1 = Counting.refreshes, time.process_time(), time.monotonic()
        return {"refreshes": n1 - n0, "window_s": round(t1 - t0, 2),
                "cpu_s": round(c1 - c0, 3),
                "cpu_ms_per_update": round(1000 * (c1 - c0) / max(1, n1 - n0), 2)}  # fmt: skip

    print(json.dumps(asyncio.run(main())))


def start_top(state: Path, spool: Path, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, "--top-child", str(state), str(spool), str(seconds)],
        stdout=subprocess.PIPE, text=True)  # fmt: skip


def top_figures(state: Path, spool: Path, seconds: float, churn_n: int) -> dict[str, Any]:
    names = sorted(p.name for p in (state / "tasks").iterdir())
    child = start_top(state, spool, seconds)
    tick, end = 0, time.monotonic() + seconds + 3
    while child.poll() is None and time.monotonic() < end + 30:
        if churn_n:
            churn(state / "tasks", names, churn_n, tick)
        tick += 1
        time.sleep(0.5)
    out, _ = child.communicate(timeout=60)
    return json.loads(out.strip().splitlines()[-1])


def engine_figures(tasks: int, agents: int, seconds: float, keep: bool) -> dict[str, Any]:
    import run
    from profile_load import cpu_s
    from support import views_fixture as vf

    with run.Scenario("views", keep) as sc:
        sc.write_profile(max_concurrent=agents, base_interval=1, stale_threshold=90)
        now = time.time()
        sc.tasks.mkdir(parents=True, exist_ok=True)
        for i in range(max(0, tasks - agents)):  # finished tasks the engine leaves alone
            row = (f"done-{i:05d}", f"done-{i}", "completed", 3600 + i, {"verdict": "PASS"}, "ok")
            vf._write_task(sc.state, row, now)
        sc.start()
        names = [f"live-{i:03d}" for i in range(agents)]
        for name in names:
            sc.drop(name, f"print: hello\ntick: 3\nsleep: {6 * seconds + 300:.0f}\nexit: 0\n")
        sc.wait_events(names, "launched", timeout=60 + 2 * agents)
        assert sc.engine is not None
        proc = psutil.Process(sc.engine.pid)
        time.sleep(5)  # settle

        def window(with_top: bool) -> dict[str, Any]:
            child = start_top(sc.state, sc.spool, seconds) if with_top else None
            if child is not None:
                time.sleep(1.0)  # its cold start is the child's, not a refresh
            c0, t0 = cpu_s(proc), time.monotonic()
            time.sleep(seconds)
            c1, t1 = cpu_s(proc), time.monotonic()
            got: dict[str, Any] = {"engine_cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 2)}
            if child is not None:
                out, _ = child.communicate(timeout=60)
                got["top"] = json.loads(out.strip().splitlines()[-1])
            return got

        windows = {"without_top": window(False), "with_top": window(True),
                   "without_top_again": window(False)}  # fmt: skip
        sc.stop()
    return {"agents": agents, "tasks": tasks, "windows": windows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--churn", type=int, default=10, help="manifests changed per 0.5 s")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "views.json")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--top-child", nargs=3, metavar=("STATE", "SPOOL", "SECONDS"))
    args = parser.parse_args(argv)
    if args.top_child:
        top_child(args.top_child[0], args.top_child[1], float(args.top_child[2]))
        return 0
    from support import views_fixture as vf

    machine = {"cpus": os.cpu_count(), "load_before": os.getloadavg()}
    result: dict[str, Any] = {"tasks": args.tasks, "churn_per_tick": args.churn,
                              "seconds": args.seconds, "machine": machine}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="supervise-bench-views-") as tmp:
        fixture = vf.many(Path(tmp), args.tasks)
        result["model"] = model_figures(fixture.state_dir, fixture.spool_dir, args.churn)
        result["status"] = status_figures(fixture.profile)
        result["top_refresh"] = top_figures(fixture.state_dir, fixture.spool_dir,
                                            args.seconds, args.churn)  # fmt: skip
    result["engine"] = engine_figures(args.tasks, args.agents, args.seconds, args.keep)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    m, s, t, e = result["model"], result["status"], result["top_refresh"], result["engine"]
    w = e["windows"]
    rows = [
        ("snapshot, cold (CPU ms)", m["snapshot_cold_cpu_ms"]),
        ("snapshot, nothing changed (CPU ms)", m["snapshot_warm_cpu_ms"]),
        (f"snapshot, {args.churn} manifests changed (CPU ms)",
         m[f"snapshot_after_{args.churn}_changes_cpu_ms"]),
        ("supervise status (CPU s / wall s)", f"{s['status_cpu_s']} / {s['status_wall_s']}"),
        ("top: CPU ms per update (target < 200)", t["cpu_ms_per_update"]),
        ("top: refreshes in window", f"{t['refreshes']} in {t['window_s']} s"),
        ("engine CPU % without top", w["without_top"]["engine_cpu_pct"]),
        ("engine CPU % with top", w["with_top"]["engine_cpu_pct"]),
        ("engine CPU % without top, again", w["without_top_again"]["engine_cpu_pct"]),
        ("top on the live engine: CPU ms per update", w["with_top"]["top"]["cpu_ms_per_update"]),
    ]  # fmt: skip
    print(f"\n{args.tasks} tasks, {args.agents} live agents, {args.seconds:g} s windows")
    for label, value in rows:
        print(f"  {label:48} {value}")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
