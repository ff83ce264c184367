"""The operator's tmux calls through libtmux (:mod:`supervisor.views.attach`): bounded like
the engine's, so a stopped tmux server (SIGSTOP: it accepts the connection and never
answers) makes ``supervise attach`` and ``supervise top``'s ``a`` say so instead of hanging;
and the tmux binary has one owner (:func:`supervisor.tmux.tmux_binary`).

The servers are conftest's ``tmux_server`` (libtmux's pytest plugin: a private socket,
killed after the test); each test continues a server it stopped before that teardown runs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import Setup
from libtmux.server import Server

from supervisor import tmux as tmux_module
from supervisor.views import attach

SUPERVISOR = Path(__file__).resolve().parent.parent / "supervisor"
#: The modules that may look tmux up: the one owner, and the in-pane wrapper.
LOOKUPS = ("tmux/basics.py", "wrapper.py")


@contextmanager
def stopped(server: Server) -> Iterator[None]:
    """The tmux server held with SIGSTOP for the block, then continued."""
    pid = int(server.cmd("display-message", "-p", "#{pid}").stdout[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_bounded_server_is_a_libtmux_server_with_our_bound(tmux_server: Server) -> None:
    tmux_server.new_session(session_name="job-1", window_command="sleep 600")
    # The live server's answers through a generous bound (a loaded machine can keep a real
    # tmux from answering within 0.5 s); the stopped one's through a short one.
    generous = attach.BoundedServer(str(tmux_server.socket_name), timeout=30)
    assert isinstance(generous, Server) and generous.bounded.timeout == 30
    assert attach.attach_problem(generous, "job-1") is None
    assert attach.attach_problem(generous, "job-2") == (
        f"no tmux session job-2 on tmux socket {tmux_server.socket_name}"
    )
    bounded = attach.BoundedServer(str(tmux_server.socket_name), timeout=0.5)
    assert bounded.bounded.timeout == 0.5
    with stopped(tmux_server):
        problem = attach.attach_problem(bounded, "job-1")
        with pytest.raises(tmux_module.TmuxTimeout):
            bounded.cmd("list-sessions")
    assert problem is not None and "did not answer within 0.5 s" in problem


def test_attach_argv_uses_the_one_tmux_binary(
    tmux_server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    named = tmp_path / "my-tmux"
    monkeypatch.setenv(tmux_module.TMUX_ENV, str(named))
    bounded = attach.BoundedServer(str(tmux_server.socket_name))
    argv = [str(named), "-L", str(tmux_server.socket_name), "attach-session", "-r", "-t", "=job-1"]
    assert attach.attach_argv(bounded, "job-1") == argv
    assert "-r" not in attach.attach_argv(bounded, "job-1", read_only=False)


def test_supervise_attach_to_a_stopped_server_says_so(setup: Setup, tmux_server: Server) -> None:
    setup.write_profile()
    folder = setup.state / "tasks" / "job-1"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"task_id": "job-1"}))
    tmux_server.new_session(session_name="job-1", window_command="sleep 600")
    with stopped(tmux_server):
        done = setup.supervise("attach", "-c", str(setup.profile), "job-1")
    assert done.returncode == 1
    assert done.stderr.startswith("supervise attach: tmux has-session on socket ")
    assert "did not answer" in done.stderr
    answered = setup.supervise("attach", "-c", str(setup.profile), "-r", "job-1")
    assert "not a terminal" in answered.stderr  # checked, then tmux ran (no tty here)


def test_top_attach_to_a_stopped_server_notifies_and_stays(
    tmp_path: Path, tmux_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("textual")
    from support import views_fixture as vf

    from supervisor.views import tui

    ran: list[Any] = []
    monkeypatch.setattr(tui.TopApp, "_attach_now", lambda self, *args: ran.append(args))
    fixture = vf.build(tmp_path)
    tmux_server.new_session(session_name="refactor-0a1b2c", window_command="sleep 600")
    socket = str(tmux_server.socket_name)
    app = tui.TopApp(
        fixture.state_dir, fixture.spool_dir, socket, clock=lambda: vf.NOW, refresh_every=None
    )

    async def drive() -> list[str]:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            ids = [task_id for task_id, _ in app._order]
            app.query_one("DataTable").move_cursor(row=ids.index("refactor-0a1b2c"))
            await pilot.pause()
            with stopped(tmux_server):
                await pilot.press("a")
                await app.workers.wait_for_complete()
                await pilot.pause()
            messages = [str(n.message) for n in app._notifications]
            assert ran == []  # never suspended the app to run an attach that would hang
            await pilot.press("a")  # the server answers again: the attach goes ahead
            await app.workers.wait_for_complete()
            await pilot.pause()
            return messages

    messages = asyncio.run(drive())
    assert any("did not answer" in m for m in messages), messages
    assert ran == [
        ("refactor-0a1b2c", attach.attach_argv(attach.BoundedServer(socket), "refactor-0a1b2c"))
    ]


def test_the_tmux_binary_has_one_owner() -> None:
    """Only ``supervisor/tmux/basics.py`` looks tmux up (``$SUPERVISE_TMUX``, else PATH); the
    in-pane wrapper (standard library only, run with ``-I -S``) reads the variable the
    engine sets for it."""
    lookup = re.compile(r"""which\(\s*["']tmux["']|["']SUPERVISE_TMUX["']""")
    found = [
        f"{path.relative_to(SUPERVISOR)}:{n}"
        for path in sorted(SUPERVISOR.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if lookup.search(line) and path.relative_to(SUPERVISOR).as_posix() not in LOOKUPS
    ]
    assert found == []
