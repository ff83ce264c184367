"""The engine's record of the child process groups it runs (issue 20).

Only the engine enforces a child's timeout (:mod:`supervisor.children`): when the engine is
SIGKILLed, an acceptance check, a notifier or a ``setup`` runs on with no bound, and a
restarted engine would run the same check again beside it, or notify twice. So the engine
records every live group in ``state_dir/children/<pgid>`` (:data:`FOLDER`) before the child
runs anything, removes the record once the group has ended, and at its next start ends
every group still recorded (:func:`supervisor.children.end_recorded`).

A record is one JSON object: ``pid`` (the group leader's PID, which is the group id),
``start`` (its start time, seconds since the epoch as :meth:`psutil.Process.create_time`
gives it: a PID the kernel handed to another process since does not match), ``what`` (the
kind of work and the command, for the log line), ``cwd`` and ``engine`` (the recording
engine's PID).

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

log = logging.getLogger("supervise.engine")

#: The folder of records inside ``state_dir``.
FOLDER = "children"
#: Characters of the command kept in a record (for the log line only).
WHAT_CHARS = 300
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

    def record(self, pid: int, argv: Sequence[str], cwd: Path | str | None) -> None:
        """Record the group led by ``pid`` (written whole: a temporary file renamed in).

        A record that cannot be written (a full disk) is logged and skipped: the child
        still runs, as it did before records existed."""
        try:
            start = psutil.Process(pid).create_time()
        except psutil.Error:  # it is gone already: nothing to end later
            return
        what = f"{self.kind}: {' '.join(argv)}"
        if len(what) > WHAT_CHARS:
            what = what[: WHAT_CHARS - 1] + "…"
        body = {"pid": pid, "start": start, "what": what,
                "cwd": None if cwd is None else str(cwd), "engine": os.getpid()}  # fmt: skip
        temporary = self.folder / f".{pid}.tmp"
        try:
            self.folder.mkdir(mode=0o700, exist_ok=True)
            temporary.write_text(json.dumps(body), encoding="utf-8")
            os.replace(temporary, self.folder / str(pid))
        except OSError as exc:
            log.warning("cannot record child %d in %s (%s); it runs unrecorded",
                        pid, self.folder, exc.strerror or exc)  # fmt: skip

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


@dataclass(frozen=True)
class Recorded:
    """One record read back: its file, the group id, the leader's start time and ``what``."""

    path: Path
    pid: int
    start: float
    what: str

    def leader_matches(self) -> bool:
        """Whether process ``pid`` is still the leader that was recorded (same start time,
        not a zombie): only then is the group ours to end."""
        try:
            process = psutil.Process(self.pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
            return abs(process.create_time() - self.start) <= START_SLACK
        except psutil.Error:
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
    try:
        data = json.loads(path.read_bytes()[:65536])
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid, start = data.get("pid"), data.get("start")
    if type(pid) is not int or pid <= 1 or not isinstance(start, int | float):
        return None
    return Recorded(path, pid, float(start), str(data.get("what", "?")))
