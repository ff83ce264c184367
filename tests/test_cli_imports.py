"""Issue 24, item 4: no CLI command imports what it does not use. ``supervise validate``
needs the config models (pydantic) but no process table, web lock, task-folder model or
agent adapter; ``supervise status [--json]`` needs none of them and no pydantic either
(targets and figures: ``benchmarks/README.md``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import wait_for
from support import views_fixture

#: Modules no ``validate`` of a headless Claude profile may load: psutil (the views'
#: engine check), filelock (``serve``), the spool and the manifest model (``folderaccess``),
#: the Claude adapter (its heartbeat is the kind's), the policy, APScheduler, the engine.
NOT_FOR_VALIDATE = (
    "psutil",
    "filelock",
    "supervisor.spool",
    "supervisor.taskdir.manifest",
    "supervisor.agents.claude.adapter",
    "supervisor.policy",
    "apscheduler",
    "supervisor.engine",
)
#: ... and ``status``, which reads only ``[paths]`` and the manifests as JSON.
NOT_FOR_STATUS = (*NOT_FOR_VALIDATE, "pydantic", "supervisor.config.models")


def _loaded(argv: list[str]) -> set[str]:
    """The modules ``supervise ARGV`` leaves in ``sys.modules`` (run in a fresh process)."""
    code = (
        "import sys, json, contextlib, io\n"
        "from supervisor.cli import main\n"
        "quiet = io.StringIO()\n"
        "with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):\n"
        f"    code = main({argv!r})\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    status, modules = json.loads(out.stdout)
    assert status in (0, 1), out.stderr
    return set(modules)


def _hits(modules: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == b or m.startswith(f"{b}.") for b in banned))


def test_validate_loads_only_what_it_checks_with() -> None:
    profile = Path(__file__).resolve().parent.parent / "profiles" / "long.toml"
    modules = _loaded(["validate", str(profile)])
    assert "supervisor.config.models" in modules  # the check itself: it does need them
    assert _hits(modules, NOT_FOR_VALIDATE) == []


def test_status_json_loads_no_model(tmp_path: Path) -> None:
    fixture = views_fixture.build(tmp_path)
    for tail in (["--json"], []):
        argv = ["status", "-c", str(fixture.profile), *tail]
        assert _hits(_loaded(argv), NOT_FOR_STATUS) == []


def test_the_claude_kinds_heartbeat_is_its_adapters() -> None:
    """``validate`` reads the heartbeat from the kind (no adapter import); the adapter's
    is the one the engine uses: both are ``agents/claude/tools.HEARTBEAT``."""
    from supervisor.agents import kinds
    from supervisor.agents.claude.adapter import ClaudeAdapter

    assert kinds.get("claude").heartbeat == ClaudeAdapter.heartbeat == 30.0
    assert kinds.get("generic").heartbeat is None


def test_the_views_engine_check_sees_a_zombie_without_psutil() -> None:
    """``status`` asks whether the heartbeat's engine runs from ``/proc/PID/stat`` (psutil
    is not imported for it): a zombie (a stopped engine nobody reaped yet) does not run."""
    from supervisor.views.sources import pid_alive

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        wait_for(lambda: _state(child.pid) == b"Z", timeout=60)
        assert pid_alive(child.pid) is False
    finally:
        child.wait(timeout=10)
    assert pid_alive(child.pid) is False  # reaped: gone
    assert pid_alive(os.getpid()) is True


def _state(pid: int) -> bytes:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    end = data.rfind(b")")
    return data[end + 2 : end + 3]


def test_a_status_row_is_what_asdict_gives(tmp_path: Path) -> None:
    """``Task.row`` (``status --json``) copies the fields one level instead of
    ``dataclasses.asdict``'s deep copy: the same dicts, and a row's lists and dicts are
    its own."""
    import dataclasses
    import time

    from supervisor.views import model

    fixture = views_fixture.build(tmp_path)
    snap = model.Reader(fixture.state_dir, fixture.spool_dir).snapshot(time.time())
    assert snap.tasks
    for task in snap.tasks:
        row = task.row()
        assert row == dataclasses.asdict(task)
        assert list(row) == [f.name for f in dataclasses.fields(task)]
        row["requests"].append("x")
        assert "x" not in task.requests
