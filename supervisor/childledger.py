"""The engine's record of the child process groups it runs (issue 20).

Only the engine enforces a child's timeout (:mod:`supervisor.children`): when the engine is
SIGKILLed, an acceptance check, a notifier or a ``setup`` runs on with no bound, and a
restarted engine would run the same check again beside it, or notify twice. So the engine
records every live group in ``state_dir/children/<pgid>`` (:data:`FOLDER`) before the child
runs anything, removes the record once the group has ended, and at its next start ends
every group still recorded (:func:`supervisor.children.end_recorded`).

A record is one JSON object: ``pid`` (the group leader's PID, which is the group id),
``start`` (its start time, seconds since the epoch as :meth:`psutil.Process.create_time`
gives it; for the log line), ``since_boot`` (its start in seconds since boot, and
``boot_id``, the kernel's id of that boot: a PID the kernel handed to another process since
does not match, and no step of the wall clock moves them, whereas ``create_time`` adds the
boot's wall time, which every step moves), ``token`` (a
random value the child and everything it starts get in :data:`TOKEN_VAR`), ``what`` (the
kind of work and the command, for the log line), ``cwd`` and ``engine`` (the recording
engine's PID).

A group is ours to end when its leader still has the recorded start time, or, once the
leader has exited, when a member still carries the record's token in its environment (a
check that exited while the engine was down can leave a server it started in the
background: the group lives on without its leader).

Which children are recorded: those started on a thread the engine bound a :class:`Ledger`
to (:func:`bind`; the engine's background pools do it for each of their threads,
:mod:`supervisor.engine.pools`). The ledger travels with the thread rather than through a
module setting, so two engines in one process keep theirs apart, and ``supervise merge``,
``diff`` or ``prune`` (git without an engine) record nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from supervisor.diskio import read_regular
from supervisor.taskdir import layout

log = logging.getLogger("supervise.engine")

#: The folder of records inside ``state_dir``.
FOLDER = layout.CHILDREN
#: Characters of the command kept in a record (for the log line only).
WHAT_CHARS = 300
#: The environment variable that carries a recorded child's token to its descendants.
TOKEN_VAR = "SUPERVISE_CHILD_TOKEN"
#: Bytes of a record read at most.
MAX_RECORD = 64 * 1024
#: Seconds two start times of one process may differ by (psutil derives them from clock
#: ticks since boot; a reused PID starts later by far more).
START_SLACK = 0.05

_thread = threading.local()


class Ledger:
    """The records of one state dir, written for one kind of work.

    Args:
        state_dir: the engine's state dir (records go in ``state_dir/children``).
        kind: what the recording threads run (``acceptance``, ``notify``, ...), for the log.
    """

    def __init__(self, state_dir: Path, kind: str) -> None:
        self.folder = state_dir / FOLDER
        self.kind = kind
        self._failing = False  # logged once per failing spell (a full disk: every git call)

    def record(self, pid: int, argv: Sequence[str], cwd: Path | str | None, token: str) -> None:
        """Record the group led by ``pid``, whose child got ``token`` in :data:`TOKEN_VAR`
        (written whole: a temporary file renamed in).

        A record that cannot be written (a full disk) is skipped, logged once until one
        can be written again: the child still runs, as it did before records existed."""
        try:
            start = psutil.Process(pid).create_time()
        except psutil.Error:  # it is gone already: nothing to end later
            return
        since_boot, boot = _since_boot(start)
        what = f"{self.kind}: {' '.join(argv)}"
        if len(what) > WHAT_CHARS:
            what = what[: WHAT_CHARS - 1] + "…"
        body = {
            "pid": pid,
            "start": start,
            "since_boot": since_boot,
            "boot_id": boot,
            "token": token,
            "what": what,
            "cwd": None if cwd is None else str(cwd),
            "engine": os.getpid(),
        }
        temporary = self.folder / f".{pid}.tmp"
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
            temporary.write_text(json.dumps(body), encoding="utf-8")
            os.replace(temporary, self.folder / str(pid))
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            if not self._failing:
                log.warning(
                    "cannot record children in %s (%s); they run unrecorded until it works",
                    self.folder,
                    exc.strerror or exc,
                )
            self._failing = True
            return
        if self._failing:
            log.info("recording children in %s again", self.folder)
            self._failing = False

    def forget(self, pid: int) -> None:
        """Remove the record of ``pid``'s group (it has ended); a missing one is fine."""
        with contextlib.suppress(OSError):
            (self.folder / str(pid)).unlink()


def bind(ledger: Ledger | None) -> None:
    """Make ``ledger`` the current thread's (``None``: record nothing); a thread pool's
    ``initializer``."""
    _thread.ledger = ledger


def bound() -> Ledger | None:
    """The current thread's ledger (:func:`bind`), or ``None``."""
    ledger: Ledger | None = getattr(_thread, "ledger", None)
    return ledger


def _this_boot() -> str:
    """The kernel's id of this boot (:func:`supervisor.engine.clock.boot_id`)."""
    # Imported here: the engine has it loaded; git from the CLI (no ledger) never gets here.
    from supervisor.engine.clock import boot_id

    return boot_id()


def _since_boot(create_time: float) -> tuple[float, str]:
    """``(seconds since boot, boot id)`` of a process whose ``create_time`` psutil gave:
    psutil adds the boot's wall time (``btime`` in ``/proc/stat``) to the process's start
    ticks since boot, so taking it away again leaves a figure no clock step moves."""
    return create_time - psutil.boot_time(), _this_boot()


@dataclass(frozen=True)
class Recorded:
    """One record read back: its file, the group id, the leader's start time (epoch s),
    the token, ``what``, and the leader's start in seconds since boot with that boot's id
    (``None`` and ``""`` in a record written before they were kept)."""

    path: Path
    pid: int
    start: float
    token: str
    what: str
    since_boot: float | None = None
    boot_id: str = ""

    def is_ours(self) -> bool:
        """Whether group ``pid`` is still the one recorded: its leader started at the
        recorded time (seconds since boot in the recorded boot: a step of the wall clock
        since does not matter), or, the leader gone, a live member carries the token. A
        PID or group id the kernel handed out again since, or in a later boot, matches
        neither."""
        try:
            leader = psutil.Process(self.pid)
            if leader.status() != psutil.STATUS_ZOMBIE:
                return self._same_start(leader.create_time())
        except psutil.NoSuchProcess:
            pass
        except psutil.Error:
            return False
        if self.boot_id and self.boot_id != _this_boot():
            return False  # every group of another boot ended with it
        return bool(self.token) and any(
            _carries(process, self.pid, self.token) for process in psutil.process_iter()
        )

    def _same_start(self, create_time: float) -> bool:
        if self.since_boot is None or not self.boot_id:  # an older record: its wall time
            return abs(create_time - self.start) <= START_SLACK
        since_boot, boot = _since_boot(create_time)
        return boot == self.boot_id and abs(since_boot - self.since_boot) <= START_SLACK


def _carries(process: psutil.Process, pgid: int, token: str) -> bool:
    """Whether ``process`` is a live member of group ``pgid`` with ``token`` in its
    environment."""
    try:
        if os.getpgid(process.pid) != pgid or process.status() == psutil.STATUS_ZOMBIE:
            return False
        return bool(process.environ().get(TOKEN_VAR) == token)
    except (OSError, psutil.Error):
        return False


def recorded(state_dir: Path) -> Iterator[Recorded]:
    """Every record in ``state_dir``; a damaged one (not a JSON object with an integer
    ``pid`` above 1 and a numeric ``start``) is removed and not yielded."""
    folder = state_dir / FOLDER
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    for path in entries:
        item = _read(path)
        if item is None:
            log.warning("removed a damaged child record %s", path)
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        yield item


def _read(path: Path) -> Recorded | None:
    """The record in ``path``; ``None`` for anything but a regular file holding one
    (opened without following a symlink or waiting on a FIFO)."""
    try:
        data = json.loads(read_regular(path, MAX_RECORD, follow=False))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid, start = data.get("pid"), data.get("start")
    if type(pid) is not int or pid <= 1 or not isinstance(start, int | float):
        return None
    token = data.get("token")
    token = token if isinstance(token, str) else ""
    since_boot, boot = data.get("since_boot"), data.get("boot_id")
    return Recorded(
        path,
        pid,
        float(start),
        token,
        str(data.get("what", "?")),
        float(since_boot) if isinstance(since_boot, int | float) else None,
        boot if isinstance(boot, str) else "",
    )
