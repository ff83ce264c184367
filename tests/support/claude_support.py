"""Helpers for tests that drive the real Claude Code CLI against :mod:`support.mock_anthropic`.

* :func:`find_claude` / :func:`require_claude` locate the ``claude`` binary.
* :func:`make_home` builds a throwaway ``HOME`` that skips the first-run dialogs.
* :func:`agent_env` returns the environment the CLI needs to talk to the mock, offline.
* :func:`start_mock` / :func:`stop_mock` wrap :class:`~mock_anthropic.MockAnthropic`.
* :func:`kill_tmux_server` ends a private tmux server (never the default one).

Facts behind these choices: ``/work/shared/notes/claude-code-offline.md`` and
``notes-claude-e2e.md`` at the repository root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.mock_anthropic import MockAnthropic  # tests/ is on sys.path, as for conftest

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository root (the folder holding ``tests/``)."""

PINNED_VERSION = "2.1.328"
"""The ``@anthropic-ai/claude-code`` version these tests were measured with."""

LOCAL_CLAUDE = REPO_ROOT / ".e2e" / "node_modules" / ".bin" / "claude"
"""Where ``npm install --prefix <repo>/.e2e @anthropic-ai/claude-code@<PINNED_VERSION>`` puts it."""

MOCK_TOKEN = "sk-ant-mock-0123456789abcdefghij"
"""Bearer token sent to the mock (via ``ANTHROPIC_AUTH_TOKEN``); any string works."""

_SCRUBBED_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_", "CLAUDECODE")
"""Variables removed from the inherited environment so a developer's real setup cannot leak in."""


def find_claude() -> str | None:
    """Locate the ``claude`` binary, or return None.

    Order: ``$SUPERVISE_CLAUDE_BIN`` (if set it must point at an executable, there is no fallback),
    then ``<repo>/.e2e/node_modules/.bin/claude``, then ``claude`` on ``PATH``.
    """
    explicit = os.environ.get("SUPERVISE_CLAUDE_BIN")
    if explicit:
        path = Path(explicit).expanduser()
        return str(path.resolve()) if path.is_file() and os.access(path, os.X_OK) else None
    if LOCAL_CLAUDE.exists() and os.access(LOCAL_CLAUDE, os.X_OK):
        return str(LOCAL_CLAUDE)
    return shutil.which("claude")


def require_claude() -> str:
    """Return the ``claude`` path; skip if absent (fail if ``SUPERVISE_REQUIRE_CLAUDE=1``)."""
    path = find_claude()
    if path is not None:
        return path
    reason = (
        "claude binary not found (set SUPERVISE_CLAUDE_BIN, or run "
        f"`npm install --prefix {REPO_ROOT / '.e2e'} @anthropic-ai/claude-code@{PINNED_VERSION}`)"
    )
    if os.environ.get("SUPERVISE_REQUIRE_CLAUDE") == "1":
        pytest.fail(reason)
    pytest.skip(reason)
    raise AssertionError("unreachable")  # for type checkers


def claude_version(claude: str) -> str:
    """Return ``claude --version`` output (e.g. ``"2.1.328 (Claude Code)"``)."""
    done = subprocess.run(
        [claude, "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout.strip()


def make_home(
    home: Path, project_dirs: list[Path] | tuple[Path, ...] = (), token: str = MOCK_TOKEN
) -> Path:
    """Create a throwaway ``HOME`` in which the CLI shows no first-run dialog.

    Writes ``home/.claude.json`` (onboarding done, the key suffix approved, each project trusted)
    and ``home/.claude/settings.json`` (no bypass-permissions warning). Returns ``home``.
    """
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    config = {
        "hasCompletedOnboarding": True,
        "customApiKeyResponses": {"approved": [token[-20:]], "rejected": []},
        "projects": {
            str(Path(p).resolve()): {"hasTrustDialogAccepted": True} for p in project_dirs
        },
    }
    (home / ".claude.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    settings = {"skipDangerousModePermissionPrompt": True}
    (home / ".claude" / "settings.json").write_text(
        json.dumps(settings, indent=2) + "\n", encoding="utf-8"
    )
    return home


def agent_env(
    home: Path, base_url: str, token: str = MOCK_TOKEN, max_retries: int = 2
) -> dict[str, str]:
    """The variables the CLI needs to run offline against the mock (to lay over the parent env)."""
    return {
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_AUTH_TOKEN": token,  # Bearer: no "use this API key?" question
        "IS_SANDBOX": "1",  # --dangerously-skip-permissions refuses root without it
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",  # else it may `npm install -g` a newer claude
        "CLAUDE_CODE_MAX_RETRIES": str(max_retries),  # default 10 = ~3 min of backoff
    }


def scrubbed_environ() -> dict[str, str]:
    """``os.environ`` minus ``ANTHROPIC_*`` / ``CLAUDE_CODE_*`` (e.g. a developer's real key)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIXES)}


def start_mock(**kwargs: str) -> MockAnthropic:
    """Start a :class:`MockAnthropic` (keyword arguments go to its constructor)."""
    return MockAnthropic(**kwargs).start()


def stop_mock(mock: MockAnthropic | None) -> None:
    """Stop a mock started by :func:`start_mock` (None is ignored)."""
    if mock is not None:
        mock.stop()


def tmux_socket_path(socket_name: str) -> Path:
    """Where ``tmux -L socket_name`` keeps its socket (``$TMUX_TMPDIR/tmux-<uid>/<name>``)."""
    return Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / socket_name


def kill_tmux_server(socket_name: str) -> None:
    """Kill the private tmux server ``tmux -L socket_name`` and remove its socket file.

    No error if none runs. tmux 3.3a leaves the socket file behind after ``kill-server``.
    """
    if shutil.which("tmux") is None:
        return
    subprocess.run(
        ["tmux", "-L", socket_name, "kill-server"], capture_output=True, timeout=30, check=False
    )
    tmux_socket_path(socket_name).unlink(missing_ok=True)
