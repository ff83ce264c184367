"""The engine's tmux calls through one control-mode client (issue 24), against real tmux:
replies reach their callers (16 threads at once, ``%`` lines in the output), a killed
server fails the callers and the client reconnects to a new one, a stopped server times
out and recovers, the client's own session is never a task and never outlives it, and
``SUPERVISE_TMUX_CONTROL=0`` falls back to client processes."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from conftest import Setup, read_line, wait_for

from supervisor.engine.panes import Sessions
from supervisor.tmux import (
    CONTROL_ENV,
    ControlEvent,
    Tmux,
    TmuxError,
    TmuxResult,
    TmuxTimeout,
    tmux_binary,
)

TMUX = tmux_binary()


def _tmux(socket: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One client process, as a person (or another program) would run it."""
    return subprocess.run([TMUX, "-L", socket, *args], capture_output=True, text=True, timeout=20)


def _connection(events: list[ControlEvent]) -> list[str]:
    """The connection's own events, in order (notifications left out)."""
    return [e.kind for e in events if e.kind in ("connected", "disconnected", "reconnected")]


def _server_pid(socket: str) -> int:
    return int(_tmux(socket, "display-message", "-p", "#{pid}").stdout)


@pytest.fixture(autouse=True)
def _control_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Control mode is opt-in (``control_enabled``); these tests are about it."""
    monkeypatch.setenv(CONTROL_ENV, "1")


@pytest.fixture
def live(socket_name: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A server with one task-like session ``a`` and a connected ``Tmux(control=True)``."""
    assert _tmux(socket_name, "new-session", "-d", "-s", "a", "sleep 600").returncode == 0
    # The product's bound (5 s): a loaded machine's real tmux may take more than 2 s.
    tmux = Tmux(socket_name, owner=None, control=True)
    events: list[ControlEvent] = []
    tmux.subscribe(events.append)
    assert tmux.cmd("display-message", "-p", "x").stdout == ["x"]
    assert tmux.control_live
    try:
        yield tmux, events
    finally:
        tmux.shutdown()


def test_commands_round_trip(live: tuple[Tmux, list[ControlEvent]]) -> None:
    tmux, events = live
    assert tmux.cmd("display-message", "-p", "it's a ; b").stdout == ["it's a ; b"]
    chained = tmux.cmd("display-message", "-p", "1", ";", "display-message", "-p", "2")
    assert (chained.returncode, chained.stdout) == (0, ["1", "2"])
    failed = tmux.cmd("display-message", "-p", "1", ";", "has-session", "-t", "=nope")
    assert (failed.returncode, failed.stdout, failed.stderr) == (
        1,
        ["1"],
        ["can't find session: nope"],
    )
    assert tmux.has_session("a") and not tmux.has_session("nope")
    assert tmux.control_live, "the calls went through the control client"
    assert _connection(events) == ["connected"]


def test_a_line_that_cannot_be_one_goes_through_a_client_process(
    live: tuple[Tmux, list[ControlEvent]],
) -> None:
    tmux, _ = live
    assert tmux.cmd("set-buffer", "-b", "nl", "--", "a\nb").returncode == 0
    assert tmux.cmd("show-buffer", "-b", "nl").stdout == ["a", "b"]


def test_sixteen_threads_get_their_own_replies(live: tuple[Tmux, list[ControlEvent]]) -> None:
    tmux, _ = live
    wrong: list[tuple[str, list[str]]] = []

    def caller(n: int) -> None:
        for k in range(40):
            want = f"thread-{n}-call-{k}"
            got = tmux.cmd("display-message", "-p", want).stdout
            if got != [want]:
                wrong.append((want, got))

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert wrong == [] and tmux.control_live


def test_percent_lines_in_a_pane_come_back_verbatim(
    live: tuple[Tmux, list[ControlEvent]], socket_name: str
) -> None:
    """An agent printing control-mode guard lines, read by ``capture-pane`` through the
    control client: returned as printed, and the next call still gets its own reply."""
    tmux, _ = live
    printed = ["%end 1 2 1", "%begin 1795687305 264 1", "%exit", "%error 1795687305 264 1"]
    script = "printf '%s\\n' " + " ".join(f"'{line}'" for line in printed) + "; sleep 600"
    assert _tmux(socket_name, "new-session", "-d", "-s", "p", script).returncode == 0
    wait_for(lambda: "%error" in tmux.capture("p"))
    assert tmux.capture("p").splitlines()[:4] == printed
    assert tmux.cmd("display-message", "-p", "after").stdout == ["after"]
    assert tmux.control_live


def test_a_killed_server_fails_the_callers_and_the_client_reconnects(
    live: tuple[Tmux, list[ControlEvent]], socket_name: str
) -> None:
    tmux, events = live
    outcome: list[BaseException] = []

    def blocked() -> None:  # waits in tmux until the server dies
        try:
            tmux.cmd("wait-for", "never-signalled")
        except TmuxError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=blocked)
    caller.start()
    wait_for(lambda: _tmux(socket_name, "list-clients").stdout.strip())
    os.kill(_server_pid(socket_name), signal.SIGKILL)
    caller.join(timeout=10)
    assert not caller.is_alive() and len(outcome) == 1, "the caller hung"
    wait_for(lambda: not tmux.control_live)
    assert not tmux.has_session("a")  # a client process: no server, no session
    assert _tmux(socket_name, "new-session", "-d", "-s", "b", "sleep 600").returncode == 0
    wait_for(lambda: tmux.has_session("b") and tmux.control_live)
    assert _connection(events) == ["connected", "disconnected", "reconnected"]


def test_a_stopped_server_times_out_then_recovers(
    live: tuple[Tmux, list[ControlEvent]], socket_name: str
) -> None:
    tmux, events = live
    tmux.timeout = 2.0  # short, for the stopped server (read at each command)
    server = _server_pid(socket_name)
    os.kill(server, signal.SIGSTOP)
    try:
        with pytest.raises(TmuxTimeout, match="did not answer within 2 s"):
            tmux.cmd("display-message", "-p", "x")
        assert not tmux.control_live  # the wedged client is closed
    finally:
        os.kill(server, signal.SIGCONT)
    wait_for(lambda: tmux.cmd("display-message", "-p", "y").stdout == ["y"] and tmux.control_live)
    assert _connection(events) == ["connected", "disconnected", "reconnected"]


def test_the_control_session_is_never_a_task(
    live: tuple[Tmux, list[ControlEvent]], socket_name: str
) -> None:
    tmux, _ = live
    listed = _tmux(socket_name, "list-sessions", "-F", "#{session_name} #{@supervise_control}")
    assert len(listed.stdout.splitlines()) == 2, listed.stdout  # a and the control session
    assert list(tmux.panes()) == ["a"] and list(tmux.panes(everyone=True)) == ["a"]
    control = next(row.split()[0] for row in listed.stdout.splitlines() if not row.startswith("a "))
    assert tmux.pane(control) is None and tmux.pane("a") is not None
    owned = Tmux(socket_name, owner="/some/state", control=True)
    try:
        assert owned.panes(everyone=True).keys() == {"a"}
    finally:
        owned.shutdown()


def test_shutdown_leaves_no_control_session(
    live: tuple[Tmux, list[ControlEvent]], socket_name: str
) -> None:
    tmux, _ = live
    tmux.shutdown()
    assert _tmux(socket_name, "list-sessions", "-F", "#{session_name}").stdout.split() == ["a"]
    assert tmux.cmd("display-message", "-p", "z").stdout == ["z"] and not tmux.control_live


HOLDER = """
import sys, time
from supervisor.tmux import Tmux
tmux = Tmux(sys.argv[1], control=True)
assert tmux.cmd("display-message", "-p", "x").stdout == ["x"] and tmux.control_live
print("ready", flush=True)
time.sleep(600)
"""


def test_sigkill_of_the_holder_leaves_no_session_and_no_server(socket_name: str) -> None:
    """The engine SIGKILLed: its control client reads EOF and leaves, its session's pane
    (watching the engine's PID) ends, and the server, empty now, exits."""
    assert _tmux(socket_name, "new-session", "-d", "-s", "a", "sleep 600").returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, socket_name], stdout=subprocess.PIPE, text=True
    )
    try:
        assert read_line(holder.stdout) == "ready\n"
        clients = [p for p in psutil.Process(holder.pid).children() if "-C" in p.cmdline()]
        assert len(clients) == 1
        assert _tmux(socket_name, "kill-session", "-t", "=a").returncode == 0
        assert _tmux(socket_name, "list-sessions").returncode == 0  # the control session
        holder.kill()
        holder.wait(timeout=10)
        wait_for(lambda: _tmux(socket_name, "list-sessions").returncode != 0)
        wait_for(lambda: not clients[0].is_running())
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)


CHURN = """
import sys
from supervisor.tmux import Tmux
tmux = Tmux(sys.argv[1], control=True)
round = 0
while True:
    for name in ("x0", "x1", "x2"):
        tmux.cmd("new-session", "-d", "-s", name, "sleep 5", ";", "set-option", "-w", "-t",
                 f"={name}:", "remain-on-exit", "on", ";", "pipe-pane", "-t", f"={name}:",
                 "cat > /dev/null")
        tmux.cmd("respawn-pane", "-k", "-t", f"={name}:", "sleep 3")
        tmux.cmd("pipe-pane", "-t", f"={name}:")
        tmux.cmd("kill-session", "-t", f"={name}")
        tmux.panes()
    round += 1
    if round == 2:
        print("ready", flush=True)
"""


def test_sigkill_of_a_busy_holder_never_takes_the_server_down(socket_name: str) -> None:
    """An engine SIGKILLed while its control client creates, respawns, pipes and kills
    sessions: every other session lives on. With ``destroy-unattached`` on the control
    session, tmux 3.3a's server segfaulted within 2-3 such kills (``dmesg``), taking every
    agent with it."""
    assert _tmux(socket_name, "new-session", "-d", "-s", "bystander", "sleep 600").returncode == 0
    for _ in range(8):
        holder = subprocess.Popen(
            [sys.executable, "-c", CHURN, socket_name], stdout=subprocess.PIPE, text=True
        )
        try:
            assert read_line(holder.stdout) == "ready\n"
        finally:
            holder.kill()
            holder.wait(timeout=10)
        assert _tmux(socket_name, "has-session", "-t", "=bystander").returncode == 0
    # and no control client outlives its holder (tmux 3.3a keeps one whose output is queued)
    wait_for(lambda: not _control_clients(socket_name), timeout=60)


def _control_clients(socket_name: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info["cmdline"] or []
        if "-C" in argv and socket_name in argv:
            found.append(proc.info["pid"])
    return found


def test_control_off_falls_back_to_client_processes(
    socket_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONTROL_ENV, "0")
    assert _tmux(socket_name, "new-session", "-d", "-s", "a", "sleep 600").returncode == 0
    tmux = Tmux(socket_name, control=True)
    assert tmux.cmd("display-message", "-p", "x").stdout == ["x"]
    assert not tmux.control_live and list(tmux.panes()) == ["a"]
    assert _tmux(socket_name, "list-sessions", "-F", "#{session_name}").stdout.split() == ["a"]


def test_the_control_client_never_starts_a_server(socket_name: str) -> None:
    tmux = Tmux(socket_name, control=True)
    assert tmux.panes() == {} and not tmux.control_live
    assert _tmux(socket_name, "list-sessions").returncode != 0


def test_the_session_list_lasts_until_tmux_says_it_changed(
    live: tuple[Tmux, list[ControlEvent]], socket_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a live control client the snapshot is not refreshed by age (no ``list-panes``
    poll), only after a notification: another client's new session is seen."""
    tmux, _ = live
    sessions = Sessions(tmux)
    queries: list[int] = []
    real = tmux.panes
    monkeypatch.setattr(tmux, "panes", lambda: queries.append(1) or real())
    assert list(sessions.get(max_age=0.0)) == ["a"]
    assert list(sessions.get(max_age=0.0)) == ["a"] and len(queries) == 1
    assert _tmux(socket_name, "new-session", "-d", "-s", "b", "sleep 600").returncode == 0
    wait_for(lambda: "b" in sessions.get(max_age=0.0))
    assert _tmux(socket_name, "kill-session", "-t", "=b").returncode == 0
    wait_for(lambda: "b" not in sessions.get(max_age=0.0))
    calls = len(queries)
    sessions.get(max_age=0.0)
    assert len(queries) == calls  # quiet again: no query


def test_without_control_the_session_list_expires(socket_name: str) -> None:
    assert _tmux(socket_name, "new-session", "-d", "-s", "a", "sleep 600").returncode == 0
    tmux = Tmux(socket_name, control=False)
    sessions = Sessions(tmux)
    first = sessions.get()
    assert sessions.get(max_age=0.0) is not first  # refreshed: nothing vouches for it


def test_a_pane_that_died_is_seen_fresh(
    live: tuple[Tmux, list[ControlEvent]], socket_name: str
) -> None:
    """No notification says a pane died (``remain-on-exit``): :meth:`Tmux.pane` asks."""
    tmux, _ = live
    sessions = Sessions(tmux)
    started = _tmux(socket_name, "new-session", "-d", "-s", "d", "read line")
    started = _tmux(socket_name, "set-option", "-w", "-t", "=d:", "remain-on-exit", "on")
    assert started.returncode == 0
    wait_for(lambda: "d" in sessions.get(max_age=0.0))
    assert not sessions.get()["d"].dead
    _tmux(socket_name, "send-keys", "-t", "=d:", "Enter")
    pane = wait_for(lambda: (found := tmux.pane("d")) is not None and found.dead and found)
    assert pane.session == "d" and tmux.pane("nope") is None


SUPERVISOR = Path(__file__).resolve().parent.parent / "supervisor"
#: Who may list every pane (``Tmux.panes``, ``list-panes -a``): the session list's refresh
#: after a notification, adoption at start, and a launch that tmux refused (is the
#: session there already?). The check path asks for one session (``Tmux.pane``).
LISTERS = {"engine/panes.py", "engine/recovery.py", "engine/launch.py"}


def test_only_the_snapshot_refresh_lists_panes() -> None:
    """``list-panes`` is sent by ``Tmux.panes`` alone, which only the session list's
    refresh, adoption and a refused launch call: no check polls it."""
    sends, calls = set(), set()
    for path in sorted(SUPERVISOR.rglob("*.py")):
        name = path.relative_to(SUPERVISOR).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value == "list-panes":
                sends.add(name)
            if isinstance(node, ast.Attribute) and node.attr == "panes":
                calls.add(name)
    assert sends == {"tmux/client.py"}
    assert calls - {"tmux/client.py"} <= LISTERS, calls


def test_both_paths_return_the_same_bytes(
    live: tuple[Tmux, list[ControlEvent]], socket_name: str
) -> None:
    """A pane holding UTF-8, colour escapes, a C1 control, bytes that are not UTF-8 and a
    guard line reads the same through the control client as through a client process;
    an argument of 200 KB travels as one line and back."""
    tmux, _ = live
    script = r"printf 'caf\303\251 \033[31mred\033[0m \302\233x \377\376 bad\n%%end 1 2 1\n'"
    assert (
        _tmux(socket_name, "new-session", "-d", "-s", "u", f"{script}; sleep 600").returncode == 0
    )
    wait_for(lambda: "%end" in tmux.capture("u"))
    assert tmux.capture("u") == Tmux(socket_name).capture("u")
    assert tmux.capture("u").startswith("café red")
    big = "x" * 200_000
    assert tmux.cmd("set-buffer", "-b", "big", "--", big).returncode == 0
    assert tmux.cmd("show-buffer", "-b", "big").stdout == [big] and tmux.control_live


def test_the_control_session_lives_on_a_path_without_sleep(
    socket_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server and the engine run with a ``PATH`` holding only tmux (found by
    ``test_disk``'s ``sed -u`` run): the control session's pane must still wait, not end
    at once and take the session, and the control client, with it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tmux").symlink_to(TMUX)
    env = {**os.environ, "PATH": str(bin_dir)}
    started = subprocess.run(
        ["tmux", "-L", socket_name, "new-session", "-d", "-s", "a", "read line"], env=env
    )
    assert started.returncode == 0
    monkeypatch.setenv("PATH", str(bin_dir))
    tmux = Tmux(socket_name, control=True)
    try:
        assert tmux.cmd("display-message", "-p", "x").stdout == ["x"] and tmux.control_live
        rows = _tmux(socket_name, "list-panes", "-a", "-F", "#{session_name} #{pane_pid}")
        pid = next(int(r.split()[1]) for r in rows.stdout.splitlines() if not r.startswith("a "))
        # the pane's shell execs this Python, watching its holder; under load the look can
        # come before the exec, so wait for it (an exec that never comes still fails here)
        wait_for(lambda: psutil.Process(pid).cmdline()[:1] == [sys.executable])
        assert str(os.getpid()) in psutil.Process(pid).cmdline()
        assert tmux.cmd("display-message", "-p", "y").stdout == ["y"] and tmux.control_live
    finally:
        tmux.shutdown()


def test_a_failed_look_at_one_pane_is_no_verdict(
    socket_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Tmux.pane`` reads "no server"/"can't find" as a session that is gone, and any
    other failure as an error: a dead agent's session read as lost would be resumed."""
    tmux = Tmux(socket_name)
    assert tmux.pane("a") is None  # no server at all
    answer = TmuxResult(1, [], ["client is exiting"])
    monkeypatch.setattr(tmux, "cmd", lambda *args: answer)
    with pytest.raises(TmuxError, match="client is exiting"):
        tmux.pane("a")


def test_the_engine_talks_through_one_control_client(setup: Setup) -> None:
    """``supervise run``: while a task runs, the server holds the engine's control session
    beside the task's; once the engine has ended, neither it nor the server is left. A live
    agent's check asks tmux nothing, so the client connects at the first ending (``a``'s),
    and ``b`` keeps the engine running meanwhile."""
    setup.write_profile(base_interval=0.3)
    setup.drop("a.toml", setup.task("a", "tick: 0.2\nsleep: 1\nexit: 0", setup.project / "a"))
    setup.drop("b.toml", setup.task("b", "sleep: 8\nexit: 0", setup.project / "b"))
    argv = [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile), "--exit-when-idle"]
    engine = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def names() -> list[str]:
            listed = setup.tmux("list-sessions", "-F", "#{session_name}")
            return listed.stdout.split() if listed.returncode == 0 else []

        seen = wait_for(lambda: [n for n in names() if n.startswith("supervise_ctl-")], timeout=30)
        assert len(seen) == 1
        assert engine.wait(timeout=60) == 0
        wait_for(lambda: setup.tmux("list-sessions").returncode != 0, timeout=60)
        assert {m["status"] for m in setup.manifests().values()} == {"completed"}
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait(timeout=10)
