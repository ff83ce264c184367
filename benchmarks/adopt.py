"""Adoption: an engine started with ``--agents`` (200) live sessions to adopt.

    .venv/bin/python benchmarks/adopt.py [--quick] [--agents 200] [--runs 5] [--out FILE.json]

One engine launches ``--agents`` long-lived fake agents (a line every 3 s, ``base_interval``
30 s) and is stopped with SIGTERM: tmux keeps the sessions. Then, ``--runs`` times, a new
engine is started on the same state dir and stopped again once it has adopted and checked
every task. Measured from the ``Popen`` of ``supervise run`` (``t0``; start-up and imports
included), all read from files, so any engine version can be measured:

- ``adopted_all_s``: t0 -> the last ``adopted`` event (each task's ``events.jsonl``, the
  first ``adopted`` with a ts >= t0);
- ``checked_all_s``: t0 -> every task's first check done. Read from the manifests when the
  engine writes one per first check (``last_checked_at`` >= t0 in every manifest:
  ``checked_source`` = ``manifest``); an engine whose quiet checks write nothing leaves the
  manifests alone, and then the heartbeat is read: the first ``engine-stats.json`` whose
  ``checks`` counter reaches ``--agents`` (its ``written_at``; the heartbeat is written every
  few seconds, so this is an upper bound: ``checked_source`` = ``engine-stats``, and
  ``checked_after_s`` is the lower bound, the last heartbeat before with fewer checks). An
  engine that counts it itself (issue 24: ``adoption_ms`` in ``engine-stats.json``, from the
  engine's start, after its imports, until every adopted task's first check) is read
  instead: ``checked_source`` = ``adoption_ms``;
- ``ready_s``: t0 -> the first heartbeat naming the new engine's PID;
- ``cpu_s``: the new engine's own CPU (children excluded) from start to the last figure.

Target (issue 24): every task adopted and checked in < 2 s. ``--quick``: 3 runs.
Also checks that no task was relaunched or ended (no ``launched``/``resumed``/``crashed``
event after the first engine) and that every session still runs at the end.
Prints a table and writes JSON to ``--out``; the cores and the 1-minute load at start and
end are in ``host``. Only processes this script started are ended (``run.Scenario``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run
from hostinfo import host, host_end, own_cpu_s
from run import BenchError, Scenario, parse_ts, wait_for

LONG_PROMPT = "print: hello\ntick: 3\nsleep: 7200\nexit: 0\n"
TARGET_S = 2.0
UNEXPECTED = ("launched", "resumed", "crashed", "completed", "failed", "abandoned", "hung")


def first_ts(events: list[dict[str, Any]], name: str, after: float) -> float | None:
    """The ts (epoch s) of the first event ``name`` at or after ``after``."""
    for record in events:
        if record.get("event") == name and (at := parse_ts(record["ts"])) >= after:
            return at
    return None


def checked_at(folder: Path, after: float) -> float | None:
    """The manifest's ``last_checked_at`` (epoch s) when it is >= ``after``, else None."""
    try:
        data = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("last_checked_at")
    at = parse_ts(value) if value else None
    return at if at is not None and at >= after else None


class Watch:
    """What the new engine has done since ``t0``, polled from the files."""

    def __init__(self, sc: Scenario, names: list[str], t0: float) -> None:
        self.sc, self.names, self.t0 = sc, names, t0
        self.adopted: dict[str, float] = {}
        self.checked: dict[str, float] = {}
        self.stats_checked: float | None = None
        self.stats_before: float | None = None  # the last heartbeat with fewer checks
        self.adoption_s: float | None = None  # the engine's own figure (``adoption_ms``)

    def poll(self) -> bool:
        """Read once more; True when every task is adopted and known to be checked."""
        for name in self.names:
            folder = self.sc.task_dir(name)
            if folder is None:
                continue
            if name not in self.adopted:
                at = first_ts(self.sc.events(name), "adopted", self.t0)
                if at is not None:
                    self.adopted[name] = at
            if name not in self.checked and (at := checked_at(folder, self.t0)) is not None:
                self.checked[name] = at
        stats = self.sc.stats()
        started = stats.get("pid") == getattr(self.sc.engine, "pid", None)
        if started and stats.get("adoption_ms"):
            # the engine's own count from its start (issue 24); t0 is a little earlier
            self.adoption_s = float(stats["adoption_ms"]) / 1000.0
        if self.stats_checked is None and started:
            if stats.get("checks", 0) >= len(self.names):
                self.stats_checked = parse_ts(stats["written_at"])
            else:
                self.stats_before = parse_ts(stats["written_at"])
        adopted = len(self.adopted) == len(self.names)
        checked = (
            len(self.checked) == len(self.names)
            or self.stats_checked is not None
            or self.adoption_s is not None
        )
        return adopted and checked


def one_restart(sc: Scenario, names: list[str], timeout: float) -> dict[str, Any]:
    """Start an engine on the live sessions, wait until all are adopted and checked, stop it."""
    t0 = time.time()
    sc.start()  # returns once the heartbeat names the new engine
    ready = time.time()
    assert sc.engine is not None
    pid = sc.engine.pid
    watch = Watch(sc, names, t0)
    wait_for(watch.poll, timeout, "every task adopted and checked", every=0.05)
    cpu = own_cpu_s(pid)
    by_manifest = len(watch.checked) == len(names)
    by_engine = not by_manifest and watch.adoption_s is not None
    if by_manifest:
        checked_s = max(watch.checked.values()) - t0
    elif by_engine:  # counted by the engine from its start (after its imports; ready_s is after)
        checked_s = watch.adoption_s  # type: ignore[assignment]
    else:
        checked_s = watch.stats_checked - t0  # type: ignore[operator]
    source = "manifest" if by_manifest else "adoption_ms" if by_engine else "engine-stats"
    result = {
        "ready_s": round(ready - t0, 3),
        "adopted_all_s": round(max(watch.adopted.values()) - t0, 3),
        "adopted_first_s": round(min(watch.adopted.values()) - t0, 3),
        "checked_all_s": round(checked_s, 3),
        "checked_source": source,
        # from the heartbeat: the checks were done after this (a lower bound; None: the
        # first heartbeat already counted them all)
        "checked_after_s": None
        if by_manifest or watch.stats_before is None
        else round(watch.stats_before - t0, 3),
        "manifests_checked": len(watch.checked),
        "cpu_s": None if cpu is None else round(cpu, 3),
    }
    sc.stop()
    return result


def adopt(args: argparse.Namespace) -> dict[str, Any]:
    with Scenario("adopt", args.keep) as sc:
        sc.write_profile(
            max_concurrent=args.agents,
            intake_interval=0.5,
            base_interval=30,
            stale_threshold=90,
            grace_period=30,
        )
        sc.start()
        names = [f"adopt-{i:03d}" for i in range(args.agents)]
        began = time.time()
        for name in names:
            sc.drop(name, LONG_PROMPT)
        sc.wait_events(names, "launched", timeout=120 + 2 * len(names))
        launch_s = time.time() - began
        print(f"  {args.agents} agents up in {launch_s:.1f} s", flush=True)
        time.sleep(args.settle)  # the first engine's own first checks are done
        sc.stop()
        cut = time.time()
        sessions = sc.tmux("list-sessions", "-F", "#{session_name}").stdout.split()
        if len(sessions) < args.agents:
            raise BenchError(f"only {len(sessions)} sessions outlived the first engine")
        restarts = []
        for i in range(args.runs):
            got = one_restart(sc, names, args.timeout)
            print(f"  restart {i + 1}: {got}", flush=True)
            restarts.append(got)
        unexpected = {
            name: kinds
            for name in names
            if (
                kinds := [
                    e["event"]
                    for e in sc.events(name)
                    if e.get("event") in UNEXPECTED and parse_ts(e["ts"]) > cut
                ]
            )
        }
        alive = sc.tmux("list-sessions", "-F", "#{session_name}").stdout.split()
        result = {
            "agents": args.agents,
            "launch_all_s": round(launch_s, 1),
            "restarts": restarts,
            "unexpected_events": dict(list(unexpected.items())[:20]),
            "sessions_alive_at_end": len(alive),
        }
    result["engine_log"] = sc.log
    return result


def summary(values: list[float]) -> dict[str, Any]:
    """median, min, max and the number of runs."""
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "runs": len(values),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=200, help="live sessions (200)")
    parser.add_argument("--runs", type=int, default=None, help="restarts (5; quick: 3)")
    parser.add_argument("--quick", action="store_true", help="3 restarts")
    parser.add_argument("--settle", type=float, default=5.0, help="s before the first stop")
    parser.add_argument("--timeout", type=float, default=120.0, help="s per restart")
    parser.add_argument("--out", type=Path, default=run.REPO / "benchmarks/results/adopt.json")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = parser.parse_args(argv)
    args.runs = args.runs or (3 if args.quick else 5)
    info = host()
    result: dict[str, Any] = {"machine": run.machine_info(), "settings": vars(args)}
    code = 0
    try:
        result["adopt"] = body = adopt(args)
        restarts = body["restarts"]
        for key in ("ready_s", "adopted_all_s", "checked_all_s", "cpu_s"):
            values = [r[key] for r in restarts if r[key] is not None]
            body[key] = summary(values) if values else None
        body["checked_sources"] = sorted({r["checked_source"] for r in restarts})
        if body["unexpected_events"] or body["sessions_alive_at_end"] < args.agents:
            code = 1
    except BenchError as exc:
        print(f"ERROR: {exc}", flush=True)
        result["adopt"] = {"error": str(exc)}
        code = 1
    result["host"] = host_end(info)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    body = result["adopt"]
    if "error" not in body:
        print(
            f"adopt: {args.agents} live sessions; cores {info['cores']}, load 1 min "
            f"{result['host']['load_1m_start']} -> {result['host']['load_1m_end']}"
        )
        print(f"{'figure':<34} {'median':>7} {'min':>7} {'max':>7} {'runs':>4}")
        for key, label in (
            ("ready_s", "start -> heartbeat (s)"),
            ("adopted_all_s", "start -> all adopted (s)"),
            ("checked_all_s", "start -> all adopted + checked (s)"),
            ("cpu_s", "engine CPU to that point (s)"),
        ):
            d = body[key] or {}
            cells = " ".join(f"{d.get(k, float('nan')):7.3f}" for k in ("median", "min", "max"))
            print(f"{label:<34} {cells} {d.get('runs', 0):>4}")
        met = body["checked_all_s"] and body["checked_all_s"]["median"] < TARGET_S
        print(
            f"checked from: {body['checked_sources']}; target < {TARGET_S:g} s: "
            f"{'met' if met else 'MISS'}; unexpected events: {len(body['unexpected_events'])};"
            f" sessions alive at end {body['sessions_alive_at_end']}"
        )
    print(f"figures written to {args.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
