"""Intake: claim task files from the spool, exactly once, and reject bad ones with a reason.

Claiming is one ``rename(2)`` of ``spool/<file>.toml`` into a fresh task directory: the
rename either happens once or not at all, so two engines (or two ticks) can never both take
a file. Files are taken only once their mtime is :data:`SETTLE` seconds old, so a writer
still filling the file in place is not read half-written (writers that can should write a
hidden temp file and rename it in, as ``supervise submit`` does; hidden files are ignored).
A rejected file goes to ``spool/rejected/`` with ``<name>.error`` beside it. Nothing is
ever deleted.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import time
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path

from supervisor.config import ConfigError, LoadedProfile, ResolvedTask, load_task
from supervisor.taskdir import Manifest, TaskDir, atomic_write, utc_iso

#: Seconds a spool file must be unchanged before it is claimed.
SETTLE = 0.2
REJECTED = "rejected"
#: Longest file name kept in ``rejected/`` (NAME_MAX is 255; ``.error`` and the temp
#: file used to write it atomically need room).
MAX_REJECTED_NAME = 200


def slug(name: str, limit: int = 40) -> str:
    """A tmux-safe, path-safe form of ``name``: ``[a-z0-9-]``, at most ``limit`` chars.

    tmux session names may not contain ``.`` or ``:``; we also drop anything a shell or a
    path could misread (``/``, leading ``-``).
    """
    text = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:limit].strip("-")
    return text or "task"


TASK_ID_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?-[0-9a-f]{6}")


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


def pending(
    spool_dir: Path, now: float | None = None, complete: frozenset[str] = frozenset()
) -> list[Path]:
    """Spool files ready to claim: ``*.toml``, not hidden, and either settled (mtime at least
    :data:`SETTLE` s old) or named in ``complete`` (inotify saw it renamed in or closed by
    its writer); oldest first."""
    now = time.time() if now is None else now
    ready = []
    try:
        entries = list(os.scandir(spool_dir))
    except FileNotFoundError:
        return []
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(".toml"):
            continue
        try:
            stat = entry.stat()
        except FileNotFoundError:
            continue
        if entry.is_file() and (entry.name in complete or now - stat.st_mtime >= SETTLE):
            ready.append((stat.st_mtime, entry.name, Path(entry.path)))
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
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        name = data.get("name")
        if isinstance(name, str) and name.strip():
            return name
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
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
    if len(raw) > MAX_REJECTED_NAME:  # leave room for ".error" and the temp name
        raw = raw[: MAX_REJECTED_NAME - 5] + b".toml"
    target = folder / os.fsdecode(raw)
    if target.exists():
        stamp = f".{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}.toml"
        stem = raw.removesuffix(b".toml")[: MAX_REJECTED_NAME - len(stamp)]
        target = folder / os.fsdecode(stem + stamp.encode())
    os.rename(source, target)
    text = "\n".join(problems) + "\n"
    error_file = target.with_name(target.name + ".error")
    atomic_write(error_file, text.encode("utf-8", errors="backslashreplace"))
    return target


def claim(path: Path, profile: LoadedProfile) -> Claimed | None:
    """Claim one spool file. Returns ``None`` when another claimer got it first.

    On success the file is ``<task_dir>/task.toml``, the prompt is in ``<task_dir>/prompt``
    and ``manifest.json`` says ``queued``. On a validation error the file is rejected (see
    :func:`reject`). Relative paths in the file resolve against the spool folder.
    """
    name = _guess_name(path)
    tasks_dir = profile.tasks_dir
    tasks_dir.mkdir(parents=True, exist_ok=True)
    # ``supervise submit`` names the file after the id it printed; keep that id.
    preferred = path.stem if TASK_ID_RE.fullmatch(path.stem) else None
    while True:
        task_id = preferred or new_task_id(name)
        preferred = None
        folder = tasks_dir / task_id
        try:
            folder.mkdir(mode=0o700)
            break
        except FileExistsError:
            continue
    target = folder / "task.toml"
    try:
        os.rename(path, target)
    except FileNotFoundError:
        folder.rmdir()
        return None
    return finish_claim(TaskDir(folder), profile, original=path)


def finish_claim(task: TaskDir, profile: LoadedProfile, original: Path | None = None) -> Claimed:
    """Validate a claimed ``task.toml`` and materialize the task, or reject the file.

    Also used on start-up for a claim that a crash interrupted (``original`` unknown: the
    file is then rejected under its task id's name). Relative paths resolve against the
    spool folder, where the file was dropped.
    """
    target = task.file("task.toml")
    shown = original or profile.spool_dir / f"{task.task_id}.toml"
    try:
        resolved = load_task(target, profile, base=profile.spool_dir, shown_as=shown)
    except ConfigError as exc:
        rejected = reject_from(target, shown, profile.spool_dir, exc.problems)
        for leftover in task.path.iterdir():  # only our own lock file can be there
            if leftover.name.startswith("."):
                leftover.unlink()
        with contextlib.suppress(OSError):
            task.path.rmdir()
        return Claimed(source=shown, error="\n".join(exc.problems), rejected_to=rejected)
    materialize(task, resolved, source=str(shown))
    return Claimed(source=shown, task_dir=task, resolved=resolved)


def reject_from(current: Path, original: Path, spool_dir: Path, problems: list[str]) -> Path:
    """Reject a file that was already moved to ``current``, under its original name."""
    return reject(current, spool_dir, problems, name=original.name)


def materialize(task: TaskDir, resolved: ResolvedTask, source: str) -> Manifest:
    """Write ``prompt``, ``spec.json`` (the validated task, paths absolute, for re-adoption
    after a restart) and the first manifest (``queued``); log the ``queued`` event."""
    atomic_write(task.file("prompt"), resolved.prompt.encode("utf-8"))
    atomic_write(task.file("spec.json"), resolved.spec.model_dump_json(indent=1).encode())
    manifest = Manifest(
        task_id=task.task_id,
        task_name=resolved.spec.name,
        status="queued",
        model=resolved.model,
        project_dir=str(resolved.spec.project_dir),
        session_name=task.task_id,
        session_id=str(uuid.uuid4()),
        tmpdir=str(task.path),
        created_at=utc_iso(),
    )
    task.write_manifest(manifest)
    task.append_event("queued", status="queued", source=source, session_id=manifest.session_id)
    return manifest
