"""The state filesystem as a fact: is there room to record what happens, and the wrapper's
files that a full disk sent to tmux instead.

On a full state filesystem (``ENOSPC``) the wrapper cannot write ``exit_code``/``done``, the
capture cannot append to ``output.log`` and the engine cannot append events: a missing
done-file or a silent log then means nothing. The engine asks :class:`StateDisk` before each
decision; the policy holds every decision that depends on those files while it says full
(see :func:`supervisor.policy.decide`). Free space is read with ``statvfs(3)``: one system
call, no write.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from supervisor.taskdir import layout
from supervisor.taskdir.folder import TaskDir
from supervisor.tmux import RECORDED_FILES, PaneInfo

#: Bytes of free space (or free inodes x 1) below which the state filesystem counts as
#: full: the wrapper's files need a few bytes, but the capture and the manifest need more,
#: and a disk this close to full fills within a check.
MIN_FREE = 64 * 1024
#: Seconds a free-space reading is reused across the checks of one tick.
MAX_AGE = 0.25


def free_bytes(path: Path) -> int:
    """Bytes this process can still write on ``path``'s filesystem, 0 when no inode is left.

    root may use the blocks reserved for it (ext4's 5 %: ``f_bfree``), others only
    ``f_bavail`` (statvfs(3)). Raises ``OSError``.
    """
    info = os.statvfs(path)
    blocks = info.f_bfree if os.geteuid() == 0 else info.f_bavail
    inodes = info.f_ffree if os.geteuid() == 0 else info.f_favail
    if info.f_files and inodes == 0:  # f_files 0: the filesystem does not count inodes
        return 0
    return blocks * info.f_frsize


class StateDisk:
    """Whether the state filesystem is full, logged once when it fills and once when it
    has room again (not at every check).

    Args:
        path: the profile's ``state_dir``.
        log: where the two transitions are logged.
        min_free: bytes (see :data:`MIN_FREE`).
    """

    def __init__(self, path: Path, log: logging.Logger, min_free: int = MIN_FREE) -> None:
        self.path = path
        self.log = log
        self.min_free = min_free
        self.is_full = False
        self._cleared = False
        self._read_at = float("-inf")

    def full(self, max_age: float = MAX_AGE) -> bool:
        """True while the state filesystem has less than ``min_free`` bytes free (reading
        reused for ``max_age`` seconds). A failing ``statvfs`` keeps the last answer."""
        if time.monotonic() - self._read_at < max_age:
            return self.is_full
        self._read_at = time.monotonic()
        try:
            free = free_bytes(self.path)
        except OSError as exc:
            self.log.debug("cannot read the free space of %s: %s", self.path, exc)
            return self.is_full
        full = free < self.min_free
        if full and not self.is_full:
            self.log.error(
                "state filesystem of %s is full (%d bytes free): holding every crash, hang, "
                "resume and ending decision until it has room; free space there",
                self.path,
                free,
            )
        elif self.is_full and not full:
            self._cleared = True
            self.log.warning(
                "state filesystem of %s has room again (%d bytes free); decisions resume",
                self.path,
                free,
            )
        self.is_full = full
        return full

    def take_cleared(self) -> bool:
        """True once after the filesystem went from full to having room (the engine then
        re-attaches each pane's capture: ``sed`` exits on its first failed write)."""
        cleared, self._cleared = self._cleared, False
        return cleared


def restore_run_files(task: TaskDir, pane: PaneInfo | None) -> bool:
    """Write the wrapper files that a full disk sent to the pane's options (wrapper.py,
    step 5), in the wrapper's order, ``done`` with the recorded end time as its mtime.

    Files that exist are left alone (the wrapper wrote them, or a retry did). Returns True
    when it wrote any. Raises ``OSError`` (the disk is still full): the pane keeps the values,
    so a later call writes them.
    """
    if pane is None or not pane.recorded:
        return False
    wrote = False
    for name in RECORDED_FILES:
        value = pane.recorded.get(name)
        path = task.file(name)
        if value is None or path.exists():
            continue
        if name == layout.DONE:
            ended = None
            with contextlib.suppress(ValueError):
                ended = float(value)
            _write_small(path, "")
            if ended is not None:
                os.utime(path, (ended, ended))
        else:
            _write_small(path, f"{value}\n")
        wrote = True
    return wrote


def _write_small(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.restore.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
