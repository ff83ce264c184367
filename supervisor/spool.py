"""Intake: claim task files from the spool, exactly once, and reject bad ones with a reason.

Claiming works the same whether the spool and ``state_dir`` share a filesystem or not:

1. ``mkdir state/tasks/<id>`` (a fresh id);
2. ``rename(2)`` ``spool/<file>.toml`` to the hidden ``spool/.claim.<id>.<file>.toml``. The
   rename stays inside the spool folder, so it is atomic on every filesystem: it happens once
   or not at all, and two engines (or two ticks) can never both take a file;
3. move the claimed file to ``<task_dir>/task.toml``: one more rename on the same filesystem,
   else (``EXDEV``) a copy that is fsynced and renamed into place, then the claim is unlinked.

If supervise dies between the steps, :func:`recover_claims` finishes or undoes each claim on
the next start: a claim whose ``task.toml`` exists is done (the claim is unlinked), any other
goes back to the spool under its own name; a task folder left empty is removed.

Files are taken only once their mtime is :data:`SETTLE` seconds old, so a writer still
filling the file in place is not read half-written (writers that can should write a hidden
temp file and rename it in, as ``supervise submit`` does; hidden files are ignored).
Anything named ``*.toml`` that is not a regular file (a directory, FIFO, socket, dangling
symlink, symlink to a directory) is moved aside without being opened. A rejected file goes
to ``spool/rejected/`` with ``<name>.error`` beside it. Nothing is ever deleted.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import stat
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor import plannames
from supervisor.config import (
    MAX_TASK_FILE_BYTES,
    ConfigError,
    LoadedProfile,
    ResolvedTask,
    file_kind,
    load_task,
    read_bounded,
    too_big,
)
from supervisor.config.cluster import spool_claim_warnings
from supervisor.diskio import fsync_dir, move_file, rename_noreplace
from supervisor.spoolaccess import is_private_group, sharing_problem
from supervisor.taskdir import layout
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import Manifest, TaskDir, atomic_write, utc_iso
from supervisor.taskdir.states import Status
from supervisor.taskid import GENERATED
from supervisor.terminal import escape_controls
from supervisor.workspace import lifecycle

log = logging.getLogger("supervise.engine")
__all__ = ["is_private_group", "sharing_problem"]  # their home: supervisor/spoolaccess.py

#: Seconds a spool file must be unchanged before it is claimed.
SETTLE = 0.2
REJECTED = layout.REJECTED
#: Longest file name kept in ``rejected/`` (NAME_MAX is 255; ``.error`` and the temp
#: file used to write it atomically need room).
MAX_REJECTED_NAME = 200
#: Prefix of a claimed spool file (``.claim.<task id>.<original name>``); hidden, so neither
#: :func:`pending` nor ``--exit-when-idle`` counts it.
CLAIM_PREFIX = layout.CLAIM_PREFIX
_CLAIM_RE = re.compile(re.escape(CLAIM_PREFIX) + r"([a-z0-9-]+)\.(.+)", re.DOTALL)


def slug(name: str, limit: int = 40) -> str:
    """A tmux-safe, path-safe form of ``name``: ``[a-z0-9-]``, at most ``limit`` chars.

    tmux session names may not contain ``.`` or ``:``; we also drop anything a shell or a
    path could misread (``/``, leading ``-``).
    """
    text = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:limit].strip("-")
    return text or "task"


TASK_ID_RE = GENERATED  # the ids new_task_id makes (their shape: supervisor/taskid.py)


def new_task_id(name: str) -> str:
    """``<slug>-<6 hex>``: readable, unique enough, and safe as a tmux session name."""
    return f"{slug(name)}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Claimed:
    """A spool file that became a task (``task`` set) or was rejected (``error`` set)."""

    source: Path
    task_dir: TaskDir | None = None
    resolved: ResolvedTask | None = None
    error: str | None = None
    rejected_to: Path | None = None
    deferred: bool = False  # put back: its 'after' names a task not claimed yet


#: What :func:`pending` remembers of a spool entry between looks: its ``st_mtime_ns`` and
#: ``st_size``, and the monotonic time it was first seen with them.
Seen = dict[str, tuple[int, int, float]]


def pending(
    spool_dir: Path,
    now: float | None = None,
    complete: frozenset[str] = frozenset(),
    seen: Seen | None = None,
) -> list[Path]:
    """Spool entries ready to claim: ``*.toml``, not hidden, and either settled (mtime at
    least :data:`SETTLE` s old) or named in ``complete`` (inotify saw it renamed in or closed
    by its writer); oldest first. Entries that are not regular files are listed too, so that
    :func:`claim` moves them to ``rejected/`` (they never block ``--exit-when-idle``).

    An mtime in the future (``rsync -t`` from a host whose clock is ahead, clock skew) says
    nothing about when the writer finished: such an entry is settled once it has stayed
    unchanged (mtime and size) for :data:`SETTLE` s of the monotonic clock since it was
    first seen. ``seen`` is that memory, kept by the caller between looks (entries gone
    from the folder are forgotten); without it a future mtime waits until it has passed."""
    now = time.time() if now is None else now
    looked = time.monotonic()
    ready = []
    try:
        entries = list(os.scandir(spool_dir))
    except FileNotFoundError:
        return []
    current: Seen = {}
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(".toml"):
            continue
        try:  # lstat: a dangling symlink or a FIFO is listed too (claim rejects it unopened)
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        settled = now - info.st_mtime >= SETTLE
        if seen is not None and info.st_mtime > now:
            first = seen.get(entry.name)
            unchanged = first is not None and first[:2] == (info.st_mtime_ns, info.st_size)
            since = first[2] if first is not None and unchanged else looked
            current[entry.name] = (info.st_mtime_ns, info.st_size, since)
            settled = looked - since >= SETTLE
        if entry.name in complete or settled:
            ready.append((info.st_mtime, entry.name, Path(entry.path)))
    if seen is not None:
        seen.clear()
        seen.update(current)
    return [path for _, _, path in sorted(ready)]


def has_waiting_files(spool_dir: Path) -> bool:
    """True if any non-hidden ``*.toml`` sits in the spool (settled or not)."""
    try:
        return any(
            e.name.endswith(".toml") and not e.name.startswith(".") for e in os.scandir(spool_dir)
        )
    except FileNotFoundError:
        return False


def _guess_name(path: Path) -> str:
    """The task's ``name`` for its id, else the file's stem; never blocks on a FIFO."""
    if not_a_task_file(path, path) is not None:
        return path.stem
    try:
        data = tomllib.loads(read_bounded(path, path, MAX_TASK_FILE_BYTES).decode("utf-8"))
        name = data.get("name")
        if isinstance(name, str) and name.strip():
            return name
    except (ConfigError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        pass
    return path.stem


def reject(source: Path, spool_dir: Path, problems: list[str], name: str | None = None) -> Path:
    """Move ``source`` to ``spool_dir/rejected/<name>`` (default: its own name) with a
    ``<name>.error`` file listing ``problems``; return the new path.

    One rename, so the file is always either where it was or in ``rejected/``. A name too
    long to leave room for ``.error`` is shortened; a name already taken gets a timestamp
    suffix; nothing is overwritten.
    """
    folder = spool_dir / REJECTED
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    raw = os.fsencode(name or source.name)
    if len(raw) > MAX_REJECTED_NAME:  # leave room for the .error file and the temp name
        raw = raw[: MAX_REJECTED_NAME - 5] + b".toml"
    target = folder / os.fsdecode(raw)
    while True:
        try:
            move_file(source, target)
            break
        except FileExistsError:  # an earlier rejection of that name, or one at this instant
            stamp = f".{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}.toml"
            stem = raw.removesuffix(b".toml")[: MAX_REJECTED_NAME - len(stamp)]
            target = folder / os.fsdecode(stem + stamp.encode())
    text = "\n".join(problems) + "\n"
    error_file = target.with_name(target.name + layout.ERROR_SUFFIX)
    atomic_write(error_file, text.encode("utf-8", errors="backslashreplace"))
    return target


def not_a_task_file(path: Path, shown: Path) -> str | None:
    """Why ``path`` cannot be a task file, or ``None`` if it may be read.

    Uses ``lstat`` (and ``stat`` for a symlink's target) and never opens the file: opening a
    FIFO for reading blocks. A symlink to a regular file is read like the file.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None  # gone: the caller sees that when it moves it
    fix = "only regular TOML files are read; remove it from the spool"
    if stat.S_ISLNK(info.st_mode):
        try:
            info = os.stat(path)
        except OSError as exc:
            what = "dangling" if exc.errno == errno.ENOENT else f"unusable ({exc.strerror})"
            return f"{shown}: a {what} symbolic link to {os.readlink(path)!r}; {fix}"
        if not stat.S_ISREG(info.st_mode):
            return f"{shown}: a symbolic link to {file_kind(info.st_mode)}; {fix}"
    elif not stat.S_ISREG(info.st_mode):
        return f"{shown}: {file_kind(info.st_mode)}, not a regular file; {fix}"
    if info.st_size > MAX_TASK_FILE_BYTES:
        return too_big(shown, info.st_size)
    return None


def claimed_id(name: str) -> re.Match[str] | None:
    """A spool entry's name as a claim's (``.claim.<id>.<original>``: group 1 the id,
    group 2 the original name), else ``None``."""
    return _CLAIM_RE.fullmatch(name)


def claim_name(task_id: str, original: str) -> str:
    """``.claim.<id>.<original>``, the original cut to fit NAME_MAX (255 bytes)."""
    head = f"{CLAIM_PREFIX}{task_id}."
    room = 255 - len(head.encode())
    raw = os.fsencode(original)
    return head + os.fsdecode(raw[:room]) if len(raw) > room else head + original


def _new_task_folder(tasks_dir: Path, name: str, preferred: str | None) -> Path:
    """A fresh ``tasks_dir/<id>`` (mode 0700), ``preferred`` as the id if still free."""
    tasks_dir.mkdir(parents=True, exist_ok=True)
    while True:
        task_id = preferred or new_task_id(name)
        preferred = None
        folder = tasks_dir / task_id
        try:
            folder.mkdir(mode=0o700)
            return folder
        except FileExistsError:
            continue


def claim(path: Path, profile: LoadedProfile, defer: bool = False) -> Claimed | None:
    """Claim one spool file. Returns ``None`` when another claimer got it first.

    On success the file is ``<task_dir>/task.toml``, the prompt is in ``<task_dir>/prompt``
    and ``manifest.json`` says ``queued``. On a validation error, or for an entry that is not
    a regular file or is over :data:`~supervisor.config.MAX_TASK_FILE_BYTES`, the file is
    rejected (see :func:`reject`) and no task folder remains. Relative paths in the file
    resolve against the spool folder. Works across filesystems (see the module docstring).

    Raises:
        OSError: the file could not be moved into the task folder; it is then back in the
            spool under its own name and the task folder is gone.
    """
    # ``supervise submit`` names the file after the id it printed; keep that id.
    preferred = path.stem if TASK_ID_RE.fullmatch(path.stem) else None
    folder = _new_task_folder(profile.tasks_dir, _guess_name(path), preferred)
    claimed = path.with_name(claim_name(folder.name, path.name))
    try:
        os.rename(path, claimed)  # the claim: inside the spool folder, atomic everywhere
    except FileNotFoundError:
        folder.rmdir()
        return None
    except BaseException:
        folder.rmdir()
        raise
    problem = not_a_task_file(claimed, path)
    if problem is not None:
        folder.rmdir()
        rejected = reject(claimed, profile.spool_dir, [problem], name=path.name)
        return Claimed(source=path, error=problem, rejected_to=rejected)
    try:
        move_file(claimed, folder / layout.TASK_TOML)
    except BaseException:
        _undo_claim(claimed, folder, path)
        raise
    return finish_claim(TaskDir(folder), profile, original=path, defer=defer)


def _moved_back(claimed: Path, original: Path) -> bool:
    """Move a deferred file back to the spool under its own name (its predecessor may come
    soon); ``False`` when a new file took that name meanwhile (the caller rejects it)."""
    try:
        move_file(claimed, original)
    except FileExistsError:
        return False
    return True


def _undo_claim(claimed: Path, folder: Path, original: Path) -> Path:
    """Put a claimed file back in the spool and remove its (unfinished) task folder.

    Returns where the file is now: ``original``, or a stamped name if that is taken.
    """
    for leftover in folder.iterdir() if folder.is_dir() else ():
        if leftover.name.startswith("."):  # atomic_write's temp file
            leftover.unlink()
    with contextlib.suppress(OSError):
        folder.rmdir()
    return put_back(claimed, original) if os.path.lexists(claimed) else original


def put_back(claimed: Path, original: Path) -> Path:
    """Rename the claimed file ``claimed`` back to ``original``, or to a stamped name beside
    it (``NAME.<YYYYmmddTHHMMSS>-<4 hex>.toml``) when a new file took that name meanwhile:
    never over a file, never left hidden. Returns where it is now.

    Raises:
        OSError: from the rename.
    """
    target = original
    while True:
        try:
            rename_noreplace(claimed, target)
            return target
        except FileExistsError:  # a new file took the name meanwhile
            stamp = f".{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}.toml"
            target = original.with_name(original.name.removesuffix(".toml")[:200] + stamp)


def recover_claims(profile: LoadedProfile) -> list[Path]:
    """Finish or undo the claims a crash interrupted; run at start-up, before intake.

    For each ``spool/.claim.<id>.<name>`` whose ``state/tasks/<id>`` exists (claims of
    another engine sharing the spool have no folder here and are left alone): if
    ``task.toml`` is in the folder the move finished and the claim is unlinked (adoption then
    validates a task without a manifest); otherwise the file goes back to the spool as
    ``<name>`` and the folder is removed. Empty task folders (a crash right after ``mkdir``)
    are removed too.

    Returns:
        The spool files put back.
    """
    put_back: list[Path] = []
    tasks_dir = profile.tasks_dir
    try:
        entries = sorted(os.scandir(profile.spool_dir), key=lambda e: e.name)
    except FileNotFoundError:
        entries = []
    for entry in entries:
        match = _CLAIM_RE.fullmatch(entry.name)
        if match is None:
            continue
        folder = tasks_dir / match.group(1)
        if not folder.is_dir():
            continue
        claimed = Path(entry.path)
        if os.path.lexists(folder / layout.TASK_TOML):
            claimed.unlink()
            continue
        put_back.append(_undo_claim(claimed, folder, claimed.with_name(match.group(2))))
    for folder in tasks_dir.iterdir() if tasks_dir.is_dir() else ():
        with contextlib.suppress(OSError):  # not empty, or not a folder: a task; keep it
            folder.rmdir()
    return put_back


def finish_claim(
    task: TaskDir, profile: LoadedProfile, original: Path | None = None, defer: bool = False
) -> Claimed:
    """Validate a claimed ``task.toml`` and materialize the task, or reject the file.

    Also used on start-up for a claim that a crash interrupted (``original`` unknown: the
    file is then rejected under its task id's name). Relative paths resolve against the
    spool folder, where the file was dropped. ``defer``: a file whose only problem is an
    ``after`` name that means no task yet goes back to the spool (``deferred``) instead.
    """
    target = task.file(layout.TASK_TOML)
    shown = original or profile.spool_dir / f"{task.task_id}.toml"
    try:
        resolved = load_task(target, profile, base=profile.spool_dir, shown_as=shown)
        after = plannames.single(resolved, task.task_id, profile.tasks_dir, shown)
    except ConfigError as exc:
        back = defer and isinstance(exc, plannames.UnknownNames) and _moved_back(target, shown)
        rejected = None if back else reject_from(target, shown, profile.spool_dir, exc.problems)
        for leftover in task.path.iterdir():  # only our own lock file can be there
            if leftover.name.startswith("."):
                leftover.unlink()
        with contextlib.suppress(OSError):
            task.path.rmdir()
        if rejected is None:
            return Claimed(source=shown, deferred=True)
        return Claimed(source=shown, error="\n".join(exc.problems), rejected_to=rejected)
    for line in spool_claim_warnings(profile, resolved.spec.host, shown):
        log.warning("%s", escape_controls(line))
    materialize(task, resolved, source=str(shown), state_dir=profile.state_dir, after=after)
    return Claimed(source=shown, task_dir=task, resolved=resolved)


def reject_from(current: Path, original: Path, spool_dir: Path, problems: list[str]) -> Path:
    """Reject a file that was already moved to ``current``, under its original name."""
    return reject(current, spool_dir, problems, name=original.name)


def materialize(
    task: TaskDir,
    resolved: ResolvedTask,
    source: str,
    state_dir: Path,
    after: list[str] | None = None,
    home: Path | None = None,
    attempt: dict[str, Any] | None = None,
) -> Manifest:
    """Write ``prompt``, ``spec.json`` (the validated task, for re-adoption), fsynced, the
    ``queued`` event (fsynced; its creation fsyncs the folder), then the first manifest, no
    fsync (its ``workspace`` resolved now: :func:`supervisor.workspace.lifecycle.resolve`).

    ``after``: the predecessors' ids (issue 26): the task is ``blocked`` (a ``blocked``
    event after ``queued``, the manifest's ``after`` and ``requires``). ``home``: where the
    folder will live when it is made elsewhere first (a plan's staging, :mod:`supervisor.plans`).
    ``attempt``: its place in a group of attempts (``{"group", "index", "of"}``, issue 26),
    in the manifest and the ``queued`` event."""
    workspace = lifecycle.resolve(
        task.task_id, resolved.spec.project_dir, resolved.workspace, state_dir
    )
    spec = resolved.spec.model_dump_json(indent=1, by_alias=True).encode()  # [workspace] copy
    atomic_write(task.file(layout.PROMPT), resolved.prompt.encode("utf-8"), sync_dir=False)
    atomic_write(task.file(layout.SPEC), spec, sync_dir=False)
    if task.file(layout.EVENTS).exists():
        fsync_dir(task.path)
    manifest = Manifest(
        task_id=task.task_id,
        task_name=resolved.spec.name,
        status=Status.QUEUED,
        model=resolved.model,
        project_dir=str(resolved.spec.project_dir),
        session_name=task.task_id,
        session_id=str(uuid.uuid4()),
        tmpdir=str(home or task.path),
        created_at=utc_iso(),
        workspace=workspace,
        account=resolved.account,
        attempt=attempt,
    )
    extra = {"attempt": attempt} if attempt else {}
    task.append_event(
        Event.QUEUED,
        status=Status.QUEUED,
        source=source,
        session_id=manifest.session_id,
        workspace=workspace.model_dump(mode="json"),
        **extra,
    )
    if after:
        manifest.status, manifest.after = Status.BLOCKED, after  # type: ignore[assignment]
        manifest.requires = resolved.spec.requires
        task.append_event(
            Event.BLOCKED, status=Status.BLOCKED, after=after, requires=manifest.requires
        )
    task.write_manifest(manifest, durable=False)
    lifecycle.note_in_place(task, workspace)  # a repository without a commit runs in place
    return manifest
