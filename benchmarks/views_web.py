"""``supervise serve`` over a 1,000-task state dir: CPU per board update, and the engine's
CPU with and without the web view running.

    .venv/bin/python benchmarks/views_web.py [--tasks 1000] [--updates 20] [--window 15]
                                             [--out FILE.json]

Needs the ``web`` extra. Everything happens in a fresh temp dir (removed at the end); the
only processes ended are the ones started here, by PID.

Phase 1, the view's cost: a state dir of ``--tasks`` tasks in every group
(``tests/support/views_fixture.many``) and a real ``supervise serve`` on a free loopback port with
one SSE client reading ``/stream`` (as a browser tab would). ``--updates`` times, one
manifest is replaced (as the engine does, atomically) and the time until the client has
the new board is taken; the serve process's CPU (user + system, psutil) over the whole
phase divided by the updates is the **CPU per update** (target < 0.2 s), the polling
included. The idle cost (CPU per second with a client connected and nothing changing) is
measured before.

Phase 2, the engine: every task is made terminal (so the engine has nothing to run) and a
real ``supervise run`` is started on the state dir. Its CPU is taken over ``--window``
seconds while a manifest changes every second, first without ``serve``, then with ``serve``
and a client; the two figures should match within noise (the view only reads files and
probes ``engine.lock`` without blocking).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from support.views_fixture import many, write_profile  # noqa: E402

from supervisor.taskdir.folder import TaskDir  # noqa: E402

CLI = [sys.executable, "-m", "supervisor.cli"]
#: The token the benchmark's server is started with (every request needs one).
TOKEN = "benchmark-token"


class Client:
    """An SSE client of ``/stream`` on a thread: counts ``board`` events."""

    def __init__(self, port: int) -> None:
        self.events = 0
        self.changed = threading.Condition()
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.conn.request("GET", "/stream", headers={"Authorization": f"Bearer {TOKEN}"})
        self.answer = self.conn.getresponse()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for raw in self.answer:
                if raw.startswith(b"event: board"):
                    with self.changed:
                        self.events += 1
                        self.changed.notify_all()
        except (OSError, ValueError, AttributeError):  # closed under the reader at the end
            return

    def wait_past(self, count: int, timeout: float = 10.0) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.events > count, timeout)

    def close(self) -> None:
        self.conn.close()


def start_serve(profile: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [*CLI, "serve", "-c", str(profile), "--bind", "127.0.0.1:0", "--token", TOKEN],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()  # supervise serve: http://127.0.0.1:PORT/?token=T
    port = urlsplit(line.split(": ", 1)[1].strip()).port
    assert port is not None, line
    return proc, port


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def touch_manifest(task: TaskDir, flip: int) -> None:
    """Replace a manifest atomically with one field changed (what an engine write does)."""
    manifest = task.read_manifest()
    manifest.last_checked_at = f"2026-01-01T00:00:{flip % 60:02d}Z"
    task.write_manifest(manifest)


def phase_view(root: Path, n: int, updates: int) -> dict[str, float]:
    fixture = many(root, n, now=time.time())
    proc, port = start_serve(fixture.profile)
    served = psutil.Process(proc.pid)
    client = Client(port)
    try:
        assert client.wait_past(0, 30), "no first board"
        time.sleep(2)
        idle_at, idle_cpu = time.monotonic(), cpu(served)
        time.sleep(5)
        idle = (cpu(served) - idle_cpu) / (time.monotonic() - idle_at)
        task = TaskDir(fixture.state_dir / "tasks" / "later-4a5b6c")
        before, latencies = cpu(served), []
        for i in range(updates):
            seen = client.events
            started = time.monotonic()
            touch_manifest(task, i)
            assert client.wait_past(seen), "update not pushed"
            latencies.append(time.monotonic() - started)
            time.sleep(0.3)
        per_update = (cpu(served) - before) / updates
    finally:
        client.close()
        stop(proc)
    latencies.sort()
    return {
        "tasks": n,
        "updates": updates,
        "cpu_per_update_s": round(per_update, 4),
        "idle_cpu_per_s": round(idle, 4),
        "latency_p50_s": round(latencies[len(latencies) // 2], 3),
        "latency_max_s": round(latencies[-1], 3),
    }


def terminalize(state_dir: Path) -> None:
    for folder in sorted((state_dir / "tasks").iterdir()):
        task = TaskDir(folder)
        manifest = task.read_manifest()
        if manifest.status not in ("completed", "failed", "abandoned"):
            manifest.status = "completed"  # type: ignore[assignment]
            manifest.finished_at = manifest.finished_at or manifest.created_at
            manifest.verdict = "PASS"  # type: ignore[assignment]
            task.write_manifest(manifest)


def engine_window(engine: psutil.Process, task: TaskDir, seconds: float) -> float:
    """The engine's CPU over ``seconds`` while a manifest changes every second."""
    before, end, i = cpu(engine), time.monotonic() + seconds, 0
    while time.monotonic() < end:
        touch_manifest(task, i)
        i += 1
        time.sleep(1.0)
    return cpu(engine) - before


def phase_engine(root: Path, window: float) -> dict[str, float]:
    state_dir = root / "state"
    terminalize(state_dir)
    socket = f"sv-bench-web-{os.getpid()}"
    profile = write_profile(root, socket_name=socket)
    log = open(root / "engine.log", "w")  # noqa: SIM115
    engine_proc = subprocess.Popen([*CLI, "run", str(profile)], stdout=log, stderr=log)
    try:
        for _ in range(300):
            if (state_dir / "engine-stats.json").exists():
                break
            time.sleep(0.1)
        time.sleep(5)  # start-up (adoption scan of 1,000 folders) over
        engine = psutil.Process(engine_proc.pid)
        task = TaskDir(state_dir / "tasks" / "later-4a5b6c")
        without = engine_window(engine, task, window)
        proc, port = start_serve(profile)
        client = Client(port)
        try:
            client.wait_past(0, 30)
            with_serve = engine_window(engine, task, window)
            pushed = client.events
        finally:
            client.close()
            stop(proc)
    finally:
        stop(engine_proc)  # type: ignore[arg-type]
        log.close()
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)
    return {
        "window_s": window,
        "engine_cpu_without_serve_s": round(without, 3),
        "engine_cpu_with_serve_s": round(with_serve, 3),
        "boards_pushed_meanwhile": pushed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--out", help="write the figures as JSON here too")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="supervise-bench-web-"))
    try:
        view = phase_view(root, args.tasks, args.updates)
        engine = phase_engine(root, args.window)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {**view, **engine, "cores": os.cpu_count()}
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    ok = view["cpu_per_update_s"] < 0.2
    print(f"serve CPU per update {'<' if ok else '>='} 0.2 s: {'PASS' if ok else 'FAIL'}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
