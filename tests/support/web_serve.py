"""A real ``supervise serve`` and a browser as fixtures (moved from tests/test_web.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import read_line

from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso
from support.claude_harness import harness  # noqa: F401 (the real CLI's fixture, for the e2e test)
from support.views_fixture import Fixture, build

REQUIRED = os.environ.get("SUPERVISE_REQUIRE_BROWSER") == "1"
EVIL = "<script>window.pwned=1</script>\x1b[31mred"


def _need(what: str) -> None:
    if REQUIRED:
        pytest.fail(f"{what} (SUPERVISE_REQUIRE_BROWSER=1)")
    pytest.skip(what)


def _web_extra() -> None:
    for module in ("starlette", "uvicorn", "sse_starlette", "jinja2"):
        if not _importable(module):
            _need(f"the web extra is not installed ({module}): pip install -e '.[web]'")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, through Playwright (one per module)."""
    _web_extra()
    if not _importable("playwright"):
        _need("playwright is not installed: pip install -e '.[test]'")
    path = shutil.which("chromium")
    if path is None:
        _need("chromium is not installed: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=path)
        yield chromium
        chromium.close()


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.fixture
def fixture(tmp_path: Path) -> Fixture:
    """The views fixture timed from now (so times in state read like a live board), plus a
    task whose name holds ``<script>`` and an ANSI colour sequence."""
    fx = build(tmp_path, now=time.time())
    folder = fx.state_dir / "tasks" / "evil-script-7a8b9c"
    folder.mkdir()
    fields = {"task_id": "evil-script-7a8b9c", "task_name": EVIL, "status": "running",
              "model": "claude-sonnet-4-6", "project_dir": "/tmp/p", "session_name": "x",
              "session_id": "s", "tmpdir": str(folder), "created_at": utc_iso(),
              "started_at": utc_iso(), "launched_at": utc_iso()}  # fmt: skip
    TaskDir(folder).write_manifest(Manifest.model_validate(fields))
    (folder / "output.log").write_text("<img src=x onerror=window.pwned=2>\x1b[2J\n")
    return fx


class Served:
    """A running ``supervise serve``: the URL it printed (with its token), its base URL,
    token, ``Authorization`` header and process."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url
        self.base, _, self.token = url.partition("?token=")
        self.auth = {"Authorization": f"Bearer {self.token}"}

    def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                host: str | None = None) -> tuple[int, str]:  # fmt: skip
        """One HTTP request; returns ``(status, body)`` (never raises on 4xx)."""
        req = urllib.request.Request(self.base + path.lstrip("/"), method=method,
                                     headers=headers or {})  # fmt: skip
        if host:
            req.add_header("Host", host)
        try:
            with urllib.request.urlopen(req, data=b"" if method == "POST" else None,
                                        timeout=10) as answer:  # fmt: skip
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


@contextmanager
def serve(profile: Path, *args: str, bind: str | None = "127.0.0.1:0") -> Iterator[Served]:
    """Start ``supervise serve -c PROFILE --bind BIND ARGS`` and stop it (by PID); with
    ``bind=None`` no ``--bind`` is given (``--socket``). The first line on stderr is the
    URL (``unix:PATH`` for a socket); the others stay readable on ``proc.stderr``."""
    env = {k: v for k, v in os.environ.items() if k != "SUPERVISE_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "serve", "-c", str(profile),
         *(["--bind", bind] if bind else []), *args],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = read_line(proc.stderr)
        assert line.startswith(("supervise serve: http://", "supervise serve: unix:")), line
        yield Served(proc, line.split(": ", 1)[1].strip())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
