"""Latency under mixed load, and what a stubborn agent's stop costs the other tasks.

    .venv/bin/python benchmarks/mixed.py [--quick] [--scenario mixed,stubborn] [--out FILE.json]

``--quick``: a 300-file burst, 5 s warm, 15 s before and after (200 long agents and 100
churning as always). Every report gives the engine's CPU % of a core and per short task
(``engine_cpu_ms_per_short_task``: the whole engine's own CPU over the window, the long
agents' checks included, divided by the short tasks that ended in it; ``engine_cpu`` for the
whole run), the cores and the 1-minute load at start and end (``machine``).

Two scenarios (``--scenario`` takes a comma-separated subset):

- ``mixed`` (issue 11, item 8, first row): ``--long`` (200) long-lived fake agents that print
  a line every 3 s; then ``--churn`` (100) short tasks kept in flight (a new one dropped for
  each one that ends: ``sleep: 0.1``, exit 0); then, while both run, ``--burst`` (1,000)
  files of short tasks renamed into the spool at once. ``max_concurrent`` is
  ``long + churn`` (300), so the burst queues and drains through the slots the churn frees.
  Every ``--kill-every`` (2) s one long agent is SIGKILLed by PID (crash). Measured per
  phase (``before`` the burst, ``claim``: first rename -> last burst file queued, ``drain``:
  -> every burst task terminal, ``after``: ``--after`` s more):

  * done -> manifest written: the ``done`` file's mtime -> the mtime of the terminal
    ``manifest.json`` (every short task that ended in the phase, churn and burst);
  * crash -> ``crashed`` event, and -> the manifest write that recorded it (as ``run.py``'s
    ``detect crash``: the manifest says ``crashed`` and its ``last_checked_at`` is the
    event's ts; read while the task waits its resume backoff).

  After the ``after`` phase no more churn is dropped and the script waits (``--settle``,
  120 s) until every short task is terminal, so a task that ended in a phase and was
  recorded after the phase's end still counts (its latency is the phase's worst).

  Target: p95 < 0.25 s, max < 1 s in every phase.
- ``stubborn`` (item 8, third row): ``--others`` (100) long-lived agents checked every second
  (``base_interval`` 1) and ``--rounds`` (3) agents that ignore SIGTERM (``ignore_term``).
  Each round has two windows of the same shape, taken in turns: ``stop``: ``supervise stop
  ID`` on a stubborn agent (the engine sends SIGTERM, waits ``STOP_TIMEOUT`` = 5 s, sends
  SIGKILL); from 1 s after the request, ``--ends`` (16) of the others are ended 0.25 s apart,
  alternately SIGKILLed (-> ``crashed`` event) and SIGTERMed (the fake agent exits 143 ->
  ``done`` file -> terminal manifest). ``control``: the same ends with no stop going on.
  The figure is the latency of those records in ``stop`` windows next to ``control``
  windows; only ends that fell between the stop's SIGTERM (its ``abandoned`` event) and its
  ``agent_stopped`` event count for ``stop``. Target: no record later than in the control
  windows by more than 0.05 s (p95 and max compared).

Each scenario runs in its own temp dir with its own tmux socket (``run.Scenario``); at the end
the engine gets SIGTERM, the private tmux server is killed and its leftover processes are
SIGKILLed by PID, and the temp dir is removed (``--keep`` keeps it). Only processes this
script started are ended; every agent it kills is checked first (``run.kill_agent``).
Prints a table and writes the figures and the raw samples as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
import run
from run import BenchError, Scenario, dist, parse_ts, wait_for
from soak import Manifests

from supervisor.taskdir.states import TERMINAL

SHORT_PROMPT = "print: hello\nsleep: 0.1\nexit: 0\n"
LONG_PROMPT = "print: hello\ntick: 3\nsleep: 7200\nexit: 0\n"
PHASES = ("before", "claim", "drain", "after")
P95_TARGET, MAX_TARGET, STUBBORN_SLACK = 0.25, 1.0, 0.05


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def read_pid(sc: Scenario, name: str) -> int | None:
    folder = sc.task_dir(name)
    got = run.read_pid_start(folder / "pid") if folder is not None else None
    return got[0] if got and run.is_our_agent(got[0], sc.root) else None


def launch_long(sc: Scenario, names: list[str], prompt: str) -> dict[str, int]:
    """Drop ``names`` (long-lived agents), wait for every ``launched`` event and agent PID."""
    for name in names:
        sc.drop(name, prompt)
    sc.wait_events(names, "launched", timeout=120 + 2 * len(names))
    pids: dict[str, int] = {}

    def all_pids() -> bool:
        for name in names:
            if name not in pids and (pid := read_pid(sc, name)) is not None:
                pids[name] = pid
        return len(pids) == len(names)

    wait_for(all_pids, 60, "every long agent's pid", every=0.2)
    return pids


def settle_records(manifests: Manifests, names: list[str], timeout: float) -> int:
    """Wait until every task in ``names`` is terminal (its record written), so that a task
    that ended in the last phase but was recorded after the phase's end is counted, not left
    out (its latency would be the worst); returns how many were still not terminal after
    ``timeout`` s (reported as ``short_tasks_unrecorded``)."""
    end = time.monotonic() + timeout
    while True:
        found = manifests.poll()
        left = sum(1 for n in names if found.get(n, {}).get("status") not in TERMINAL)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.2)


class CrashWatch:
    """SIGKILLs of long agents and their records: kill time -> ``crashed`` event ts and ->
    the mtime of the manifest write that recorded it (read before the resume rewrites it)."""

    def __init__(self, sc: Scenario) -> None:
        self.sc = sc
        self.pending: dict[str, float] = {}  # name -> kill time
        self.samples: list[dict[str, Any]] = []

    def kill(self, name: str, pid: int) -> float:
        at = run.kill_agent(pid, self.sc.root)
        self.pending[name] = at
        return at

    def poll(self) -> None:
        for name, at in list(self.pending.items()):
            crashed = self.sc.event_ts(name, "crashed", after=at)
            if crashed is None:
                continue
            written = run.crash_manifest_mtime(self.sc, name, crashed)
            self.samples.append(
                {
                    "name": name,
                    "killed_at": at,
                    "event_s": crashed - at,
                    "manifest_s": None if written is None else written - at,
                }
            )
            del self.pending[name]


def done_latency(sc: Scenario, dir_name: str) -> tuple[float, float] | None:
    """(done-file mtime, terminal manifest mtime - done mtime) of one finished task."""
    folder = sc.tasks / dir_name
    try:
        done = (folder / "done").stat().st_mtime
        written = (folder / "manifest.json").stat().st_mtime
    except OSError:
        return None
    return done, written - done


def phase_of(at: float, marks: dict[str, float]) -> str | None:
    """Which phase the time ``at`` falls in (``marks``: phase -> its start; ``end``)."""
    if at < marks["before"] or at >= marks["end"]:
        return None
    current = None
    for phase in PHASES:
        if at >= marks[phase]:
            current = phase
    return current


def start_pyspy(args: argparse.Namespace, pid: int) -> subprocess.Popen | None:
    """With ``--py-spy S``: ``py-spy record --idle`` of the engine for S s from the burst on
    (wall time, idle samples included; speedscope JSON next to ``--out``;
    ``profile_load.py --analyze`` summarises it)."""
    if not args.py_spy:
        return None
    out = args.out.with_suffix(".speedscope.json")
    argv = [args.py_spy_bin, "record", "-p", str(pid), "-d", f"{args.py_spy:g}", "-r", "100"]
    argv.append("--idle")  # wall time: the worker's waits on tmux are the point
    return subprocess.Popen(
        [*argv, "-f", "speedscope", "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def mixed(args: argparse.Namespace) -> dict[str, Any]:
    with Scenario("mixed", args.keep) as sc:
        sc.write_profile(
            max_concurrent=args.long + args.churn,
            intake_interval=0.5,
            base_interval=args.base_interval,
            stale_threshold=90,
            grace_period=30,
        )
        sc.start()
        load = {"start": loadavg()}
        began = time.time()
        long_names = [f"long-{i:03d}" for i in range(args.long)]
        pids = launch_long(sc, long_names, LONG_PROMPT)
        launch_long_s = time.time() - began
        print(f"  {args.long} long agents up in {launch_long_s:.1f} s", flush=True)
        load["long_up"] = loadavg()
        engine = psutil.Process(sc.engine.pid)  # type: ignore[union-attr]
        manifests = Manifests(sc.state)
        crashes = CrashWatch(sc)
        churn_dropped: list[str] = []
        burst_names = [f"burst-{i:04d}" for i in range(args.burst)]
        files = [sc.task_file(name, SHORT_PROMPT) for name in burst_names]
        marks: dict[str, float] = {}
        cpu0, cpu_t0 = sum(engine.cpu_times()[:2]), time.time()
        next_kill = time.time() + args.warm
        killable = list(long_names)
        warm_until = time.time() + args.warm
        state = "warm"
        drained_at = None
        spy: subprocess.Popen | None = None
        while True:
            now = time.time()
            if sc.engine is not None and sc.engine.poll() is not None:
                raise BenchError(f"engine exited: {sc.tail()}")
            found = manifests.poll()
            terminal = {n for n, m in found.items() if m["status"] in TERMINAL}
            in_flight = sum(1 for n in churn_dropped if n not in terminal)
            for _ in range(args.churn - in_flight):
                name = f"churn-{len(churn_dropped):05d}"
                sc.drop(name, SHORT_PROMPT)
                churn_dropped.append(name)
            if state == "warm" and now >= warm_until:
                state, marks["before"] = "before", now
                load["before"] = loadavg()
            elif state == "before" and now >= marks["before"] + args.before:
                spy = start_pyspy(args, sc.engine.pid)  # type: ignore[union-attr]
                marks["claim"] = time.time()
                for tmp, final in files:
                    tmp.rename(final)
                marks["renamed"] = time.time()
                state = "burst"
                load["burst"] = loadavg()
            elif state == "burst" and all(n in terminal for n in burst_names):
                drained_at = now
                state = "after"
                load["drained"] = loadavg()
            elif state == "after" and now >= drained_at + args.after:  # type: ignore[operator]
                marks["end"] = now
                break
            if state != "warm" and now >= next_kill and killable:
                name = killable.pop(0)
                pid = read_pid(sc, name) or pids[name]
                crashes.kill(name, pid)
                next_kill = now + args.kill_every
            crashes.poll()
            time.sleep(0.1)
        cpu1, cpu_t1 = sum(engine.cpu_times()[:2]), time.time()
        if spy is not None:
            spy.wait(timeout=args.py_spy + 60)
        wait_for(lambda: (crashes.poll(), not crashes.pending)[1], 30, "the last crashes' records")
        unrecorded = settle_records(manifests, churn_dropped + burst_names, args.settle)
        load["end"] = loadavg()
        # the claim phase ends at the last burst file's 'queued' event
        queued = [sc.event_ts(n, "queued") for n in burst_names]
        marks["drain"] = max(q for q in queued if q is not None)
        marks["after"] = drained_at  # type: ignore[assignment]
        done: dict[str, list[float]] = {p: [] for p in PHASES}
        for dir_name, (_, data) in manifests.by_dir.items():
            if not data["task_name"].startswith(("churn-", "burst-")):
                continue
            if data["status"] not in TERMINAL:
                continue
            got = done_latency(sc, dir_name)
            if got is not None and (phase := phase_of(got[0], marks)) is not None:
                done[phase].append(got[1])
        crash_event: dict[str, list[float]] = {p: [] for p in PHASES}
        crash_manifest: dict[str, list[float]] = {p: [] for p in PHASES}
        rewritten = 0
        for sample in crashes.samples:
            phase = phase_of(sample["killed_at"], marks)
            if phase is None:
                continue
            crash_event[phase].append(sample["event_s"])
            if sample["manifest_s"] is None:
                rewritten += 1
            else:
                crash_manifest[phase].append(sample["manifest_s"])
        statuses: dict[str, int] = {}
        for _, data in manifests.by_dir.values():
            statuses[data["status"]] = statuses.get(data["status"], 0) + 1
        window = marks["end"] - marks["before"]
        short_done = sum(1 for n in terminal if n.startswith(("churn-", "burst-")))
        result = {
            "settings": vars(args) | {"out": str(args.out)},
            "launch_long_s": round(launch_long_s, 1),
            "phase_s": {
                p: round((marks[q] if q != "end" else marks["end"]) - marks[p], 1)
                for p, q in zip(PHASES, (*PHASES[1:], "end"), strict=True)
            },
            "burst_rename_s": round(marks["renamed"] - marks["claim"], 3),
            "churn_dropped": len(churn_dropped),
            "short_tasks_terminal": short_done,
            "statuses": statuses,
            "crashes": len(crashes.samples),
            "crash_manifest_rewritten_before_read": rewritten,
            "short_tasks_unrecorded": unrecorded,
            "engine_cpu_pct": round((cpu1 - cpu0) / (cpu_t1 - cpu_t0) * 100, 1),
            # the long agents' checks included: the whole engine's CPU over the short tasks
            "engine_cpu_ms_per_short_task": round(1000 * (cpu1 - cpu0) / max(short_done, 1), 2),
            "loadavg": load,
            "done_to_manifest_s": {p: dist(v) for p, v in done.items()},
            "done_to_manifest_all_s": dist([x for v in done.values() for x in v]),
            "crash_to_event_s": {p: dist(v) for p, v in crash_event.items()},
            "crash_to_manifest_s": {p: dist(v) for p, v in crash_manifest.items()},
            "crash_to_manifest_all_s": dist([x for v in crash_manifest.values() for x in v]),
            "window_s": round(window, 1),
            "short_tasks_per_s": round(short_done / window, 2) if window else None,
        }
    result["engine_log"] = sc.log
    result["engine_cpu"] = sc.cpu.report()
    result["engine_stats"] = sc.final_stats
    return result


# ---------------------------------------------------------------------------- stubborn
def end_others(
    sc: Scenario, names: list[str], pids: dict[str, int], gap: float, crashes: CrashWatch
) -> list[dict[str, Any]]:
    """End ``names`` ``gap`` s apart: even ones SIGKILLed (a crash), odd ones SIGTERMed (the
    fake agent traps it and exits 143: a done file). Returns what was done, when."""
    ends = []
    for i, name in enumerate(names):
        pid = pids[name]
        if i % 2 == 0:
            at = crashes.kill(name, pid)
            ends.append({"name": name, "how": "kill", "at": at})
        else:
            if not run.is_our_agent(pid, sc.root):
                raise BenchError(f"pid {pid} is not one of our fake agents")
            at = time.time()
            os.kill(pid, signal.SIGTERM)
            ends.append({"name": name, "how": "term", "at": at})
        end = time.time() + gap
        while time.time() < end:
            crashes.poll()
            time.sleep(0.02)
    return ends


def term_record(sc: Scenario, name: str) -> float | None:
    """done mtime -> terminal manifest mtime of a SIGTERMed agent (None while not terminal)."""
    folder = sc.task_dir(name)
    if folder is None:
        return None
    try:
        status = json.loads((folder / "manifest.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        return None
    if status not in TERMINAL:
        return None
    got = done_latency(sc, folder.name)
    return got[1] if got else None


def stubborn(args: argparse.Namespace) -> dict[str, Any]:
    with Scenario("stubborn", args.keep) as sc:
        sc.write_profile(
            max_concurrent=args.others + args.rounds + 2,
            intake_interval=0.5,
            base_interval=1,
            max_interval=300,
            stale_threshold=90,
            grace_period=30,
            max_retries=10,
        )
        sc.start()
        others = [f"other-{i:03d}" for i in range(args.others)]
        stubs = [f"stubborn-{i}" for i in range(args.rounds)]
        pids = launch_long(sc, others, LONG_PROMPT)
        launch_long(sc, stubs, "ignore_term\n" + LONG_PROMPT)
        time.sleep(3.0)
        crashes = CrashWatch(sc)
        windows: list[dict[str, Any]] = []
        free = list(others)
        cli = run.supervise_argv()
        for r in range(args.rounds):
            for kind in ("stop", "control") if r % 2 == 0 else ("control", "stop"):
                names, free = free[: args.ends], free[args.ends :]
                if len(names) < args.ends:
                    raise BenchError("not enough other agents; raise --others")
                began = time.time()
                stopper = None
                if kind == "stop":
                    task_id = sc.task_dir(stubs[r]).name  # type: ignore[union-attr]
                    stopper = subprocess.Popen(
                        [*cli, "stop", "-c", str(sc.profile), task_id],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        env=run.clean_env(),
                    )
                time.sleep(1.0)
                ends = end_others(sc, names, pids, args.gap, crashes)
                if stopper is not None:
                    stopper.wait(timeout=60)
                    wait_for(
                        lambda s=stubs[r]: sc.event_ts(s, "agent_stopped"),
                        30,
                        "the stubborn agent's agent_stopped",
                    )
                wait_for(lambda: (crashes.poll(), not crashes.pending)[1], 30, "crash records")
                wait_for(
                    lambda n=names: all(term_record(sc, x) is not None for x in n[1::2]),
                    30,
                    "done records",
                )
                stop_window = None
                if kind == "stop":
                    sigterm = sc.event_ts(stubs[r], "abandoned")
                    stopped = [e for e in sc.events(stubs[r]) if e["event"] == "agent_stopped"]
                    stop_window = {
                        "sigterm_at": sigterm,
                        "stopped_at": parse_ts(stopped[0]["ts"]),
                        "killed": stopped[0].get("killed"),
                    }
                windows.append(
                    {
                        "round": r,
                        "kind": kind,
                        "began": began,
                        "ends": ends,
                        "stop": stop_window,
                        "loadavg": loadavg(),
                    }
                )
                time.sleep(2.0)
        by_name = {s["name"]: s for s in crashes.samples}
        figures: dict[str, dict[str, list[float]]] = {
            k: {"crash_event": [], "crash_manifest": [], "done_manifest": []}
            for k in ("stop", "control")
        }
        outside = 0
        for w in windows:
            for end in w["ends"]:
                if w["stop"] is not None and not (
                    w["stop"]["sigterm_at"] <= end["at"] <= w["stop"]["stopped_at"]
                ):
                    outside += 1
                    continue
                bucket = figures[w["kind"]]
                if end["how"] == "kill":
                    sample = by_name[end["name"]]
                    bucket["crash_event"].append(sample["event_s"])
                    if sample["manifest_s"] is not None:
                        bucket["crash_manifest"].append(sample["manifest_s"])
                else:
                    value = term_record(sc, end["name"])
                    if value is not None:
                        bucket["done_manifest"].append(value)
        stops = [w["stop"] for w in windows if w["stop"]]
        result = {
            "settings": vars(args) | {"out": str(args.out)},
            "stop_s": [round(s["stopped_at"] - s["sigterm_at"], 3) for s in stops],
            "stops_killed": [s["killed"] for s in stops],
            "ends_outside_stop_window": outside,
            "figures": {
                kind: {k: dist(v) for k, v in fig.items()}
                | {"all": dist([x for v in fig.values() for x in v])}
                for kind, fig in figures.items()
            },
            "windows": windows,
        }
    result["engine_log"] = sc.log
    result["engine_cpu"] = sc.cpu.report()
    result["engine_stats"] = sc.final_stats
    return result


# ---------------------------------------------------------------------------- output
def verdict(d: dict[str, Any], p95: float, top: float) -> str:
    if not d.get("n"):
        return "no samples"
    return "ok" if d["p95"] < p95 and d["max"] < top else "MISS"


def print_mixed(r: dict[str, Any]) -> None:
    print(
        f"mixed: long agents up in {r['launch_long_s']} s; phases (s) {r['phase_s']}; "
        f"{r['short_tasks_terminal']} short tasks ended ({r['short_tasks_per_s']}/s); "
        f"{r['crashes']} crashes; engine CPU {r['engine_cpu_pct']} % of a core, "
        f"{r['engine_cpu_ms_per_short_task']} ms per short task; "
        f"load {r['loadavg']}"
    )
    print(f"{'figure':<28} {'phase':<7} {'n':>5} {'p50':>7} {'p95':>7} {'max':>7}  target")
    for label, key in (
        ("done -> manifest written", "done_to_manifest_s"),
        ("crash -> crashed event", "crash_to_event_s"),
        ("crash -> manifest written", "crash_to_manifest_s"),
    ):
        for phase in PHASES:
            d = r[key][phase]
            cells = [f"{d.get(k, float('nan')):7.3f}" for k in ("p50", "p95", "max")]
            mark = verdict(d, P95_TARGET, MAX_TARGET) if "manifest" in key else ""
            print(f"{label:<28} {phase:<7} {d.get('n', 0):>5} {' '.join(cells)}  {mark}")


def print_stubborn(r: dict[str, Any]) -> None:
    print(
        f"stubborn: stops took {r['stop_s']} s (SIGKILL needed: {r['stops_killed']}); "
        f"{r['ends_outside_stop_window']} ends outside their stop window (not counted)"
    )
    print(f"{'record':<16} {'window':<8} {'n':>4} {'p50':>7} {'p95':>7} {'max':>7}")
    for key in ("crash_event", "crash_manifest", "done_manifest", "all"):
        for kind in ("control", "stop"):
            d = r["figures"][kind][key]
            cells = [f"{d.get(k, float('nan')):7.3f}" for k in ("p50", "p95", "max")]
            print(f"{key:<16} {kind:<8} {d.get('n', 0):>4} {' '.join(cells)}")
    c, s = r["figures"]["control"]["all"], r["figures"]["stop"]["all"]
    if c.get("n") and s.get("n"):
        dp95, dmax = s["p95"] - c["p95"], s["max"] - c["max"]
        ok = dp95 <= STUBBORN_SLACK and dmax <= STUBBORN_SLACK
        print(
            f"stop - control: p95 {dp95:+.3f} s, max {dmax:+.3f} s "
            f"(target <= +{STUBBORN_SLACK}): {'ok' if ok else 'MISS'}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="mixed,stubborn")
    parser.add_argument("--long", type=int, default=200, help="long-lived agents (200)")
    parser.add_argument("--churn", type=int, default=100, help="short tasks in flight (100)")
    parser.add_argument("--burst", type=int, default=None, help="burst files (1000; quick 300)")
    parser.add_argument("--base-interval", type=float, default=30.0, help="mixed: checks (30)")
    parser.add_argument("--warm", type=float, default=None, help="s of churn first (15; 5)")
    parser.add_argument("--before", type=float, default=None, help="s before the burst (30; 15)")
    parser.add_argument("--after", type=float, default=None, help="s after the drain (30; 15)")
    parser.add_argument("--quick", action="store_true", help="the sizes after ';' above")
    parser.add_argument(
        "--settle", type=float, default=120.0, help="mixed: s to wait for the last records"
    )
    parser.add_argument("--kill-every", type=float, default=2.0, help="s between crashes (2)")
    parser.add_argument("--others", type=int, default=100, help="stubborn: other agents (100)")
    parser.add_argument("--rounds", type=int, default=3, help="stubborn: rounds (3)")
    parser.add_argument("--ends", type=int, default=16, help="stubborn: ends per window (16)")
    parser.add_argument("--gap", type=float, default=0.25, help="stubborn: s between ends")
    parser.add_argument("--out", type=Path, default=run.REPO / "benchmarks/results/mixed.json")
    parser.add_argument("--py-spy", type=float, default=0, help="mixed: profile S s (0: off)")
    parser.add_argument("--py-spy-bin", default="/tmp/pyspy/bin/py-spy")
    parser.add_argument("--keep", action="store_true", help="keep the temp dirs")
    args = parser.parse_args(argv)
    quick = args.quick
    args.burst = args.burst if args.burst is not None else (300 if quick else 1000)
    args.warm = args.warm if args.warm is not None else (5.0 if quick else 15.0)
    args.before = args.before if args.before is not None else (15.0 if quick else 30.0)
    args.after = args.after if args.after is not None else (15.0 if quick else 30.0)
    chosen = [s.strip() for s in args.scenario.split(",") if s.strip()]
    if set(chosen) - {"mixed", "stubborn"}:
        parser.error("--scenario: choose from mixed, stubborn")
    result: dict[str, Any] = {"machine": run.machine_info(), "started_at": time.time()}
    code = 0
    for name, body, show in (("mixed", mixed, print_mixed), ("stubborn", stubborn, print_stubborn)):
        if name not in chosen:
            continue
        print(f"- {name} (load {loadavg()}) ...", flush=True)
        try:
            result[name] = body(args)
            show(result[name])
        except BenchError as exc:
            print(f"ERROR: {name}: {exc}", flush=True)
            result[name] = {"error": str(exc)}
            code = 1
    result["machine"]["load_average_after"] = loadavg()
    result["machine"]["load_1m_end"] = result["machine"]["load_average_after"][0]
    print(
        f"cores {result['machine']['cores']}; load 1 min {result['machine']['load_1m_start']}"
        f" -> {result['machine']['load_1m_end']}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"figures written to {args.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
