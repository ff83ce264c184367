"""Benchmarks of ``supervise``: detection and pickup latency, load, CLI speed, and supervisord.

    .venv/bin/python benchmarks/run.py [--quick] [--runs N] [--duration S] [--only NAME,...]
                                       [--cli-reps N] [--out benchmarks/results/run.json]

Scenarios (``--only`` takes a comma-separated subset of these names):

- ``detect``: how fast the engine notices an ending, with ``base_interval = 30`` (so only
  inotify and pidfds can make it fast). ``done``: done-file mtime -> ``completed`` event
  (and -> manifest written); ``crash``: our SIGKILL of the fake agent -> ``crashed`` event
  (and -> the manifest write that recorded it); ``hang``: an agent that
  prints and goes silent (``hang_runs: 1``), ``stale_threshold`` 3 s + ``grace_period``
  2 s -> ``hung`` event minus (last output mtime + 3 + 2); ``hang_late``: the same after
  34 s of output (so the silence starts after the first check).
- ``pickup``: a file renamed into the spool -> its ``launched`` event (the tmux session
  exists then), one file at a time with gaps; then pairs of files 10 ms apart (does the
  second one wait for the next ``intake_interval``?).
- ``burst`` (also ``cli``): 1,000 files renamed into the spool at once; each must be
  claimed exactly once (1,000 task folders, one ``queued`` event each, nothing left in the
  spool). On that state: ``supervise status -c PROFILE --json``, ``supervise --help``,
  ``supervise validate PROFILE`` and ``supervise validate profiles/long.toml``, each timed
  ``--cli-reps`` (10) times per round, taking turns; the table gives the median, min and
  max over all timed runs of all rounds.
- ``load``: the engine's CPU seconds (user + system, psutil) and peak RSS (sampled every
  second) while 10, 50 and 200 fake agents print a line every 3 s for ``--duration``
  seconds with ``base_interval`` 30, and 200 agents with ``base_interval`` 1 (one set of
  agents, grown 10 -> 50 -> 200, then re-adopted by a restarted engine); the RSS of one
  wrapper and one ``sed`` capture process; the APScheduler counters from
  ``engine-stats.json`` over the window.
- ``peer``: crash-to-restart latency of supervisord (its own venv, ``pip install
  supervisor``) and of supervise (``base_interval`` = ``max_interval`` = 1, so every resume
  waits a 1 s backoff), over ``--kills`` SIGKILLs each: kill time -> the new agent's start
  (the mtime of the ``agent_pid`` file the fake agent writes first thing).

Each figure is the median, min and max over ``--runs`` runs (default 3; ``load`` runs
``--load-runs`` times, default 1). Every scenario has its own temp dir and tmux socket; at
the end the private tmux servers are killed and the temp dirs removed. Only processes this
script started (and their descendants) are ended, by PID.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import tomli_w

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostinfo import EngineCpu, host, loadavg

REPO = Path(__file__).resolve().parent.parent
FAKE_AGENT = REPO / "tests" / "support" / "fake_agent.py"
LONG_PROFILE = REPO / "profiles" / "long.toml"
SCENARIOS = ("detect", "pickup", "burst", "cli", "load", "peer")
LOAD_CONFIGS = ((10, 30.0), (50, 30.0), (200, 30.0), (200, 1.0))  # (agents, base_interval)
HANG_STALE, HANG_GRACE = 3.0, 2.0
PEER_BACKOFF = 1.0  # min(base_interval * 2**n, max_interval) with base = max = 1


class BenchError(RuntimeError):
    """A scenario could not be measured (timeout, engine died, ...)."""


# ---------------------------------------------------------------------------- small helpers
def parse_ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (p95 of 20 values is the 19th smallest)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def dist(values: list[float]) -> dict[str, Any]:
    """p50 / p95 / min / max of one run's samples (seconds, rounded to the ms)."""
    if not values:
        return {"n": 0}

    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 4)

    return {
        "n": len(values),
        "p50": r(pct(values, 0.5)),
        "p95": r(pct(values, 0.95)),
        "min": r(min(values)),
        "max": r(max(values)),
        "median": r(statistics.median(values)),
    }


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise BenchError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def tmux_socket_path(name: str) -> Path:
    return Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / name


def clean_env() -> dict[str, str]:
    """Our environment without MONITOR_* (they would override the profiles)."""
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("MONITOR_")}


def supervise_argv() -> list[str]:
    """How a user runs the CLI: the venv's ``supervise`` entry point."""
    entry = Path(sys.executable).parent / "supervise"
    return [str(entry)] if entry.exists() else [sys.executable, "-m", "supervisor.cli"]


def log_summary(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    problems = [ln for ln in lines if "ERROR" in ln or "Traceback" in ln]
    return {
        "lines": len(lines),
        "error_or_traceback": len(problems),
        "problems": problems[:20],
    }


def descendants(pid: int | None) -> list[psutil.Process]:
    if pid is None:
        return []
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def end_processes(procs: list[psutil.Process], grace: float = 5.0) -> int:
    """Wait for ``procs`` (ours) to exit; SIGKILL those still there. Returns how many."""
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace)
    return len(alive)


def read_pid_start(path: Path) -> tuple[int, float] | None:
    """(pid, mtime) of an ``agent_pid`` file, or None while it is absent or half-written."""
    try:
        text = path.read_text().strip()
        mtime = path.stat().st_mtime
    except OSError:
        return None
    return (int(text), mtime) if text.isdigit() else None


def is_our_agent(pid: int, root: Path) -> bool:
    """The process runs tests/support/fake_agent.py with its working directory inside ``root``."""
    try:
        proc = psutil.Process(pid)
        return str(FAKE_AGENT) in " ".join(proc.cmdline()) and proc.cwd().startswith(str(root))
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def kill_agent(pid: int, root: Path) -> float:
    """SIGKILL one of our fake agents; returns the time just before the signal."""
    if not is_our_agent(pid, root):
        raise BenchError(f"pid {pid} is not one of our fake agents; not killing it")
    at = time.time()
    os.kill(pid, signal.SIGKILL)
    return at


# ---------------------------------------------------------------------------- a scenario
class Scenario:
    """A temp dir with a profile running the fake agent, one engine, one private tmux server."""

    def __init__(self, label: str, keep: bool = False) -> None:
        self.label = label
        self.keep = keep
        self.root = Path(tempfile.mkdtemp(prefix=f"supervise-bench-{label}-")).resolve()
        self.socket = f"sv-bench-{label}-{uuid.uuid4().hex[:8]}"
        self.spool = self.root / "spool"
        self.state = self.root / "state"
        self.tasks = self.state / "tasks"
        self.projects = self.root / "projects"
        self.profile = self.root / "profile.toml"
        self.log_path = self.root / "engine.log"
        self.engine: subprocess.Popen | None = None
        self.engine_exit: int | None = None
        self.log: dict[str, Any] = {}
        self.final_stats: dict[str, Any] = {}
        self.forced_kills = 0
        self.exits: list[int] = []  # exit status of each engine run here (0 = clean stop)
        self.cpu = EngineCpu()
        self._dirs: dict[str, Path] = {}
        for folder in (self.spool, self.projects):
            folder.mkdir(mode=0o700)

    def __enter__(self) -> Scenario:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    # ---- setup
    def write_profile(self, max_concurrent: int, intake_interval: float = 0.5, **monitor: Any):
        agent = [sys.executable, str(FAKE_AGENT), "--prompt-file", "{prompt_file}"]
        data = {
            "max_concurrent": max_concurrent,
            "intake_interval": intake_interval,
            "paths": {"spool_dir": "spool", "state_dir": "state"},
            "tmux": {"socket_name": self.socket},
            "agent": {
                "command": [*agent, "--session-id", "{session_id}", "--model", "{model}"],
                "resume_command": [*agent, "--resume", "{session_id}", "--model", "{model}"],
            },
            "monitor": {"deadline": 86400, **monitor},
        }
        self.profile.write_text(tomli_w.dumps(data), encoding="utf-8")

    def task_file(self, name: str, prompt: str) -> tuple[Path, Path]:
        """Write the task as a hidden temp file in the spool; returns (temp, final) paths."""
        project = self.projects / name
        project.mkdir(exist_ok=True)
        data = {"name": name, "prompt": prompt, "project_dir": str(project)}
        tmp = self.spool / f".{name}.toml.tmp"
        tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
        return tmp, self.spool / f"{name}.toml"

    def drop(self, name: str, prompt: str) -> float:
        """Write a task file the careful way (temp + rename); returns the rename time."""
        tmp, final = self.task_file(name, prompt)
        tmp.rename(final)
        return time.time()

    def start(self) -> None:
        """Start ``supervise run`` (again, after :meth:`stop`: it re-adopts the tasks)."""
        self.engine_exit = None
        handle = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the engine's life
        try:
            self.engine = subprocess.Popen(
                [sys.executable, "-m", "supervisor.cli", "run", str(self.profile)],
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                env=clean_env(),
            )
        finally:
            handle.close()

        def ready() -> bool:
            assert self.engine is not None
            if self.engine.poll() is not None:
                raise BenchError(f"engine exited with {self.engine.returncode}: {self.tail()}")
            return self.stats().get("pid") == self.engine.pid

        wait_for(ready, 30, "the engine's first intake (engine-stats.json)")
        self.cpu.begin(self.engine.pid)

    def tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> int | None:
        if self.engine is None or self.engine_exit is not None:
            return self.engine_exit
        if self.engine.poll() is None:
            self.cpu.end(tasks=len(list(self.tasks.glob("*/manifest.json"))))
            self.engine.send_signal(signal.SIGTERM)
            try:
                self.engine.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.engine.kill()
                self.engine.wait()
        self.engine_exit = self.engine.returncode
        self.exits.append(self.engine_exit)
        return self.engine_exit

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )

    def tmux_pid(self) -> int | None:
        shown = self.tmux("display-message", "-p", "#{pid}").stdout.strip()
        return int(shown) if shown.isdigit() else None

    def cleanup(self) -> None:
        try:
            self.stop()
            self.final_stats = self.stats()  # written by the engine as it stopped
        finally:
            procs = descendants(self.tmux_pid())
            self.tmux("kill-server")
            self.forced_kills = end_processes(procs)
            tmux_socket_path(self.socket).unlink(missing_ok=True)
            self.log = log_summary(self.log_path)
            if self.keep:
                print(f"  kept {self.root}", flush=True)
            else:
                shutil.rmtree(self.root, ignore_errors=True)

    # ---- reading the state
    def task_dir(self, name: str) -> Path | None:
        """The task folder of task ``name`` (ids are ``<name>-<6 hex>``)."""
        if name not in self._dirs:
            found = list(self.tasks.glob(f"{name}-" + "?" * 6)) if self.tasks.exists() else []
            if not found:
                return None
            self._dirs[name] = found[0]
        return self._dirs[name]

    def events(self, name: str) -> list[dict[str, Any]]:
        folder = self.task_dir(name)
        if folder is None:
            return []
        try:
            lines = (folder / "events.jsonl").read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def event_ts(self, name: str, event: str, after: float = 0.0) -> float | None:
        for record in self.events(name):
            if record.get("event") == event:
                at = parse_ts(record["ts"])
                if at >= after:
                    return at
        return None

    def wait_events(self, names: list[str], event: str, timeout: float) -> dict[str, float]:
        """Wait until every task in ``names`` has logged ``event``; name -> its ts."""
        seen: dict[str, float] = {}

        def all_seen() -> bool:
            if self.engine is not None and self.engine.poll() is not None:
                raise BenchError(f"engine exited with {self.engine.returncode}: {self.tail()}")
            for name in names:
                if name not in seen:
                    at = self.event_ts(name, event)
                    if at is not None:
                        seen[name] = at
            return len(seen) == len(names)

        wait_for(all_seen, timeout, f"'{event}' of {len(names)} task(s)", every=0.1)
        return seen

    def stats(self) -> dict[str, Any]:
        try:
            return json.loads((self.state / "engine-stats.json").read_text())
        except (OSError, ValueError):
            return {}

    def next_stats(self, timeout: float = 30.0, sample: Callable[[], None] | None = None):
        """Wait for the next write of engine-stats.json; (stats, time.time()) right after it.

        ``sample`` is called about once a second meanwhile (RSS sampling).
        """
        path = self.state / "engine-stats.json"
        try:
            before = path.stat().st_mtime_ns
        except FileNotFoundError:
            before = 0
        end = time.monotonic() + timeout
        last_sample = 0.0
        while time.monotonic() < end:
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime_ns != before:
                    at = time.time()
                    return self.stats(), at
            if sample is not None and time.monotonic() - last_sample >= 1.0:
                sample()
                last_sample = time.monotonic()
            time.sleep(0.02)
        return self.stats(), time.time()  # not written in time: take what is there


# ---------------------------------------------------------------------------- detect
def detect_done(args: argparse.Namespace, run: int) -> dict[str, Any]:
    n = args.samples
    with Scenario(f"done{run}", args.keep) as sc:
        sc.write_profile(max_concurrent=n + 2, base_interval=30)
        sc.start()
        names = [f"done-{i:03d}" for i in range(n)]
        lead = 4.0 + 0.1 * n  # every launch is done before the first agent ends
        for i, name in enumerate(names):
            sc.drop(name, f"print: hello\nsleep: {lead + 0.3 * i:.2f}\nexit: 0\n")
        completed = sc.wait_events(names, "completed", timeout=lead + 0.3 * n + 60)
        lat, manifest_lat = [], []
        for name in names:
            folder = sc.task_dir(name)
            assert folder is not None
            done_at = (folder / "done").stat().st_mtime
            lat.append(completed[name] - done_at)
            manifest_lat.append((folder / "manifest.json").stat().st_mtime - done_at)
        result = {"latency_s": dist(lat), "manifest_latency_s": dist(manifest_lat)}
    result["engine_log"] = sc.log
    result["engine_cpu"] = sc.cpu.report()
    result["engine_stats"] = sc.final_stats
    return result


def detect_crash(args: argparse.Namespace, run: int) -> dict[str, Any]:
    n = args.samples
    with Scenario(f"crash{run}", args.keep) as sc:
        sc.write_profile(max_concurrent=n + 2, base_interval=30)
        sc.start()
        names = [f"crash-{i:03d}" for i in range(n)]
        for name in names:
            sc.drop(name, "print: hello\nsleep: 3600\n")
        sc.wait_events(names, "launched", timeout=60 + n)
        pids: dict[str, int] = {}

        def all_pids() -> bool:
            for name in names:
                folder = sc.task_dir(name)
                if name not in pids and folder is not None:
                    got = read_pid_start(folder / "pid")
                    if got and is_our_agent(got[0], sc.root):
                        pids[name] = got[0]
            return len(pids) == n

        wait_for(all_pids, 60, "every agent's pid")
        time.sleep(1.0)  # the engine has armed its pidfds by now
        killed = {}
        for name in names:
            killed[name] = kill_agent(pids[name], sc.root)
            time.sleep(0.4)
        crashed = sc.wait_events(names, "crashed", timeout=60)
        lat = [crashed[name] - killed[name] for name in names]
        manifest_lat, rewritten = [], 0
        for name in names:
            at = crash_manifest_mtime(sc, name, crashed[name])
            if at is None:
                rewritten += 1
            else:
                manifest_lat.append(at - killed[name])
        result = {
            "latency_s": dist(lat),
            "manifest_latency_s": dist(manifest_lat),
            "manifest_rewritten_since": rewritten,
        }
    result["engine_log"] = sc.log
    result["engine_cpu"] = sc.cpu.report()
    result["engine_stats"] = sc.final_stats
    return result


def crash_manifest_mtime(sc: Scenario, name: str, crashed_at: float) -> float | None:
    """mtime of the manifest write that recorded the crash: the manifest says ``crashed``
    and its ``last_checked_at`` is the ``crashed`` event's time (the same check wrote both).
    None when a later write replaced it (its mtime would not date the crash)."""
    folder = sc.task_dir(name)
    if folder is None:
        return None
    path = folder / "manifest.json"
    try:
        before = path.stat().st_mtime
        manifest = json.loads(path.read_text(encoding="utf-8"))
        after = path.stat().st_mtime
    except (OSError, ValueError):
        return None
    checked = manifest.get("last_checked_at")
    if before != after or manifest.get("status") != "crashed" or not checked:
        return None
    return after if abs(parse_ts(checked) - crashed_at) < 0.002 else None


def tail_bytes(path: Path, size: int = 256) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(max(0, os.fstat(handle.fileno()).st_size - size))
        return handle.read()


#: Output for 34 s (a 64 KiB write every 2 s, so never stale), then hang: the silence starts
#: after the first check (at base_interval = 30 s after the launch).
LATE_FLOOD = f"flood: {17 * 65536} 34\n"


def detect_hang(args: argparse.Namespace, run: int) -> dict[str, dict[str, Any]]:
    """Two kinds of hang in one engine, their drops interleaved: ``hang`` goes silent right
    after its start line; ``hang_late`` prints for 34 s first (past the first check, which
    comes base_interval = 30 s after the launch), then goes silent."""
    n = args.samples
    with Scenario(f"hang{run}", args.keep) as sc:
        sc.write_profile(
            max_concurrent=2 * n + 2,
            base_interval=30,
            stale_threshold=HANG_STALE,
            grace_period=HANG_GRACE,
        )
        sc.start()
        kinds = {"hang": "", "hang_late": LATE_FLOOD}
        names = [f"{kind.replace('_', '')}-{i:03d}" for i in range(n) for kind in kinds]
        kind_of = {name: name.split("-")[0].replace("hanglate", "hang_late") for name in names}
        quiet_since: dict[str, float] = {}  # name -> output.log mtime after the last line

        def note_output() -> None:
            for name in names:
                folder = sc.task_dir(name)
                if name in quiet_since or folder is None:
                    continue
                log = folder / "output.log"
                with contextlib.suppress(FileNotFoundError):
                    before = log.stat()
                    if b"thinking very hard..." in tail_bytes(log):
                        after = log.stat()
                        if after.st_size == before.st_size:
                            quiet_since[name] = after.st_mtime

        for name in names:  # staggered, so each hang is detected on its own
            sc.drop(name, kinds[kind_of[name]] + "hang_runs: 1\nsleep: 1\nexit: 0\n")
            end = time.monotonic() + 0.25
            while time.monotonic() < end:
                note_output()
                time.sleep(0.05)

        def all_hung() -> bool:
            note_output()
            return all(sc.event_ts(name, "hung") for name in names)

        wait_for(all_hung, 90 + n, f"'hung' of {len(names)} task(s)", every=0.05)
        missing = [name for name in names if name not in quiet_since]
        if missing:
            raise BenchError(f"never saw the last output line of {missing[:3]}")
        time.sleep(1.0)  # let the last stops finish (their duration is reported too)
        results = {}
        for kind in kinds:
            lat, stale_lat, stop_s, killed = [], [], [], 0
            for name in (x for x in names if kind_of[x] == kind):
                hung_at = sc.event_ts(name, "hung") or math.nan
                stopped = [e for e in sc.events(name) if e.get("event") == "agent_stopped"]
                if stopped:
                    stop_s.append(parse_ts(stopped[0]["ts"]) - hung_at)
                    killed += bool(stopped[0].get("killed"))
                due = quiet_since[name] + HANG_STALE
                stale = sc.event_ts(name, "stale", after=quiet_since[name])
                stale_lat.append((stale or math.nan) - due)
                lat.append(hung_at - (due + HANG_GRACE))
            results[kind] = {
                "latency_s": dist(lat),
                "stale_event_latency_s": dist(stale_lat),
                "stale_threshold_s": HANG_STALE,
                "grace_period_s": HANG_GRACE,
                "silent_after_s": 34.0 if kind == "hang_late" else 0.0,
                "stop_agent_s": dist(stop_s),
                "stops_needing_sigkill": killed,
            }
    for result in results.values():
        result["engine_log"] = sc.log
        result["engine_cpu"] = sc.cpu.report()
        result["engine_stats"] = sc.final_stats
    return results


# ---------------------------------------------------------------------------- pickup
#: Seconds between the two files of a pair: the second lands while the intake that the
#: first one started is still running (claiming takes ~10-20 ms).
PAIR_GAP = 0.01


def pickup(args: argparse.Namespace, run: int) -> dict[str, Any]:
    """Single files ``gap`` s apart (the issue's case), then pairs of files 10 ms apart: the
    second file of a pair shows whether a spool event that arrives during an intake run is
    acted on at once or waits for the next ``intake_interval`` (0.5 s here)."""
    n, gap, pairs = args.pickup_files, args.pickup_gap, args.pickup_pairs
    prompt = "print: hello\nsleep: 0.3\nexit: 0\n"
    with Scenario(f"pickup{run}", args.keep) as sc:
        sc.write_profile(max_concurrent=n + 2 * pairs + 2, base_interval=30)
        sc.start()
        time.sleep(1.0)
        dropped: dict[str, float] = {}
        for i in range(n):
            name = f"pickup-{i:03d}"
            dropped[name] = sc.drop(name, prompt)
            time.sleep(gap)
        second: dict[str, float] = {}  # the second file of each pair
        for i in range(pairs):
            sc.drop(f"pair-{i:03d}-a", prompt)
            time.sleep(PAIR_GAP)
            second[f"pair-{i:03d}-b"] = sc.drop(f"pair-{i:03d}-b", prompt)
            time.sleep(gap)
        launched = sc.wait_events([*dropped, *second], "launched", timeout=60)
        queued = {name: sc.event_ts(name, "queued") or math.nan for name in [*dropped, *second]}
        result = {
            "launched_latency_s": dist([launched[k] - t for k, t in dropped.items()]),
            "queued_latency_s": dist([queued[k] - t for k, t in dropped.items()]),
            "gap_s": gap,
            "pair_second_launched_latency_s": dist([launched[k] - t for k, t in second.items()]),
            "pair_second_queued_latency_s": dist([queued[k] - t for k, t in second.items()]),
            "pair_second_waited": sum(queued[k] - t > 0.25 for k, t in second.items()),
            "pairs": pairs,
            "pair_gap_s": PAIR_GAP,
        }
    result["engine_log"] = sc.log
    result["engine_cpu"] = sc.cpu.report()
    result["engine_stats"] = sc.final_stats
    return result


# ---------------------------------------------------------------------------- burst + cli
def timed(argv: list[str], reps: int) -> tuple[list[float], subprocess.CompletedProcess]:
    walls = []
    done = None
    for _ in range(reps):
        began = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False, env=clean_env())
        walls.append(time.perf_counter() - began)
        if done.returncode != 0:
            raise BenchError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-500:]}")
    assert done is not None
    return walls, done


def burst(args: argparse.Namespace, run: int) -> dict[str, Any]:
    n = args.burst_files
    with Scenario(f"burst{run}", args.keep) as sc:
        sc.write_profile(max_concurrent=2, base_interval=30)
        sc.start()
        time.sleep(1.0)
        files = [sc.task_file(f"burst-{i:04d}", "sleep: 3600\n") for i in range(n)]
        first = time.time()
        for tmp, final in files:
            tmp.rename(final)
        last = time.time()

        def claimed_all() -> bool:
            if sc.engine is not None and sc.engine.poll() is not None:
                raise BenchError(f"engine exited: {sc.tail()}")
            left = [p for p in os.listdir(sc.spool) if p.endswith(".toml")]
            return not left and len(list(sc.tasks.glob("*/manifest.json"))) >= n

        wait_for(claimed_all, 120 + n * 0.5, f"the claim of {n} files", every=0.2)
        claimed_wall = time.time() - first
        # exactly once: n folders, one per file, each with exactly one 'queued' event
        folders = [p for p in sc.tasks.iterdir() if p.is_dir()]
        queued_counts, queued_ts, names = [], [], []
        for folder in folders:
            events = [json.loads(x) for x in (folder / "events.jsonl").read_text().splitlines()]
            queued = [e for e in events if e.get("event") == "queued"]
            queued_counts.append(len(queued))
            queued_ts.extend(parse_ts(e["ts"]) for e in queued)
            names.append(json.loads((folder / "manifest.json").read_text())["task_name"])
        spool_left = [p for p in os.listdir(sc.spool) if not p.startswith(".")]
        rejected = os.listdir(sc.spool / "rejected") if (sc.spool / "rejected").exists() else []
        exactly_once = (
            len(folders) == n
            and all(c == 1 for c in queued_counts)
            and sorted(names) == sorted(f"burst-{i:04d}" for i in range(n))
            and not spool_left
            and not rejected
        )
        result: dict[str, Any] = {
            "files": n,
            "rename_s": round(last - first, 3),
            "task_dirs": len(folders),
            "queued_events_per_task": sorted(set(queued_counts)),
            "spool_left": spool_left[:10],
            "rejected": rejected[:10],
            "exactly_once": exactly_once,
            "first_rename_to_last_queued_s": round(max(queued_ts) - first, 3),
            "seen_all_claimed_s": round(claimed_wall, 3),
            "claims_per_s": round(n / (max(queued_ts) - first), 1),
        }
        # ---- CLI wall times on this state (engine still running, 2 agents live)
        result.update(cli_timings(args, sc))
    result["engine_log"] = sc.log
    result["engine_cpu"] = sc.cpu.report()
    result["engine_stats"] = sc.final_stats
    return result


def cli_timings(args: argparse.Namespace, sc: Scenario) -> dict[str, Any]:
    """``--cli-reps`` timed runs of each command through the venv's ``supervise`` entry
    point, taking turns (so a burst of load on the machine hits all of them alike). Each
    command is run once first, untimed. The walls are kept (``cli_walls_s``) so the table
    can give the median, min and max over all runs of all rounds."""
    cli = supervise_argv()
    commands = {
        "status_json": [*cli, "status", "-c", str(sc.profile), "--json"],
        "help": [*cli, "--help"],
        "validate": [*cli, "validate", str(sc.profile)],
        "validate_long": [*cli, "validate", str(LONG_PROFILE)],
    }
    out: dict[str, Any] = {}
    # profiles/long.toml is the example; skip it (noted) if it does not validate
    first = subprocess.run(
        commands["validate_long"], capture_output=True, text=True, check=False, env=clean_env()
    )
    if first.returncode != 0:
        out["validate_long_skipped"] = first.stderr[-500:] or f"exit {first.returncode}"
        del commands["validate_long"]
    walls: dict[str, list[float]] = {name: [] for name in commands}
    for argv in commands.values():  # an untimed first run of each
        timed(argv, 1)
    rows = 0
    for _ in range(args.cli_reps):
        for name, argv in commands.items():
            got, done = timed(argv, 1)
            walls[name].extend(got)
            if name == "status_json":
                rows = len(json.loads(done.stdout))
    for name, values in walls.items():
        out[f"{name}_s"] = dist(values)
    out["status_json_rows"] = rows
    out["cli_walls_s"] = {name: [round(w, 4) for w in values] for name, values in walls.items()}
    out["cli_reps"] = args.cli_reps
    out["cli_argv0"] = cli[0]
    return out


# ---------------------------------------------------------------------------- load
def proc_memory(pids: list[int]) -> dict[str, Any]:
    rss, uss = [], []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc = psutil.Process(pid)
            rss.append(proc.memory_info().rss / 2**20)
            uss.append(proc.memory_full_info().uss / 2**20)
    if not rss:
        return {"n": 0}
    return {
        "n": len(rss),
        "rss_mb_median": round(statistics.median(rss), 2),
        "uss_mb_median": round(statistics.median(uss), 2),
        "rss_mb_max": round(max(rss), 2),
    }


def pane_memory(sc: Scenario, limit: int = 20) -> dict[str, Any]:
    """RSS/USS of wrappers (pane processes), sed capture processes and fake agents."""
    rows = sc.tmux("list-panes", "-a", "-F", "#{pane_pid}").stdout.split()
    wrappers = [int(x) for x in rows if x.isdigit()][:limit]
    agents = []
    for pid in wrappers:
        with contextlib.suppress(psutil.NoSuchProcess):
            agents.extend(c.pid for c in psutil.Process(pid).children())
    seds = [p.pid for p in descendants(sc.tmux_pid()) if p.name() == "sed"][:limit]
    return {
        "wrapper": proc_memory(wrappers),
        "sed": proc_memory(seds),
        "agent": proc_memory(agents[:limit]),
    }


def cpu_total(proc: psutil.Process) -> tuple[float, float]:
    """(own user+system, reaped children's user+system) CPU seconds."""
    t = proc.cpu_times()
    return t.user + t.system, t.children_user + t.children_system


def load_series(args: argparse.Namespace, run: int) -> dict[str, dict[str, Any]]:
    """The load windows of :data:`LOAD_CONFIGS` on one set of agents: 10 are launched and
    measured, then 40 more, then 150 more (all with base_interval 30); then the engine is
    restarted with base_interval 1 and re-adopts the same 200 (tmux outlives the engine)."""
    results: dict[str, dict[str, Any]] = {}
    total = max(agents for agents, _ in LOAD_CONFIGS)
    sleep_s = len(LOAD_CONFIGS) * (args.duration + 30) + 600  # outlives every window
    with Scenario(f"load{run}", args.keep) as sc:
        names: list[str] = []
        base_now = None
        for agents, base in LOAD_CONFIGS:
            if base != base_now:
                sc.stop()
                sc.write_profile(
                    max_concurrent=total,
                    base_interval=base,
                    max_interval=max(300.0, base),
                    stale_threshold=90,
                    grace_period=30,
                )
                sc.start()
                base_now = base
                live = len(names)
                wait_for(lambda n=live: sc.stats().get("live") == n, 60, "re-adoption")
            began = time.time()
            new = [f"load-{i:03d}" for i in range(len(names), agents)]
            for name in new:
                sc.drop(name, f"print: hello\ntick: 3\nsleep: {sleep_s:.0f}\nexit: 0\n")
            names += new
            sc.wait_events(new, "launched", timeout=60 + len(new) * 2)
            launch_s = time.time() - began
            key = f"load.{agents}.{base:g}s"
            results[key] = load_window(args, sc, names, base, len(new), launch_s)
            print(f"  {key}: {results[key]['cpu_s']} CPU s, {results[key]['checks']} checks")
        sc.stop()
    for result in results.values():
        result["engine_log"] = sc.log
        result["engine_cpu"] = sc.cpu.report()
        result["engine_stats"] = sc.final_stats  # of the last engine (base_interval 1)
        result["engine_exits"] = sc.exits
    return results


def load_window(
    args: argparse.Namespace,
    sc: Scenario,
    names: list[str],
    base: float,
    launched: int,
    launch_s: float,
) -> dict[str, Any]:
    """One measuring window of ``--duration`` s between two engine-stats.json writes."""
    assert sc.engine is not None
    engine = psutil.Process(sc.engine.pid)
    rss: list[float] = []

    def sample() -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            rss.append(engine.memory_info().rss / 2**20)

    stats0, t0 = sc.next_stats(sample=sample)
    cpu0, children0 = cpu_total(engine)
    tmux_proc = psutil.Process(sc.tmux_pid() or 0)
    tmux_cpu0 = sum(tmux_proc.cpu_times()[:2])
    rss.clear()
    mem: dict[str, Any] = {}
    while time.time() < t0 + args.duration:
        sample()
        if not mem and time.time() > t0 + args.duration / 2:
            mem = pane_memory(sc)
        time.sleep(max(0.0, 1.0 - (time.time() - t0) % 1.0))
    stats1, t1 = sc.next_stats(sample=sample)
    cpu1, children1 = cpu_total(engine)
    tmux_cpu1 = sum(tmux_proc.cpu_times()[:2])
    window = t1 - t0
    live_panes = sc.tmux("list-panes", "-a", "-F", "#{pane_dead}").stdout.split()
    surprises: dict[str, int] = {}
    for name in names:
        for event in sc.events(name):
            kind = event.get("event")
            if kind not in ("queued", "launched", "adopted"):
                surprises[kind] = surprises.get(kind, 0) + 1

    def delta(key: str) -> int | None:
        if key not in stats0 or key not in stats1:
            return None
        return stats1[key] - stats0[key]

    checks = delta("checks")
    return {
        "agents": len(names),
        "base_interval_s": base,
        "launched_for_this_window": launched,
        "launch_all_s": round(launch_s, 2) if launched else None,
        "window_s": round(window, 2),
        "cpu_s": round(cpu1 - cpu0, 3),
        "cpu_pct": round((cpu1 - cpu0) / window * 100, 2),
        "cpu_ms_per_agent": round(1000 * (cpu1 - cpu0) / len(names), 2),
        "cpu_ms_per_check": round(1000 * (cpu1 - cpu0) / checks, 3) if checks else None,
        "children_cpu_s": round(children1 - children0, 3),
        "tmux_server_cpu_s": round(tmux_cpu1 - tmux_cpu0, 3),
        "rss_mb_peak": round(max(rss, default=0.0), 1),
        "rss_mb_start": round(rss[0], 1) if rss else None,
        "rss_samples": len(rss),
        "panes": mem,
        "checks": checks,
        "checks_per_s": round(checks / window, 1) if checks is not None else None,
        "jobs_missed": delta("jobs_missed"),
        "jobs_max_instances": delta("jobs_max_instances"),
        "jobs_failed": delta("jobs_failed"),
        "stats_window_start": stats0,
        "stats_window_end": stats1,
        "live_agents_at_end": sum(1 for x in live_panes if x == "0"),
        "other_events": surprises,
    }


# ---------------------------------------------------------------------------- peer
def kill_loop(root: Path, pid_file: Path, kills: int, uptime: float = 1.5) -> list[dict]:
    """Kill the agent ``kills`` times; each time wait for the restarted one's start."""
    got = wait_for(lambda: read_pid_start(pid_file), 60, f"{pid_file}")
    out = []
    for _ in range(kills):
        pid, started = got
        time.sleep(max(0.0, started + uptime - time.time()))  # past supervisord's startsecs
        at = kill_agent(pid, root)

        def restarted(old: int = pid) -> tuple[int, float] | None:
            now = read_pid_start(pid_file)
            return now if now and now[0] != old else None

        got = wait_for(restarted, 60, "the restarted agent's start", every=0.005)
        out.append({"killed_at": at, "pid": pid, "new_pid": got[0], "started_at": got[1]})
    return out


def make_supervisord_venv(base: Path) -> Path:
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "supervisor"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return venv


def peer_supervisord(args: argparse.Namespace, venv: Path, run: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"supervise-bench-supervisord{run}-")).resolve()
    project = root / "project"
    project.mkdir()
    conf = root / "supervisord.conf"
    command = f"{sys.executable} {FAKE_AGENT} -p 'sleep: 3600'"
    conf.write_text(
        f"""[unix_http_server]
file={root}/supervisor.sock

[supervisord]
nodaemon=true
logfile={root}/supervisord.log
pidfile={root}/supervisord.pid
childlogdir={root}
loglevel=info

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{root}/supervisor.sock

[program:agent]
command={command}
directory={project}
autostart=true
autorestart=true
startsecs=1
startretries=1000
stopsignal=TERM
stdout_logfile={root}/agent.log
redirect_stderr=true
""",
        encoding="utf-8",
    )
    bin_dir = venv / "bin"
    daemon = subprocess.Popen(
        [str(bin_dir / "supervisord"), "-n", "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        cwd=root,
        env=clean_env(),
    )
    clean = False
    try:
        kills = kill_loop(root, project / "agent_pid", args.kills)
        ctl = subprocess.run(
            [str(bin_dir / "supervisorctl"), "-c", str(conf), "shutdown"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        try:
            daemon.wait(timeout=30)
            clean = ctl.returncode == 0 and daemon.returncode == 0
        except subprocess.TimeoutExpired:
            pass
    finally:
        procs = descendants(daemon.pid)
        if daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        end_processes(procs)
        log = (root / "supervisord.log").read_text(errors="replace")
        shutil.rmtree(root, ignore_errors=True)
    lat = [k["started_at"] - k["killed_at"] for k in kills]
    return {
        "restart_s": dist(lat),
        "kills": len(kills),
        "clean_shutdown": clean,
        "log_lines": len(log.splitlines()),
    }


def peer_supervise(args: argparse.Namespace, run: int) -> dict[str, Any]:
    with Scenario(f"peer{run}", args.keep) as sc:
        sc.write_profile(
            max_concurrent=2,
            base_interval=1,
            max_interval=1,
            max_retries=args.kills + 10,
            stale_threshold=3600,
        )
        sc.start()
        sc.drop("peer", "print: hello\nsleep: 3600\n")
        sc.wait_events(["peer"], "launched", timeout=30)
        kills = kill_loop(sc.root, sc.projects / "peer" / "agent_pid", args.kills)
        events = sc.events("peer")
        raw, detect, resume, relaunch = [], [], [], []
        for k in kills:
            crashed = next(
                (
                    parse_ts(e["ts"])
                    for e in events
                    if e["event"] == "crashed" and parse_ts(e["ts"]) >= k["killed_at"] - 0.001
                ),
                math.nan,
            )
            resumed = next(
                (
                    parse_ts(e["ts"])
                    for e in events
                    if e["event"] == "resumed" and parse_ts(e["ts"]) >= crashed - 0.001
                ),
                math.nan,
            )
            raw.append(k["started_at"] - k["killed_at"])
            detect.append(crashed - k["killed_at"])
            resume.append(resumed - crashed)
            relaunch.append(k["started_at"] - resumed)
        result = {
            "restart_s": dist(raw),
            "restart_minus_backoff_s": dist([x - PEER_BACKOFF for x in raw]),
            "kill_to_crashed_s": dist(detect),
            "crashed_to_resumed_s": dist(resume),
            "resumed_to_agent_start_s": dist(relaunch),
            "backoff_s": PEER_BACKOFF,
            "kills": len(kills),
        }
    result["engine_log"] = sc.log
    result["engine_cpu"] = sc.cpu.report()
    result["engine_stats"] = sc.final_stats
    return result


# ---------------------------------------------------------------------------- aggregation
# (key path into a run's result, table label, unit, target, target test)
def within_1s(value: float) -> bool:
    return value <= 1.0


Figure = tuple[str, str, str, str, Callable[[float], bool] | None]
FIGURES: dict[str, list[Figure]] = {
    "detect.done": [
        (
            "engine_cpu.ms_per_task",
            "detect done: engine CPU per task (own, after start-up)",
            "ms",
            "",
            None,
        ),
        ("latency_s.p50", "done -> completed event p50", "s", "", None),
        ("latency_s.p95", "done -> completed event p95", "s", "<= 1", within_1s),
        ("manifest_latency_s.p95", "done -> manifest written p95", "s", "<= 1", within_1s),
    ],
    "detect.crash": [
        (
            "engine_cpu.ms_per_task",
            "detect crash: engine CPU per task (own, after start-up)",
            "ms",
            "",
            None,
        ),
        ("latency_s.p50", "SIGKILL -> crashed event p50", "s", "", None),
        ("latency_s.p95", "SIGKILL -> crashed event p95", "s", "<= 1", within_1s),
        ("manifest_latency_s.p95", "SIGKILL -> manifest written p95", "s", "<= 1", within_1s),
    ],
    "detect.hang": [
        ("latency_s.p50", "hang at start: hung - (output+3+2) p50", "s", "", None),
        ("latency_s.p95", "hang at start: hung - (output+3+2) p95", "s", "<= 1", within_1s),
        ("stale_event_latency_s.p95", "hang at start: stale - (output+3) p95", "s", "", None),
        ("stop_agent_s.max", "hang at start: hung -> agent stopped, max", "s", "", None),
        ("stops_needing_sigkill", "hang at start: stops that took 10 s (SIGKILL)", "", "", None),
        ("engine_stats.jobs_max_instances", "hang: jobs_max_instances (whole run)", "", "", None),
    ],
    "detect.hang_late": [
        ("latency_s.p50", "hang after 34 s: hung - (output+3+2) p50", "s", "", None),
        (
            "latency_s.p95",
            "hang after 34 s: hung - (output+3+2) p95",
            "s",
            "<= 1",
            lambda v: v <= 1,
        ),
        ("stale_event_latency_s.p95", "hang after 34 s: stale - (output+3) p95", "s", "", None),
        ("stop_agent_s.max", "hang after 34 s: hung -> agent stopped, max", "s", "", None),
        ("stops_needing_sigkill", "hang after 34 s: stops that took 10 s (SIGKILL)", "", "", None),
    ],
    "pickup": [
        (
            "engine_cpu.ms_per_task",
            "pickup: engine CPU per task (own, after start-up)",
            "ms",
            "",
            None,
        ),
        ("launched_latency_s.p50", "rename -> launched p50", "s", "", None),
        ("launched_latency_s.p95", "rename -> launched p95", "s", "<= 1", within_1s),
        ("queued_latency_s.p95", "rename -> queued (claimed) p95", "s", "", None),
        ("pair_second_launched_latency_s.p50", "pair, 2nd file -> launched p50", "s", "", None),
        ("pair_second_launched_latency_s.p95", "pair, 2nd file -> launched p95", "s", "", None),
        ("pair_second_waited", "pair, 2nd file queued > 0.25 s late (count)", "", "", None),
        ("engine_stats.jobs_max_instances", "pickup: jobs_max_instances (whole run)", "", "", None),
    ],
    "burst": [
        ("exactly_once", "1,000-file burst claimed exactly once", "bool", "all", lambda v: v == 1),
        ("first_rename_to_last_queued_s", "burst: first rename -> last queued", "s", "", None),
        ("claims_per_s", "burst: claims per second", "/s", "", None),
    ],
    # cli: the runs of every round pooled (see CLI_FIGURES), not one figure per round
    "cli": [],
    "load": [
        ("cpu_s", "engine CPU s (user+sys) in window", "s", "", None),
        ("cpu_pct", "engine CPU % of one core", "%", "", None),
        ("children_cpu_s", "engine's tmux clients CPU s", "s", "", None),
        ("rss_mb_peak", "engine peak RSS", "MB", "", None),
        ("panes.wrapper.rss_mb_median", "one wrapper RSS (USS in JSON)", "MB", "", None),
        ("panes.sed.rss_mb_median", "one sed capture RSS (USS in JSON)", "MB", "", None),
        ("checks", "checks in window", "", "", None),
        ("checks_per_s", "checks per second", "/s", "", None),
        ("jobs_missed", "APScheduler jobs_missed", "", "0", lambda v: v == 0),
        ("jobs_max_instances", "APScheduler jobs_max_instances", "", "0", lambda v: v == 0),
        ("launch_all_s", "time to launch the new agents", "s", "", None),
        ("cpu_ms_per_agent", "engine CPU per agent over the window", "ms", "", None),
        ("cpu_ms_per_check", "engine CPU per check", "ms", "", None),
    ],
    "peer.supervisord": [
        ("restart_s.p50", "supervisord kill -> restarted p50", "s", "", None),
        ("restart_s.p95", "supervisord kill -> restarted p95", "s", "", None),
    ],
    "peer.supervise": [
        (
            "engine_cpu.ms_per_task",
            "supervise peer: engine CPU per task (one task, its resumes)",
            "ms",
            "",
            None,
        ),
        ("restart_s.p50", "supervise kill -> resumed p50 (raw)", "s", "", None),
        ("restart_s.p95", "supervise kill -> resumed p95 (raw)", "s", "", None),
        ("restart_minus_backoff_s.p50", "supervise, minus 1 s backoff, p50", "s", "", None),
        ("restart_minus_backoff_s.p95", "supervise, minus 1 s backoff, p95", "s", "", None),
        ("kill_to_crashed_s.p50", "supervise kill -> crashed event p50", "s", "", None),
        ("resumed_to_agent_start_s.p50", "supervise resumed -> agent start p50", "s", "", None),
    ],
}


#: (command, table label, target, target test): median, min and max over every timed run
#: of every round (``cli_walls_s``); older JSON without the walls: the rounds' p50s.
CLI_FIGURES: list[tuple[str, str, str, Callable[[float], bool]]] = [
    ("status_json", "status --json, 1,000 tasks", "< 0.2", lambda v: v < 0.2),
    ("help", "supervise --help", "< 0.3", lambda v: v < 0.3),
    ("validate", "supervise validate PROFILE", "< 0.2", lambda v: v < 0.2),
    ("validate_long", "supervise validate profiles/long.toml", "< 0.2", lambda v: v < 0.2),
]


def cli_figures(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for name, label, target, test in CLI_FIGURES:
        walls = [w for r in runs for w in r.get("cli_walls_s", {}).get(name, [])]
        if walls:
            summary: dict[str, Any] = {
                "median": round(statistics.median(walls), 4),
                "min": round(min(walls), 4),
                "max": round(max(walls), 4),
                "p95": round(pct(walls, 0.95) or 0.0, 4),
                "runs": len(walls),
            }
            label = f"{label} (median of {len(walls)} runs)"
            figure = f"cli_walls_s.{name}"
        else:
            summary = summarize(runs, f"{name}_s.p50")  # type: ignore[assignment]
            if summary is None:
                continue
            label = f"{label} (p50)"
            figure = f"{name}_s.p50"
        median_ok = test(summary["median"])
        rows.append(
            {
                "group": "cli",
                "figure": figure,
                "label": label,
                "unit": "s",
                "target": target,
                "verdict": ("ok" if median_ok else "MISS")
                + (" (slowest run misses)" if median_ok and not test(summary["max"]) else ""),
                **summary,
            }
        )
    return rows


def dig(data: Any, path: str) -> float | None:
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    if isinstance(data, bool):
        return 1.0 if data else 0.0
    return float(data) if isinstance(data, int | float) else None


def summarize(runs: list[dict[str, Any]], path: str) -> dict[str, Any] | None:
    values = [v for v in (dig(r, path) for r in runs) if v is not None and not math.isnan(v)]
    if not values:
        return None
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
        "runs": len(values),
    }


def build_figures(raw: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for group, figures in FIGURES.items():
        if group == "cli" and "burst" in raw:
            rows.extend(cli_figures(raw["burst"]))
            continue
        keys = [k for k in raw if k == group]
        if group == "load":
            keys = [k for k in raw if k.startswith("load.")]
        for key in keys:
            for path, label, unit, target, test in figures:
                summary = summarize(raw[key], path)
                if summary is None:
                    continue
                if group == "load":
                    agents, base = key.split(".")[1:]
                    label = f"{agents} agents, {base} checks: {label}"
                verdict = ""
                if test is not None:
                    verdict = "ok" if test(summary["median"]) else "MISS"
                    worst = summary["min"] if unit == "bool" else summary["max"]
                    if verdict == "ok" and not test(worst):
                        verdict = "ok (worst run misses)"
                rows.append(
                    {
                        "group": key,
                        "figure": path,
                        "label": label,
                        "unit": unit,
                        "target": target,
                        "verdict": verdict,
                        **summary,
                    }
                )
    return rows


def fmt(value: float, unit: str) -> str:
    if unit == "bool":
        return "yes" if value == 1 else "no"
    if value == int(value) and (unit in ("", "/s") or abs(value) >= 10):
        return f"{int(value)}"
    return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"


def print_table(rows: list[dict[str, Any]]) -> None:
    header = ("figure", "median", "min", "max", "runs", "target", "")
    table = [header]
    for r in rows:
        unit = f" ({r['unit']})" if r["unit"] not in ("", "bool") else ""
        table.append(
            (
                r["label"] + unit,
                fmt(r["median"], r["unit"]),
                fmt(r["min"], r["unit"]),
                fmt(r["max"], r["unit"]),
                str(r["runs"]),
                r["target"],
                r["verdict"],
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for i, row in enumerate(table):
        numbers = zip(row[1:5], widths[1:5], strict=True)
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in numbers]
        cells += [row[5].ljust(widths[5]), row[6]]
        print("  ".join(cells).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def print_title(result: dict[str, Any]) -> None:
    info, settings = result["machine"], result["settings"]
    print(
        f"supervise benchmarks ({result['mode']}, {result['wall_s']:.0f} s; {info['cpus']} "
        f"CPUs, load {info['load_average_before'][0]} -> {info['load_average_after'][0]}): "
        f"median/min/max over {settings['runs']} run(s); load figures from "
        f"{settings['load_runs']} run(s) of {settings['duration_s']:g} s windows"
    )
    if info.get("pythondontwritebytecode") and not info.get("supervisor_pycache"):
        print(
            "note: PYTHONDONTWRITEBYTECODE is set and supervisor/ has no __pycache__: every "
            "CLI run compiles supervisor's modules again (slower than a normal install)"
        )


# ---------------------------------------------------------------------------- main
def supervisor_path() -> str:
    """Folder of the ``supervisor`` package that ``python -m supervisor.cli`` imports."""
    code = "import pathlib, supervisor; print(pathlib.Path(supervisor.__file__).parent)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env=clean_env(),
        cwd=tempfile.gettempdir(),
    )
    return done.stdout.strip() or done.stderr.strip()[-200:]


def machine_info() -> dict[str, Any]:
    def out(argv: list[str]) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            return ""

    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "tmux": out(["tmux", "-V"]),
        "git_head": out(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
        "git_dirty": bool(out(["git", "-C", str(REPO), "status", "--porcelain", "supervisor"])),
        # the package the engines and the CLI run (PYTHONPATH can point at another checkout)
        "supervisor_path": supervisor_path(),
        # With PYTHONDONTWRITEBYTECODE set and no supervisor/__pycache__ (an editable install
        # in such an environment), every CLI run compiles cli.py and config.py again.
        "pythondontwritebytecode": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
        "supervisor_pycache": (REPO / "supervisor" / "__pycache__").is_dir(),
        "load_average_before": loadavg(),
        **host(),
    }


@contextlib.contextmanager
def step(title: str, errors: list[str]) -> Iterator[None]:
    began = time.monotonic()
    print(f"- {title} ...", flush=True)
    try:
        yield
    except BenchError as exc:
        errors.append(f"{title}: {exc}")
        print(f"  ERROR: {exc}", flush=True)
    except Exception as exc:
        errors.append(f"{title}: {exc!r}")
        print(f"  ERROR: {exc!r}\n{traceback.format_exc()}", flush=True)
    else:
        print(f"  done in {time.monotonic() - began:.1f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short load windows, fewer samples")
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (3; quick: 1)")
    parser.add_argument("--load-runs", type=int, default=1, help="runs of each load config (1)")
    parser.add_argument("--duration", type=float, default=None, help="load window s (300; 30)")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {SCENARIOS}")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "run.json")
    parser.add_argument("--samples", type=int, default=None, help="tasks per detect kind (20)")
    parser.add_argument("--kills", type=int, default=None, help="kills per peer run (10; 5)")
    parser.add_argument(
        "--cli-reps", type=int, default=10, help="timed runs of each CLI command per round (10)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dirs")
    parser.add_argument(
        "--table",
        type=Path,
        metavar="JSON",
        help="measure nothing: recompute the figures from this earlier output's raw numbers, "
        "print the table and update the file's figures",
    )
    args = parser.parse_args(argv)
    if args.table:
        data = json.loads(args.table.read_text(encoding="utf-8"))
        data["figures"] = build_figures(data["raw"])
        args.table.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
        print_title(data)
        print_table(data["figures"])
        return 0
    quick = args.quick
    args.runs = args.runs or (1 if quick else 3)
    args.duration = args.duration or (30.0 if quick else 300.0)
    args.samples = args.samples or (10 if quick else 20)
    args.kills = args.kills or (5 if quick else 10)
    args.pickup_files = 10 if quick else 20
    args.pickup_gap = 1.0 if quick else 1.5
    args.pickup_pairs = 5 if quick else 10
    args.burst_files = 1000
    only = [x.strip() for x in args.only.split(",") if x.strip()] or list(SCENARIOS)
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    if min(args.runs, args.load_runs, args.samples, args.kills) < 1 or args.duration <= 0:
        parser.error("--runs, --load-runs, --samples, --kills and --duration must be positive")
    if args.cli_reps < 10:
        parser.error("--cli-reps must be at least 10 (the CLI figures are medians of >= 10 runs)")
    if shutil.which("tmux") is None:
        print("run: tmux is not installed", file=sys.stderr)
        return 2

    began = time.monotonic()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    info = machine_info()
    errors: list[str] = []
    raw: dict[str, list[dict[str, Any]]] = {}
    print(
        f"supervise benchmarks: {', '.join(only)}; runs {args.runs}, load runs "
        f"{args.load_runs}, load window {args.duration:g} s, {info['cpus']} CPUs",
        flush=True,
    )

    def collect(key: str, title: str, body: Callable[[], dict[str, Any]]) -> None:
        with step(title, errors):
            raw.setdefault(key, []).append(body())

    for run in range(1, args.runs + 1):
        if "detect" in only:
            collect("detect.done", f"run {run}: detect done", lambda r=run: detect_done(args, r))
            collect("detect.crash", f"run {run}: detect crash", lambda r=run: detect_crash(args, r))
            with step(f"run {run}: detect hang (at start and after 34 s)", errors):
                for kind, result in detect_hang(args, run).items():
                    raw.setdefault(f"detect.{kind}", []).append(result)
        if "pickup" in only:
            collect("pickup", f"run {run}: spool pickup", lambda r=run: pickup(args, r))
        if "burst" in only or "cli" in only:
            collect("burst", f"run {run}: 1,000-file burst + CLI", lambda r=run: burst(args, r))
    if "load" in only:
        for run in range(1, args.load_runs + 1):
            with step(f"load run {run}: 10, 50, 200 agents (base 30 s), 200 (base 1 s)", errors):
                for key, result in load_series(args, run).items():
                    raw.setdefault(key, []).append(result)
    if "peer" in only:
        peer_root = Path(tempfile.mkdtemp(prefix="supervise-bench-peer-venv-")).resolve()
        try:
            venv: Path | None = None
            with step("supervisord venv (pip install supervisor)", errors):
                venv = make_supervisord_venv(peer_root)
                version = subprocess.run(
                    [str(venv / "bin" / "supervisord"), "--version"],
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout.strip()
                info["supervisord"] = version
            for run in range(1, args.runs + 1):
                if venv is not None:
                    collect(
                        "peer.supervisord",
                        f"run {run}: supervisord crash -> restart",
                        lambda r=run, v=venv: peer_supervisord(args, v, r),
                    )
                collect(
                    "peer.supervise",
                    f"run {run}: supervise crash -> resume",
                    lambda r=run: peer_supervise(args, r),
                )
        finally:
            shutil.rmtree(peer_root, ignore_errors=True)

    rows = build_figures(raw)
    wall = time.monotonic() - began
    info["load_average_after"] = loadavg()
    info["load_1m_end"] = info["load_average_after"][0]
    engine_problems = {
        key: [r.get("engine_log", {}).get("error_or_traceback", 0) for r in runs]
        for key, runs in raw.items()
    }
    result = {
        "started_at": started_at,
        "wall_s": round(wall, 1),
        "mode": "quick" if quick else "full",
        "settings": {
            "runs": args.runs,
            "load_runs": args.load_runs,
            "duration_s": args.duration,
            "detect_samples": args.samples,
            "peer_kills": args.kills,
            "pickup_files": args.pickup_files,
            "pickup_gap_s": args.pickup_gap,
            "pickup_pairs": args.pickup_pairs,
            "burst_files": args.burst_files,
            "cli_reps": args.cli_reps,
            "scenarios": only,
        },
        "machine": info,
        "figures": rows,
        "engine_log_error_lines": engine_problems,
        "errors": errors,
        "raw": raw,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    print()
    print_title(result)
    print_table(rows)
    for key, counts in engine_problems.items():
        if any(counts):
            print(f"engine log ERROR/Traceback lines in {key}: {counts}")
    for error in errors:
        print(f"ERROR: {error}")
    print(f"figures written to {args.out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
