"""The one runner for every child process ``supervise`` starts besides tmux and the agents:
acceptance checks, notifiers, a workspace's ``setup`` and git (issue 20).

Each child:

- runs in a session and process group of its own (``start_new_session``): no controlling
  terminal to prompt on, and one signal reaches everything it started;
- has its whole group ended (SIGTERM, then SIGKILL after :data:`KILL_GRACE` seconds) at its
  timeout, when the caller cancels, **and at its normal end**: a background process it left
  behind would otherwise hold its pipes open, or live on under PID 1 after a timeout;
- has its output read with a cap (:class:`Capture`): the first and last bytes are kept up to
  a limit, the middle is read and counted but not kept, so a child that floods stdout or
  stderr costs the engine a bounded amount of memory (a notifier writing 200 MB to stderr
  grew the engine to 1.7 GB when all of it was kept);
- gets its stdin payload through a non-blocking pipe, written as the child reads it (a
  child that never reads stdin does not block the runner);
- when started on an engine's thread, is recorded in the state dir while its group lives
  (:mod:`supervisor.childledger`), written before it runs anything (it waits behind
  :data:`GATE` until then), so the next engine ends what a SIGKILLed one left running
  (:func:`end_recorded`) instead of letting it run with no timeout beside a new run.

A descendant that leaves the group (``setsid``) is out of reach of the group signal; the
runner stops reading its output :data:`DRAIN_AFTER_END` seconds after the group ended.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from supervisor import childledger

log = logging.getLogger("supervise.engine")

#: Seconds between SIGTERM and SIGKILL of a child's process group (supervisord's
#: ``stopwaitsecs`` is 10; these are short helper programs, not agents).
KILL_GRACE = 2.0
#: Default bytes of a stream kept in memory (half from its start, half from its end).
DEFAULT_CAP = 64 * 1024
#: Bytes read from a pipe per call.
CHUNK = 64 * 1024
#: Seconds the output is still read after the group ended (a descendant that left the
#: group may hold the pipe open for ever).
DRAIN_AFTER_END = 1.0
#: Seconds between looks at the child while nothing arrives (cancel, deadline, its exit).
TICK = 0.05


class Capture:
    """One output stream read with a cap: the first ``cap // 2`` bytes and the last
    ``cap - cap // 2`` bytes are kept, everything between is counted in :attr:`dropped`.

    Args:
        cap: bytes kept in memory; ``None`` keeps everything (only for output that is the
            result itself, such as ``git diff``).
        sink: a binary file every byte is also written to, up to ``sink_limit`` bytes (then
            one line says how much was left out).
        sink_limit: bytes written to ``sink`` at most.
    """

    def __init__(
        self, cap: int | None = DEFAULT_CAP, sink: BinaryIO | None = None, sink_limit: int = 0
    ) -> None:
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.total = 0
        self.sink, self.sink_limit, self._sunk = sink, sink_limit, 0

    def add(self, chunk: bytes) -> None:
        """Take ``chunk`` (bytes read from the pipe)."""
        self.total += len(chunk)
        self._to_sink(chunk)
        if self.cap is None:
            self.head += chunk
            return
        room = self.cap // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        excess = len(self.tail) - (self.cap - self.cap // 2)
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def _to_sink(self, chunk: bytes) -> None:
        if self.sink is None or self._sunk > self.sink_limit:
            return
        part = chunk[: self.sink_limit - self._sunk]
        with contextlib.suppress(OSError):  # a full disk must not end the child's read
            self.sink.write(part)
            if len(part) < len(chunk):
                self.sink.write(
                    b"\n[supervise] output beyond %d bytes not kept\n" % self.sink_limit
                )
        self._sunk += len(chunk)

    def data(self) -> bytes:
        """What was kept: the head, a marker line naming the bytes left out (when any),
        the tail."""
        if not self.dropped:
            return bytes(self.head + self.tail)
        marker = b"\n[supervise: %d bytes left out]\n" % self.dropped
        return bytes(self.head) + marker + bytes(self.tail)


@dataclass(frozen=True)
class Finished:
    """How a child ended.

    Attributes:
        returncode: its exit status (negative: the signal that ended it); ``None`` when it
            could not start (:attr:`error`), timed out or was cancelled.
        stdout, stderr: what was kept of each stream (:meth:`Capture.data`); ``b""`` for a
            stream not captured.
        timed_out: the timeout passed (its group was ended).
        cancelled: the caller's ``cancelled()`` said so (its group was ended).
        error: why it could not start (the OS error's text), else ``None``.
        left_behind: its group still had members at its end (they were ended).
    """

    returncode: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    cancelled: bool = False
    error: str | None = None
    left_behind: bool = False


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    stdout: Capture | None = None,
    stderr: Capture | None = None,
    merge_stderr: bool = False,
    cancelled: Callable[[], bool] | None = None,
) -> Finished:
    """Run ``argv`` (never through a shell) and end its whole process group afterwards.

    Args:
        argv: the program and its arguments.
        timeout: seconds before the group gets SIGTERM (SIGKILL :data:`KILL_GRACE` s later).
        cwd, env: as for :class:`subprocess.Popen` (``env=None``: ours).
        stdin: bytes written to its stdin, then closed; ``None``: ``/dev/null`` (an empty,
            closed pipe for a recorded child).
        stdout, stderr: where each stream goes; ``None``: ``/dev/null``.
        merge_stderr: stderr joins stdout's pipe (``stderr`` is then ignored).
        cancelled: polled every :data:`TICK` s; true ends the group (``Finished.cancelled``).

    Returns:
        :class:`Finished`. Never raises for the child's behaviour; an ``OSError`` at start
        (a missing program, a missing ``cwd``) is ``Finished.error``.
    """
    ledger = childledger.bound()
    proc = _spawn(argv, cwd, env, stdin is not None, stdout, stderr, merge_stderr, ledger)
    if isinstance(proc, str):
        return Finished(None, error=proc)
    streams = {}
    if proc.stdout is not None and stdout is not None:
        streams[proc.stdout.fileno()] = stdout
    if proc.stderr is not None and stderr is not None:
        streams[proc.stderr.fileno()] = stderr
    pump = _Pump(proc, streams, stdin)
    timed_out = was_cancelled = False
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if cancelled is not None and cancelled():
                was_cancelled = True
                break
            pump.step(min(TICK, left))
        left_behind = end_group(proc)
        pump.drain(DRAIN_AFTER_END)
    finally:
        pump.close()
        if ledger is not None and not _group_alive(proc.pid):
            ledger.forget(proc.pid)  # else the next engine start ends what is left
    code = None if timed_out or was_cancelled else proc.returncode
    return Finished(
        code,
        stdout.data() if stdout is not None else b"",
        stderr.data() if stderr is not None and not merge_stderr else b"",
        timed_out=timed_out,
        cancelled=was_cancelled,
        left_behind=left_behind and not (timed_out or was_cancelled),
    )


#: The gate a recorded child starts behind (``/bin/sh -c GATE gate ARGV...``): it waits for
#: the line ``go`` on its stdin, which the engine writes once the child's record exists
#: (:mod:`supervisor.childledger`), then becomes ``ARGV`` (``exec``: same PID, same group).
#: An engine that dies before writing it closes the pipe: the gate exits
#: :data:`GATE_CLOSED` and ``ARGV`` never runs. ``read`` takes one byte at a time from a
#: pipe (POSIX), so the stdin payload after the line is left whole for ``ARGV``.
GATE = 'IFS= read -r go; [ "$go" = go ] || exit 125; exec "$@"'
#: The gate's exit status when the line never came.
GATE_CLOSED = 125


def _spawn(
    argv: Sequence[str],
    cwd: Path | str | None,
    env: Mapping[str, str] | None,
    feed: bool,
    stdout: Capture | None,
    stderr: Capture | None,
    merge_stderr: bool,
    ledger: childledger.Ledger | None,
) -> subprocess.Popen[bytes] | str:
    """Start the child in a session of its own; with a ``ledger``, behind :data:`GATE`
    until its record is written. Returns the process, or why it could not start (the OS
    error's text)."""
    err = subprocess.PIPE if stderr is not None else subprocess.DEVNULL
    command, token = list(argv), secrets.token_hex(8)
    if ledger is not None:
        problem = _not_runnable(command[0], cwd, env)
        if problem is not None:
            return problem
        command = ["/bin/sh", "-c", GATE, "supervise-gate", *command]
        env = {**(os.environ if env is None else env), childledger.TOKEN_VAR: token}
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.PIPE if feed or ledger is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout is not None else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if merge_stderr else err,
            start_new_session=True,
        )
    except OSError as exc:
        return exc.strerror or str(exc)
    if ledger is not None and proc.stdin is not None:
        ledger.record(proc.pid, argv, cwd, token)
        with contextlib.suppress(OSError):  # EPIPE: someone else ended the gate
            os.write(proc.stdin.fileno(), b"go\n")  # 3 bytes into an empty pipe: no wait
    return proc


def _not_runnable(
    program: str, cwd: Path | str | None, env: Mapping[str, str] | None
) -> str | None:
    """Why ``program`` cannot be executed, as :class:`subprocess.Popen` would say it (the
    gate's ``exec`` could only exit 127), or ``None``. Looked up as ``execvp`` does: a
    name with a slash against ``cwd``, otherwise along ``env``'s ``PATH``."""
    if os.sep in program:
        path = os.path.join(cwd, program) if cwd is not None else program
        if not os.path.exists(path):
            return os.strerror(errno.ENOENT)
        return None if _executable(path) else os.strerror(errno.EACCES)
    found = shutil.which(program, path=os.pathsep.join(os.get_exec_path(env)))
    return None if found is not None else os.strerror(errno.ENOENT)


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


class _Pump:
    """Moves bytes between the runner and the child's pipes without blocking."""

    def __init__(
        self, proc: subprocess.Popen[bytes], streams: dict[int, Capture], stdin: bytes | None
    ) -> None:
        self.proc, self.streams = proc, streams
        self.selector = selectors.DefaultSelector()
        self.pending = memoryview(stdin or b"")
        for fd in streams:
            self.selector.register(fd, selectors.EVENT_READ)
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            if self.pending:
                self.selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
            else:
                self._close_stdin()

    def step(self, wait: float) -> None:
        """Wait up to ``wait`` s for a pipe to be ready and serve it."""
        if not self.selector.get_map():  # nothing to move: wait for the exit (or a tick)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait)
            return
        for key, _ in self.selector.select(wait):
            fd = int(key.fd)
            if fd in self.streams:
                try:
                    chunk = os.read(fd, CHUNK)
                except BlockingIOError:
                    continue
                if chunk:
                    self.streams[fd].add(chunk)
                else:
                    self.selector.unregister(fd)
            else:
                self._write(fd)

    def _write(self, fd: int) -> None:
        try:
            written = os.write(fd, self.pending[:CHUNK])
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the child closed its stdin without reading it all
            written = len(self.pending)
        self.pending = self.pending[written:]
        if not self.pending:
            self.selector.unregister(fd)
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def drain(self, bound: float) -> None:
        """Read what is left in the output pipes until each is closed, at most ``bound`` s."""
        with contextlib.suppress(KeyError, ValueError, OSError):
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                self.selector.unregister(self.proc.stdin.fileno())
        self._close_stdin()
        end = time.monotonic() + bound
        while self.selector.get_map() and time.monotonic() < end:
            self.step(min(TICK, max(0.0, end - time.monotonic())))

    def close(self) -> None:
        self.selector.close()
        self._close_stdin()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def end_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE) -> bool:
    """End ``proc``'s process group (its pid, as ``start_new_session`` made it): SIGTERM
    and SIGCONT, SIGKILL after ``grace`` s for whatever still runs; ``proc`` is reaped.

    Returns whether the group had members other than an exited ``proc`` when called.
    Blocks at most about ``3 * grace`` s.
    The group id stays safe to signal while any member lives: Linux does not hand out a
    PID that is still in use as a process group id.
    """
    pgid = proc.pid
    if not _signal_group(pgid, signal.SIGTERM):
        _reap(proc, grace)
        return False
    _signal_group(pgid, signal.SIGCONT)  # a stopped member must see the SIGTERM
    if not _wait_group(proc, pgid, grace):
        _signal_group(pgid, signal.SIGKILL)
        _wait_group(proc, pgid, grace)
    _reap(proc, grace)
    return True


def end_recorded(state_dir: Path, grace: float = KILL_GRACE) -> int:
    """End every child group a killed engine left recorded in ``state_dir``
    (:mod:`supervisor.childledger`); call it holding the state dir's lock, before adoption
    runs anything again. A group that is still the recorded one
    (:meth:`~supervisor.childledger.Recorded.is_ours`) gets SIGTERM (and SIGCONT), then
    SIGKILL after ``grace`` s, and one log line; a record of a group that has ended or whose
    id now names another process (a reused PID) is only removed. Every record
    is removed. Returns how many groups were ended. Blocks at most about ``2 * grace`` s."""
    ours = []
    for item in childledger.recorded(state_dir):
        if item.is_ours():
            ours.append(item)
        else:
            with contextlib.suppress(OSError):
                item.path.unlink()
    for item in ours:
        _signal_group(item.pid, signal.SIGTERM)
        _signal_group(item.pid, signal.SIGCONT)
    if not _wait_groups([i.pid for i in ours], grace):
        for item in ours:
            _signal_group(item.pid, signal.SIGKILL)
        _wait_groups([i.pid for i in ours], grace)
    for item in ours:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(item.start))
        log.warning(
            "ended process group %d (%s, started %s), left running by an engine that was killed",
            item.pid,
            item.what,
            started,
        )
        with contextlib.suppress(OSError):
            item.path.unlink()
    return len(ours)


def _wait_groups(pgids: list[int], bound: float) -> bool:
    """Wait up to ``bound`` s for every group in ``pgids`` to empty; returns whether they did
    (groups that are not our children's: nothing to reap)."""
    end = time.monotonic() + bound
    while any(_group_alive(pgid) for pgid in pgids):
        if time.monotonic() >= end:
            return False
        time.sleep(TICK)
    return True


def _reap(proc: subprocess.Popen[bytes], bound: float) -> None:
    """Wait up to ``bound`` s for ``proc``; one we may not signal (a set-user-ID program
    that refused every signal) is left to run rather than waited for for ever."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(bound)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to the group; ``False`` when it has no member left."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed its user (setuid): nothing more we can do
        return False
    return True


def _wait_group(proc: subprocess.Popen[bytes], pgid: int, bound: float) -> bool:
    """Wait up to ``bound`` s for the group to empty (``proc`` reaped meanwhile, so its
    zombie does not count); returns whether it did."""
    end = time.monotonic() + bound
    while True:
        proc.poll()
        if not _group_alive(pgid):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(TICK)


def _group_alive(pgid: int) -> bool:
    """Whether a process other than a zombie is in group ``pgid`` (a zombie that left with
    its parent is reaped by PID 1 in its own time and runs nothing)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False
