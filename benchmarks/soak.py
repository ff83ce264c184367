"""Soak test: many short tasks through the spool of one long-running ``supervise run``.

    python benchmarks/soak.py [--quick] [--tasks 1000] [--concurrency 50] [--agent fake|sh]
                              [--out benchmarks/results/soak.json]

What it does, all inside a fresh temp dir (removed at the end unless ``--keep``):

1. writes a profile (a private tmux socket unique to this run, ``max_concurrent`` =
   ``--concurrency``, ``intake_interval`` 0.2 s, ``base_interval`` 0.5 s) whose agent is
   ``tests/support/fake_agent.py --prompt-file {prompt_file}``;
2. starts ``supervise run PROFILE`` as a subprocess (stderr to ``engine.log`` there), waits
   for its heartbeat (``engine-stats.json`` naming its PID) and for one warm-up task
   (``--warmup N``: N of them) to complete, then samples the engine's open file descriptors
   (``/proc/PID/fd``) and RSS as the baseline;
3. drops ``--tasks`` task files into the spool (hidden temp file, then rename), each with its
   own project folder and a deterministic cue mix: most sleep 0.05-0.30 s and exit 0
   (expected ``completed``), every 10th exits with a non-zero code (expected ``failed`` with
   that code);
4. polls the manifests until all are terminal, sampling fds and RSS every second (peak);
5. after a short settle samples again, checks for leaks, SIGTERMs the engine and waits.

Checks (any failure: exit status 1): every task terminal with the expected status and exit
code, its output captured in ``output.log``; nothing rejected; no tmux session left on the
private socket; no process left whose command line, cwd or open files mention the temp dir
(fake agents, wrappers, ``sed -u -E`` capture processes), and no child of the engine; the
engine's fd count after equals the baseline (+-2); RSS after grew less than 10 %; no
``ERROR`` or ``Traceback`` in the engine's log; the engine exits 0 on SIGTERM.

Every report gives tasks/s beside the engine's own CPU per task (``engine_cpu``: user +
system seconds of the engine process, children excluded, from the first rename to the last
terminal manifest, divided by the tasks; ms/task), the machine's cores and the 1-minute load
average at start and end (``host``). ``--quick``: 300 tasks.

Prints a table and writes the same figures as JSON to ``--out`` (plus a per-second timeline
of fds, RSS and finished tasks), and copies the engine's log beside it as
``<out stem>.engine.log``. Only processes this script
started are ended (by PID), plus the private tmux server it named.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import tomli_w

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostinfo import host, host_end, own_cpu_s

from supervisor.taskdir.states import TERMINAL

REPO = Path(__file__).resolve().parent.parent
FAKE_AGENT = REPO / "tests" / "support" / "fake_agent.py"
FD_TOLERANCE = 2
RSS_LIMIT_PCT = 10.0
WARMUP_PREFIX = "soak-warmup-"


# ---------------------------------------------------------------------------- task mix
def task_plan(index: int) -> dict[str, Any]:
    """The deterministic cues and expectation of task ``index`` (0-based)."""
    sleep = 0.05 + ((index * 37) % 26) / 100  # 0.05 .. 0.30 s
    code = (1, 2, 3, 42, 255)[(index // 10) % 5] if index % 10 == 7 else 0
    return {
        "name": f"soak-{index:05d}",
        "sleep": round(sleep, 2),
        "exit": code,
        "status": "completed" if code == 0 else "failed",
    }


def prompt_for(plan: dict[str, Any]) -> str:
    return (
        f"soak task {plan['name']}\n"
        f"print: hello from {plan['name']}\n"
        f"sleep: {plan['sleep']}\n"
        f"exit: {plan['exit']}\n"
    )


# ---------------------------------------------------------------------------- helpers
def tmux_socket_path(name: str) -> Path:
    return Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / name


def tmux(socket: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, check=False, timeout=30
    )


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(proc: psutil.Process) -> float:
    return proc.memory_info().rss / 2**20


def drop(spool: Path, filename: str, data: dict[str, Any]) -> None:
    """Write a task file the careful way: hidden temp file, then one rename."""
    tmp = spool / f".{filename}.tmp"
    tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
    tmp.rename(spool / filename)


class Manifests:
    """task_name -> manifest for every task directory, read cheaply enough to poll.

    A manifest is parsed again only when its mtime changed, and a terminal one never again
    (terminal is final), so a poll over 1,000 tasks costs a directory listing and a stat
    per live task instead of 1,000 JSON parses competing with the engine for the CPU.
    """

    def __init__(self, state: Path) -> None:
        self.tasks = state / "tasks"
        self.by_dir: dict[str, tuple[int, dict[str, Any]]] = {}

    def poll(self) -> dict[str, dict[str, Any]]:
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.tasks):
                known = self.by_dir.get(entry.name)
                if known is not None and known[1]["status"] in TERMINAL:
                    continue
                path = os.path.join(entry.path, "manifest.json")
                try:
                    mtime = os.stat(path).st_mtime_ns
                    if known is not None and known[0] == mtime:
                        continue
                    with open(path, "rb") as handle:
                        data = json.loads(handle.read())
                except (OSError, ValueError):
                    continue  # not written yet (or mid-replace): the next poll sees it
                self.by_dir[entry.name] = (mtime, data)
        return {data["task_name"]: data for _, data in self.by_dir.values()}


def ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value).timestamp() if value else None


def percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    values = sorted(values)

    def pick(q: float) -> float:
        return round(values[min(len(values) - 1, int(q * len(values)))], 3)

    return {"p50": pick(0.5), "p95": pick(0.95), "max": round(values[-1], 3)}


def stray_processes(root: Path, exclude: set[int]) -> list[str]:
    """Processes whose cmdline, cwd or open files mention ``root`` (excluding ``exclude``)."""
    needle = str(root)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "name"]):
        if proc.pid in exclude:
            continue
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            hit = needle in cmdline
            if not hit:
                with contextlib.suppress(psutil.AccessDenied):
                    hit = proc.cwd().startswith(needle)
            if not hit:
                with contextlib.suppress(psutil.AccessDenied):
                    hit = any(f.path.startswith(needle) for f in proc.open_files())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if hit:
            found.append(f"{proc.pid} {proc.info['name']}: {cmdline[:160]}")
    return found


def log_problems(log: Path) -> list[str]:
    if not log.exists():
        return []
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    return [line for line in lines if "ERROR" in line or "Traceback" in line]


class Sampler:
    """fd count and RSS of the engine, with running peaks."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.proc = psutil.Process(pid)
        self.peak_rss = 0.0
        self.peak_fds = 0
        self.timeline: list[tuple[float, int, float, int]] = []
        self.t0 = time.monotonic()

    def sample(self, terminal: int = 0) -> tuple[int, float]:
        fds, rss = fd_count(self.pid), rss_mb(self.proc)
        self.peak_fds = max(self.peak_fds, fds)
        self.peak_rss = max(self.peak_rss, rss)
        self.timeline.append((round(time.monotonic() - self.t0, 1), fds, round(rss, 1), terminal))
        return fds, rss


# ---------------------------------------------------------------------------- the run
#: ``--agent sh``: the same cues (``sleep:``, ``exit:``) and last line as the fake agent, read
#: by ``/bin/sh`` builtins, so a task costs one shell and one ``sleep`` instead of a Python
#: start-up: the side-by-side shows how much of the soak's cost is the agent's own start.
SH_AGENT = (
    's=0; e=0; while IFS=": " read -r k v; do case $k in sleep) s=$v;; exit) e=$v;; esac; '
    'done < "$1"; sleep "$s"; echo "fake-agent done, exit $e"; exit "$e"'
)


def agent_argv(kind: str) -> list[str]:
    """The agent command of the profile: the Python fake agent, or ``/bin/sh`` (SH_AGENT)."""
    if kind == "sh":
        return ["/bin/sh", "-c", SH_AGENT, "sh", "{prompt_file}"]
    return [sys.executable, str(FAKE_AGENT), "--prompt-file", "{prompt_file}"]


def write_profile(root: Path, socket: str, concurrency: int, kind: str = "fake") -> Path:
    agent = agent_argv(kind)
    data = {
        "max_concurrent": concurrency,
        "intake_interval": 0.2,
        "paths": {"spool_dir": "spool", "state_dir": "state"},
        "tmux": {"socket_name": socket},
        "agent": {
            "command": [*agent, "--session-id", "{session_id}", "--model", "{model}"],
            "resume_command": [*agent, "--resume", "{session_id}", "--model", "{model}"],
        },
        "monitor": {"base_interval": 0.5, "max_interval": 2, "deadline": 300},
    }
    profile = root / "profile.toml"
    profile.write_text(tomli_w.dumps(data), encoding="utf-8")
    return profile


def heartbeat_pid(state: Path) -> int | None:
    """The ``pid`` in ``state/engine-stats.json`` (the engine's heartbeat, written once it
    holds the state dir and every few seconds after), or None."""
    try:
        return json.loads((state / "engine-stats.json").read_text()).get("pid")
    except (OSError, ValueError):
        return None


def wait_until(predicate: Any, timeout: float, what: str, engine: subprocess.Popen) -> Any:
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        if engine.poll() is not None:
            raise RuntimeError(f"the engine exited ({engine.returncode}) while waiting for {what}")
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def soak(args: argparse.Namespace, root: Path, socket: str) -> dict[str, Any]:
    spool, state, projects = root / "spool", root / "state", root / "projects"
    for folder in (spool, projects):
        folder.mkdir(mode=0o700)
    profile = write_profile(root, socket, args.concurrency, args.agent)
    log_path = root / "engine.log"
    plans = [task_plan(i) for i in range(args.tasks)]
    task_files = []
    for plan in plans:  # prepared up front so the drop itself is only renames and writes
        project = projects / plan["name"]
        project.mkdir()
        task_files.append(
            (
                f"{plan['name']}.toml",
                {"name": plan["name"], "prompt": prompt_for(plan), "project_dir": str(project)},
            )
        )

    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "tmux": subprocess.run(["tmux", "-V"], capture_output=True, text=True).stdout.strip(),
        },
        "tasks": args.tasks,
        "concurrency": args.concurrency,
        "warmup_tasks": args.warmup,
        "agent": args.agent,
        "host": host(),
    }
    failures: list[str] = []
    log_handle = log_path.open("wb")
    engine = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "run", str(profile)],
        stdout=log_handle,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    try:
        # ---- up, and warm: trivial task(s) through the whole path, dropped as one burst
        wait_until(lambda: heartbeat_pid(state) == engine.pid, 60, "the heartbeat", engine)
        warm_names = [f"{WARMUP_PREFIX}{i:05d}" for i in range(args.warmup)]
        for name in warm_names:
            (projects / name).mkdir()
            data = {"name": name, "prompt": "exit: 0\n", "project_dir": str(projects / name)}
            drop(spool, f"{name}.toml", data)

        watcher = Manifests(state)

        def warm() -> bool:
            found = watcher.poll()
            return all(found.get(n, {}).get("status") in TERMINAL for n in warm_names)

        wait_until(warm, 60 + 1.5 * args.warmup, "the warm-up task(s)", engine)
        time.sleep(args.settle)
        sampler = Sampler(engine.pid)
        fds_before, rss_before = sampler.sample()
        threads_before = sampler.proc.num_threads()

        # ---- the soak
        t0 = sampler.t0 = time.monotonic()
        cpu0 = own_cpu_s(engine.pid) or 0.0
        for filename, data in task_files:
            drop(spool, filename, data)
        drop_s = time.monotonic() - t0
        names = {p["name"] for p in plans}
        deadline = t0 + args.timeout
        next_sample = time.monotonic()
        done: dict[str, dict[str, Any]] = {}
        last_report = 0.0
        while True:
            now = time.monotonic()
            current = watcher.poll()
            done = {n: m for n, m in current.items() if n in names and m["status"] in TERMINAL}
            if len(done) == len(names):
                break
            if engine.poll() is not None:
                failures.append(f"engine exited early with status {engine.returncode}")
                break
            if now >= next_sample:
                sampler.sample(len(done))
                next_sample = now + 1.0
            if now > deadline:
                failures.append(f"timed out after {args.timeout} s: {len(done)} terminal")
                break
            if now - last_report >= 10:
                last_report = now
                print(
                    f"  {now - t0:6.1f} s  terminal {len(done)}/{len(names)}  "
                    f"claimed {sum(1 for n in current if n in names)}  "
                    f"rss {sampler.peak_rss:.1f} MB peak  fds {fd_count(engine.pid)}",
                    flush=True,
                )
            time.sleep(0.25)
        wall = time.monotonic() - t0
        engine_cpu = (own_cpu_s(engine.pid) or cpu0) - cpu0

        # ---- after: settle, sample, look for leftovers
        time.sleep(args.settle)
        if engine.poll() is None:
            fds_after, rss_after = sampler.sample(len(done))
            threads_after = sampler.proc.num_threads()
            children = [f"{c.pid} {c.name()}" for c in sampler.proc.children(recursive=True)]
        else:
            fds_after, rss_after, threads_after, children = -1, -1.0, -1, []
        sessions = tmux(socket, "list-sessions", "-F", "#{session_name}")
        leftover_sessions = sessions.stdout.split() if sessions.returncode == 0 else []
        strays = stray_processes(root, exclude={os.getpid(), engine.pid, *tmux_server(socket)})

        # ---- stop the engine
        engine.send_signal(signal.SIGTERM)
        try:
            engine_status = engine.wait(timeout=60)
        except subprocess.TimeoutExpired:
            engine.kill()
            engine_status = engine.wait()
            failures.append("the engine did not stop within 60 s of SIGTERM (killed)")
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
        log_handle.close()

    # ---- verdicts
    wrong = []
    uncaptured = []
    for plan in plans:
        m = done.get(plan["name"])
        if m is None:
            continue
        if m["status"] != plan["status"] or m.get("exit_code") != plan["exit"]:
            wrong.append(
                f"{plan['name']}: {m['status']} exit {m.get('exit_code')} "
                f"(expected {plan['status']} exit {plan['exit']}, {m.get('abandon_reason')})"
            )
        out_log = Path(m["tmpdir"]) / "output.log"
        text = out_log.read_text(errors="replace") if out_log.exists() else ""
        if f"fake-agent done, exit {plan['exit']}" not in text:
            uncaptured.append(plan["name"])
    missing = sorted(names - set(done))
    rejected = sorted(p.name for p in (spool / "rejected").glob("*")) if spool.exists() else []
    problems = log_problems(log_path)
    statuses: dict[str, int] = {}
    for m in done.values():
        statuses[m["status"]] = statuses.get(m["status"], 0) + 1
    retries = sum(m.get("retry_count", 0) for m in done.values())

    if missing:
        failures.append(f"{len(missing)} task(s) not terminal, e.g. {missing[:5]}")
    if wrong:
        failures.append(f"{len(wrong)} task(s) with a wrong outcome, e.g. {wrong[:5]}")
    if uncaptured:
        failures.append(f"{len(uncaptured)} output.log(s) lack the agent's last line")
    if rejected:
        failures.append(f"{len(rejected)} file(s) rejected: {rejected[:5]}")
    if leftover_sessions:
        failures.append(f"{len(leftover_sessions)} tmux session(s) left: {leftover_sessions[:5]}")
    if strays:
        failures.append(f"{len(strays)} leftover process(es): {strays[:5]}")
    if children:
        failures.append(f"engine still has {len(children)} child process(es): {children[:5]}")
    if abs(fds_after - fds_before) > FD_TOLERANCE:
        failures.append(f"fd count {fds_before} -> {fds_after} (allowed +-{FD_TOLERANCE})")
    rss_growth = (rss_after - rss_before) / rss_before * 100
    if rss_growth >= RSS_LIMIT_PCT:
        failures.append(f"RSS grew {rss_growth:.1f} % ({rss_before:.1f} -> {rss_after:.1f} MB)")
    if problems:
        failures.append(f"{len(problems)} ERROR/Traceback line(s) in the engine log")
    if engine_status != 0:
        failures.append(f"engine exit status {engine_status} after SIGTERM")

    def spans(start: str, end: str) -> list[float]:
        pairs = ((ts(m.get(start)), ts(m.get(end))) for m in done.values())
        return [b - a for a, b in pairs if a is not None and b is not None]

    waits = spans("created_at", "started_at")
    runs = spans("started_at", "finished_at")
    lags = spans("finished_at", "last_checked_at")
    result.update(
        {
            "wall_s": round(wall, 2),
            "drop_s": round(drop_s, 2),
            "tasks_per_s": round(args.tasks / wall, 2) if wall > 0 else None,
            "engine_cpu": {
                "cpu_s": round(engine_cpu, 3),
                "ms_per_task": round(1000 * engine_cpu / args.tasks, 2),
                "what": "engine's own user+system CPU (children excluded) from the first "
                "rename to the last terminal manifest, divided by --tasks",
            },
            "host": host_end(result["host"]),
            "statuses": statuses,
            "retries": retries,
            "fds": {"before": fds_before, "peak": sampler.peak_fds, "after": fds_after},
            "rss_mb": {
                "before": round(rss_before, 1),
                "peak": round(sampler.peak_rss, 1),
                "after": round(rss_after, 1),
                "growth_pct": round(rss_growth, 1),
            },
            "threads": {"before": threads_before, "after": threads_after},
            "samples": len(sampler.timeline),
            "latency_s": {
                "queued_to_started": percentiles(waits),
                "started_to_done_file": percentiles(runs),
                "done_file_to_recorded": percentiles(lags),
            },
            "leaks": {
                "tmux_sessions": leftover_sessions,
                "processes": strays,
                "engine_children": children,
                "fd_delta": fds_after - fds_before,
            },
            "wrong_outcomes": wrong[:50],
            "missing": missing[:50],
            "uncaptured_output": uncaptured[:50],
            "rejected": rejected,
            "engine_exit_status": engine_status,
            "engine_log_problems": problems[:50],
            "failures": failures,
            "ok": not failures,
            "timeline": {
                "columns": ["t_s", "fds", "rss_mb", "terminal"],
                "rows": sampler.timeline,
            },
        }
    )
    return result


def tmux_server(socket: str) -> set[int]:
    """PID of our private tmux server, if it runs (it is ours: killed at the end)."""
    shown = tmux(socket, "display-message", "-p", "#{pid}")
    return {int(shown.stdout.strip())} if shown.stdout.strip().isdigit() else set()


def print_table(r: dict[str, Any]) -> None:
    leaks = r["leaks"]
    leak_text = (
        f"{len(leaks['tmux_sessions'])} sessions, {len(leaks['processes'])} processes, "
        f"{len(leaks['engine_children'])} children, fd delta {leaks['fd_delta']:+d}"
    )
    lat, h = r["latency_s"], r["host"]
    rows = [
        ("tasks", r["tasks"]),
        ("concurrency", r["concurrency"]),
        ("statuses", ", ".join(f"{k} {v}" for k, v in sorted(r["statuses"].items()))),
        ("wall time (s)", r["wall_s"]),
        ("tasks/s", r["tasks_per_s"]),
        ("engine CPU per task (ms)", r["engine_cpu"]["ms_per_task"]),
        ("engine CPU (s)", r["engine_cpu"]["cpu_s"]),
        ("cores; load 1 min start / end", "{cores}; {load_1m_start} / {load_1m_end}".format(**h)),
        ("fds before / peak / after", "{before} / {peak} / {after}".format(**r["fds"])),
        ("RSS before / peak / after (MB)", "{before} / {peak} / {after}".format(**r["rss_mb"])),
        ("RSS growth (%)", r["rss_mb"]["growth_pct"]),
        ("threads before / after", "{before} / {after}".format(**r["threads"])),
        ("leaks", leak_text),
        ("queued -> started (s)", lat["queued_to_started"]),
        ("started -> done file (s)", lat["started_to_done_file"]),
        ("done file -> recorded (s)", lat["done_file_to_recorded"]),
        ("engine log ERROR/Traceback", len(r["engine_log_problems"])),
        ("result", "OK" if r["ok"] else "FAILED"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        if isinstance(value, dict):
            value = "  ".join(f"{k} {v}" for k, v in value.items())
        print(f"{key:<{width}}  {value}")
    for failure in r["failures"]:
        print(f"FAIL: {failure}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=None, help="tasks (1000; quick: 300)")
    parser.add_argument("--concurrency", type=int, default=50, help="max_concurrent (50)")
    parser.add_argument("--quick", action="store_true", help="300 tasks unless --tasks")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "soak.json")
    parser.add_argument("--timeout", type=float, default=None, help="seconds (default: scaled)")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds before sampling")
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="trivial tasks run before the baseline is sampled (default 1); a burst as large "
        "as --tasks shows whether RSS growth is a one-off high-water mark or a leak",
    )
    parser.add_argument(
        "--agent",
        choices=("fake", "sh"),
        default="fake",
        help=(
            "fake: tests/support/fake_agent.py (Python); "
            "sh: the same cues read by /bin/sh (SH_AGENT)"
        ),
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir for inspection")
    args = parser.parse_args(argv)
    args.tasks = args.tasks or (300 if args.quick else 1000)
    if min(args.tasks, args.concurrency, args.warmup) < 1:
        parser.error("--tasks, --concurrency and --warmup must be at least 1")
    if args.timeout is None:
        args.timeout = max(300.0, args.tasks * 1.5)
    if shutil.which("tmux") is None:
        print("soak: tmux is not installed", file=sys.stderr)
        return 2

    root = Path(tempfile.mkdtemp(prefix="supervise-soak-")).resolve()
    socket = f"sv-soak-{uuid.uuid4().hex[:10]}"
    print(f"soak: {args.tasks} tasks, max_concurrent {args.concurrency}, in {root}", flush=True)
    try:
        result = soak(args, root, socket)
        log = root / "engine.log"
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if log.exists():
            shutil.copyfile(log, args.out.with_suffix(".engine.log"))
    finally:
        tmux(socket, "kill-server")
        tmux_socket_path(socket).unlink(missing_ok=True)
        if args.keep:
            print(f"soak: kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print_table(result)
    print(f"soak: figures written to {args.out}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
