"""Shared fixtures: a private tmux server per test, profiles that run the fake agent, and a
way to run ``supervise`` as a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, AnyStr

import libtmux
import psutil
import pytest
import tomli_w

# The shared helpers in tests/support/ assert too: pytest rewrites their asserts as it does a
# test module's, so a failing helper shows its values.
pytest.register_assert_rewrite("support")

TESTS = Path(__file__).resolve().parent
FAKE_AGENT = TESTS / "support" / "fake_agent.py"


def _tmux_socket_path(name: str) -> Path:
    return Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / name


@pytest.fixture
def tmux_server(TestServer: type[libtmux.Server]) -> libtmux.Server:
    """A private tmux server (libtmux's pytest plugin: a random ``libtmux_test...`` socket,
    the server killed and its socket removed after the test); started on first use. Not the
    plugin's ``server`` fixture: test modules name their PostgreSQL fixture ``server``."""
    return TestServer()


@pytest.fixture
def socket_name(tmux_server: libtmux.Server) -> str:
    """The socket name of the test's private tmux server (:func:`tmux_server`)."""
    return str(tmux_server.socket_name)


@pytest.fixture(autouse=True)
def _clean_monitor_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("MONITOR_"):
            monkeypatch.delenv(key)


class Setup:
    """A profile in ``tmp_path`` that runs the fake agent, plus helpers to use it."""

    def __init__(self, root: Path, socket_name: str) -> None:
        self.root = root
        self.socket_name = socket_name
        self.spool = root / "spool"
        self.state = root / "state"
        self.project = root / "project"
        self.project.mkdir()
        self.profile = root / "profile.toml"

    def write_profile(
        self, max_concurrent: int = 4, extra: dict[str, Any] | None = None, **monitor: Any
    ) -> Path:
        data: dict[str, Any] = {
            "max_concurrent": max_concurrent,
            "intake_interval": 0.2,
            "paths": {"spool_dir": "spool", "state_dir": "state"},
            "tmux": {"socket_name": self.socket_name},
            "agent": {
                "command": [
                    sys.executable, str(FAKE_AGENT), "--prompt-file", "{prompt_file}",
                    "--session-id", "{session_id}", "--model", "{model}",
                ],
                "resume_command": [
                    sys.executable, str(FAKE_AGENT), "--prompt-file", "{prompt_file}",
                    "--resume", "{session_id}", "--model", "{model}",
                ],
            },
            # stale_threshold 30: a slow start on a loaded machine must not log "stale";
            # tests about staleness set their own.
            "monitor": {
                "base_interval": 0.5, "max_interval": 2, "deadline": 120, "stale_threshold": 30,
                **monitor,
            },
            **(extra or {}),
        }  # fmt: skip
        self.profile.write_text(tomli_w.dumps(data), encoding="utf-8")
        return self.profile

    def task(self, name: str, prompt: str, project: Path | None = None, **extra: Any) -> dict:
        project = project or self.project
        project.mkdir(exist_ok=True)
        return {"name": name, "prompt": prompt, "project_dir": str(project), **extra}

    def drop(self, filename: str, task: dict | str) -> Path:
        """Write a task file into the spool the way a careful writer does (rename in)."""
        self.spool.mkdir(exist_ok=True)
        text = task if isinstance(task, str) else tomli_w.dumps(task)
        tmp = self.spool / f".{filename}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.rename(self.spool / filename)
        return self.spool / filename

    def supervise(self, *args: str, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "supervisor.cli", *args],
            capture_output=True, text=True, timeout=timeout, check=False, **kw,
        )  # fmt: skip

    def run(self, timeout: float = 60) -> subprocess.CompletedProcess:
        return self.supervise("run", str(self.profile), "--exit-when-idle", timeout=timeout)

    def start(self, **popen: Any) -> subprocess.Popen:
        """``supervise run`` of this profile in the background, until the test ends it (by
        its PID); ``popen`` goes to :class:`subprocess.Popen` (default: output discarded)."""
        popen.setdefault("stdout", subprocess.DEVNULL)
        popen.setdefault("stderr", subprocess.DEVNULL)
        argv = [sys.executable, "-m", "supervisor.cli", "run", str(self.profile)]
        return subprocess.Popen(argv, **popen)

    def manifests(self) -> dict[str, dict]:
        """task_name -> manifest."""
        out = {}
        for path in sorted((self.state / "tasks").glob("*/manifest.json")):
            data = json.loads(path.read_text())
            out[data["task_name"]] = data
        return out

    def events(self, task_id: str) -> list[dict]:
        """The task's events so far; none while its claim has not written the first one."""
        path = self.state / "tasks" / task_id / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["tmux", "-L", self.socket_name, *args], capture_output=True, text=True, check=False
        )


@pytest.fixture
def setup(tmp_path: Path, socket_name: str) -> Setup:
    return Setup(tmp_path, socket_name)


SIGNAL_CUES = {"trap": "", "die": "die_on_signal\n"}
"""The fake agent's two signal behaviours, as prompt cues: ``trap`` (the default, like the
real Claude Code CLI: exits 143 on SIGTERM, 129 on SIGHUP) and ``die`` (killed by them)."""


@pytest.fixture(params=sorted(SIGNAL_CUES))
def signal_cue(request: pytest.FixtureRequest) -> str:
    """Run a test with both fake-agent signal behaviours; returns the cue to put first in
    the prompt (empty for ``trap``)."""
    return SIGNAL_CUES[request.param]


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen]:
    """A plain child process that lives for 60 s (killed at the end of the test)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process
    finally:
        process.kill()
        process.wait(timeout=10)


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_engine(process: subprocess.Popen[Any]) -> None:
    """End an engine a test started, by its PID: SIGTERM (a clean stop), SIGKILL after 30 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(predicate: Callable[[], Any], timeout: float = 60, every: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds.

    ``timeout`` is a hang guard, never a speed bound: under a loaded CI (xdist, two locales)
    a process start, a tmux server, PostgreSQL or an engine tick can take many seconds, so
    keep it generous (30-60 s); a test proves order and outcome, not speed."""
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout} s")


def read_line(stream: IO[AnyStr] | None, timeout: float = 60) -> AnyStr:
    """One line from a child's pipe (``""``/``b""`` at EOF), read on a helper thread; fail
    after ``timeout`` seconds instead of hanging the run when the child never writes it
    (a hang guard, not a speed bound). The reader thread ends once the test ends the child.

    Raises:
        AssertionError: ``stream`` is None, or no line came within ``timeout`` seconds.
    """
    assert stream is not None, "the child's pipe was not opened"
    got: list[AnyStr] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not got:
        raise AssertionError(f"no line from the child within {timeout} s")
    return got[0]


def pytest_report_header() -> str:
    """The locale the tests (and their tmux servers and capture filters) run under."""
    return f"locale: LC_ALL={os.environ.get('LC_ALL', '')} LANG={os.environ.get('LANG', '')}"
