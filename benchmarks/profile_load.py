"""Profile the engine under ``run.py``'s heaviest load case: 200 agents, 1 s checks.

    .venv/bin/python benchmarks/profile_load.py [--agents 200] [--base 1] [--seconds 60]
        [--py-spy PATH] [--strace] [--perf] [--out-dir benchmarks/results] [--tag NAME] [--keep]
    .venv/bin/python benchmarks/profile_load.py --analyze PROFILE.speedscope.json

It sets up the same state as ``run.py``'s ``load`` scenario (same profile, same fake
agents printing a line every 3 s, launched with ``base_interval`` 30, then the engine is
restarted with ``base_interval`` 1 and re-adopts them), then, one after the other:

1. a plain window of ``--seconds``: engine CPU (psutil) and the ``checks`` counter, with no
   profiler attached (the reference);
2. ``py-spy record -p PID -d SECONDS -f speedscope`` (100 samples/s; py-spy stops the
   process for each sample, so its CPU is measured again during this window);
3. ``py-spy dump -p PID`` (the threads and what they do at one moment);
4. with ``--perf``: ``perf stat --per-thread -e task-clock,context-switches`` for 30 s (the
   exact CPU of each engine thread; ``/proc``'s per-thread times are tick-sampled);
5. with ``--strace``: ``strace -c -f -p PID`` for 20 s (system calls per check; strace
   slows the engine and follows its tmux clients too, so only the counts mean anything).

Then it analyses the profile (``--analyze`` does only that, on an earlier file): for each
thread the share of samples, and over all samples the functions by self time and by
cumulative time, and the samples grouped by the deepest ``supervisor/`` function on the
stack (which project call the time is spent under). The raw files and a ``.txt`` summary go
to ``--out-dir``; the temp dir, tmux server and engine are cleaned up as in ``run.py``.
py-spy is not a dependency: install it with ``pip install --target /tmp/pyspy py-spy``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
import run

DEFAULT_PYSPY = "/tmp/pyspy/bin/py-spy"


# ---------------------------------------------------------------------------- analysis
def short(frame: dict[str, Any]) -> str:
    path = frame.get("file") or ""
    for marker in ("/supervisor/", "/site-packages/", "/lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker == "/supervisor/":
                path = "supervisor/" + path
            break
    return f"{frame['name']} ({path})"  # by function: py-spy's frames are per line


#: A leaf line that blocks in C (lock, queue, poll): py-spy's record often counts a thread
#: parked there as active, so these samples are set apart as waiting, not CPU.
WAITING = re.compile(r"\.acquire\(|\.get\(block=True\)|\.poll\(|\bselect\(|\.wait\(")


def source_line(file: str, line: int, cache: dict[str, list[str]] = {}) -> str:  # noqa: B006
    if file not in cache:
        try:
            cache[file] = Path(file).read_text(errors="replace").splitlines()
        except OSError:
            cache[file] = []
    lines = cache[file]
    return lines[line - 1] if 0 < line <= len(lines) else ""


def analyze(path: Path, top: int = 30) -> str:
    data = json.loads(path.read_text())
    frames = data["shared"]["frames"]
    waiting: collections.Counter[str] = collections.Counter()
    by_line: collections.Counter[str] = collections.Counter()
    all_total = 0.0
    total = 0.0  # seconds of samples (py-spy weighs each sample 1 / rate)
    per_thread: collections.Counter[str] = collections.Counter()
    self_t: collections.Counter[str] = collections.Counter()
    cum_t: collections.Counter[str] = collections.Counter()
    project: collections.Counter[str] = collections.Counter()
    project_cum: collections.Counter[str] = collections.Counter()
    below: collections.Counter[str] = collections.Counter()
    for prof in data["profiles"]:
        samples, weights = prof["samples"], prof["weights"]
        for stack, weight in zip(samples, weights, strict=True):
            all_total += weight
            if not stack:
                continue
            leaf = frames[stack[-1]]
            if WAITING.search(source_line(leaf.get("file") or "", leaf.get("line") or 0)):
                waiting[f"{prof['name']}: {short(leaf)}:{leaf.get('line')}"] += weight
                continue
            total += weight
            per_thread[prof["name"]] += weight
            names = [short(frames[i]) for i in stack]  # root first
            self_t[names[-1]] += weight
            ours_at = [i for i in stack if "/supervisor/" in (frames[i].get("file") or "")]
            if ours_at:
                f = frames[ours_at[-1]]
                text = source_line(f["file"], f.get("line") or 0).strip()[:60]
                by_line[f"{short(f)}:{f.get('line')}  {text}"] += weight
            for name in set(names):
                cum_t[name] += weight
            ours = [i for i, n in enumerate(names) if n.split(" (")[1].startswith("supervisor/")]
            owner = names[ours[-1]] if ours else "(no supervisor/ frame: " + names[-1] + ")"
            project[owner] += weight
            # what the deepest supervisor/ function was calling: its callee's module
            callee = names[ours[-1] + 1] if ours and ours[-1] + 1 < len(names) else "(itself)"
            module = callee.split(" (")[-1].rstrip(")").split("/")[0] if ours else owner
            below[module] += weight
            # cumulative over the project functions only, counted once per sample
            for name in {n for n in names if n.split(" (")[1].startswith("supervisor/")}:
                project_cum[name] += weight

    def table(counter: collections.Counter[str], n: int) -> list[str]:
        return [f"  {100 * v / total:6.2f} %  {v:7.2f} s  {k}" for k, v in counter.most_common(n)]

    out = [
        f"{path.name}: {all_total:.2f} s of samples py-spy called active (100/s); "
        f"{all_total - total:.2f} s of them sit in a blocking call (below), so {total:.2f} s "
        "are on the CPU; the percentages are of those",
        "",
        "waiting (leaf line blocks in C: lock, queue, poll), share of all samples:",
        *[f"  {100 * v / all_total:6.2f} %  {v:7.2f} s  {k}" for k, v in waiting.most_common(8)],
        "",
        "threads (CPU samples):",
    ]
    out += table(per_thread, 10)
    out += ["", f"self time, top {top}:", *table(self_t, top)]
    out += ["", f"cumulative time, top {top}:", *table(cum_t, top)]
    out += ["", f"by the deepest supervisor/ frame on the stack, top {top}:"]
    out += table(project, top)
    out += ["", "what the deepest supervisor/ frame was calling (package or module):"]
    out += table(below, top)
    out += ["", f"cumulative, supervisor/ functions only, top {top}:"]
    out += table(project_cum, top)
    out += ["", f"by the line of the deepest supervisor/ frame, top {top}:"]
    out += table(by_line, top)
    return "\n".join(out) + "\n"


def analyze_wall(path: Path, thread: str, top: int = 25) -> str:
    """Wall time of the threads whose name contains ``thread`` (a ``py-spy record --idle``
    profile): every sample counts, waits included, so it shows what keeps a thread busy
    (a subprocess it waits on, a lock) as well as its CPU. Cumulative by ``supervisor/``
    function, and by the leaf (where each sample stood)."""
    data = json.loads(path.read_text())
    frames = data["shared"]["frames"]
    total = 0.0
    cum: collections.Counter[str] = collections.Counter()
    leaf: collections.Counter[str] = collections.Counter()
    top_job: collections.Counter[str] = collections.Counter()
    names_seen = []
    for prof in data["profiles"]:
        if thread not in prof["name"]:
            continue
        names_seen.append(prof["name"])
        for stack, weight in zip(prof["samples"], prof["weights"], strict=True):
            total += weight
            if not stack:
                continue
            names = [short(frames[i]) for i in stack]
            leaf[names[-1]] += weight
            ours = [n for n in names if n.split(" (")[1].startswith("supervisor/")]
            for name in set(ours):
                cum[name] += weight
            # the outermost supervisor/ frame below the job runner: which job it is
            outer = ours[1] if len(ours) > 1 and "_guarded" in ours[0] else (ours or ["(idle)"])[0]
            top_job[outer] += weight
    if not total:
        return f"{path.name}: no thread named like {thread!r}\n"

    def table(counter: collections.Counter[str]) -> list[str]:
        return [f"  {100 * v / total:6.2f} %  {v:7.2f} s  {k}" for k, v in counter.most_common(top)]

    out = [f"{path.name}: wall time of {names_seen}: {total:.2f} s of samples", ""]
    out += ["by job (outermost supervisor/ frame under the job runner):", *table(top_job), ""]
    out += ["cumulative, supervisor/ functions:", *table(cum), ""]
    out += ["leaf (where the thread stood):", *table(leaf)]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- measuring
def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def thread_cpu(proc: psutil.Process) -> dict[str, tuple[float, float]]:
    """name (tid) -> (user, system) CPU seconds of each thread of the engine."""
    out = {}
    for t in proc.threads():
        try:
            name = Path(f"/proc/{proc.pid}/task/{t.id}/comm").read_text().strip()
        except OSError:
            name = "?"
        out[f"{name} ({t.id})"] = (t.user_time, t.system_time)
    return out


def thread_delta(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], window: float
) -> dict[str, dict[str, float]]:
    out = {}
    for key, (u1, s1) in after.items():
        u0, s0 = before.get(key, (0.0, 0.0))
        out[key] = {
            "user_s": round(u1 - u0, 3),
            "system_s": round(s1 - s0, 3),
            "pct_of_core": round(100 * (u1 - u0 + s1 - s0) / window, 2),
        }
    return out


def window(sc: run.Scenario, proc: psutil.Process, seconds: float) -> dict[str, Any]:
    """CPU and checks of the engine over ``seconds`` (aligned on engine-stats.json writes)."""
    stats0, t0 = sc.next_stats()
    c0, th0, ut0 = cpu_s(proc), thread_cpu(proc), proc.cpu_times()
    time.sleep(max(0.0, t0 + seconds - time.time()))
    stats1, t1 = sc.next_stats()
    c1, th1, ut1 = cpu_s(proc), thread_cpu(proc), proc.cpu_times()
    checks = stats1.get("checks", 0) - stats0.get("checks", 0)
    return {
        "window_s": round(t1 - t0, 2),
        "cpu_s": round(c1 - c0, 3),
        "user_s": round(ut1.user - ut0.user, 3),
        "system_s": round(ut1.system - ut0.system, 3),
        "threads": thread_delta(th0, th1, t1 - t0),
        "cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 2),
        "checks": checks,
        "checks_per_s": round(checks / (t1 - t0), 1),
        "cpu_ms_per_check": round(1000 * (c1 - c0) / checks, 3) if checks else None,
        "jobs_missed": stats1.get("jobs_missed", 0) - stats0.get("jobs_missed", 0),
        "jobs_max_instances": stats1.get("jobs_max_instances", 0)
        - stats0.get("jobs_max_instances", 0),
        "rss_mb": round(proc.memory_info().rss / 2**20, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--base", type=float, default=1.0, help="base_interval while profiling")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--py-spy", default=DEFAULT_PYSPY)
    parser.add_argument("--strace", action="store_true", help="strace -c for 20 s")
    parser.add_argument("--perf", action="store_true", help="perf stat --per-thread for 30 s")
    parser.add_argument("--out-dir", type=Path, default=run.REPO / "benchmarks" / "results")
    parser.add_argument("--tag", default=time.strftime("%Y-%m-%d"))
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--analyze", type=Path, metavar="SPEEDSCOPE_JSON")
    parser.add_argument(
        "--wall",
        metavar="THREAD",
        help="with --analyze: wall time (waits included) of the threads named like THREAD, "
        "e.g. ThreadPoolExecutor-0 (the check worker), from a py-spy record --idle profile",
    )
    args = parser.parse_args(argv)
    if args.analyze:
        text = analyze_wall(args.analyze, args.wall) if args.wall else analyze(args.analyze)
        print(text, end="")
        return 0
    out_dir: Path = args.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"profile-{args.agents}x{args.base:g}s-{args.tag}"
    speedscope = out_dir / f"{stem}.speedscope.json"
    result: dict[str, Any] = {
        "agents": args.agents,
        "base_interval_s": args.base,
        "seconds": args.seconds,
        "machine": run.machine_info(),
    }
    with run.Scenario("profile", args.keep) as sc:
        settings = {"max_concurrent": args.agents, "stale_threshold": 90, "grace_period": 30}
        sc.write_profile(base_interval=30, max_interval=300, **settings)
        sc.start()
        names = [f"load-{i:03d}" for i in range(args.agents)]
        sleep_s = 4 * args.seconds + 900
        for name in names:
            sc.drop(name, f"print: hello\ntick: 3\nsleep: {sleep_s:.0f}\nexit: 0\n")
        sc.wait_events(names, "launched", timeout=60 + 2 * args.agents)
        print(f"{args.agents} agents launched", flush=True)
        sc.stop()
        sc.write_profile(base_interval=args.base, max_interval=max(300.0, args.base), **settings)
        sc.start()
        run.wait_for(lambda: sc.stats().get("live") == args.agents, 60, "re-adoption")
        assert sc.engine is not None
        proc = psutil.Process(sc.engine.pid)
        time.sleep(10)  # settle
        result["plain"] = window(sc, proc, args.seconds)
        print(f"plain window: {result['plain']}", flush=True)

        # py-spy record (its own CPU is measured too)
        stats0, t0 = sc.next_stats()
        c0, th0 = cpu_s(proc), thread_cpu(proc)
        spy = subprocess.Popen(
            [args.py_spy, "record", "-p", str(proc.pid), "-d", f"{args.seconds:g}",
             "-f", "speedscope", "-o", str(speedscope)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        spy_proc = psutil.Process(spy.pid)
        spy_cpu = 0.0
        while spy.poll() is None:
            try:
                spy_cpu = cpu_s(spy_proc)
            except psutil.NoSuchProcess:
                break
            time.sleep(0.5)
        spy_out = spy.communicate()[0]
        t1 = time.time()
        c1, th1 = cpu_s(proc), thread_cpu(proc)
        stats1 = sc.stats()
        checks = stats1.get("checks", 0) - stats0.get("checks", 0)
        result["pyspy"] = {
            "exit": spy.returncode,
            "output_tail": spy_out[-800:],
            "file": str(speedscope),
            "window_s": round(t1 - t0, 2),
            "engine_cpu_s": round(c1 - c0, 3),
            "engine_cpu_pct": round(100 * (c1 - c0) / (t1 - t0), 2),
            "threads": thread_delta(th0, th1, t1 - t0),
            "checks": checks,
            "checks_per_s": round(checks / (t1 - t0), 1),
            "pyspy_cpu_s_approx": round(spy_cpu, 2),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
        print(f"py-spy window: {result['pyspy']}", flush=True)
        dump = subprocess.run(
            [args.py_spy, "dump", "-p", str(proc.pid)], capture_output=True, text=True, check=False
        )
        (out_dir / f"{stem}.dump.txt").write_text(dump.stdout + dump.stderr)

        if args.perf:
            # exact per-thread CPU (scheduler task-clock, not tick-sampled /proc times)
            perf_out = out_dir / f"{stem}.perf-stat.txt"
            s0, t0 = sc.stats().get("checks", 0), time.time()
            done = subprocess.run(
                ["perf", "stat", "--per-thread", "-e", "task-clock,context-switches",
                 "-p", str(proc.pid), "--", "sleep", "30"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            s1, t1 = sc.stats().get("checks", 0), time.time()
            names = {t.id: "" for t in proc.threads()}
            perf_out.write_text(
                f"checks during perf stat (approx.): {s1 - s0} in {t1 - t0:.1f} s\n"
                f"threads: {sorted(names)}\n" + done.stdout + done.stderr
            )
            result["perf_stat"] = {"file": str(perf_out), "checks_approx": s1 - s0}

        if args.strace:
            trace = out_dir / f"{stem}.strace-c.txt"
            s0 = sc.stats().get("checks", 0)
            done = subprocess.run(
                ["timeout", "-s", "INT", "20", "strace", "-c", "-f", "-p", str(proc.pid)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            s1 = sc.stats().get("checks", 0)
            trace.write_text(f"checks during the trace (approx.): {s1 - s0}\n" + done.stderr)
            result["strace"] = {"file": str(trace), "checks_approx": s1 - s0}

        # reference again after the profilers, to see the state did not drift
        result["plain_after"] = window(sc, proc, min(args.seconds, 30.0))
        print(f"plain window after: {result['plain_after']}", flush=True)
    result["engine_log"] = sc.log
    result["engine_exits"] = sc.exits
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    if speedscope.exists():
        summary = analyze(speedscope)
        (out_dir / f"{stem}.txt").write_text(summary)
        print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
