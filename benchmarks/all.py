"""Issue 24's whole benchmark set in one command, with its targets.

    .venv/bin/python benchmarks/all.py [--quick] [--only run,load,soak_fake,soak_sh,mixed,adopt]
    .venv/bin/python benchmarks/all.py --table benchmarks/results/issue24-<commit>.json [...]

Runs each benchmark as its own process, one after another (:data:`STEPS`: ``run.py --only
detect,pickup,cli,peer``, ``load_only.py`` with 200 agents at 30 s and at 1 s checks,
``soak.py`` with the Python fake agent and with ``--agent sh``, ``mixed.py --scenario
mixed``, ``adopt.py``), each with ``--quick`` when given (the whole quick set: about 15
minutes on 2 cores). Each step's JSON and console output go to
``benchmarks/results/issue24-<commit>-<step>.{json,out}``; then the targets of issue 24 are
read from them (:func:`rows`) and written, with every step's wall time and 1-minute load at
start and end, to ``benchmarks/results/issue24-<commit>.json``, and printed as a markdown
table (target, figure, met?, load, command). ``<commit>`` is ``git rev-parse --short HEAD``,
with ``-dirty`` when ``supervisor/`` has uncommitted changes.

``--table FILE [FILE ...]``: measure nothing, print the table of an earlier summary again
(its rows are recomputed from the step JSON files it names, when they are still there); of
several summaries (e.g. two quick sets), one table with each headline figure pooled over
them: median of the sets' medians, min, max, runs (:func:`combine`).
Exit status 1 when a step exited non-zero (an error, or a soak whose checks failed: see its
``.out``); a missed target is not a failure of the command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hostinfo import host, host_end, loadavg

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"

#: step name -> (script, its arguments, extra arguments with --quick)
STEPS: dict[str, tuple[str, list[str], list[str]]] = {
    "run": ("run.py", ["--only", "detect,pickup,cli,peer"], ["--quick"]),
    "load": ("load_only.py", ["--configs", "200:30,200:1"], ["--quick", "--duration", "45"]),
    "soak_fake": ("soak.py", ["--concurrency", "50"], ["--quick"]),
    "soak_sh": ("soak.py", ["--agent", "sh", "--concurrency", "50"], ["--quick"]),
    "mixed": ("mixed.py", ["--scenario", "mixed"], ["--quick"]),
    "adopt": ("adopt.py", [], ["--quick"]),
}


def commit_label() -> str:
    """``git rev-parse --short HEAD``, plus ``-dirty`` when ``supervisor/`` has changes."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return done.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "supervisor") else "")


def run_step(name: str, quick: bool, label: str) -> dict[str, Any]:
    """Run one step; its argv, exit status, wall time (s), load at start and end, files."""
    script, args, quick_args = STEPS[name]
    out = RESULTS / f"issue24-{label}-{name}.json"
    argv = [sys.executable, str(BENCH / script), *args, *(quick_args if quick else [])]
    argv += ["--out", str(out)]
    console = out.with_suffix(".out")
    shown = " ".join(["benchmarks/" + script, *argv[2:-2]])
    print(f"- {name}: {shown} (load {loadavg()[0]}) ...", flush=True)
    began, load_start = time.monotonic(), loadavg()[0]
    with console.open("w", encoding="utf-8") as handle:
        rc = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO).returncode
    wall = time.monotonic() - began
    print(f"  exit {rc} after {wall:.0f} s (load {loadavg()[0]}); output in {console}", flush=True)
    return {
        "command": shown,
        "rc": rc,
        "wall_s": round(wall, 1),
        "load_1m_start": load_start,
        "load_1m_end": loadavg()[0],
        "json": str(out),
        "console": str(console),
    }


# ---------------------------------------------------------------------------- figures
def read_json(path: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def dig(data: Any, path: str) -> Any:
    """``data["a"]["b"]`` for ``path`` ``"a.b"``; None where a key is missing."""
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def run_figure(data: dict[str, Any], group: str, figure: str) -> dict[str, Any] | None:
    """One row of ``run.py``'s ``figures`` (median, min, max, runs)."""
    for row in data.get("figures", []):
        if row["group"] == group and row["figure"] == figure:
            return row
    return None


def spread(d: dict[str, Any] | None, unit: str = "s", digits: int = 3) -> str:
    """``median (min–max), N runs`` of a summary."""
    if not d:
        return "no figure"
    m, lo, hi = (round(d[k], digits) for k in ("median", "min", "max"))
    return f"{m:g} {unit} ({lo:g}–{hi:g}), {d['runs']} run{'s' if d['runs'] != 1 else ''}"


Row = dict[str, Any]
Check = Callable[[float], bool]


def one(value: Any) -> dict[str, Any] | None:
    """A single figure as a summary of one run (None when there is none)."""
    if not isinstance(value, int | float):
        return None
    return {"median": value, "min": value, "max": value, "runs": 1}


def row(
    target: str, figure: str, met: bool | None, step: str, **stats: dict[str, Any] | None
) -> Row:
    """A row of the table; ``met`` None: no target, or no figure. ``stats``: the headline
    figures (name -> median, min, max, runs) that :func:`combine` pools over summaries."""
    kept = {k: v for k, v in stats.items() if v}
    return {"target": target, "figure": figure, "met": met, "step": step, "stats": kept}


def run_rows(data: dict[str, Any]) -> list[Row]:
    """Light-load latencies, the CLI, engine CPU per task, and the supervisord side-by-side."""
    out = []
    light: list[tuple[str, str, str]] = [
        ("detect.done", "latency_s.p95", "done → completed event p95 < 100 ms"),
        ("detect.crash", "latency_s.p95", "SIGKILL → crashed event p95 < 100 ms"),
        ("detect.hang", "latency_s.p95", "hang: hung − (output + stale + grace) p95 < 100 ms"),
        ("pickup", "launched_latency_s.p95", "spool rename → launched p95 < 100 ms"),
    ]
    for group, figure, target in light:
        d = run_figure(data, group, figure)
        met = None if d is None else d["median"] < 0.1
        out.append(row(target, spread(d), met, "run", s=d))
    for name, target in (("status_json", "status --json"), ("validate", "validate")):
        d = run_figure(data, "cli", f"cli_walls_s.{name}")
        label = f"`{target}`" + (" over 1,000 tasks" if name == "status_json" else "")
        out.append(row(f"{label} median < 0.2 s", spread(d), d and d["median"] < 0.2, "run", s=d))
    for group in ("detect.done", "detect.crash", "pickup"):
        d = run_figure(data, group, "engine_cpu.ms_per_task")
        out.append(
            row(f"engine CPU per task, {group} (light load)", spread(d, "ms", 1), None, "run", ms=d)
        )
    peer = run_figure(data, "peer.supervisord", "restart_s.p50")
    ours = run_figure(data, "peer.supervise", "restart_minus_backoff_s.p50")
    raw = run_figure(data, "peer.supervise", "restart_s.p50")
    text = (
        f"supervisord {spread(peer)}; supervise {spread(raw)} raw, {spread(ours)} minus 1 s backoff"
    )
    target = "crash → restarted, same agent: supervisord beside supervise (p50)"
    stats = {"supervisord": peer, "supervise_raw": raw, "supervise_minus_backoff": ours}
    out.append(row(target, text, None, "run", **stats))
    return out


def load_rows(data: dict[str, Any]) -> list[Row]:
    """200 live agents: engine CPU % of one core at 30 s and at 1 s checks."""
    out = []
    for base, limit in (("30s", 1.0), ("1s", 10.0)):
        d = run_figure(data, f"load.200.{base}", "cpu_pct")
        per = run_figure(data, f"load.200.{base}", "cpu_ms_per_check")
        text = spread(d, "%", 2) + (f"; {per['median']:g} ms per check" if per else "")
        target = f"200 live agents at {base.rstrip('s')} s checks < {limit:g} % of a core"
        out.append(row(target, text, d and d["median"] < limit, "load", pct=d))
    return out


def soak_rows(data: dict[str, Any], step: str) -> list[Row]:
    """Short-task throughput and the engine's CPU per task (the sh agent carries targets)."""
    if not data:
        return [row(f"{step}: short-task throughput", "no figure", None, step)]
    rate, cpu = data.get("tasks_per_s"), dig(data, "engine_cpu.ms_per_task")
    p95 = dig(data, "latency_s.done_file_to_recorded.p95")
    text = (
        f"{rate} tasks/s, {cpu} ms engine CPU/task, done → recorded p95 {p95} s "
        f"({data.get('tasks')} tasks, concurrency {data.get('concurrency')}, 1 run"
        f"{'' if data.get('ok') else ', checks FAILED'})"
    )
    if step == "soak_sh":
        met = rate is not None and cpu is not None and rate >= 25 and cpu <= 10
        return [
            row(
                "`sh` agent: ≥ 25 tasks/s at ≤ 10 ms engine CPU/task (2 cores)",
                text,
                met,
                step,
                tasks_per_s=one(rate),
                ms_per_task=one(cpu),
                recorded_p95_s=one(p95),
            )
        ]
    return [
        row(
            "Python fake agent: throughput (no target)",
            text,
            None,
            step,
            tasks_per_s=one(rate),
            ms_per_task=one(cpu),
            recorded_p95_s=one(p95),
        )
    ]


def mixed_rows(data: dict[str, Any]) -> list[Row]:
    """done/crash → manifest written: p95 < 250 ms and max < 1 s in every phase."""
    body = data.get("mixed") or {}
    out = []
    for key, what in (("done_to_manifest_s", "done"), ("crash_to_manifest_s", "crash")):
        phases = body.get(key)
        target = f"mixed: {what} → manifest p95 < 250 ms, max < 1 s in every phase"
        if not phases:
            out.append(row(target, "no figure", None, "mixed"))
            continue
        cells, met = [], True
        for phase, d in phases.items():
            if not d.get("n"):
                cells.append(f"{phase} –")
                continue
            cells.append(f"{phase} {d['p95']:.3f}/{d['max']:.3f}")
            met = met and d["p95"] < 0.25 and d["max"] < 1.0
        text = "p95/max s: " + ", ".join(cells) + " (1 run)"
        sampled = [d for d in phases.values() if d.get("n")]
        worst_p95 = one(max((d["p95"] for d in sampled), default=None))
        worst_max = one(max((d["max"] for d in sampled), default=None))
        out.append(row(target, text, met, "mixed", worst_p95_s=worst_p95, worst_max_s=worst_max))
    if body.get("engine_cpu_pct") is not None:
        text = (
            f"{body['engine_cpu_pct']} % of a core, {body['engine_cpu_ms_per_short_task']} ms per"
            f" short task, {body['short_tasks_per_s']} short tasks/s"
        )
        cpu = one(body["engine_cpu_pct"])
        per = one(body["engine_cpu_ms_per_short_task"])
        rate = one(body["short_tasks_per_s"])
        out.append(
            row("mixed: engine CPU (no target)", text, None, "mixed", pct=cpu, ms=per, rate=rate)
        )
    return out


def adopt_rows(data: dict[str, Any]) -> list[Row]:
    """200 live sessions adopted and checked by a fresh engine in < 2 s."""
    body = data.get("adopt") or {}
    d = body.get("checked_all_s")
    sources = ", ".join(body.get("checked_sources", []))
    text = spread(d) + (f" (checks read from: {sources})" if d else "")
    if "engine-stats" in sources:  # the heartbeat's cadence: say how loose the figure is
        lower = [r.get("checked_after_s") for r in body.get("restarts", [])]
        text += f"; heartbeat figures are upper bounds, lower bounds {lower} s"
    target = f"{body.get('agents', 200)} live sessions adopted and checked < 2 s"
    return [row(target, text, d and d["median"] < 2.0, "adopt", s=d)]


def rows(steps: dict[str, dict[str, Any]]) -> list[Row]:
    """Every target row, from the step JSON files that exist."""
    makers: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
        "mixed": mixed_rows,
        "soak_sh": lambda d: soak_rows(d, "soak_sh"),
        "soak_fake": lambda d: soak_rows(d, "soak_fake"),
        "load": load_rows,
        "adopt": adopt_rows,
        "run": run_rows,
    }
    out: list[Row] = []
    for name, make in makers.items():
        if name in steps:
            out.extend(make(read_json(steps[name]["json"])))
    return out


def markdown(summary: dict[str, Any]) -> str:
    """The table: target, figure, met?, load (1 min, start → end of its step), command."""
    lines = [
        f"Commit `{summary['commit']}`, {summary['started_at']}, {summary['host']['cores']} "
        f"cores, load {summary['host']['load_1m_start']} → {summary['host']['load_1m_end']}, "
        f"{summary['mode']}, {summary['wall_s']:.0f} s",
        "",
        "| target | figure | met? | load (1 min) | command |",
        "|---|---|---|---|---|",
    ]
    for r in summary["rows"]:
        step = summary["steps"].get(r["step"], {})
        met = "–" if r["met"] is None else ("yes" if r["met"] else "**no**")
        load = f"{step.get('load_1m_start')}–{step.get('load_1m_end')}"
        lines.append(
            f"| {r['target']} | {r['figure']} | {met} | {load} | `{step.get('command', '')}` |"
        )
    return "\n".join(lines)


def pool(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' summaries of one figure as one: the median of their medians (of the
    values, when each is one run), the lowest min, the highest max, the runs added up."""
    return {
        "median": round(statistics.median(d["median"] for d in summaries), 4),
        "min": min(d["min"] for d in summaries),
        "max": max(d["max"] for d in summaries),
        "runs": sum(d["runs"] for d in summaries),
    }


def combine(summaries: list[dict[str, Any]]) -> str:
    """One markdown table over several summaries (e.g. two ``--quick`` sets): per target,
    each headline figure pooled (:func:`pool`), how many sets met it, and each set's load."""
    lines = [
        "Sets: "
        + "; ".join(
            f"`{s['commit']}` {s['started_at']} ({s['host']['cores']} cores, load "
            f"{s['host']['load_1m_start']} → {s['host']['load_1m_end']})"
            for s in summaries
        ),
        "",
        "| target | median (min–max), runs | met | load (1 min) per set | command |",
        "|---|---|---|---|---|",
    ]
    targets: dict[str, list[tuple[dict[str, Any], Row]]] = {}
    for summary in summaries:
        for r in summary["rows"]:
            targets.setdefault(r["target"], []).append((summary, r))
    for target, found in targets.items():
        names = sorted({k for _, r in found for k in r.get("stats", {})})
        cells = []
        for name in names:
            got = [r["stats"][name] for _, r in found if name in r.get("stats", {})]
            d = pool(got)
            cells.append(
                f"{'' if name == 's' else name + ' '}{d['median']:g} "
                f"({d['min']:g}–{d['max']:g}), {d['runs']}"
            )
        judged = [r["met"] for _, r in found if r["met"] is not None]
        met = f"{sum(bool(m) for m in judged)} of {len(judged)}" if judged else "–"
        loads = ", ".join(
            f"{s['steps'].get(r['step'], {}).get('load_1m_start')}–"
            f"{s['steps'].get(r['step'], {}).get('load_1m_end')}"
            for s, r in found
        )
        command = found[0][0]["steps"].get(found[0][1]["step"], {}).get("command", "")
        figure = "; ".join(cells) or found[-1][1]["figure"]
        lines.append(f"| {target} | {figure} | {met} | {loads} | `{command}` |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each step's --quick size")
    parser.add_argument("--only", default=",".join(STEPS), help="comma-separated steps")
    parser.add_argument(
        "--table", type=Path, nargs="+", metavar="JSON", help="print earlier summaries"
    )
    args = parser.parse_args(argv)
    if args.table:
        summaries = [json.loads(p.read_text(encoding="utf-8")) for p in args.table]
        for summary in summaries:
            summary["rows"] = rows(summary["steps"]) or summary["rows"]
        print(markdown(summaries[0]) if len(summaries) == 1 else combine(summaries))
        return 0
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    if set(chosen) - set(STEPS):
        parser.error(f"--only: choose from {', '.join(STEPS)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    label, info, began = commit_label(), host(), time.monotonic()
    summary: dict[str, Any] = {
        "commit": label,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        # the engine measured: identical trees are the same engine, whatever HEAD is
        "supervisor_tree": subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD:supervisor"],
            capture_output=True,
            text=True,
        ).stdout.strip(),
        "steps": {},
    }
    for name in chosen:
        summary["steps"][name] = run_step(name, args.quick, label)
    summary["host"] = host_end(info)
    summary["wall_s"] = round(time.monotonic() - began, 1)
    summary["rows"] = rows(summary["steps"])
    path = RESULTS / f"issue24-{label}.json"
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    print()
    print(markdown(summary))
    print(f"\nsummary written to {path}")
    failed = [name for name, step in summary["steps"].items() if step["rc"] != 0]
    if failed:
        print(f"steps that failed (see their .out): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
