"""Issue 26, part 2, in the views: an attempt of a group shows ``[attempt K/N]`` beside its
name in ``supervise status`` and ``top``, and ``attempt K/N GROUP`` under it in ``serve``'s
board (stop 33 left the group only in ``status --json`` and ``supervise attempts``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from support.views_fixture import build
from support.web_serve import _web_extra, serve

from supervisor.config import load_profile
from supervisor.taskdir.folder import TaskDir
from supervisor.views import model
from supervisor.views.tui_columns import COLUMNS, cells

GROUP = "attempts-abc123"


def _with_an_attempt(root: Path) -> Path:
    """The views fixture, its running ``refactor-parser`` made attempt 2 of 3 of GROUP
    (and given a name holding an escape); returns the profile."""
    fx = build(root, now=time.time())

    def change(m: object) -> None:
        m.attempt = {"group": GROUP, "index": 2, "of": 3}  # type: ignore[attr-defined]

    TaskDir(fx.state_dir / "tasks" / "refactor-0a1b2c").update_manifest(change)
    return fx.profile


def test_status_and_top_show_the_attempt_beside_its_name(tmp_path: Path) -> None:
    profile = _with_an_attempt(tmp_path)
    shown = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "status", "-c", str(profile)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert "refactor-parser [attempt 2/3]" in shown.stdout, shown.stdout + shown.stderr
    assert "check-tests [attempt" not in shown.stdout  # a plain task shows its name only
    snap = model.snapshot(load_profile(profile), time.time())
    task = snap.task("refactor-0a1b2c")
    assert task is not None and task.attempt == f"2/3 {GROUP}"
    name = COLUMNS[[c.key for c in COLUMNS].index("name")]
    (cell,) = cells(task, 0, (name,))
    assert cell.plain == "refactor-parser [attempt 2/3]"


def test_serve_s_board_shows_the_attempt_and_its_group(tmp_path: Path) -> None:
    _web_extra()
    profile = _with_an_attempt(tmp_path)
    with serve(profile) as served:
        code, body = served.request("GET", "/", headers=served.auth)
    assert code == 200
    assert f"attempt 2/3 {GROUP}" in body
