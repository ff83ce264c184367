"""Issue 24, item 5: what the benchmarks report, read from their files (no engine started).

- ``benchmarks/hostinfo.py``: the engine's own CPU (children excluded) per task, the cores
  and the 1-minute load at start and end;
- ``benchmarks/all.py``: the targets of issue 24 read from each step's JSON, met or not, and
  the markdown table;
- ``benchmarks/adopt.py`` and ``soak.py``: the readers of the files a running engine writes
  (the ``adopted`` event, ``last_checked_at``, the heartbeat's PID).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

hostinfo = importlib.import_module("hostinfo")
bench_all = importlib.import_module("all")
adopt = importlib.import_module("adopt")
soak = importlib.import_module("soak")

BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


def test_engine_cpu_counts_the_process_itself_not_its_children() -> None:
    """A child that burns 0.3 CPU s and is reaped adds to ``children_*`` only."""
    cpu = hostinfo.EngineCpu()
    me = os.getpid()
    cpu.begin(me)
    subprocess.run([sys.executable, "-c", BURN], check=True)
    cpu.end(tasks=4)
    got = cpu.report()
    assert got["tasks"] == 4 and got["stretches"] == 1
    assert got["cpu_s"] < 0.3, got  # the child's 0.3 s are not the engine's
    assert got["ms_per_task"] == round(1000 * cpu.cpu_s / 4, 2)


def test_engine_cpu_sums_stretches_and_keeps_the_largest_task_count() -> None:
    """A restarted engine (a second stretch) adds its CPU; the tasks are the same ones."""
    cpu = hostinfo.EngineCpu()
    me = os.getpid()
    for tasks in (10, 8):
        cpu.begin(me)
        end = hostinfo.own_cpu_s(me) + 0.02  # type: ignore[operator]
        while hostinfo.own_cpu_s(me) < end:  # type: ignore[operator]
            pass
        cpu.end(tasks=tasks)
    got = cpu.report()
    assert got["stretches"] == 2 and got["tasks"] == 10
    assert got["cpu_s"] >= 0.04


def test_engine_cpu_of_a_gone_process_is_not_counted() -> None:
    """``end`` after the engine exited leaves the report as it was (no negative CPU)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    cpu = hostinfo.EngineCpu()
    cpu.begin(child.pid)
    child.wait()
    cpu.end(tasks=3)
    assert cpu.report()["stretches"] == 0 and cpu.report()["ms_per_task"] is None


def test_host_gives_cores_and_load_at_start_and_end() -> None:
    info = hostinfo.host_end(hostinfo.host())
    assert info["cores"] == os.cpu_count()
    assert {"load_1m_start", "load_1m_end"} <= info.keys()


# ---------------------------------------------------------------------------- all.py
def write(path: Path, data: dict[str, Any]) -> str:
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def phases(p95: float, top: float) -> dict[str, Any]:
    return {p: {"n": 5, "p95": p95, "max": top} for p in ("before", "claim", "drain", "after")}


def fig(group: str, figure: str, median: float) -> dict[str, Any]:
    return {
        "group": group,
        "figure": figure,
        "median": median,
        "min": median,
        "max": median,
        "runs": 1,
    }


def steps(tmp_path: Path, *, sh_rate: float, sh_cpu: float, claim_max: float) -> dict:
    mixed = {
        "mixed": {
            "done_to_manifest_s": phases(0.1, 0.5)
            | {"claim": {"n": 9, "p95": 0.2, "max": claim_max}},
            "crash_to_manifest_s": phases(0.1, 0.5),
        }
    }
    soak_sh = {"tasks_per_s": sh_rate, "engine_cpu": {"ms_per_task": sh_cpu}, "ok": True}
    run = {
        "figures": [
            fig("detect.done", "latency_s.p95", 0.05),
            fig("detect.crash", "latency_s.p95", 0.2),
            fig("cli", "cli_walls_s.validate", 0.15),
            fig("load.200.1s", "cpu_pct", 12.0),
            fig("load.200.30s", "cpu_pct", 0.5),
        ]
    }
    adopted = {
        "adopt": {
            "agents": 200,
            "checked_all_s": {"median": 1.5, "min": 1.2, "max": 1.9, "runs": 3},
            "checked_sources": ["manifest"],
        }
    }
    files = {"mixed": mixed, "soak_sh": soak_sh, "run": run, "load": run, "adopt": adopted}
    return {
        name: {
            "json": write(tmp_path / f"{name}.json", data),
            "command": name,
            "load_1m_start": 1.0,
            "load_1m_end": 2.0,
        }
        for name, data in files.items()
    }


def by_target(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["target"]: r["met"] for r in rows}


def test_all_reads_each_target_from_its_step(tmp_path: Path) -> None:
    met = by_target(bench_all.rows(steps(tmp_path, sh_rate=30, sh_cpu=8, claim_max=0.9)))
    assert met["mixed: done → manifest p95 < 250 ms, max < 1 s in every phase"] is True
    assert met["`sh` agent: ≥ 25 tasks/s at ≤ 10 ms engine CPU/task (2 cores)"] is True
    assert met["done → completed event p95 < 100 ms"] is True
    assert met["SIGKILL → crashed event p95 < 100 ms"] is False
    assert met["`validate` median < 0.2 s"] is True
    assert met["200 live agents at 30 s checks < 1 % of a core"] is True
    assert met["200 live agents at 1 s checks < 10 % of a core"] is False
    assert met["200 live sessions adopted and checked < 2 s"] is True
    assert met["spool rename → launched p95 < 100 ms"] is None  # no figure


def test_all_misses_a_target_on_one_phase_or_one_half(tmp_path: Path) -> None:
    """One phase's max over 1 s misses the mixed row; tasks/s met with too much CPU misses."""
    met = by_target(bench_all.rows(steps(tmp_path, sh_rate=30, sh_cpu=11, claim_max=1.2)))
    assert met["mixed: done → manifest p95 < 250 ms, max < 1 s in every phase"] is False
    assert met["`sh` agent: ≥ 25 tasks/s at ≤ 10 ms engine CPU/task (2 cores)"] is False


def test_all_markdown_gives_each_rows_load_and_command(tmp_path: Path) -> None:
    found = steps(tmp_path, sh_rate=20, sh_cpu=5, claim_max=0.5)
    summary = {
        "commit": "abc1234",
        "started_at": "now",
        "mode": "quick",
        "wall_s": 1.0,
        "host": {"cores": 2, "load_1m_start": 1.0, "load_1m_end": 2.0},
        "steps": found,
        "rows": bench_all.rows(found),
    }
    table = bench_all.markdown(summary).splitlines()
    sh = next(line for line in table if line.startswith("| `sh` agent"))
    assert "| **no** | 1.0–2.0 | `soak_sh` |" in sh
    assert "2 cores" in table[0]


def test_all_a_step_without_json_gives_no_figure(tmp_path: Path) -> None:
    missing = {"adopt": {"json": str(tmp_path / "absent.json")}}
    (only,) = bench_all.rows(missing)
    assert only["figure"] == "no figure" and not only["met"]


# ---------------------------------------------------------------------------- file readers
def test_adopt_reads_the_first_adopted_event_after_the_start() -> None:
    events = [
        {"event": "adopted", "ts": "2026-11-26T10:00:00+00:00"},
        {"event": "adopted", "ts": "2026-11-26T10:00:05+00:00"},
    ]
    t0 = adopt.parse_ts("2026-11-26T10:00:01+00:00")
    assert adopt.first_ts(events, "adopted", t0) == t0 + 4


def test_adopt_counts_a_check_only_when_last_checked_at_is_new(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(
        json.dumps({"last_checked_at": "2026-11-26T10:00:02+00:00"}), encoding="utf-8"
    )
    t0 = adopt.parse_ts("2026-11-26T10:00:01+00:00")
    assert adopt.checked_at(tmp_path, t0) == t0 + 1
    assert adopt.checked_at(tmp_path, t0 + 5) is None
    assert adopt.checked_at(tmp_path / "absent", t0) is None


def test_soak_waits_for_the_heartbeat_naming_the_engine(tmp_path: Path) -> None:
    """The engine names itself in ``engine-stats.json`` (there is no ``engine.lock``)."""
    assert soak.heartbeat_pid(tmp_path) is None
    (tmp_path / "engine-stats.json").write_text('{"pid": 4242}', encoding="utf-8")
    assert soak.heartbeat_pid(tmp_path) == 4242


class StubScenario:
    """What :class:`adopt.Watch` reads of a ``run.Scenario``: folders, events, heartbeat."""

    def __init__(self, root: Path, pid: int, stats: dict[str, Any]) -> None:
        self.root, self.engine, self._stats = root, subprocess.Popen(["true"]), stats
        self.engine.wait()
        self.engine.pid = pid  # type: ignore[misc]
        self.log: list[dict[str, Any]] = []

    def task_dir(self, name: str) -> Path:
        (self.root / name).mkdir(exist_ok=True)
        return self.root / name

    def events(self, name: str) -> list[dict[str, Any]]:
        return [{"event": "adopted", "ts": "2026-11-26T10:00:02+00:00"}]

    def stats(self) -> dict[str, Any]:
        return self._stats


def test_adopt_falls_back_to_the_new_engines_heartbeat(tmp_path: Path) -> None:
    """An engine whose quiet first checks write no manifest is read from its heartbeat's
    ``checks`` counter; a heartbeat still naming the previous engine does not count."""
    t0 = adopt.parse_ts("2026-11-26T10:00:01+00:00")
    beat = {"pid": 111, "checks": 2, "written_at": "2026-11-26T10:00:03+00:00"}
    old = adopt.Watch(StubScenario(tmp_path, 222, beat), ["a", "b"], t0)
    assert old.poll() is False and old.stats_checked is None
    new = adopt.Watch(StubScenario(tmp_path, 111, beat), ["a", "b"], t0)
    assert new.poll() is True and new.stats_checked == t0 + 2
    assert new.checked == {}  # no manifest was written: the heartbeat is the source


def test_all_pools_several_sets_into_one_row_per_target(tmp_path: Path) -> None:
    """Two quick sets: each headline figure's median of the sets, lowest min, highest max,
    runs added up; 'met' counted per set."""
    tables = []
    for i, rate in enumerate((20.0, 30.0)):
        folder = tmp_path / str(i)
        folder.mkdir()
        found = steps(folder, sh_rate=rate, sh_cpu=5, claim_max=0.5)
        tables.append(
            {
                "commit": f"c{i}",
                "started_at": "now",
                "host": {"cores": 2, "load_1m_start": 1.0, "load_1m_end": 2.0},
                "steps": found,
                "rows": bench_all.rows(found),
            }
        )
    table = bench_all.combine(tables)
    sh = next(line for line in table.splitlines() if line.startswith("| `sh` agent"))
    assert "tasks_per_s 25 (20–30), 2" in sh and "| 1 of 2 |" in sh
    assert bench_all.pool([{"median": 1, "min": 0.5, "max": 2, "runs": 3}] * 2)["runs"] == 6


class SlowRecords:
    """A manifest poller whose tasks turn terminal one poll at a time."""

    def __init__(self, names: list[str]) -> None:
        self.names, self.polls = names, 0

    def poll(self) -> dict[str, dict[str, Any]]:
        self.polls += 1
        return {n: {"status": "completed"} for n in self.names[: self.polls]}


def test_mixed_waits_for_the_records_that_come_after_the_last_phase() -> None:
    """A task that ended in the ``after`` phase and was recorded later is waited for (and
    counted), not left out; what never turns terminal is counted as unrecorded."""
    mixed = importlib.import_module("mixed")
    slow = SlowRecords(["a", "b", "c"])
    assert mixed.settle_records(slow, ["a", "b", "c"], timeout=60) == 0
    assert slow.polls == 3
    assert mixed.settle_records(SlowRecords(["a"]), ["a", "never"], timeout=0) == 1


def test_adopt_bounds_the_heartbeat_figure_from_below(tmp_path: Path) -> None:
    """The heartbeat before the one that counts every check is the lower bound."""
    t0 = adopt.parse_ts("2026-11-26T10:00:01+00:00")
    sc = StubScenario(
        tmp_path, 111, {"pid": 111, "checks": 1, "written_at": "2026-11-26T10:00:02+00:00"}
    )
    watch = adopt.Watch(sc, ["a", "b"], t0)
    assert watch.poll() is False and watch.stats_before == t0 + 1
    sc._stats = {"pid": 111, "checks": 2, "written_at": "2026-11-26T10:00:07+00:00"}
    assert watch.poll() is True
    assert (watch.stats_before, watch.stats_checked) == (t0 + 1, t0 + 6)
