"""The harness that drives the real Claude Code CLI in tmux against the mock Messages API (moved
from tests/test_claude_agent.py): ``Harness`` and its ``harness`` fixture."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from support.claude_support import (
    agent_env,
    kill_tmux_server,
    make_home,
    require_claude,
    scrubbed_environ,
    start_mock,
    stop_mock,
)
from support.mock_anthropic import MockAnthropic

MODEL_ID = "claude-sonnet-4-6"
RUN_TIMEOUT = 120.0


def supervise() -> list[str]:
    script = Path(sys.executable).parent / "supervise"
    return [str(script)] if script.exists() else [sys.executable, "-m", "supervisor.cli"]


class Harness:
    """One test's world: a mock API, a throwaway HOME, project folders, a profile, a spool."""

    def __init__(self, root: Path, mock: MockAnthropic, token: str | None = None) -> None:
        self.root = root
        self.mock = mock
        self.claude = require_claude()
        self.socket = f"sv-ag-{uuid.uuid4().hex[:10]}"
        self.projects: list[Path] = []
        self.home = root / "home"
        self.token = token
        self.spool = root / "spool"
        self.spool.mkdir()
        self.state = root / "state"
        self.notified = root / "notified.jsonl"
        self.proc: subprocess.Popen[str] | None = None
        self.profile = root / "profile.toml"
        self.cli_retries = 2
        """``CLAUDE_CODE_MAX_RETRIES`` for the agent (the CLI's own API retries)."""

    def project(self, name: str = "project") -> Path:
        path = self.root / name
        if not path.exists():
            path.mkdir()
            subprocess.run(["git", "init", "-q", str(path)], check=True, capture_output=True)
            self.projects.append(path)
        return path

    def write_profile(self, **extra: Any) -> Path:
        make_home(self.home, self.projects)
        env = agent_env(self.home, self.mock.base_url, max_retries=self.cli_retries)
        if self.token:
            env["ANTHROPIC_AUTH_TOKEN"] = self.token
        notifier = [
            sys.executable,
            "-c",
            "import sys; open(sys.argv[1], 'a').write(sys.stdin.read().strip() + '\\n')",
            str(self.notified),
        ]
        profile: dict[str, Any] = {
            "max_concurrent": 4,
            "paths": {"spool_dir": "spool", "state_dir": "state"},
            "tmux": {"socket_name": self.socket},
            "agent": {
                "kind": "claude",
                "binary": self.claude,
                "env": env,
                "models": {"sonnet": MODEL_ID},
                **extra.pop("agent", {}),
            },
            "monitor": {
                "base_interval": 1,
                "max_interval": 4,
                "deadline": 240,
                "grace_period": 30,
                "stale_threshold": 120,
                "notifier": notifier,
                **extra.pop("monitor", {}),
            },
            # projects are fresh `git init`s (no commit): tasks run in them unless a test
            # asks for worktrees
            "workspace": extra.pop("workspace", {"mode": "shared"}),
            **extra,
        }
        self.profile.write_text(tomli_w.dumps(profile), encoding="utf-8")
        return self.profile

    def submit(self, name: str, prompt: str, project: Path | None = None, **extra: Any) -> None:
        task = {"name": name, "prompt": prompt, "project_dir": str(project or self.project())}
        task.update(extra)
        path = self.spool / f".{name}.tmp"
        path.write_text(tomli_w.dumps(task), encoding="utf-8")
        path.rename(self.spool / f"{name}.toml")

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [*supervise(), "run", str(self.profile), "--exit-when-idle"],
            cwd=self.root,
            env=scrubbed_environ(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def finish(self, timeout: float = RUN_TIMEOUT) -> str:
        assert self.proc is not None
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
            pytest.fail(f"supervise did not finish in {timeout} s\n{out}\n{self.diagnostics()}")
        assert self.proc.returncode == 0, f"{out}\n{self.diagnostics()}"
        return out

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*supervise(), *args],
            cwd=self.root,
            env=scrubbed_environ(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def manifests(self) -> dict[str, dict[str, Any]]:
        """Task name → manifest."""
        out = {}
        for path in sorted(self.state.glob("tasks/*/manifest.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            out[data["task_name"]] = data
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        task_dir = Path(self.manifests()[name]["tmpdir"])
        lines = (task_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            value = check()
            if value:
                return value
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.1)
        pytest.fail(f"timed out waiting for {what}\n{self.diagnostics()}")

    def status(self, name: str) -> str | None:
        return self.manifests().get(name, {}).get("status")

    def diagnostics(self) -> str:
        parts = []
        for path in sorted(self.state.glob("tasks/*/*")):
            if path.is_file() and path.suffix in (".json", ".jsonl", ".log"):
                text = path.read_text(encoding="utf-8", errors="replace")
                parts.append(f"--- {path.relative_to(self.state)} ---\n{text[-2500:]}")
        for req in self.mock.snapshot():
            parts.append(f"mock: {req.path} session={req.session_id} reply={req.reply_kind}")
        return "\n".join(parts)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        kill_tmux_server(self.socket)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    made: list[tuple[Harness, MockAnthropic]] = []

    def make(token: str | None = None, **mock_args: Any) -> Harness:
        mock = start_mock(**mock_args)
        made.append((Harness(tmp_path, mock, token), mock))
        return made[-1][0]

    yield make
    for h, mock in made:
        h.close()
        stop_mock(mock)
