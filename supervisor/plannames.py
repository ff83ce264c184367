"""Which task each name in a task's ``after`` means (issue 26), decided once at claim:
a task of the same plan file, a task id of the state dir, else the newest task of the
state dir with that ``name`` (the rules: :mod:`supervisor.plans`). Imports nothing of the
spool, which calls :func:`single` for every single task file it claims."""

from __future__ import annotations

import os
from pathlib import Path

from supervisor.config import ConfigError, ResolvedTask
from supervisor.taskdir import layout
from supervisor.waiting import load_manifest


class UnknownNames(ConfigError):
    """An ``after`` name means no task (yet): the spool may wait for it a while
    (:data:`supervisor.engine.intake.AFTER_WAIT`) before it rejects the file."""


def known_tasks(tasks_dir: Path, skip: str = "") -> tuple[set[str], dict[str, str]]:
    """The task ids of ``tasks_dir`` (folders holding a readable manifest; ``skip`` left
    out), and each task name's newest task id (by ``created_at``)."""
    ids: set[str] = set()
    newest: dict[str, tuple[str, str]] = {}
    try:
        folders = list(os.scandir(tasks_dir))
    except FileNotFoundError:
        return ids, {}
    for entry in folders:
        if entry.name == skip or entry.name.startswith("."):
            continue
        try:
            data = load_manifest(Path(entry.path) / layout.MANIFEST)
        except (OSError, ValueError):
            continue
        ids.add(entry.name)
        name, created = data.get("task_name"), str(data.get("created_at") or "")
        if isinstance(name, str) and (name not in newest or newest[name][0] <= created):
            newest[name] = (created, entry.name)
    return ids, {name: task_id for name, (_, task_id) in newest.items()}


def resolve_after(
    resolved: ResolvedTask,
    local: dict[str, str],
    known: tuple[set[str], dict[str, str]],
    shown: str,
) -> list[str]:
    """The ids ``after``'s names mean (see the module docstring): ``local`` (the plan's
    names to ids) first, then ``known`` (:func:`known_tasks`).

    Raises:
        ConfigError: one line per name that means no task, naming the file and the fix.
    """
    ids, names = known
    found, problems = [], []
    for name in resolved.spec.after:
        task_id = local.get(name) or (name if name in ids else None) or names.get(name)
        if task_id is None:
            problems.append(
                f"{shown}: key 'after': no task named {name!r} in this profile (neither a "
                "task name, a task id, nor a task of the same plan file); submit it first, "
                "or put both in one plan file of [[tasks]]"
            )
        else:
            found.append(task_id)
    if problems:
        raise UnknownNames(problems)
    return found


def single(resolved: ResolvedTask, task_id: str, tasks_dir: Path, shown: Path) -> list[str]:
    """The predecessors' ids of a single task file being claimed as ``task_id``.

    Raises:
        ConfigError: a name means no task (:func:`resolve_after`).
    """
    if not resolved.spec.after:
        return []
    return resolve_after(resolved, {}, known_tasks(tasks_dir, skip=task_id), str(shown))


def no_cycle(edges: dict[str, list[str]], shown: Path) -> None:
    """Refuse tasks that wait for each other (``edges``: id -> predecessors' ids).

    Raises:
        ConfigError: one line naming the cycle's ids and the fix.
    """
    from supervisor.policy.plans import find_cycle

    cycle = find_cycle(edges)
    if cycle is not None:
        raise ConfigError(
            [
                f"{shown}: key 'after': tasks wait for each other ({' -> '.join(cycle)}); "
                "break the cycle"
            ]
        )
