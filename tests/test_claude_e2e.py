"""End-to-end: ``supervise run`` drives the real Claude Code CLI, in tmux, against a mock API.

The mock (:mod:`mock_anthropic`) answers the first agent turn with a ``Write`` of ``hello.txt``
into the task's project directory and the next turn with a final text. The test then checks the
task manifest, the file, the captured output and the session id the mock saw.

Needs ``tmux``, ``git`` and the ``claude`` binary (see :func:`claude_support.find_claude`); skips
without ``claude`` unless ``SUPERVISE_REQUIRE_CLAUDE=1``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import tomli_w

# tests/ is on sys.path (pytest's rootdir-relative import mode, like conftest).
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

pytestmark = pytest.mark.e2e

SUPERVISE_TIMEOUT = 180
MODEL_ALIAS = "sonnet"
MODEL_ID = "claude-sonnet-4-6"


def supervise_command() -> list[str]:
    """``supervise`` next to the running interpreter, else ``python -m supervisor.cli``."""
    script = Path(sys.executable).parent / "supervise"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "supervisor.cli"]


def write_profile(path: Path, claude: str, socket_name: str, env: dict[str, str]) -> Path:
    """Write the test's profile (its relative dirs resolve against ``path``'s folder)."""
    common = [
        "--model",
        "{model}",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
    ]
    profile = {
        "max_concurrent": 2,
        "paths": {"spool_dir": "spool", "state_dir": "state"},
        "tmux": {"socket_name": socket_name},
        "agent": {
            "command": [claude, "-p", "{prompt}", "--session-id", "{session_id}", *common],
            "resume_command": [
                claude,
                "-p",
                "continue the task",
                "--resume",
                "{session_id}",
                *common,
            ],
            "env": env,
            "models": {MODEL_ALIAS: MODEL_ID},
        },
        "monitor": {
            "base_interval": 1,
            "max_interval": 5,
            "deadline": 300,
            "grace_period": 30,
            "stale_threshold": 120,
        },
        # the project is a fresh `git init` (no commit): run in it, not in a worktree
        "workspace": {"mode": "shared"},
    }
    path.write_text(tomli_w.dumps(profile), encoding="utf-8")
    return path


def diagnostics(
    proc: subprocess.CompletedProcess[str] | None, state_dir: Path, mock: MockAnthropic
) -> str:
    """For a failed run: supervise output, manifests, output logs, mock requests."""
    parts: list[str] = []
    if proc is not None:
        parts.append(f"supervise exit={proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}")
        parts.append(f"--- stderr ---\n{proc.stderr[-4000:]}")
    for path in sorted(state_dir.glob("tasks/*/*")):
        if path.is_file() and path.suffix in (".json", ".log"):
            text = path.read_text(encoding="utf-8", errors="replace")
            parts.append(f"--- {path.relative_to(state_dir)} (last 3000 chars) ---\n{text[-3000:]}")
    for req in mock.snapshot():
        model = req.body.get("model") if isinstance(req.body, dict) else None
        parts.append(
            f"mock: {req.method} {req.path} session={req.session_id} model={model} "
            f"tools={req.offers_tools} reply={req.reply_kind}"
        )
    return "\n".join(parts)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_supervise_runs_claude_task_to_completion(tmp_path: Path) -> None:
    """One task, real CLI, mock API: completed manifest, file written, final text captured."""
    claude = require_claude()

    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True, capture_output=True)
    home = make_home(tmp_path / "home", [project])
    socket_name = f"sv-e2e-{uuid.uuid4().hex[:10]}"
    final_text = f"DONE: wrote hello.txt ({uuid.uuid4().hex[:8]})"
    task_name = "e2e-hello"

    mock = start_mock(final_text=final_text)
    proc: subprocess.CompletedProcess[str] | None = None
    state_dir = tmp_path / "state"
    try:
        profile = write_profile(
            tmp_path / "profile.toml", claude, socket_name, agent_env(home, mock.base_url)
        )
        spool = tmp_path / "spool"
        spool.mkdir()
        task = {
            "name": task_name,
            "prompt": "Create hello.txt containing 'hello from mock', then say DONE.",
            "project_dir": str(project),
            "model": MODEL_ALIAS,
        }
        (spool / f"{task_name}.toml").write_text(tomli_w.dumps(task), encoding="utf-8")

        try:
            proc = subprocess.run(
                [*supervise_command(), "run", str(profile), "--exit-when-idle"],
                cwd=tmp_path,
                env=scrubbed_environ(),
                capture_output=True,
                text=True,
                timeout=SUPERVISE_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(
                f"supervise did not exit within {SUPERVISE_TIMEOUT}s: {exc}\n"
                + diagnostics(None, state_dir, mock)
            )
        info = diagnostics(proc, state_dir, mock)
        assert proc.returncode == 0, info

        manifests = sorted(state_dir.glob("tasks/*/manifest.json"))
        assert len(manifests) == 1, info
        manifest = json.loads(manifests[0].read_text(encoding="utf-8"))
        assert manifest["status"] == "completed", info
        assert manifest["exit_code"] == 0, info
        assert manifest["task_name"] == task_name, info
        session_id = manifest["session_id"]
        uuid.UUID(session_id)  # raises if it is not a UUID

        written = project / mock.file_name
        assert written.is_file(), info
        assert written.read_text(encoding="utf-8") == mock.file_content, info

        assert isinstance(manifest["output_tail"], str), info
        assert final_text in manifest["output_tail"], info

        session_requests = mock.message_requests(session_id)
        assert session_requests, info
        kinds = [r.reply_kind for r in session_requests if r.offers_tools]
        assert kinds[:1] == ["tool_use"] and "final" in kinds, info
        assert {r.body.get("model") for r in session_requests} == {MODEL_ID}, info
        assert mock.session_ids() == {session_id}, info
    finally:
        kill_tmux_server(socket_name)
        stop_mock(mock)
