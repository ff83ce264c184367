"""One persistent tmux control-mode client per tmux server (tmux(1), CONTROL MODE).

A command through a client process costs a fork, an exec and a connect (2.5–17 ms here,
tens of ms under load: 75 % of the engine worker's time, ``benchmarks/README.md``). A
control client (``tmux -C``) takes the same commands as lines on its stdin: a call is a
line on a pipe. :class:`ControlClient` is one such connection; :class:`ControlLink` keeps
one alive for a :class:`~supervisor.tmux.client.Tmux` (connects lazily, reconnects with
backoff, tells subscribers) and says when calls must go through client processes instead.

Framing: every call writes its command line, then ``display-message -p TOKEN`` with a
token made of a per-connection secret (128 random bits) and a counter. Replies come back in
the order the lines were written (one control client's commands run in order), so the
calls wait in a FIFO; every block up to the one that prints the call's token is that
call's reply (a chained line gets one block per command that ran, a count only tmux
knows). A pane's text read back by ``capture-pane`` cannot end a block early
(:class:`~supervisor.tmux.protocol.Parser`) nor pose as a token it cannot know.

The connection's session: a control client must be attached to a session, so it creates
its own (:func:`control_session`), marked with :data:`CONTROL_OPTION` so no session list
counts it as a task. Its one pane runs :func:`idle_command`, which waits for the process
holding the client to end, SIGKILLs the client (tmux 3.3a keeps an orphaned control client
with queued output for ever, :mod:`~supervisor.tmux.holdwatch`) and then ends itself: the
session goes the way a task's session goes when its pane exits (the engine SIGKILLed: the
pane's watcher wakes on the engine's pidfd, and the server exits when nothing else lives).
A connection closed while the engine lives (shutdown, a timeout, a reconnect) kills its
session with a client process. Not ``destroy-unattached``: with it, tmux 3.3a's server
segfaulted (NULL dereference, seen in ``dmesg``) when a control client that had created,
respawned, piped and killed sessions was SIGKILLed, and every agent on the server died with
it (``tests/test_tmux_control.py``). ``tmux -N`` keeps the control client from ever
starting a server: the first ``new-session`` goes through a client process (and its systemd
scope). ``-N`` came with tmux 3.2: an older tmux refuses it, the connection fails, and
every call keeps using client processes (a retry every :data:`RETRY_MAX` seconds costs one process).
Tested on tmux 3.3a.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import secrets
import shlex
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from supervisor.tmux import holdwatch
from supervisor.tmux.basics import TmuxError, TmuxResult, TmuxTimeout
from supervisor.tmux.protocol import Block, Notification, Parser, quote

#: tmux user option set on the control client's own session: it is no task.
CONTROL_OPTION = "@supervise_control"
#: The name prefix of control sessions (also a mark: the option is set one command later;
#: the underscore is never in a task id, :data:`supervisor.taskid.TASK_ID`).
CONTROL_PREFIX = "supervise_ctl-"
#: ``SUPERVISE_TMUX_CONTROL=0`` turns control mode off: every call forks a client process.
CONTROL_ENV = "SUPERVISE_TMUX_CONTROL"
#: Notifications passed on to subscribers: sessions appeared or went, windows closed, the
#: control client is told to go (tmux(1), CONTROL MODE).
NOTIFICATIONS = frozenset({"sessions-changed", "window-close", "unlinked-window-close", "exit"})
#: Events of the connection itself, passed on to subscribers too.
CONNECTED, RECONNECTED, DISCONNECTED = "connected", "reconnected", "disconnected"
#: Seconds before the first reconnect attempt after a failure; doubled per failure up to
#: :data:`RETRY_MAX` (a server that is gone costs one client process per attempt).
RETRY_FIRST = 0.25
RETRY_MAX = 8.0
#: Blocks the connecting command line answers with: new-session and two set-options.
_HANDSHAKE_BLOCKS = 3
#: Seconds :meth:`ControlClient.close` waits for a client it asked to leave.
_CLOSE_WAIT = 1.0
#: Seconds the ``kill-session`` of a closed connection's session may take.
_END_WAIT = 5.0

log = logging.getLogger("supervisor.tmux")
_sequence = itertools.count(1)


@dataclass(frozen=True)
class ControlEvent:
    """What a subscriber hears: a notification (``kind`` is its name, e.g.
    ``"sessions-changed"``, with its ``args``) or a change of the connection
    (:data:`CONNECTED`, :data:`RECONNECTED`, :data:`DISCONNECTED` with the reason)."""

    kind: str
    args: tuple[str, ...] = ()


Listener = Callable[[ControlEvent], None]


def control_enabled() -> bool:
    """True only when ``$SUPERVISE_TMUX_CONTROL`` is ``1``: control mode is opt-in.

    With tmux 3.3a (the version tested), the chaos test (``tests/test_chaos.py``: engines
    SIGKILLed while tasks crash, hang, resume and end) made the tmux server segfault in
    about one run of three with control clients attached (``dmesg``: NULL dereferences at
    two sites), and a segfault ends every agent on that server. Client processes never
    did. Until a tmux release passes that test, the engine uses client processes unless
    asked."""
    return os.environ.get(CONTROL_ENV, "0").strip() == "1"


def control_session(owner: str) -> str:
    """A fresh name for a control client's session: :data:`CONTROL_PREFIX`, a hash of the
    owner mark, this process's PID and a counter (two engines, or two clients of one
    process, never share one)."""
    digest = hashlib.sha256(owner.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    return f"{CONTROL_PREFIX}{digest}-{os.getpid()}-{next(_sequence)}"


def is_control(session: str, mark: str) -> bool:
    """Whether a session is a control client's (its :data:`CONTROL_OPTION` value ``mark``
    is set, or it has the name prefix while the option is being set)."""
    return bool(mark) or session.startswith(CONTROL_PREFIX)


def idle_command(holder: int, session: str) -> str:
    """The control session's pane command (:mod:`supervisor.tmux.holdwatch`): it waits,
    printing nothing, until process ``holder`` (the one holding the control client: the
    engine) ends, then SIGKILLs that client and ends, and its session with it. This Python
    by absolute path (``-I -S``: no site, nothing read from the environment): an engine's
    ``PATH`` may hold no ``sleep``."""
    script = holdwatch.__file__
    return "exec " + shlex.join([sys.executable, "-I", "-S", script, str(holder), session])


@dataclass
class _Call:
    """One call waiting for its reply: the blocks so far, until the block printing
    ``token`` (``None``: the connecting line, :data:`_HANDSHAKE_BLOCKS` blocks)."""

    token: str | None
    blocks: list[Block] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    error: TmuxError | None = None

    def take(self, block: Block) -> bool:
        """Add ``block``; True when it completes the call."""
        if self.token is None:
            self.blocks.append(block)
            return not block.ok or len(self.blocks) == _HANDSHAKE_BLOCKS
        if block.ok and block.lines == (self.token,):
            return True
        self.blocks.append(block)
        return False

    def result(self) -> TmuxResult:
        """The reply as a client process would give it: exit status 1 if a command failed,
        the successful commands' output, the failures' messages."""
        failed = [line for block in self.blocks if not block.ok for line in block.lines]
        stdout = [line for block in self.blocks if block.ok for line in block.lines]
        while stdout and stdout[-1] == "":
            stdout.pop()
        return TmuxResult(1 if any(not b.ok for b in self.blocks) else 0, stdout, failed)


class ControlClient:
    """One ``tmux -N -L SOCKET -C`` process attached to its own session.

    Args:
        binary: the tmux executable.
        socket_name: the server's socket (``-L``).
        session: the name of the session it creates (:func:`control_session`).
        on_note: called (on the reader thread) with each notification.
        on_end: called once with this client and the reason when the connection ends.
    """

    def __init__(
        self,
        binary: str,
        socket_name: str,
        session: str,
        on_note: Callable[[Notification], None],
        on_end: Callable[[ControlClient, str], None],
    ) -> None:
        self.socket_name = socket_name
        self.session = session
        self._binary = binary
        self._argv = [binary, "-N", "-L", socket_name, "-C", "new-session", "-s", session]
        self._argv += ["-x", "80", "-y", "24", idle_command(os.getpid(), session)]
        self._argv += [";", "set-option", "-t", f"={session}:", CONTROL_OPTION, "1"]
        # the pane's end must end the session, whatever a tmux.conf sets globally
        self._argv += [";", "set-option", "-w", "-t", f"={session}:", "remain-on-exit", "off"]
        self._on_note, self._on_end = on_note, on_end
        self._secret = secrets.token_hex(16)
        self._counter = itertools.count(1)
        self._write = threading.Lock()  # one line at a time, in FIFO order
        self._state = threading.Lock()  # the FIFO and the closed flag
        self._pending: deque[_Call] = deque()
        self._closed = False
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        """Whether calls can still be made."""
        return not self._closed and self._proc is not None

    def connect(self, timeout: float) -> None:
        """Start the client and wait until its session exists.

        Raises:
            TmuxError: no server runs (``-N``: none is started), or tmux refused; the
                client is gone.
            TmuxTimeout: no answer within ``timeout`` seconds.
        """
        hello = _Call(None)
        self._pending.append(hello)
        try:
            self._proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's ^C is the engine's, not the client's
            )
        except OSError as exc:
            self._closed = True
            raise TmuxError(f"cannot run {self._argv[0]}: {exc.strerror}") from None
        reader = threading.Thread(target=self._read, name=f"tmux-ctl-{self.session}", daemon=True)
        reader.start()
        self._wait(hello, timeout, "the control client")
        if hello.result().returncode != 0:
            self.close("tmux refused the control session")
            raise TmuxError(f"tmux control client: {' '.join(hello.result().stderr)}")

    def run(self, line: str, timeout: float, what: str) -> TmuxResult:
        """Send one command line and wait for its reply.

        Raises:
            TmuxTimeout: no reply within ``timeout`` seconds (the client is closed: it is
                wedged, or its server is).
            TmuxError: the connection ended before the reply.
        """
        call = _Call(f"supervise-{self._secret}-{next(self._counter)}")
        data = f"{line}\ndisplay-message -p {quote(call.token or '')}\n".encode()
        began = time.monotonic()
        if not self._write.acquire(timeout=timeout):
            self.close(f"{what} could not be written within {timeout:g} s")
            raise self._timeout(what, timeout)
        try:
            with self._state:
                if self._closed or self._proc is None or self._proc.stdin is None:
                    raise TmuxError(f"tmux control client on {self.socket_name} is closed")
                self._pending.append(call)
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (OSError, ValueError) as exc:
            self.close(f"cannot write to it: {exc}")
            raise TmuxError(f"tmux control client on {self.socket_name} ended: {exc}") from None
        finally:
            self._write.release()
        self._wait(call, max(0.0, timeout - (time.monotonic() - began)), what, timeout)
        return call.result()

    def _wait(self, call: _Call, seconds: float, what: str, timeout: float = 0.0) -> None:
        """Wait for ``call``; close the client when it does not come.

        Raises:
            TmuxTimeout: the reply did not come within ``seconds``.
            TmuxError: the connection ended first.
        """
        if not call.done.wait(seconds):
            self.close(f"{what} did not answer within {timeout or seconds:g} s")
            raise self._timeout(what, timeout or seconds)
        if call.error is not None:
            raise call.error

    def _timeout(self, what: str, timeout: float) -> TmuxTimeout:
        return TmuxTimeout(
            f"tmux {what} on socket {self.socket_name} did not answer within {timeout:g} s"
        )

    def _read(self) -> None:
        """The reader thread: replies to their calls, notifications to ``on_note``."""
        assert self._proc is not None and self._proc.stdout is not None
        parser = Parser()
        try:
            for raw in self._proc.stdout:
                item = parser.feed(raw[:-1] if raw.endswith(b"\n") else raw)
                if isinstance(item, Block):
                    self._reply(item)
                elif isinstance(item, Notification):
                    self._on_note(item)
                    if item.name == "exit":  # tmux lets the client go: send it nothing more
                        self.close("tmux sent %exit (its session or server ended)")
                        return
        except (OSError, ValueError):
            pass
        self.close("its output ended (tmux server gone, or the client exited)")

    def _reply(self, block: Block) -> None:
        with self._state:
            if not self._pending:
                return  # a block nobody asked for (none is expected)
            call = self._pending[0]
            if not call.take(block):
                return
            self._pending.popleft()
        call.done.set()

    def close(self, why: str, graceful: bool = False) -> None:
        """End the connection (idempotent): every waiting call gets :class:`TmuxError`,
        the client process ends (``graceful``: its stdin is closed, so tmux detaches it
        itself; else it is killed), and ``on_end(why)`` runs once."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            waiting = list(self._pending)
            self._pending.clear()
        for call in waiting:
            call.error = TmuxError(f"tmux control client on {self.socket_name} closed: {why}")
            call.done.set()
        self._stop(graceful)
        if graceful:
            self._end_session()
        else:  # the server may be wedged: never hold the caller for its answer
            threading.Thread(target=self._end_session, daemon=True).start()
        self._on_end(self, why)

    def _end_session(self) -> None:
        """Kill this connection's session with a client process, once the control client
        is gone (its pane would end it only with the engine; a reconnect makes a new one)."""
        argv = [self._binary, "-L", self.socket_name, "kill-session", "-t", f"={self.session}"]
        # gone with the server, or ended by its pane when the engine ends
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=_END_WAIT)

    def _stop(self, graceful: bool) -> None:
        proc = self._proc
        if proc is None:
            return
        if graceful and proc.stdin is not None:
            try:
                proc.stdin.close()
                proc.wait(_CLOSE_WAIT)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(_CLOSE_WAIT)
        except subprocess.TimeoutExpired:
            log.warning("tmux control client %d did not exit after SIGKILL", proc.pid)
        for stream in (proc.stdin,):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
