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

How (:func:`apply`), so a task folder is never lost: per month, a new tarball is written
beside the old one (``.YYYY-MM.tar.gz.tmp``: the old tarball's members, less any of the
folders being added again after an interrupted run, then the new folders), fsynced,
renamed over the old one and the folder fsynced; it is read back, and only then are the
archived task folders removed. Any error before the rename leaves everything as it was.
``gzip`` through the standard library's :mod:`tarfile`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tarfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from supervisor.diskio import fsync_dir
from supervisor.states import TERMINAL
from supervisor.taskdir import MANIFEST, TaskDir, parse_iso

ARCHIVE = "archive"


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
        entries = sorted((e for e in os.scandir(tasks_dir) if e.is_dir(follow_symlinks=False)),
                         key=lambda e: e.name)  # fmt: skip
    except FileNotFoundError:
        return found
    for entry in entries:
        if not entry.name.startswith("."):
            found.items.append(_judge(TaskDir(Path(entry.path)), older_than, now))
    return found


def _write_month(folder: Path, month: str, tasks_dir: Path, ids: list[str]) -> Path:
    """Write ``folder/MONTH.tar.gz`` holding its old members and the folders ``ids``;
    returns it. Raises ``OSError``/``tarfile.TarError`` (the old tarball intact then)."""
    target = folder / f"{month}.tar.gz"
    tmp = folder / f".{month}.tar.gz.tmp"
    adding = set(ids)
    try:
        with tarfile.open(tmp, "w:gz") as out:
            if target.exists():
                with tarfile.open(target, "r:gz") as old:
                    for member in old:
                        if member.name.split("/", 1)[0] in adding:
                            continue  # a folder archived before an interrupted removal
                        data = old.extractfile(member) if member.isfile() else None
                        out.addfile(member, data)
            for task_id in ids:
                out.add(tasks_dir / task_id, arcname=task_id)
        os.chmod(tmp, 0o600)
        fsync_dir(tmp)
        os.replace(tmp, target)
        fsync_dir(folder)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return target


def _holds(target: Path, ids: list[str]) -> set[str]:
    """The ids whose ``manifest.json`` the tarball holds (read back)."""
    with tarfile.open(target, "r:gz") as archive:
        names = set(archive.getnames())
    return {task_id for task_id in ids if f"{task_id}/{MANIFEST}" in names}


def apply(found: Plan, tasks_dir: Path) -> bool:
    """Archive the planned folders month by month (see the module docstring); sets each
    item's ``result`` (``archived`` or ``error: ...``). Returns False on any error."""
    ok = True
    months = found.to_archive()
    if months:
        found.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for month, items in sorted(months.items()):
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
            shutil.rmtree(tasks_dir / item.task_id)
            item.result = f"archived in {target.name}"
    return ok


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
    return {"task_id": task_id, "name": m.get("task_name"), "status": m.get("status"),
            "verdict": m.get("verdict"),
            "reason": m.get("failure_reason") or m.get("abandon_reason"),
            "finished_at": m.get("finished_at"), "archive": archive}  # fmt: skip
