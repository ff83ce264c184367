"""The engine's tmux calls, on the profile's private socket (``tmux -L NAME``).

Every call forks one ``tmux`` client (measured 2.5–17 ms here, see DESIGN.md), so related
commands are chained with tmux's ``;`` separator into one invocation. Each client runs under
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
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from supervisor import wrapper
from supervisor.capture import pipe_command
from supervisor.errors import ConfigError, SuperviseError
from supervisor.rlimits import raise_nofile
from supervisor.taskdir import layout

PANE_WIDTH = 220
PANE_HEIGHT = 50
#: tmux user option set on each session at creation: the absolute ``state_dir`` of the
#: engine that owns it. Engines sharing one server never adopt, respawn or kill a session
#: whose mark is not their own (issue 10).
OWNER_OPTION = "@supervise_state_dir"


#: Seconds one tmux client may take before it is killed and :class:`TmuxTimeout` raised.
#: A healthy client answers in 2.5–17 ms here (DESIGN.md), ``new-session`` with its chained
#: commands in under 100 ms on a loaded 2-core machine; 5 s leaves room for a machine under
#: heavy swap while bounding how long one check can wait on tmux.
TMUX_TIMEOUT = 5.0

log = logging.getLogger(__name__)


class TmuxError(SuperviseError, RuntimeError):
    """A tmux command failed; the message carries tmux's stderr."""


class TmuxTimeout(TmuxError):
    """A tmux client did not answer within its timeout (:data:`TMUX_TIMEOUT`) and was
    killed. Whether the command took effect is unknown: callers look again later."""


@dataclass(frozen=True)
class TmuxResult:
    """What one tmux client returned: exit status and output lines (trailing empty lines
    dropped; bytes that are not UTF-8 shown as backslash escapes)."""

    returncode: int
    stdout: list[str]
    stderr: list[str]


#: The environment variable naming the tmux executable (the wrapper reads it too).
TMUX_ENV = "SUPERVISE_TMUX"


def tmux_binary() -> str:
    """The tmux executable: ``$SUPERVISE_TMUX`` when set (the wrapper reads the same
    variable), else ``tmux`` found on ``PATH``."""
    return os.environ.get(TMUX_ENV) or shutil.which("tmux") or "tmux"


def missing_tmux() -> str | None:
    """One line saying why no tmux can be run (``$SUPERVISE_TMUX`` names no executable
    file, or none is on ``PATH``) with the fix, or ``None`` when it can. Read by
    ``supervise run`` before it starts (else the engine would retry adoption for ever) and
    by ``supervise validate`` for a profile."""
    named = os.environ.get(TMUX_ENV)
    if named:
        if shutil.which(named) is None:
            return (
                f"{TMUX_ENV}={named} is not an executable file; set it to tmux's path "
                f"(e.g. {shutil.which('tmux') or '/usr/bin/tmux'}) or unset it"
            )
        return None
    if shutil.which("tmux") is None:
        return (
            f"tmux is not found on PATH ({os.environ.get('PATH', '')}); supervise runs every "
            f"agent in tmux. Fix: install tmux (apt install tmux, brew install tmux), or set "
            f"{TMUX_ENV} to its path"
        )
    return None


def require_tmux(profile_path: Path) -> None:
    """``supervise validate``'s check of a profile: tmux can be run here.

    Raises:
        ConfigError: one problem line, ``PROFILE: <why>`` (:func:`missing_tmux`).
    """
    problem = missing_tmux()
    if problem is not None:
        raise ConfigError([f"{profile_path}: {problem}"])


#: Wrapper files that a full disk may send to pane options instead (wrapper.py, step 5).
RECORDED_FILES = layout.RUN_FILES


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

    Every method may raise :class:`TmuxTimeout` (even those that otherwise ignore tmux's
    errors): an unanswered query must never read as "no such session".
    """

    def __init__(
        self,
        socket_name: str,
        owner: str | None = None,
        timeout: float = TMUX_TIMEOUT,
        scope: Sequence[str] = (),
    ) -> None:
        self.socket_name = socket_name
        self.owner = owner
        self.timeout = timeout
        self.scope = list(scope)
        self.binary = tmux_binary()
        self._limits_of = 0  # the server PID whose open-file limit was raised

    def cmd(self, *args: str, prefix: Sequence[str] = ()) -> TmuxResult:
        """Run one tmux client ``tmux -L socket_name ARGS...`` with the timeout, behind
        ``prefix`` when given (``systemd-run ... --``; the timeout covers both).

        Raises:
            TmuxTimeout: no answer within ``timeout`` seconds (the client is killed).
            TmuxError: the tmux executable cannot be run.
        """
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
        stdout = _lines(done.stdout)
        while stdout and stdout[-1] == "":
            stdout.pop()
        return TmuxResult(done.returncode, stdout, [line for line in _lines(done.stderr) if line])

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
        printed = self._launch_scoped(args)
        if printed is None:
            printed = self._run(*args)
        self._check_limits(printed)

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

        Only the sessions this engine owns (see ``owner``), unless ``everyone``. Each row
        also carries the wrapper files a full disk sent to pane options (``recorded``).
        """
        options = "".join(f"#{{{wrapper.PANE_OPTION_PREFIX}{name}}}\t" for name in RECORDED_FILES)
        fmt = f"#{{session_name}}\t#{{pane_pid}}\t#{{pane_dead}}\t{options}#{{{OWNER_OPTION}}}"
        rows = self._run("list-panes", "-a", "-F", fmt, check=False)
        out: dict[str, PaneInfo] = {}
        fields = 4 + len(RECORDED_FILES)
        for row in rows:
            parts = row.split("\t", fields - 1)  # the mark (a path) comes last: it may hold a tab
            if len(parts) != fields:
                continue
            pid = int(parts[1]) if parts[1].isdigit() else None
            values = parts[3 : 3 + len(RECORDED_FILES)]
            recorded = {n: v for n, v in zip(RECORDED_FILES, values, strict=True) if v}
            info = PaneInfo(parts[0], pid, parts[2] == "1", parts[-1], recorded)
            if everyone or self.owner is None or info.owner == self.owner:
                out.setdefault(parts[0], info)
        return out

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


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "backslashreplace").split("\n")
