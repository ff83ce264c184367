"""``supervise top`` driven by Textual's pilot (``App.run_test``) against the views fixture:
groups, live refresh, approve/deny/stop/resume writing the control requests a running engine
takes, tail, diff on a real git branch, help, read-only attach to a real tmux session, the
missing-extra message; and snapshot tests (pytest-textual-snapshot) pinning the layout at
80×24 on a fixed clock."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import pty
import select
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for
from support import tui_app
from support import views_fixture as vf
from support.tui_app import make_app
from textual.widgets import DataTable, Log, Static

from supervisor.taskdir.folder import utc_iso
from supervisor.views import actions, attach
from supervisor.views.tui import TopApp
from supervisor.views.tui_screens import ConfirmScreen, TailScreen, TextScreen

fixture = tui_app.fixture  # pytest fixtures, found by name in this module

REPO = Path(__file__).resolve().parent.parent
SIZE = (80, 24)


@pytest.fixture(autouse=True)
def _colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots are in colour: NO_COLOR (which Textual honours) would make them differ."""
    monkeypatch.delenv("NO_COLOR", raising=False)


def sync(test: Callable[..., Any]) -> Callable[..., Any]:
    """Run an ``async def`` test (the pilot is async) on a fresh event loop."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(test(*args, **kwargs))

    return run


def text_of(widget: Static) -> str:
    return str(widget.render())


async def select_task(app: TopApp, pilot: Any, task_id: str) -> None:
    ids = [task_id for task_id, _ in app._order]
    app.query_one(DataTable).move_cursor(row=ids.index(task_id), animate=False)
    await pilot.pause()
    assert app.selected_id() == task_id


def control_files(fixture: vf.Fixture) -> list[str]:
    folder = fixture.state_dir / "control"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ---------------------------------------------------------------- the table


@sync
async def test_groups_in_order_with_titles_and_counts(fixture: vf.Fixture) -> None:
    app = make_app(fixture)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        table = app.query_one(DataTable)
        assert table.row_count == len(vf.TASKS)
        groups = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert [g for g in groups if g] == ["Needs you 1", "Waiting 1", "Running 2",
            "Recovering 2", "Failed 2", "Queued 1", "Done 2"]  # fmt: skip
        assert app.selected_id() == "ask-perm-a1b2c3"  # the one that needs you, on top
        head = text_of(app.query_one("#head", Static))
        assert "engine: not running" in head and "spool: 2 waiting" in head
        assert "cost $1.67" in head
        details = text_of(app.query_one("#details", Static))
        assert "waits for: Bash rm -rf build/" in details
        ids = [str(table.get_row_at(i)[1]) for i in range(table.row_count)]
        assert "evil-name-1d2e3f" in ids  # the task id column (the name shows when wide)


@sync
async def test_manifest_change_shows_within_a_second(fixture: vf.Fixture) -> None:
    app = make_app(fixture, refresh_every=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        path = fixture.state_dir / "tasks" / "later-4a5b6c" / "manifest.json"
        data = json.loads(path.read_text())
        data.update(status="running", launched_at=utc_iso(vf.NOW - 2))
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.rename(tmp, path)  # as the engine writes it: atomically
        table = app.query_one(DataTable)
        await wait_async(pilot, lambda: str(table.get_row("later-4a5b6c")[2]) == "running")


# ---------------------------------------------------------------- requests


@sync
async def test_approve_shows_tool_and_subject_then_writes_the_request(
    fixture: vf.Fixture,
) -> None:
    app = make_app(fixture)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        question = text_of(app.screen.query_one("#question", Static))
        assert "tool:    Bash" in question and "subject: rm -rf build/" in question
        await pilot.press("n")  # said no: nothing written
        await pilot.pause()
        assert control_files(fixture) == []
        await pilot.press("y", "y")
        await pilot.pause()
    assert control_files(fixture) == ["ask-perm-a1b2c3.approve"]
    # the file a running engine's intake takes: supervisor.taskdir.control.pending lists it
    from supervisor.taskdir import control

    assert [(t, v) for t, v, _ in control.pending(fixture.state_dir)] == [
        ("ask-perm-a1b2c3", "approve")]  # fmt: skip


@sync
async def test_deny_stop_resume_and_refusals(fixture: vf.Fixture) -> None:
    app = make_app(fixture)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("n", "y")  # deny the escalated task
        await pilot.pause()
        await select_task(app, pilot, "refactor-0a1b2c")
        await pilot.press("n", "y")  # deny a running task: refused (as 'supervise deny')
        await pilot.pause()
        await pilot.press("r", "y")
        await pilot.pause()
        await select_task(app, pilot, "stuck-loop-9d0e1f")
        await pilot.press("s", "y")
        await pilot.pause()
        # the stop in progress shows: the task moves to Recovering with a mark
        table = app.query_one(DataTable)
        assert str(table.get_row("stuck-loop-9d0e1f")[2]) == "hung*"
        await select_task(app, pilot, "docs-8a9b0c")
        await pilot.press("s", "y")  # an ended task: refused
        await pilot.pause()
    assert control_files(fixture) == [
        "ask-perm-a1b2c3.deny", "refactor-0a1b2c.resume", "stuck-loop-9d0e1f.stop"]  # fmt: skip


def test_ask_refuses_what_the_cli_refuses(fixture: vf.Fixture) -> None:
    done = actions.ask(fixture.state_dir, "docs-8a9b0c", "stop", engine_running=False)
    assert (done.ok, done.message) == (False, "task docs-8a9b0c already ended: completed")
    running = actions.ask(fixture.state_dir, "refactor-0a1b2c", "approve", engine_running=True)
    assert running.message == "task refactor-0a1b2c is running, not escalated: nothing to approve"
    queued = actions.ask(fixture.state_dir, "ask-perm-a1b2c3", "approve", engine_running=False)
    assert queued.ok and "no engine runs" in queued.message and queued.path is not None
    assert control_files(fixture) == ["ask-perm-a1b2c3.approve"]


# ---------------------------------------------------------------- screens


@sync
async def test_tail_follows_output(fixture: vf.Fixture) -> None:
    app = make_app(fixture)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await select_task(app, pilot, "evil-name-1d2e3f")
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, TailScreen)
        log = app.screen.query_one(Log)
        assert [str(line) for line in log.lines] == [
            "starting", "\\x1b]0;pwned\\x07<script>alert(1)</script>", ""]  # fmt: skip
        with open(fixture.state_dir / "tasks" / "evil-name-1d2e3f" / "output.log", "a") as f:
            f.write("one more line\n")
        await wait_async(pilot, lambda: "one more line" in [str(x) for x in log.lines])
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, TailScreen)


async def wait_async(pilot: Any, predicate: Callable[[], bool], timeout: float = 3) -> None:
    for _ in range(round(timeout / 0.05)):  # a limit on the wait, not on the app's speed
        if predicate():
            return
        await pilot.pause(0.05)
    assert predicate(), f"not seen after {timeout} s of pauses"


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()  # fmt: skip


@sync
async def test_diff_shows_the_task_branch_against_its_base(
    fixture: vf.Fixture, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "-b", "supervise/refactor-0a1b2c")
    (repo / "a.txt").write_text("one\ntwo \x1b[31mred\n")
    _git(repo, "commit", "-q", "-am", "task")
    path = fixture.state_dir / "tasks" / "refactor-0a1b2c" / "manifest.json"
    data = json.loads(path.read_text())
    data["workspace"].update(repository=str(repo), base_commit=base, path=str(repo))
    path.write_text(json.dumps(data))
    app = make_app(fixture)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await select_task(app, pilot, "refactor-0a1b2c")
        await pilot.press("d")
        await app.workers.wait_for_complete()
        await wait_async(pilot, lambda: isinstance(app.screen, TextScreen))
        body = text_of(app.screen.query_one("#body", Static))
        assert "+two \\x1b[31mred" in body and "has not ended" in body
        await pilot.press("escape")
        await select_task(app, pilot, "bad-auth-2a3b4c")
        await pilot.press("d")
        await app.workers.wait_for_complete()
        await wait_async(pilot, lambda: isinstance(app.screen, TextScreen))
        body = text_of(app.screen.query_one("#body", Static))
        assert "has no 'workspace' in its manifest" in body


@sync
async def test_help(fixture: vf.Fixture) -> None:
    app = make_app(fixture)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, TextScreen)
        assert "attach read-only" in text_of(app.screen.query_one("#body", Static))
        await pilot.press("s", "y")  # task keys do nothing under the help screen
        await pilot.pause()
        assert isinstance(app.screen, TextScreen)
    assert control_files(fixture) == []


# ---------------------------------------------------------------- attach, no textual


def test_attach_argv_attaches_read_only(socket_name: str, tmp_path: Path) -> None:
    """The argv ``a`` runs, in a real terminal (a pty), makes a read-only tmux client."""
    tmux = shutil.which("tmux") or "tmux"
    subprocess.run([tmux, "-L", socket_name, "new-session", "-d", "-s", "job-1", "sleep 60"],
                   check=True, timeout=10)  # fmt: skip
    pid, fd = pty.fork()
    if pid == 0:  # the child: what TopApp.action_attach runs with the app suspended
        argv = attach.attach_argv(attach.BoundedServer(socket_name), "job-1")
        os.execvpe(argv[0], argv, {**os.environ, "TERM": "xterm"})
    try:

        def clients() -> str:
            out = subprocess.run([tmux, "-L", socket_name, "list-clients", "-F",
                                  "#{session_name} #{client_readonly}"],
                                 capture_output=True, text=True, timeout=10)  # fmt: skip
            while select.select([fd], [], [], 0)[0]:
                try:
                    os.read(fd, 65536)
                except OSError:
                    break
            return out.stdout.strip()

        assert wait_for(clients, timeout=60) == "job-1 1"
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.close(fd)


def test_top_without_textual_names_the_extra(fixture: vf.Fixture) -> None:
    code = ("import sys; sys.modules['textual'] = None\n"
            "from supervisor.cli import main\n"
            f"sys.exit(main(['top', '-c', {str(fixture.profile)!r}]))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=REPO)  # fmt: skip
    assert out.returncode == 1
    assert (
        out.stderr
        == "supervise top needs the 'tui' extra (Textual): pip install 'supervise-agents[tui]'\n"
    )


def test_core_commands_never_import_textual(fixture: vf.Fixture) -> None:
    code = (
        "import sys\nfrom supervisor.cli import main\n"
        f"main(['status', '-c', {str(fixture.profile)!r}])\n"
        "assert not any(m.split('.')[0] in ('textual', 'rich') for m in sys.modules), 'leak'"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=REPO)  # fmt: skip
    assert out.returncode == 0, out.stderr


# ---------------------------------------------------------------- snapshots


def test_snapshot_top(fixture: vf.Fixture, snap_compare: Any) -> None:
    assert snap_compare(make_app(fixture), terminal_size=SIZE)


def test_snapshot_approve_dialog(fixture: vf.Fixture, snap_compare: Any) -> None:
    assert snap_compare(make_app(fixture), press=["y"], terminal_size=SIZE)


def test_snapshot_help(fixture: vf.Fixture, snap_compare: Any) -> None:
    assert snap_compare(make_app(fixture), press=["question_mark"], terminal_size=SIZE)


def test_screenshot_for_the_readme(fixture: vf.Fixture, tmp_path: Path) -> None:
    """docs/top.svg is what this renders (regenerate: SUPERVISE_WRITE_DOCS=1)."""

    async def shoot() -> str:
        app = make_app(fixture)
        async with app.run_test(size=(100, 24)) as pilot:
            await pilot.pause()
            return app.export_screenshot(title="supervise top -c profile.toml")

    svg = asyncio.run(shoot())
    target = REPO / "docs" / "top.svg"
    if os.environ.get("SUPERVISE_WRITE_DOCS") == "1":
        target.write_text(svg, encoding="utf-8")
    assert target.read_text(encoding="utf-8") == svg, (
        "docs/top.svg is out of date; regenerate with SUPERVISE_WRITE_DOCS=1"
    )
