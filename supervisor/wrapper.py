"""The in-pane launcher: runs the agent in the foreground of a tmux pane and records its end.

Run by tmux as ``python3 -I -S wrapper.py TASK_DIR [GATE_CHANNEL]``; it imports only the
standard library so it stays small (it lives as long as the agent).

Protocol with the engine: files in ``TASK_DIR``, each written atomically (temp + rename),
named as the seed skill named them (the constants below copy
:mod:`supervisor.taskdir.layout`'s; a test holds them equal). Exit status: the agent's.

1. ``launch.json`` holds ``{"argv": [...], "env": {...}, "cwd": "..."}``. The argv is
   executed directly (``execvpe``): no shell ever sees the prompt or any other value.
2. If ``GATE_CHANNEL`` is given, wait (``tmux wait-for CHANNEL``, bounded) until the engine
   has attached pipe-pane, so ``output.log`` gets every byte from the first one.
3. Fork; the child execs the agent. ``pid`` is written with the agent's own PID (not ours).
   With ``"stream": NAME`` in ``launch.json`` (Claude Code headless mode), the agent's
   stdout is a pipe that the wrapper copies line by line to ``TASK_DIR/NAME`` (after a
   ``{"type": "supervise_launch"}`` marker line) and to the pane. That copy is complete
   when the files of step 4 appear, so the engine never reads a half-flushed result line.
   The partial-message lines (``--include-partial-messages``) never reach the pane and
   their content deltas are folded in the file (:mod:`streamcopy`, the stdlib-only module
   beside this one).
   If the agent's program cannot be executed, the child writes ``launch_error`` (the
   reason) and exits 127, as a shell does for a missing command.
4. When the agent ends: ``exit_code`` (for a signal: 128 + N, as shells report it) and, only
   for a signal, ``signal``. ``done`` is written last, and only when the agent exited on its
   own with a code not in ``launch.json``'s ``resume_exit_codes``: an agent killed by a
   signal, one that asked to be resumed (supervisord's ``exitcodes`` idea inverted), or one
   that exited after the wrapper passed it a SIGTERM or SIGHUP (Claude Code exits 143 or 129
   then; measured) has not finished and must not look finished.
5. A full disk never loses the agent's end: a file the wrapper cannot write (``ENOSPC``,
   ``EDQUOT``, ``EROFS``...) is recorded instead as a tmux user option of its pane,
   ``@supervise_<name>`` (:data:`PANE_OPTION_PREFIX`; ``@supervise_done`` holds the end
   time in epoch seconds, as the done-file's mtime would), through the tmux server the
   pane runs in (``$TMUX``/``$TMUX_PANE``, the same client the gate uses), bounded by
   :data:`TMUX_TIMEOUT`. Once one file of the end went to tmux, the later ones do too, so
   ``done`` is never on disk without ``exit_code``. The engine reads these options when
   it looks at the pane of an agent that ended (``Tmux.pane``) and writes the files
   itself when the disk has room again. If tmux refuses too, the writes are retried for
   :data:`RETRY_FOR` seconds.
6. Fencing (a fleet's task only; issue 20, :mod:`supervisor.cluster.lease`): with
   ``"lease": {"path", "expiry", "poll", "grace"}`` in ``launch.json``, a thread reads the
   lease file's record (:data:`LEASE_RECORD` bytes, opened ``O_NONBLOCK``) every ``poll``
   seconds. When it has not changed for ``expiry`` seconds on this process's monotonic
   clock (a released one, a clean stop: after the seconds it names, or never; see
   :mod:`supervisor.leaserecord`), the engine is
   gone and the sweeper may soon run the task on another host: the agent's process group
   gets SIGTERM (and SIGCONT), and ``grace`` seconds later SIGKILL (every member but this
   wrapper, which records the end). A fenced agent has not finished: no ``done``.
7. Prompt delivery (issue 21): Linux caps one argv or environment string at
   :data:`ARG_STRLEN_MAX` bytes, so a long prompt never rides in argv. With
   ``"stdin": PATH`` the agent's stdin is that file (Claude Code's ``-p`` reads its prompt
   from stdin and stops at the file's end). With ``"paste": {"path", "ready", "pasted",
   "timeout", "refused", "refused_why"}`` (an interactive TUI; the last two optional) a
   thread waits until the pane's text matches the ``ready`` pattern, pastes the file as
   one bracketed paste (``tmux load-buffer`` + ``paste-buffer -p``), waits until the pane
   matches ``pasted`` and presses Enter. A TUI that shows no input prompt within
   ``timeout`` seconds, or that shows the ``refused`` pattern within
   :data:`PASTE_SETTLE` seconds of Enter, is stopped and recorded as not launched
   (``launch_error``: the reason, ``refused_why``; exit 127). An exec that fails with
   ``E2BIG`` names the longest argument or environment string in ``launch_error``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

if __package__:  # imported as supervisor.wrapper (the engine, the tests)
    from supervisor import leaserecord, streamcopy
else:  # run by path as ``python3 -I -S wrapper.py``, which leaves its folder off sys.path
    import importlib.util
    import types

    def _sibling(name: str) -> types.ModuleType:
        """The stdlib-only module ``name`` beside this file."""
        here = os.path.dirname(os.path.abspath(__file__))
        spec = importlib.util.spec_from_file_location(name, os.path.join(here, f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    streamcopy, leaserecord = _sibling("streamcopy"), _sibling("leaserecord")

GATE_TIMEOUT = 30.0  # seconds to wait for the engine's pipe-pane gate
END_MARK = "[supervise]"  # starts the last line the wrapper prints when the agent ends
LAUNCH, PID, EXIT_CODE, SIGNAL, DONE = "launch.json", "pid", "exit_code", "signal", "done"
LAUNCH_ERROR = "launch_error"  # written before exit_code when the program cannot be executed
PANE_OPTION_PREFIX = "@supervise_"  # tmux user options holding files that could not be written
TMUX_TIMEOUT = 5.0  # seconds for the tmux fallback command
RETRY_FOR = 600.0  # seconds to keep retrying files that neither disk nor tmux took
RETRY_EVERY = 0.5  # seconds between those retries
#: The lease record's size and a released one's start (step 6; :mod:`supervisor.leaserecord`).
LEASE_RECORD, LEASE_RELEASED = leaserecord.LEASE_RECORD, leaserecord.LEASE_RELEASED
#: Linux's cap on one argv or environment string, NUL included (``MAX_ARG_STRLEN``, 32
#: pages of 4 KiB): a longer one makes ``execve`` fail with ``E2BIG``.
ARG_STRLEN_MAX = 128 * 1024
PASTE_POLL = 0.2  # seconds between looks at the pane while a paste waits
PASTE_SETTLE = 10.0  # seconds to wait for the TUI to show the paste before Enter anyway


def _write(task_dir: str, name: str, text: str) -> None:
    """Write ``TASK_DIR/name`` atomically (temp + fsync + rename). Raises ``OSError``; the
    temp file is then removed."""
    tmp = os.path.join(task_dir, f".{name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, os.path.join(task_dir, name))
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _set_pane_options(values: dict[str, str]) -> bool:
    """Set ``@supervise_<name> VALUE`` on this pane in one tmux call; True when tmux took it."""
    pane = os.environ.get("TMUX_PANE")
    if not pane or not values:
        return False
    argv = [os.environ.get("SUPERVISE_TMUX", "tmux")]
    for name, value in values.items():
        argv += ["set-option", "-p", "-t", pane, PANE_OPTION_PREFIX + name, value, ";"]
    try:
        result = subprocess.run(argv[:-1], timeout=TMUX_TIMEOUT, check=False, capture_output=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


def _record(task_dir: str, files: list[tuple[str, str]], at: float) -> None:
    """Record ``(name, text)`` files in order; on the first that cannot be written, that one
    and all after it go to tmux (see step 5 of the module docstring). ``done`` carries
    ``at`` (epoch s) in tmux, where no mtime exists."""
    for index, (name, text) in enumerate(files):
        try:
            _write(task_dir, name, text)
        except OSError as exc:
            _say(f"{END_MARK} cannot write {name}: {exc.strerror}; recorded in tmux")
            rest = files[index:]
            values = {n: (f"{at:.6f}" if n == DONE else t.strip()) for n, t in rest}
            if not _set_pane_options(values):
                _retry(task_dir, rest)
            return


def _retry(task_dir: str, files: list[tuple[str, str]]) -> None:
    """Keep trying to write ``files`` in order for up to :data:`RETRY_FOR` seconds."""
    deadline = time.monotonic() + RETRY_FOR
    pending = list(files)
    while pending and time.monotonic() < deadline:
        try:
            _write(task_dir, *pending[0])
            pending.pop(0)
        except OSError:
            time.sleep(RETRY_EVERY)


def _say(text: str) -> None:
    """Print to the pane; the pane may be gone (tmux server killed), which is not fatal."""
    with contextlib.suppress(OSError):
        print(text, flush=True)


def _copy(source: int, sink_path: str, child: int) -> int:
    """Copy the agent's stdout to ``sink_path`` and the pane (fd 1), as
    :class:`streamcopy.StreamCopy` does, until EOF, or until the agent has exited and its
    pipe has been quiet for a moment (a grandchild may keep the pipe open). Returns the
    agent's wait status."""
    status: int | None = None
    quiet_since: float | None = None
    # A full disk must not end the copy to the pane (nor the wrapper): the copy to the file
    # is then incomplete, which the engine can read, and the pane still gets its lines.
    with open(sink_path, "ab", buffering=0) as sink:
        with contextlib.suppress(OSError):
            sink.write(streamcopy.launch_line(sink_path, time.time()))
        copy = streamcopy.StreamCopy(sink)
        while True:
            if status is None:
                with contextlib.suppress(ChildProcessError):
                    pid, waited = os.waitpid(child, os.WNOHANG)
                    if pid:
                        status, quiet_since = waited, time.monotonic()
            ready, _, _ = select.select([source], [], [], 0.2)
            if not ready:
                copy.idle()
                if quiet_since is not None and time.monotonic() - quiet_since > 1.0:
                    break
                continue
            data = os.read(source, 65536)
            if not data:
                break
            copy.feed(data)
            if quiet_since is not None:
                quiet_since = time.monotonic()
        copy.close()
    os.close(source)
    if status is None:
        while True:
            try:
                _, status = os.waitpid(child, 0)
                break
            except ChildProcessError:  # pragma: no cover - already reaped
                return 0
    return status


def _group_members(pgid: int) -> list[int]:
    """PIDs in process group ``pgid`` (from ``/proc/<pid>/stat``; zombies left out), but
    this process."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z" and int(fields[2]) == pgid:
            found.append(int(name))
    return found


def _stop_group(child: int, grace: float) -> None:
    """SIGTERM and SIGCONT to ``child``'s process group, SIGKILL to what of it (but this
    wrapper) still runs after ``grace`` seconds, as :mod:`supervisor.engine.stopping` does."""
    try:
        pgid = os.getpgid(child)
    except ProcessLookupError:
        return
    for signum in (signal.SIGTERM, signal.SIGCONT):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)
    deadline = time.monotonic() + grace
    while _group_members(pgid) and time.monotonic() < deadline:
        _nap(0.05)
    for pid in _group_members(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _nap(seconds: float) -> None:
    """Sleep ``seconds``; never raises. ``time.sleep`` is an absolute ``clock_nanosleep``,
    which a stepped clock shim (libfaketime) can fail with EINVAL: a relative ``select``
    timeout then, so the fence thread never dies of a clock."""
    try:
        time.sleep(seconds)
    except OSError:
        with contextlib.suppress(OSError, ValueError):
            select.select([], [], [], seconds)


def _watch_lease(lease: dict, child: int, fenced: list[float]) -> None:
    """Step 6: stop the agent once the lease went unrenewed for ``expiry`` seconds (or a
    released one for the seconds it names)."""
    path, poll = str(lease["path"]), float(lease["poll"])
    expiry, grace = float(lease["expiry"]), float(lease["grace"])
    last, seen = leaserecord.read_lease(path), time.monotonic()
    while True:
        _nap(poll)
        record, now = leaserecord.read_lease(path), time.monotonic()
        limit = leaserecord.expires_after(record, expiry)
        if record != last or limit is None:
            last, seen = record, now
        elif now - seen > limit:
            fenced.append(now - seen)
            _say(
                f"\n{END_MARK} the engine did not renew its lease for {now - seen:.1f} s: "
                "stopping the agent (the fleet may run this task on another host)"
            )
            _stop_group(child, grace)
            return


def _wait_for_gate(channel: str) -> None:
    tmux = os.environ.get("SUPERVISE_TMUX", "tmux")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([tmux, "wait-for", channel], timeout=GATE_TIMEOUT, check=False)


def _spawn(task_dir: str, launch: dict, env: dict[str, str], pipe: tuple[int, int] | None) -> int:
    """Fork the agent (step 3): its stdout into ``pipe`` when given; returns its PID. The
    child never returns: it execs the agent or exits 127 after writing ``launch_error``."""
    argv: list[str] = launch["argv"]
    child = os.fork()
    if child:
        return child
    try:
        if pipe is not None:
            os.dup2(pipe[1], 1)
            os.close(pipe[0])
            os.close(pipe[1])
        if launch.get("cwd"):
            os.chdir(launch["cwd"])
        if launch.get("stdin"):  # step 7: the prompt on stdin, never in argv
            source = os.open(launch["stdin"], os.O_RDONLY | os.O_NONBLOCK)
            os.set_blocking(source, True)
            os.dup2(source, 0)
            os.close(source)
        os.execvpe(argv[0], argv, env)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte, refused before execve
        why = _exec_failure(argv, env, exc) if isinstance(exc, OSError) else f"{exc} (NUL)"
        if isinstance(exc, OSError) and launch.get("stdin") and exc.filename == launch["stdin"]:
            why = f"cannot open its prompt {launch['stdin']} as stdin: {exc.strerror}"
        if isinstance(exc, OSError) and launch.get("cwd") and exc.filename == launch["cwd"]:
            why = f"its working folder {launch['cwd']} cannot be entered: {exc.strerror}"
        message = f"supervise: cannot run {argv[0]!r}: {why}"
        print(message, file=sys.stderr)
        with contextlib.suppress(OSError):
            _write(task_dir, LAUNCH_ERROR, message + "\n")
    os._exit(127)


def _exec_failure(argv: list[str], env: dict[str, str], exc: OSError) -> str:
    """Why ``execve`` failed, in words: for ``E2BIG`` the longest string and its size
    against :data:`ARG_STRLEN_MAX` (the cause the engine puts in the task's summary)."""
    if exc.errno != errno.E2BIG:
        return str(exc.strerror)
    sizes = [(len(os.fsencode(a)) + 1, f"argv[{i}]") for i, a in enumerate(argv)]
    sizes += [(len(os.fsencode(f"{k}={v}")) + 1, f"env {k}") for k, v in env.items()]
    size, where = max(sizes)
    if size <= ARG_STRLEN_MAX:
        total = sum(n for n, _ in sizes)
        return f"argument list too long (E2BIG): argv and environment total {total} bytes"
    what = "prompt too long for argv" if where.startswith("argv") else "value too long for env"
    return (
        f"{what} (E2BIG): {where} is {size} bytes, Linux allows {ARG_STRLEN_MAX} per string; "
        "pass a long prompt as a file ({prompt_file}) or on stdin"
    )


def _tmux(*args: str) -> str | None:
    """One tmux command through the pane's own server; its stdout, ``None`` on failure."""
    argv = [os.environ.get("SUPERVISE_TMUX", "tmux"), *args]
    try:
        done = subprocess.run(argv, timeout=TMUX_TIMEOUT, check=False, capture_output=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def _pane_matches(pane: str, pattern: re.Pattern[str], until: float) -> bool:
    """Whether the pane's visible text matches ``pattern`` before ``until`` (monotonic s)."""
    while time.monotonic() < until:
        if pattern.search(_tmux("capture-pane", "-p", "-t", pane) or ""):
            return True
        _nap(PASTE_POLL)
    return False


def _paste(task_dir: str, spec: dict, child: int, failed: list[str]) -> None:
    """Step 7: type the file ``spec["path"]`` into the agent's TUI as one bracketed paste
    and press Enter, once the TUI shows its input prompt; else stop the agent and record
    why in ``launch_error`` (``failed`` gets the reason: the wrapper then exits 127)."""
    pane = os.environ.get("TMUX_PANE", "")
    timeout = float(spec.get("timeout", 60))
    ready = re.compile(str(spec["ready"]), re.MULTILINE)
    if not pane or not _pane_matches(pane, ready, time.monotonic() + timeout):
        why = f"the prompt could not be pasted: no input prompt on screen within {timeout:g} s"
        _not_delivered(task_dir, child, why, failed)
        return
    buffer = f"supervise-{pane.lstrip('%')}-{os.getpid()}"
    if _tmux("load-buffer", "-b", buffer, str(spec["path"])) is not None:
        _tmux("paste-buffer", "-p", "-d", "-b", buffer, "-t", pane)
        # Enter before the TUI has taken the whole paste would submit part of it
        _pane_matches(pane, re.compile(str(spec["pasted"])), time.monotonic() + PASTE_SETTLE)
    _tmux("send-keys", "-t", pane, "Enter")
    refused = re.compile(str(spec["refused"]), re.MULTILINE) if spec.get("refused") else None
    if refused and _pane_matches(pane, refused, time.monotonic() + PASTE_SETTLE):
        _not_delivered(task_dir, child, str(spec.get("refused_why", "refused")), failed)


def _not_delivered(task_dir: str, child: int, why: str, failed: list[str]) -> None:
    """The agent never got its prompt: ``launch_error`` says ``why``, ``failed`` gets it (the
    wrapper then reports exit 127) and the agent is ended."""
    failed.append(why)
    with contextlib.suppress(OSError):
        _write(task_dir, LAUNCH_ERROR, f"supervise: {why}\n")
    _end(child, 5.0)


def _end(child: int, grace: float) -> None:
    """SIGTERM to the agent alone, SIGKILL after ``grace`` seconds; through a pidfd, so a
    PID the main thread reaped meanwhile (and the kernel gave away) is never signalled."""
    try:
        pidfd = os.pidfd_open(child)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        if not select.select([pidfd], [], [], grace)[0]:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    finally:
        os.close(pidfd)


def _wait(child: int) -> int:
    """The agent's wait status (0 when something else reaped it)."""
    while True:
        try:
            return os.waitpid(child, 0)[1]
        except ChildProcessError:  # pragma: no cover - already reaped
            return 0
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue


def main(args: list[str]) -> int:
    """Entry point; ``args`` is ``[TASK_DIR, GATE_CHANNEL?]``. Returns the exit status."""
    if not args:
        print("usage: wrapper.py TASK_DIR [GATE_CHANNEL]", file=sys.stderr)
        return 2
    task_dir = os.path.abspath(args[0])
    with open(os.path.join(task_dir, LAUNCH), encoding="utf-8") as handle:
        launch = json.load(handle)
    env = dict(os.environ)
    env.update(launch.get("env", {}))
    env.pop("SUPERVISE_TMUX", None)
    if len(args) > 1:
        _wait_for_gate(args[1])

    stream = launch.get("stream")
    pipe = os.pipe() if stream else None
    child = _spawn(task_dir, launch, env, pipe)
    _record(task_dir, [(PID, f"{child}\n")], time.time())
    fenced: list[float] = []
    unpasted: list[str] = []
    if launch.get("paste"):
        threading.Thread(
            target=_paste, args=(task_dir, launch["paste"], child, unpasted), daemon=True
        ).start()
    if launch.get("lease"):
        threading.Thread(
            target=_watch_lease, args=(launch["lease"], child, fenced), daemon=True
        ).start()

    forwarded: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        forwarded.append(signum)
        if fenced:  # the fence signalled the whole group, the agent included: not twice
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    # An operator's Ctrl-C in an attached pane reaches the agent, which decides; we only
    # pass SIGTERM/SIGHUP on, and keep waiting so the end is always recorded.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGHUP, forward)
    if pipe is not None:
        os.close(pipe[1])
        status = _copy(pipe[0], os.path.join(task_dir, stream), child)
    else:
        status = _wait(child)
    # The end line goes to the pane (and so to output.log) before the files, so the engine
    # can wait for it and capture a complete output_tail.
    at = time.time()
    if os.WIFSIGNALED(status) and not unpasted:
        number = os.WTERMSIG(status)
        _say(f"\n{END_MARK} agent killed by signal {number}")
        _record(task_dir, [(SIGNAL, f"{number}\n"), (EXIT_CODE, f"{128 + number}\n")], at)
        return 128 + number
    code = 127 if unpasted else os.WEXITSTATUS(status)  # never got its prompt: not launched
    _say(f"\n{END_MARK} agent exited with code {code}")
    files = [(EXIT_CODE, f"{code}\n")]
    # An agent that exits because we passed it a SIGTERM or SIGHUP (the real Claude Code
    # CLI exits 143 or 129 by itself) did not end on its own: its pane's terminal went away
    # (tmux server killed) or somebody stopped the pane. No done-file, so it is resumed.
    if code not in launch.get("resume_exit_codes", []) and not forwarded and not fenced:
        files.append((DONE, ""))
    _record(task_dir, files, at)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
