"""Writes that readers never see half done, reads that never wait on a FIFO, and the
timestamps every record uses.

Plain standard library: the status views, ``supervise status`` and the control requests use
these without loading the pydantic models of :mod:`supervisor.taskdir.folder`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import stat
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from supervisor.errors import SuperviseError


def utc_iso(timestamp: float | None = None) -> str:
    """ISO-8601 UTC with a ``Z`` suffix and millisecond precision; ``timestamp`` in epoch s."""
    moment = datetime.now(UTC) if timestamp is None else datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(value: str | None) -> float | None:
    """Epoch seconds from :func:`utc_iso` output (``None`` passes through)."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def iso_epoch(value: object) -> float | None:
    """Epoch seconds of an ISO-8601 time as a manifest or an event writes it (``...Z``);
    ``None`` for anything else (missing, not a string, malformed): the views and
    ``supervise cost`` read files a hand or a torn write may have changed."""
    if not isinstance(value, str):
        return None
    try:
        return parse_iso(value)
    except ValueError:
        return None


def fsync_dir(path: Path) -> None:
    """fsync a folder (or a file) by path: makes a rename or a new entry in it durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: ``renameat2(2)``'s flag: fail with EEXIST instead of replacing the target (Linux 3.15+).
_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """glibc's ``renameat2`` (2.28+), or ``None`` where the C library has none."""
    libc = ctypes.CDLL(None, use_errno=True)
    return getattr(libc, "renameat2", None)


def rename_noreplace(source: Path | str, target: Path | str) -> None:
    """Rename ``source`` to ``target`` unless ``target`` exists, in one step: no file that
    appears at ``target`` meanwhile is ever replaced (``renameat2(2)``, ``RENAME_NOREPLACE``).

    Where the C library or the filesystem lacks the flag (``ENOSYS``/``EINVAL``) it falls
    back to a look then ``rename(2)``, which leaves that instant open.

    Raises:
        FileExistsError: ``target`` exists (a file, a folder or a link, dangling too).
        OSError: from the rename.
    """
    call = _renameat2()
    if call is not None:
        names = os.fsencode(source), os.fsencode(target)
        done = call(_AT_FDCWD, names[0], _AT_FDCWD, names[1], _RENAME_NOREPLACE)
        if done == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(code, os.strerror(code), str(source), None, str(target))
    if os.path.lexists(target):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
    os.rename(source, target)


#: How many ``.<n>`` suffixes :func:`keep_aside` tries after the plain stamped name.
_ASIDE_TRIES = 1000


def keep_aside(path: Path, infix: str) -> Path | None:
    """Rename ``path`` (a damaged record) to ``<name><infix><epoch s>`` beside it, or to
    ``<that>.<n>`` when that name is taken (two damagings in one second): never over a copy
    kept before (:func:`rename_noreplace`). Returns the new path, ``None`` when ``path`` is
    gone. Found by attack: a plain ``rename`` replaced the first kept copy.

    Raises:
        OSError: the rename failed, or all :data:`_ASIDE_TRIES` names are taken (EEXIST).
    """
    first = path.with_name(f"{path.name}{infix}{int(time.time())}")
    for n in range(_ASIDE_TRIES + 1):
        target = first if n == 0 else first.with_name(f"{first.name}.{n}")
        try:
            rename_noreplace(path, target)
        except FileExistsError:
            continue
        except FileNotFoundError:
            return None
        return target
    raise FileExistsError(errno.EEXIST, f"{_ASIDE_TRIES} names taken", str(first))


def atomic_write(
    path: Path, data: bytes, durable: bool = True, sync_dir: bool = True, replace: bool = True
) -> None:
    """Write ``data`` to ``path`` so a reader sees the old or the new file, never a mix.

    Temp file in the same folder, fsync, rename, fsync the folder. On any error the temp
    file is removed and the old file is left intact. Raises ``OSError``.
    ``durable=False`` skips the two fsyncs (still atomic for readers): for writes whose loss
    in a power cut costs nothing, or that a write-ahead record restores (a manifest,
    :func:`supervisor.taskdir.repair.restorable`). ``sync_dir=False`` skips only the
    folder's: the caller fsyncs it once after several writes (a group commit).
    ``replace=False`` never replaces a file at ``path``: :class:`FileExistsError` then
    (:func:`rename_noreplace`).
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            rename_noreplace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable and sync_dir:
        fsync_dir(path.parent)


def file_kind(mode: int) -> str:
    """What a ``st_mode`` names, for error lines: ``a directory``, ``a FIFO``, ..."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


class NotRegularFile(SuperviseError, OSError):
    """:func:`read_regular` found something else than a regular file; ``kind`` names it
    (:func:`file_kind`)."""

    def __init__(self, path: Path | str, mode: int) -> None:
        self.kind = file_kind(mode)
        super().__init__(errno.EINVAL, f"{self.kind}, not a regular file", str(path))


class FileTooBig(SuperviseError, OSError):
    """:func:`read_regular` found more than ``limit`` bytes; ``size`` is how many it saw
    (the file's size, or ``limit + 1`` when it ``grew`` while being read)."""

    def __init__(self, path: Path | str, size: int, limit: int, grew: bool = False) -> None:
        self.size, self.limit = size, limit
        why = f"more than {limit} bytes" if grew else f"{size} bytes; at most {limit} are allowed"
        super().__init__(errno.EFBIG, why, str(path))


def open_regular(path: Path | str, follow: bool = True) -> int | None:
    """A read descriptor on ``path`` when it is a regular file, else ``None`` (missing,
    unreadable, a FIFO, a folder, a device; with ``follow=False`` a symlink too).

    Opened non-blocking and checked with ``fstat`` on that descriptor, as
    :func:`read_regular`: a FIFO an agent put in its task folder never blocks the reader.
    The caller closes the descriptor.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags if follow else flags | os.O_NOFOLLOW)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def read_regular(path: Path | str, limit: int | None = None, follow: bool = True) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (``None``: any size).

    The file is opened once, non-blocking (a FIFO put there must not block the reader;
    ``/dev/zero`` never ends; a terminal never becomes the controlling one) and checked with
    ``fstat`` on that descriptor, so a path swapped for a FIFO after an earlier look is still
    refused, and a huge file is refused unread. ``follow=False``: a symlink is refused too
    (``O_NOFOLLOW``), for files in folders an agent can write.

    Raises:
        NotRegularFile: a FIFO, folder, device, socket.
        FileTooBig: over ``limit``, by its size or by what it held when read.
        OSError: it cannot be opened or read (``ELOOP`` for a symlink when not followed).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    fd = os.open(path, flags if follow else flags | os.O_NOFOLLOW)
    with open(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(path, info.st_mode)
        if limit is not None and info.st_size > limit:
            raise FileTooBig(path, info.st_size, limit)
        data = handle.read() if limit is None else handle.read(limit + 1)
    if limit is not None and len(data) > limit:  # it grew while being read
        raise FileTooBig(path, len(data), limit, grew=True)
    return data


def read_end(path: Path | str, count: int, end: int | None = None) -> tuple[bytes, int]:
    """The last ``count`` bytes of a regular file before ``end`` (its size when ``None``)
    and that size; ``(b"", 0)`` when it is missing, not a regular file or unreadable.

    Opened non-blocking and checked with ``fstat`` on the descriptor, as
    :func:`read_regular`: a FIFO an agent put in its task folder in place of a log never
    blocks a view or the engine (issue 22). Never raises ``OSError``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return b"", 0
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return b"", 0
        size = info.st_size if end is None else min(end, info.st_size)
        start = max(0, size - count)
        return os.pread(fd, size - start, start), size
    except OSError:
        return b"", 0
    finally:
        os.close(fd)


def read_end_rotated(path: Path, lines: int, max_bytes: int) -> bytes:
    """The end of a size-rotated log (:mod:`supervisor.logrotate`): at most ``max_bytes``
    bytes, from ``path`` and, when it holds ``lines`` or fewer line ends (a rotation just
    happened), from the end of ``path.1`` before it. ``b""`` when neither can be read."""
    data = read_end(path, max_bytes)[0]
    if data.count(b"\n") <= lines and len(data) < max_bytes:
        older = read_end(path.with_name(path.name + ".1"), max_bytes - len(data))[0]
        data = older + data
    return data


def move_file(source: Path, target: Path) -> None:
    """Move ``source`` to ``target`` on the same filesystem or across filesystems.

    One ``rename(2)`` when it can; on ``EXDEV`` the bytes (of a regular file, or a symlink's
    target) are copied to a temp file beside ``target``, fsynced and renamed into place, and
    only then is ``source`` unlinked. So ``target`` is whole or absent, and a crash leaves the
    file in one place or both, never in none. Never over a file at ``target``, not even one
    that appears meanwhile (:func:`rename_noreplace`).

    Raises:
        FileExistsError: ``target`` exists; ``source`` is where it was.
        OSError: from the rename, the copy or the unlink (``target`` is then absent, unless
            only the final unlink failed).
    """
    try:
        rename_noreplace(source, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    try:
        data = read_regular(source)
    except NotRegularFile as exc:
        raise OSError(errno.EXDEV, f"cannot copy {exc.kind} across filesystems") from exc
    atomic_write(target, data, replace=False)
    os.unlink(source)
    fsync_dir(source.parent)
