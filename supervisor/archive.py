"""``supervise archive``: move ended task folders out of ``state_dir/tasks`` into one
compressed tarball per month, ``state_dir/archive/YYYY-MM.tar.gz`` (the month the task
ended, UTC), so ``status`` and the engine's start-up stop reading them.

Which folders go (:func:`plan`): a task that has ended (``states.TERMINAL``) at least
``older_than`` seconds ago (``finished_at``, else ``abandoned_at``, else the manifest's
mtime). Never a live task, a folder whose manifest cannot be read (``supervise repair``
territory), nor one whose work is unreviewed: its worktree's branch not merged or the
worktree dirty (:mod:`supervisor.workspace.prune`'s judgement, reused), or a worktree still
on disk (``supervise prune`` removes a merged one first, so no worktree is left that no
manifest names).

Never either a task the engine still works on after its ending (its notifier or its
leftover-process sweep: :func:`supervisor.statelock.task_busy`); it is archived next time.

How (:func:`run`), so a task folder is never lost nor doubled, even when two runs start at
once or one is SIGKILLed halfway: one run at a time per state dir (:func:`locked`, a lock on
``state_dir/archive`` itself; a second run refuses in one line), and per month a new tarball
is written beside the old one under a unique temporary name (the old tarball's members, less
any of the folders being added again after an interrupted run, then the new folders),
fsynced, renamed over the old one and the folder fsynced; it is read back, and only then is
each archived task folder renamed to ``archive/.removing-ID`` (atomic, out of sight of every
reader of ``tasks/``) and removed. Any error before the rename leaves everything as it was; a
run killed after it leaves ``.removing-*`` folders and temporary files that the next run
removes (their tasks are in the tarball), or task folders still in place that the next run
archives again (replacing their copies in the tarball). ``gzip`` through the standard library's
:mod:`tarfile`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from supervisor import statelock
from supervisor.diskio import fsync_dir
from supervisor.errors import SuperviseError
from supervisor.taskdir import layout
from supervisor.taskdir.folder import MANIFEST, TaskDir, parse_iso
from supervisor.taskdir.states import TERMINAL

ARCHIVE = layout.ARCHIVE
#: Prefix of a task folder renamed into ``state_dir/archive`` once its tarball is durable,
#: then removed: no reader of ``tasks/`` (the engine's adoption, ``status``) sees it there.
GONE = ".removing-"
#: The same within ``tasks/`` when ``archive/`` is on another filesystem (EXDEV).
GONE_IN_PLACE = ".archived-"
#: Suffix of a tarball being written (``.YYYY-MM.tar.gz.<random>.tmp``).
TMP_SUFFIX = ".tmp"


class ArchiveBusy(SuperviseError, RuntimeError):
    """Another ``supervise archive`` writes into the same ``state_dir/archive``."""


@dataclass
class ArchiveItem:
    """One task folder looked at: ``action`` ``archive`` or ``keep`` (with ``reason``);
    ``month`` (``YYYY-MM``) names the tarball; ``result`` after :func:`apply`."""

    task_id: str
    action: str
    reason: str
    month: str = ""
    result: str = ""


@dataclass
class Plan:
    """What :func:`plan` found: the items, and the archive folder."""

    folder: Path
    items: list[ArchiveItem] = field(default_factory=list)

    def to_archive(self) -> dict[str, list[ArchiveItem]]:
        """Items to archive, by month."""
        months: dict[str, list[ArchiveItem]] = {}
        for item in self.items:
            if item.action == "archive":
                months.setdefault(item.month, []).append(item)
        return months


def _ended_at(task: TaskDir, manifest: Any) -> float:
    ended = parse_iso(manifest.finished_at) or parse_iso(manifest.abandoned_at)
    return ended if ended is not None else task.file(MANIFEST).stat().st_mtime


def _workspace_hold(task: TaskDir, now: float) -> str | None:
    """Why the task's worktree keeps it here, or ``None``."""
    from supervisor.workspace import prune

    try:
        verdict = prune._judge(task, False, None, now)  # the one judgement of "reviewed"
    except Exception as exc:  # git missing or failing: keep the folder, say why
        return f"its worktree could not be judged ({exc})"
    if verdict is None:
        return None
    if verdict.action == "keep":
        return f"unreviewed worktree: {verdict.reason}"
    if Path(verdict.path).exists():
        return f"worktree still at {verdict.path} ({verdict.reason}); 'supervise prune' removes it"
    return None


def _judge(task: TaskDir, older_than: float, now: float) -> ArchiveItem:
    try:
        manifest = task.read_manifest()
    except (OSError, ValueError) as exc:
        return ArchiveItem(task.task_id, "keep", f"manifest unreadable ({exc})")
    if manifest.status not in TERMINAL:
        return ArchiveItem(task.task_id, "keep", f"not ended ({manifest.status})")
    ended = _ended_at(task, manifest)
    if now - ended < older_than:
        return ArchiveItem(task.task_id, "keep", f"ended {(now - ended) / 3600:.1f} h ago")
    try:
        busy = statelock.task_busy(task.path)
    except OSError as exc:  # moved by another run meanwhile (a --dry-run does not lock)
        return ArchiveItem(task.task_id, "keep", f"its folder cannot be opened ({exc})")
    if busy:
        why = "the engine still runs its notifier or cleanup on it; archived next time"
        return ArchiveItem(task.task_id, "keep", why)
    hold = _workspace_hold(task, now)
    if hold is not None:
        return ArchiveItem(task.task_id, "keep", hold)
    month = datetime.fromtimestamp(ended, UTC).strftime("%Y-%m")
    return ArchiveItem(task.task_id, "archive", f"{manifest.status}, ended {month}", month)


def plan(tasks_dir: Path, state_dir: Path, older_than: float, now: float | None = None) -> Plan:
    """Look at every task folder (``older_than`` in seconds); nothing is changed."""
    now = time.time() if now is None else now
    found = Plan(state_dir / ARCHIVE)
    try:
        entries = [e for e in os.scandir(tasks_dir) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return found
    entries.sort(key=lambda e: e.name)
    for entry in entries:
        if not entry.name.startswith("."):
            found.items.append(_judge(TaskDir(Path(entry.path)), older_than, now))
    return found


def _write_month(folder: Path, month: str, tasks_dir: Path, ids: list[str]) -> Path:
    """Write ``folder/MONTH.tar.gz`` holding its old members and the folders ``ids``;
    returns it. Raises ``OSError``/``tarfile.TarError`` (the old tarball intact then)."""
    target = folder / f"{month}.tar.gz"
    # A unique name: a run SIGKILLed while writing leaves its own file, never one that a
    # later run opens again (the next run removes it under the lock).
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TMP_SUFFIX, dir=folder)
    tmp, adding = Path(name), set(ids)
    try:
        with os.fdopen(fd, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz") as out:
                if target.exists():
                    _copy_members(target, out, adding)
                for task_id in ids:
                    out.add(tasks_dir / task_id, arcname=task_id)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, target)
        fsync_dir(folder)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return target


def _copy_members(target: Path, out: tarfile.TarFile, adding: set[str]) -> None:
    """The old tarball's members into ``out``, less those of the folders ``adding``
    (archived before by a run that was stopped before it removed them)."""
    with tarfile.open(target, "r:gz") as old:
        for member in old:
            if member.name.split("/", 1)[0] in adding:
                continue
            out.addfile(member, old.extractfile(member) if member.isfile() else None)


def _holds(target: Path, ids: list[str]) -> set[str]:
    """The ids whose ``manifest.json`` the tarball holds (read back)."""
    with tarfile.open(target, "r:gz") as archive:
        names = set(archive.getnames())
    return {task_id for task_id in ids if f"{task_id}/{MANIFEST}" in names}


def _remove(tasks_dir: Path, archive: Path, task_id: str, tarball: str) -> str:
    """Move an archived task folder away (rename, then remove); returns the item's result.
    Kept, not moved, when the engine took it up again meanwhile."""
    folder = tasks_dir / task_id
    fd = statelock.claim_task(folder)
    if fd is None:
        return f"kept: the engine works on it again; {tarball} takes its newer copy next time"
    try:
        gone = archive / f"{GONE}{task_id}"
        try:  # atomic: the whole folder is in tasks/ or out of every reader's sight
            os.rename(folder, gone)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            gone = tasks_dir / f"{GONE_IN_PLACE}{task_id}"
            os.rename(folder, gone)
    finally:
        os.close(fd)
    fsync_dir(tasks_dir)
    shutil.rmtree(gone)
    return f"archived in {tarball}"


def _clean_leftovers(folder: Path, tasks_dir: Path) -> None:
    """What a run killed halfway left (the caller holds :func:`locked`): its temporary
    tarballs, and the task folders it had renamed away after their tarball was durable."""
    for entry in folder.glob(f".*{TMP_SUFFIX}"):
        if entry.is_file() and not entry.is_symlink():
            entry.unlink(missing_ok=True)
    for entry in [*folder.glob(f"{GONE}*"), *tasks_dir.glob(f"{GONE_IN_PLACE}*")]:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


def apply(found: Plan, tasks_dir: Path) -> bool:
    """Archive the planned folders month by month (see the module docstring); sets each
    item's ``result`` (``archived in ...``, ``kept: ...`` or ``error: ...``). The caller
    holds :func:`locked`. Returns False on any error."""
    ok = True
    for month, items in sorted(found.to_archive().items()):
        ids = [item.task_id for item in items]
        try:
            target = _write_month(found.folder, month, tasks_dir, ids)
            held = _holds(target, ids)
        except (OSError, tarfile.TarError) as exc:
            ok = False
            for item in items:
                item.result = f"error: {exc}; nothing removed"
            continue
        for item in items:
            if item.task_id not in held:
                ok, item.result = False, f"error: not found in {target.name}; kept"
                continue
            try:
                item.result = _remove(tasks_dir, found.folder, item.task_id, target.name)
            except OSError as exc:
                ok, item.result = False, f"error: archived in {target.name}, not removed: {exc}"
    return ok


@contextlib.contextmanager
def locked(state_dir: Path) -> Iterator[Path]:
    """Hold the archive lock of ``state_dir`` (on the ``state_dir/archive`` folder, made
    0700 if missing) for a ``with`` block; yields that folder.

    Raises:
        ArchiveBusy: another ``supervise archive`` holds it (one line for the user).
        OSError: the folder cannot be made or opened.
    """
    folder = state_dir / ARCHIVE
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = statelock.acquire(folder)
    except statelock.LockBusy:
        raise ArchiveBusy(
            f"another 'supervise archive' is writing {folder}; nothing was changed: run "
            "it again once that one ends"
        ) from None
    try:
        yield folder
    finally:
        os.close(fd)


def run(tasks_dir: Path, state_dir: Path, older_than: float) -> tuple[Plan, bool]:
    """Plan and apply under :func:`locked` (``older_than`` in seconds): the plan with each
    item's result, and False on any error. Raises what :func:`locked` raises."""
    with locked(state_dir) as folder:
        with contextlib.suppress(FileNotFoundError):
            _clean_leftovers(folder, tasks_dir)
        found = plan(tasks_dir, state_dir, older_than)
        return found, apply(found, tasks_dir)


def archived_rows(state_dir: Path) -> list[dict[str, Any]]:
    """One row per task in ``state_dir/archive/*.tar.gz`` (its manifest read from the
    tarball): ``task_id``, ``name``, ``status``, ``verdict``, ``reason``, ``finished_at``,
    ``archive`` (the tarball's name). An unreadable tarball gives one row with ``error``."""
    rows = []
    for path in sorted((state_dir / ARCHIVE).glob("*.tar.gz")):
        try:
            with tarfile.open(path, "r:gz") as archive:
                for member in archive:
                    parts = member.name.split("/")
                    if len(parts) != 2 or parts[1] != MANIFEST or not member.isfile():
                        continue
                    handle = archive.extractfile(member)
                    m = json.loads(handle.read()) if handle is not None else {}
                    rows.append(_row(parts[0], m, path.name))
        except (OSError, tarfile.TarError, ValueError) as exc:
            rows.append({"task_id": None, "archive": path.name, "error": str(exc)})
    return rows


def _row(task_id: str, m: dict[str, Any], archive: str) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "name": m.get("task_name"),
        "status": m.get("status"),
        "verdict": m.get("verdict"),
        "reason": m.get("failure_reason") or m.get("abandon_reason"),
        "finished_at": m.get("finished_at"),
        "archive": archive,
    }
