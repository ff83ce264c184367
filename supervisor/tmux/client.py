"""The engine's tmux calls, on the profile's private socket (``tmux -L NAME``).

With ``control=True`` (the engine) a call is a line to one persistent control-mode client
(:mod:`supervisor.tmux.control`); otherwise, and whenever that client is not connected,
each call forks one ``tmux`` client (measured 2.5–17 ms here, see DESIGN.md), so related
commands are chained with tmux's ``;`` separator into one invocation. Each call runs under
a timeout (:data:`TMUX_TIMEOUT`): a tmux server that does not answer (stopped, wedged on a
full pipe, swapped out) raises :class:`TmuxTimeout`, which the engine logs as a fault and
looks at again later, instead of waiting for ever in ``communicate()`` as libtmux's
``Server.cmd`` does (it passes no timeout). The operator's calls (attach from ``supervise
attach`` and ``supervise top``) use libtmux's typed objects behind the same bound
(:mod:`supervisor.views.attach`).

Which tmux runs is :func:`tmux_binary`, for every caller. The pipe-pane filter that writes
``output.log`` lives in :mod:`supervisor.capture`.
"""

from __future__ import annotations

import logging
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from supervisor import wrapper
from supervisor.capture import pipe_command
from supervisor.rlimits import raise_nofile
from supervisor.taskdir import layout
from supervisor.tmux.basics import (
    TMUX_ENV,
    TMUX_TIMEOUT,
    TmuxError,
    TmuxResult,
    TmuxTimeout,
    decode_lines,
    retry_lost_server,
    tmux_binary,
)
from supervisor.tmux.control import CONTROL_OPTION, Listener, control_enabled, is_control
from supervisor.tmux.link import ControlLink
from supervisor.tmux.protocol import command_line

PANE_WIDTH = 220
PANE_HEIGHT = 50
#: tmux user option set on each session at creation: the absolute ``state_dir`` of the
#: engine that owns it. Engines sharing one server never adopt, respawn or kill a session
#: whose mark is not their own (issue 10).
OWNER_OPTION = "@supervise_state_dir"


log = logging.getLogger("supervisor.tmux")


#: Wrapper files that a full disk may send to pane options instead (wrapper.py, step 5).
RECORDED_FILES = layout.RUN_FILES
#: The fields of one pane row: session, pane PID, dead flag, control mark, the recorded
#: run files, then the owner mark (last: a path may hold a tab).
_PANE_FORMAT = "\t".join(
    [
        "#{session_name}",
        "#{pane_pid}",
        "#{pane_dead}",
        f"#{{{CONTROL_OPTION}}}",
        *(f"#{{{wrapper.PANE_OPTION_PREFIX}{name}}}" for name in RECORDED_FILES),
        f"#{{{OWNER_OPTION}}}",
    ]
)
_PANE_FIELDS = 5 + len(RECORDED_FILES)
#: tmux's messages for a target that is not there (tmux 3.3a, client.c and cmd-find.c).
_GONE = re.compile(r"no server running|error connecting|can't find|no such")


@dataclass(frozen=True)
class PaneInfo:
    """One row of ``list-panes -a``: session name, the pane's first process, dead flag, and
    the session's owner mark (:data:`OWNER_OPTION`; ``""`` when unset), and ``recorded``:
    the wrapper files it could not write, kept as pane options
    (``{"exit_code": "0", "done": "1763850000.123456"}``; empty in the normal case)."""

    session: str
    pane_pid: int | None
    dead: bool
    owner: str = ""
    recorded: dict[str, str] = field(default_factory=dict)


def gate_channel(session: str) -> str:
    """The ``tmux wait-for`` channel the wrapper waits on before starting the agent."""
    return f"supervise-go-{session}"


def wrapper_command(task_dir: Path, gate: str | None) -> str:
    """The pane command: run :mod:`supervisor.wrapper` by path with this Python.

    ``-I -S``: isolated, no site import; the wrapper uses only the standard library. Only
    our own paths appear here (quoted); task values travel in ``launch.json``.
    """
    parts = [sys.executable, "-I", "-S", wrapper.__file__, str(task_dir)]
    if gate:
        parts.append(gate)
    return "exec " + shlex.join(parts)


class Tmux:
    """A private tmux server (``tmux -L socket_name``).

    Args:
        socket_name: the profile's ``[tmux] socket_name``; never the default server.
        owner: the owner mark for sessions this object creates (the engine's absolute
            ``state_dir``). When given, :meth:`panes` lists only sessions carrying it, and
            :meth:`respawn`, :meth:`close` and :meth:`send_keys` leave other sessions alone.
            ``None``: no ownership (every session counts as ours).
        timeout: seconds each tmux client may take (:data:`TMUX_TIMEOUT`).
        scope: argv prefix for the client that starts the server, when :meth:`launch`
            finds none running (:func:`supervisor.systemd.scope_prefix`: ``systemd-run
            --user --scope``, so the server lives outside the login's scope); ``()``: none.
        control: send commands through one control-mode client (the engine's many calls;
            off when ``$SUPERVISE_TMUX_CONTROL`` is ``0``). It connects once a server runs
            (it never starts one), reconnects after it died, and calls use client processes
            meanwhile. Call :meth:`shutdown` when done.

    Every method may raise :class:`TmuxTimeout` (even those that otherwise ignore tmux's
    errors): an unanswered query must never read as "no such session".
    """

    def __init__(
        self,
        socket_name: str,
        owner: str | None = None,
        timeout: float = TMUX_TIMEOUT,
        scope: Sequence[str] = (),
        control: bool = False,
    ) -> None:
        self.socket_name = socket_name
        self.owner = owner
        self.timeout = timeout
        self.scope = list(scope)
        self.binary = tmux_binary()
        self._limits_of = 0  # the server PID whose open-file limit was raised
        self._link = (
            ControlLink(self.binary, socket_name, owner or socket_name, timeout)
            if control and control_enabled()
            else None
        )

    def cmd(self, *args: str, prefix: Sequence[str] = ()) -> TmuxResult:
        """Run ``tmux -L socket_name ARGS...`` with the timeout: a line to the control
        client when one is connected and the argv fits one line
        (:func:`~supervisor.tmux.protocol.command_line`), else one client process, behind
        ``prefix`` when given (``systemd-run ... --``; the timeout covers both).

        Raises:
            TmuxTimeout: no answer within ``timeout`` seconds (a client process is killed;
                the control client is closed).
            TmuxError: the tmux executable cannot be run, or the control client ended
                before the reply.
        """
        if self._link is not None and not prefix:
            line = command_line(args)
            client = self._link.client() if line is not None else None
            if client is not None and line is not None:
                return client.run(line, self.timeout, args[0])
        return self._process(args, prefix)

    def _process(self, args: Sequence[str], prefix: Sequence[str]) -> TmuxResult:
        """One tmux client process (see :meth:`cmd`)."""
        argv = [*prefix, self.binary, "-L", self.socket_name, *args]
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=self.timeout
            )
        except subprocess.TimeoutExpired:
            raise TmuxTimeout(
                f"tmux {args[0]} on socket {self.socket_name} did not answer within "
                f"{self.timeout:g} s"
            ) from None
        except OSError as exc:
            raise TmuxError(f"cannot run {self.binary}: {exc.strerror}") from None
        stdout = decode_lines(done.stdout)
        while stdout and stdout[-1] == "":
            stdout.pop()
        stderr = [line for line in decode_lines(done.stderr) if line]
        return TmuxResult(done.returncode, stdout, stderr)

    def _run(self, *args: str, check: bool = True) -> list[str]:
        result = self.cmd(*args)
        if check and result.returncode != 0:
            raise TmuxError(f"tmux {args[0]} failed: {' '.join(result.stderr).strip()}")
        return list(result.stdout)

    def server_running(self) -> bool:
        """Whether a server answers on the socket (``list-sessions`` succeeds: tmux exits 1
        with "no server running" or "error connecting" when none does).

        Raises:
            TmuxTimeout: a server exists but does not answer.
        """
        return self.cmd("list-sessions", "-F", "#{session_name}").returncode == 0

    def _launch_scoped(self, args: Sequence[str]) -> list[str] | None:
        """Run the ``new-session`` client ``args`` through :attr:`scope` when no server runs
        yet, so the server it starts is born in its own systemd scope. Returns its output
        when it did; ``None`` (nothing started) when there is no scope, a server already
        runs, or ``systemd-run`` failed (no user manager reachable: logged, and the caller
        starts the server plainly)."""
        if not self.scope or self.server_running():
            return None
        result = self.cmd(*args, prefix=self.scope)
        if result.returncode == 0:
            return result.stdout
        if self.server_running():  # systemd-run worked; tmux refused: report tmux's error
            raise TmuxError(f"tmux new-session failed: {' '.join(result.stderr).strip()}")
        log.warning(
            "could not start the tmux server in its own systemd scope (%s); "
            "starting it in this process's cgroup: agents end with this login if "
            "logind kills user processes",
            " ".join(result.stderr).strip(),
        )
        return None

    def launch(self, session: str, task_dir: Path, start_dir: Path) -> None:
        """Create a detached session running the wrapper, with output capture in place.

        One tmux invocation creates the session (remain-on-exit on, so a crashed agent's
        pane stays for ``respawn-pane``), attaches pipe-pane and then opens the wrapper's
        gate, so the agent starts only after the pipe exists.

        Raises:
            TmuxError: tmux refused (e.g. a session of that name exists).
        """
        gate = gate_channel(session)
        args = (
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            str(PANE_WIDTH),
            "-y",
            str(PANE_HEIGHT),
            "-c",
            str(start_dir),
            "-e",
            f"{TMUX_ENV}={self.tmux_bin()}",
            wrapper_command(task_dir, gate),
            *self._mark(session),
            ";",
            "set-option",
            "-w",
            "-t",
            f"={session}:",
            "remain-on-exit",
            "on",
            # Claude Code's TUI prints a notice over its screen when focus events are off.
            ";",
            "set-option",
            "-g",
            "focus-events",
            "on",
            ";",
            "pipe-pane",
            "-t",
            f"={session}:",
            pipe_command(task_dir / layout.OUTPUT),
            ";",
            "display-message",
            "-p",
            "#{pid}",  # the server's PID, for its limits
            ";",
            "wait-for",
            "-S",
            gate,
        )
        printed = retry_lost_server(lambda: self._start_session(args), session)
        self._check_limits(printed)

    def _start_session(self, args: Sequence[str]) -> list[str]:
        """Run the ``new-session`` ``args``: in a systemd scope when that starts the
        server (:meth:`_launch_scoped`), else plainly. Returns tmux's output lines."""
        printed = self._launch_scoped(args)
        return self._run(*args) if printed is None else printed

    def _check_limits(self, printed: list[str]) -> None:
        """Raise the open-file limit of the server whose PID ``launch`` printed, once per
        server (:func:`raise_nofile`)."""
        pid = printed[-1].strip() if printed else ""
        if pid.isdigit() and int(pid) != self._limits_of:
            self._limits_of = int(pid)
            raise_nofile(int(pid))

    def respawn(self, session: str, task_dir: Path, start_dir: Path) -> None:
        """Run the wrapper again in the session's (dead or hung) pane: ``respawn-pane -k``.

        tmux keeps a pane's pipe across ``respawn-pane``, but the pipe may have died with the
        old run, so pipe-pane is replaced (without ``-o``, which would toggle it off), then
        the gate opens.

        Raises:
            TmuxError: the session is gone, or another engine owns it (its agent is never
                killed by ``-k``).
        """
        if not self.owns(session):
            raise TmuxError(f"tmux session {session} belongs to another state_dir")
        gate = gate_channel(session)
        # The previous run's end, if a full disk sent it to pane options, is not this run's.
        unset = [
            arg
            for name in RECORDED_FILES
            for arg in (
                "set-option",
                "-p",
                "-u",
                "-t",
                f"={session}:",
                wrapper.PANE_OPTION_PREFIX + name,
                ";",
            )
        ]
        self._run(
            *unset,
            "respawn-pane",
            "-k",
            "-t",
            f"={session}:",
            "-c",
            str(start_dir),
            wrapper_command(task_dir, gate),
            ";",
            "pipe-pane",
            "-t",
            f"={session}:",
            pipe_command(task_dir / layout.OUTPUT),
            ";",
            "wait-for",
            "-S",
            gate,
        )

    def repipe(self, session: str, task_dir: Path) -> None:
        """Point pipe-pane at a fresh ``output.log`` after a rotation (the old capture
        process finishes writing into the rotated file, so nothing is lost)."""
        self._run(
            "pipe-pane", "-t", f"={session}:", pipe_command(task_dir / layout.OUTPUT), check=False
        )

    def close(self, session: str) -> int | None:
        """Turn pipe-pane off, then kill the session; a missing session is not an error.

        Two invocations: tmux refuses pipe-pane on a dead pane, and a failed command would
        stop a chain before ``kill-session``. Killing the session closes the pipe anyway,
        so the capture process (sed) gets EOF and exits: none is left behind. A session
        another engine owns is left running.

        Returns the pane's first PID (the session id every process of its last run shares,
        see :mod:`supervisor.engine.processes`) when it closed a session, else ``None``.
        """
        found = self._describe(session)
        if found is None or (self.owner is not None and found[0] != self.owner):
            return None
        self._run("pipe-pane", "-t", f"={session}:", check=False)
        self._run("kill-session", "-t", f"={session}", check=False)
        return found[1]

    def panes(self, everyone: bool = False) -> dict[str, PaneInfo]:
        """Panes of the server in one query, keyed by session name ({} if no server).

        Only the sessions this engine owns (see ``owner``), unless ``everyone``; never a
        control client's session (:func:`~supervisor.tmux.control.is_control`). Each row
        also carries the wrapper files a full disk sent to pane options (``recorded``).
        """
        rows = self._run("list-panes", "-a", "-F", _PANE_FORMAT, check=False)
        out: dict[str, PaneInfo] = {}
        for row in rows:
            info = self._pane_row(row, everyone)
            if info is not None:
                out.setdefault(info.session, info)
        return out

    def pane(self, session: str) -> PaneInfo | None:
        """A fresh look at one session's pane (one ``display-message -t =SESSION:``, not a
        list of every pane): ``None`` when it does not exist or is not ours (``owner``).
        For the facts no notification announces: a pane that died (``remain-on-exit``),
        the run files a full disk sent to pane options.

        Raises:
            TmuxError: tmux failed otherwise than "no server", "can't find" (never read as
                a session that is gone: that verdict resumes the task).
        """
        result = self.cmd("display-message", "-p", "-t", f"={session}:", _PANE_FORMAT)
        if result.returncode != 0 and not _GONE.search(" ".join(result.stderr)):
            raise TmuxError(f"tmux display-message failed: {' '.join(result.stderr).strip()}")
        if result.returncode != 0 or len(result.stdout) != 1:
            return None
        info = self._pane_row(result.stdout[0], everyone=False)
        # tmux 3.3a prints the format with empty fields, exit 0, for a missing target.
        return info if info is not None and info.session == session else None

    def _pane_row(self, row: str, everyone: bool) -> PaneInfo | None:
        """One :data:`_PANE_FORMAT` row, or ``None`` when malformed, a control client's
        session, or not ours (unless ``everyone``)."""
        parts = row.split("\t", _PANE_FIELDS - 1)  # the mark (a path) comes last: tabs ok
        if len(parts) != _PANE_FIELDS or is_control(parts[0], parts[3]):
            return None
        pid = int(parts[1]) if parts[1].isdigit() else None
        values = parts[4 : 4 + len(RECORDED_FILES)]
        recorded = {n: v for n, v in zip(RECORDED_FILES, values, strict=True) if v}
        info = PaneInfo(parts[0], pid, parts[2] == "1", parts[-1], recorded)
        if everyone or self.owner is None or info.owner == self.owner:
            return info
        return None

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` with each :class:`~supervisor.tmux.control.ControlEvent` of the
        control client: the notifications ``sessions-changed``, ``window-close``,
        ``unlinked-window-close``, ``exit``, and ``connected``/``reconnected``/
        ``disconnected``. Nothing is ever called without ``control``. Listeners run on
        the client's reader thread: quick, and no tmux calls."""
        if self._link is not None:
            self._link.subscribe(listener)

    @property
    def control_live(self) -> bool:
        """Whether a control client is connected now (its notifications are arriving)."""
        return self._link is not None and self._link.live

    def shutdown(self) -> None:
        """Close the control client cleanly (its session goes with it); later calls use
        client processes. Nothing to do without ``control``."""
        if self._link is not None:
            self._link.shutdown()

    def owns(self, session: str) -> bool:
        """Whether ``session`` carries this engine's owner mark (always true without an
        ``owner``, and for a session that does not exist: nothing of another's is at stake).

        One ``display-message`` call; a session without a mark belongs to no one, so it is
        not ours either.
        """
        if self.owner is None:
            return True
        found = self._describe(session)
        return found is None or found[0] == self.owner

    def _describe(self, session: str) -> tuple[str, int | None] | None:
        """``(owner mark, pane_pid)`` of a session's pane, or ``None`` if there is none."""
        result = self.cmd(
            "display-message", "-p", "-t", f"={session}:", f"#{{pane_pid}}\t#{{{OWNER_OPTION}}}"
        )
        if result.returncode != 0 or not result.stdout:
            return None
        pid, _, owner = "\n".join(result.stdout).partition("\t")
        return owner, int(pid) if pid.isdigit() else None

    def _mark(self, session: str) -> tuple[str, ...]:
        """The chained ``set-option`` that puts the owner mark on a new session."""
        if self.owner is None:
            return ()
        return (";", "set-option", "-t", f"={session}:", OWNER_OPTION, self.owner)

    def has_session(self, session: str) -> bool:
        """Whether the server has a session of that name (any owner)."""
        return self.cmd("has-session", "-t", f"={session}").returncode == 0

    def capture(self, session: str, lines: int = 50) -> str:
        """The last ``lines`` lines visible in the session's pane (for humans)."""
        rows = self._run("capture-pane", "-p", "-t", f"={session}:", "-S", f"-{lines}", check=False)
        return "\n".join(rows)

    def send_keys(self, session: str, *keys: str, literal: bool = False) -> None:
        """``send-keys`` to the session's pane (``-l``: the keys are text, not key names)."""
        if not self.owns(session):
            return
        flags = ("-l",) if literal else ()
        self._run("send-keys", "-t", f"={session}:", *flags, *keys, check=False)

    def kill_server(self) -> None:
        """End the private server (tests and ``--kill-server`` only)."""
        self.cmd("kill-server")

    def tmux_bin(self) -> str:
        """Path of the tmux executable this object runs (passed on to the wrapper)."""
        return self.binary
