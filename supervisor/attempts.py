"""Attempts (issue 26, part 2): one task file with ``attempts = N`` claimed as N tasks of a
group, and the group's record, ``state_dir/plans/<group id>/group.json`` (this module is the
one owner of that file and its keys).

**Claim.** A spool file whose top level sets ``attempts`` is claimed by
:func:`supervisor.plans.claim`, the plan claim (staging, ``members.json``, the commit,
:func:`supervisor.plans.recover`), with :func:`members` making the tasks: attempt ``k`` is
the task as written, its model ``models[k - 1]`` when given, its own task id, worktree and
branch. The group record is written in the staging folder before the commit, so a claim cut
short leaves no group, and a committed one leaves every attempt.

**Record.** ``group.json``::

    {"group": ID, "name": NAME, "pick": "first-pass" | "all",
     "attempts": [{"index": 1, "task_id": ID, "model": MODEL}, ...],
     "winner": ID | null, "outcome": null | "passed" | "none_passed" | "ended",
     "cost_usd": USD | null, "closed": false, "updated_at": ISO}

``winner``, ``outcome``, ``cost_usd`` and ``closed`` are the engine's
(:mod:`supervisor.engine.attempts`, deciding with :mod:`supervisor.policy.attempts`);
``cost_usd`` is the attempts' summed ``cost_usd``. Each attempt's manifest holds
``attempt = {"group", "index", "of"}``. Written atomically.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from pathlib import Path
from typing import Any

from supervisor import costs
from supervisor.config import MAX_TASK_FILE_BYTES, ConfigError, LoadedProfile
from supervisor.config.attemptkeys import ALL, FIRST_PASS
from supervisor.config.loading import task_from_table
from supervisor.config.workspace import TASK_ID_FIELD
from supervisor.diskio import atomic_write, keep_aside, read_regular, utc_iso
from supervisor.errors import SuperviseError
from supervisor.plannames import known_tasks, resolve_after
from supervisor.plans import MEMBERS, PLANS, RECORD, Member, free_id, reserved_ids
from supervisor.taskdir import layout
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TaskDir
from supervisor.taskdir.states import AbandonReason
from supervisor.taskid import is_task_id
from supervisor.waiting import load_manifest
from supervisor.workspace import lifecycle

#: The group record's file name, in ``state_dir/plans/<group id>/``.
GROUP = "group.json"
#: The most bytes of a group record read (N is at most 8: a record is small).
MAX_RECORD_BYTES = 64 * 1024


class NotFound(SuperviseError, LookupError):
    """The id names no group and no attempt; ``str()`` is the one line to print."""


def group_file(state_dir: Path, group_id: str) -> Path:
    """``state_dir/plans/<group id>/group.json``."""
    return state_dir / PLANS / group_id / GROUP


def new_record(group_id: str, name: str, pick: str, ids: list[str], models: list[str]) -> dict:
    """A fresh group record (see the module docstring): no winner, no outcome yet."""
    return {
        "group": group_id,
        "name": name,
        "pick": pick,
        "attempts": [
            {"index": k, "task_id": task_id, "model": model}
            for k, (task_id, model) in enumerate(zip(ids, models, strict=True), 1)
        ],
        "winner": None,
        "outcome": None,
        "cost_usd": None,
        "closed": False,
        "updated_at": utc_iso(),
    }


def write(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Write a group record atomically (fsynced: the winner must survive a power cut);
    returns it as written (its ``updated_at`` now)."""
    record = {**record, "updated_at": utc_iso()}
    atomic_write(path, json.dumps(record, indent=1).encode())
    return record


def read(state_dir: Path, group_id: str) -> dict[str, Any] | None:
    """The group record of ``group_id``, or ``None`` when there is none (or it is not a
    regular JSON object: a hostile or damaged file is no group)."""
    if not is_task_id(group_id):
        return None
    path = group_file(state_dir, group_id)
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_RECORD_BYTES:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("attempts"), list) else None


def rebuild(state_dir: Path, group_id: str) -> dict[str, Any] | None:
    """The group record of ``group_id`` made again when ``group.json`` is there but cannot
    be read (truncated, not JSON, not a record: a damaged disk or a hand edit), from what the
    claim left beside it: ``plan.toml`` (``name``, ``pick``) and ``members.json`` (the
    attempts, in order, each one's model from its manifest; a task another group's or no
    group's is dropped: :func:`_members_of`). The damaged file is renamed to
    ``group.json.damaged-<epoch s>`` (``.<n>`` added when that name is taken: nothing is
    deleted or replaced, :func:`supervisor.diskio.keep_aside`) and the new record written with
    no winner: the engine decides again from the attempts' manifests. ``None`` when there is
    no such file, or nothing to rebuild it from.

    Raises:
        OSError: the damaged file could not be moved aside, or the new one written.
    """
    path = group_file(state_dir, group_id)
    if not is_task_id(group_id) or not os.path.lexists(path) or read(state_dir, group_id):
        return None
    folder = path.parent
    try:
        plan = tomllib.loads(read_regular(folder / RECORD, MAX_TASK_FILE_BYTES).decode())
        ids = json.loads(read_regular(folder / MEMBERS, MAX_RECORD_BYTES))
    except (OSError, ValueError, RecursionError):  # "[[[…": nested deeper than the parser
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) and is_task_id(i) for i in ids):
        return None
    ids, models = _members_of(state_dir, group_id, list(dict.fromkeys(ids)))
    if not ids:
        return None
    pick = plan.get("pick") if plan.get("pick") in (FIRST_PASS, ALL) else FIRST_PASS
    record = new_record(group_id, str(plan.get("name") or group_id), pick, ids, models)
    keep_aside(path, layout.DAMAGED)  # never over a copy kept in the same second
    return write(path, record)  # as written: its updated_at is the write's (was 1 ms off)


def _members_of(state_dir: Path, group_id: str, ids: list[str]) -> tuple[list[str], list[str]]:
    """The ids of ``ids`` that can be attempts of ``group_id``, and each one's model: a task
    whose manifest names another group, or none (a plain task), is dropped; one whose
    manifest cannot be read is kept (model ``""``: read as gone by the engine). Found by
    attack: a ``members.json`` naming another group's running task rebuilt a record whose
    decision discarded that task as a loser."""
    kept: list[str] = []
    models: list[str] = []
    for task_id in ids:
        try:
            manifest = load_manifest(state_dir / layout.TASKS / task_id / layout.MANIFEST)
        except (OSError, ValueError):
            kept.append(task_id)
            models.append("")
            continue
        place = manifest.get("attempt")
        if isinstance(place, dict) and place.get("group") == group_id:
            kept.append(task_id)
            models.append(str(manifest.get("model") or ""))
    return kept, models


def worktree_problem(resolved: Any, profile: LoadedProfile, shown: Path) -> str | None:
    """Why the task's attempts would not each get a worktree (``project_dir`` not in a git
    repository with a commit, or its folder untracked at the base), else ``None``."""
    report = lifecycle.resolve(
        "attempt-probe", resolved.spec.project_dir, resolved.workspace, profile.state_dir
    )
    if report.mode == "worktree":
        return _branch_problem(resolved.workspace.branch, shown)
    why = report.warning or f"{resolved.spec.project_dir} is not in a git repository"
    return (
        f"{shown}: key 'attempts': attempts need a git worktree each, and this task would "
        f"run in its project folder ({why}); give a project_dir inside a git repository "
        "with a commit, or remove 'attempts'"
    )


def _branch_problem(template: str, shown: Path) -> str | None:
    """A branch template without ``{task_id}`` names one branch for every attempt: the
    second ``git worktree add -b`` would fail ("a branch named ... already exists")."""
    if TASK_ID_FIELD in template:
        return None
    return (
        f"{shown}: key 'attempts': [workspace] branch = {template!r} names the same branch "
        f"for every attempt; put {TASK_ID_FIELD} in the profile's branch template, or "
        "remove 'attempts'"
    )


def members(
    profile: LoadedProfile,
    data: dict[str, Any],
    shown: Path,
    group_id: str,
    text: str = "",
    base: Path | None = None,
) -> tuple[list[Member], dict[str, Any]]:
    """The attempts of the task table ``data``, as :class:`supervisor.plans.Member`\\ s
    (each with its ``attempt`` reference), and the group's first record.

    Raises:
        ConfigError: every problem of the task (one line each), or no worktree for it.
    """
    resolved = task_from_table(data, profile, base or profile.spool_dir, shown, text)
    spec = resolved.spec
    count = spec.attempts or 0
    problem = worktree_problem(resolved, profile, shown) if count else None
    if count < 2 or problem is not None:
        raise ConfigError([problem or f"{shown}: key 'attempts': give attempts = 2 or more"])
    after = resolve_after(resolved, {}, known_tasks(profile.tasks_dir), str(shown))
    names = list(spec.models or [spec.model or profile.spec.agent.default_model] * count)
    ids = list(resolved.attempt_models or [resolved.model] * count)
    made, taken = [], reserved_ids(profile)
    for index in range(1, count + 1):
        one = spec.model_copy(deep=True)
        one.model, one.models = names[index - 1], None
        copy = dataclasses.replace(resolved, spec=one, model=ids[index - 1], attempt_models=())
        ref = {"group": group_id, "index": index, "of": count}
        made.append(Member(free_id(spec.name, profile, taken), copy, after, attempt=ref))
    pick = spec.pick or FIRST_PASS
    record = new_record(group_id, spec.name, pick, [m.task_id for m in made], ids)
    return made, record


def group_of(profile: LoadedProfile, ident: str) -> tuple[str, dict[str, Any]]:
    """The group named by ``ident``: a group id, or the task id of one of its attempts.

    Raises:
        NotFound: one line: no such group or task, or a task that is no attempt.
    """
    record = read(profile.state_dir, ident)
    if record is not None:
        return ident, record
    folder = profile.tasks_dir / ident if is_task_id(ident) else None
    if folder is not None and (profile.spool_dir / f"{ident}.toml").is_file():
        raise NotFound(
            f"{ident} waits in the spool {profile.spool_dir}: its attempts are made when the "
            "engine claims it (supervise run)"
        )
    if folder is None or not folder.is_dir():
        raise NotFound(f"no attempts group or task {ident!r} in {profile.state_dir}")
    try:
        ref = load_manifest(folder / layout.MANIFEST).get("attempt") or {}
    except (OSError, ValueError):
        ref = {}
    group = ref.get("group") if isinstance(ref, dict) else None
    record = read(profile.state_dir, group) if isinstance(group, str) else None
    if record is None or not isinstance(group, str):
        raise NotFound(f"task {ident} is not an attempt of a group (it has no 'attempts')")
    return group, record


def live_attempts(profile: LoadedProfile, record: dict[str, Any]) -> list[str]:
    """The task ids of the group's attempts that have not ended (``supervise stop GROUP``)."""
    from supervisor.taskdir.states import TERMINAL

    out = []
    for row in attempt_rows(record):
        try:
            data = load_manifest(profile.tasks_dir / row["task_id"] / layout.MANIFEST)
        except (OSError, ValueError):
            continue
        if data.get("status") not in TERMINAL:
            out.append(row["task_id"])
    return out


def attempt_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The record's well-formed attempt rows (``index``, ``task_id``, ``model``)."""
    rows = []
    for row in record.get("attempts") or []:
        if (
            isinstance(row, dict)
            and isinstance(row.get("task_id"), str)
            and is_task_id(row["task_id"])
            and isinstance(row.get("index"), int)
        ):
            rows.append(row)
    return rows


def summed_cost(manifests: list[dict[str, Any]]) -> float | None:
    """The attempts' summed ``cost_usd`` (:func:`supervisor.costs.total_of`), ``None``
    when none reported one."""
    found = [c for c in (costs.total_of(m) for m in manifests) if c is not None]
    return round(sum(found), 6) if found else None


def diff_size(workspace: dict[str, Any] | None) -> tuple[int | None, int | None, int | None]:
    """``(files_changed, insertions, deletions)`` of an attempt against its base commit:
    the manifest's (recorded when it ended), else ``git diff --shortstat BASE`` in its
    worktree now (bounded by :data:`supervisor.workspace.git.GIT_TIMEOUT`); ``None``\\ s
    when neither can be had (no worktree, git failing)."""
    from supervisor.workspace import git

    ws = workspace or {}
    if ws.get("files_changed") is not None:
        return ws.get("files_changed"), ws.get("insertions"), ws.get("deletions")
    path, base = ws.get("path"), ws.get("base_commit")
    if ws.get("mode") != "worktree" or not path or not base or ws.get("removed"):
        return None, None, None
    try:
        done = git.run_git(["diff", "--shortstat", str(base)], Path(path))
    except (git.GitError, OSError):
        return None, None, None
    return git.parse_shortstat(done.stdout)


def merged_into(task_dir: Path) -> str | None:
    """The target of the task's last ``merged`` event (``supervise merge``), ``None`` when
    it was never merged or its events cannot be read."""
    try:
        events = TaskDir(task_dir).events()
    except (OSError, ValueError):
        return None
    for event in reversed(events):
        if event.get("event") == Event.MERGED and isinstance(event.get("into"), str):
            return str(event["into"])
    return None


def listing(profile: LoadedProfile, ident: str) -> dict[str, Any]:
    """``supervise attempts ID``'s object: the group (``group``, ``name``, ``pick``,
    ``winner``, ``outcome``, ``cost_usd``: the attempts' sum now) and one row per attempt
    (``index``, ``task_id``, ``model``, ``status``, ``verdict``, ``abandon_reason``,
    ``cost_usd``, ``files_changed``, ``insertions``, ``deletions``, ``branch``,
    ``merged_into``: the branch ``supervise merge`` merged it into, else ``None``).

    Raises:
        NotFound: the id names no group and no attempt (one line).
    """
    group_id, record = group_of(profile, ident)
    rows, manifests = [], []
    for row in attempt_rows(record):
        try:
            data = load_manifest(profile.tasks_dir / row["task_id"] / layout.MANIFEST)
        except (OSError, ValueError):
            data = {}
        manifests.append(data)
        ws = data.get("workspace") if isinstance(data.get("workspace"), dict) else None
        files, plus, minus = diff_size(ws)
        rows.append(
            {
                "index": row["index"],
                "task_id": row["task_id"],
                "model": row.get("model"),
                "status": data.get("status", "gone"),
                "verdict": data.get("verdict"),
                "abandon_reason": data.get("abandon_reason"),
                "cost_usd": costs.total_of(data) if data else None,
                "files_changed": files,
                "insertions": plus,
                "deletions": minus,
                "branch": (ws or {}).get("branch"),
                "merged_into": merged_into(profile.tasks_dir / row["task_id"]),
            }
        )
    return {
        "group": group_id,
        "name": record.get("name"),
        "pick": record.get("pick"),
        "winner": record.get("winner"),
        "outcome": record.get("outcome"),
        "cost_usd": summed_cost(manifests),
        "attempts": rows,
    }


def merge_notes(profile: LoadedProfile, task_id: str) -> list[str]:
    """What ``supervise merge TASK`` tells a person before merging an attempt that is not
    its group's choice: one line when it was discarded (stopped unfinished, another
    attempt passed first) or is not the winner, and one per other attempt of the group
    already merged (merging a second one mixes two attempts' work). Empty for a plain task,
    the winner, or a group whose record cannot be read. Found by attack: such a merge went
    through without a word."""
    try:
        group_id, record = group_of(profile, task_id)
    except NotFound:
        return []
    if group_id == task_id:
        return []
    rows = attempt_rows(record)
    index = next((r["index"] for r in rows if r["task_id"] == task_id), "?")
    where = f"{task_id} is attempt {index} of {len(rows)} of {group_id}"
    winner = record.get("winner") if isinstance(record.get("winner"), str) else None
    notes = []
    try:
        data = load_manifest(profile.tasks_dir / task_id / layout.MANIFEST)
    except (OSError, ValueError):
        data = {}
    if data.get("abandon_reason") == AbandonReason.DISCARDED:
        notes.append(
            f"note: {where}, discarded: it was stopped before it ended because {winner or '?'} "
            "passed first; its work may be unfinished"
        )
    elif winner is not None and winner != task_id:
        notes.append(f"note: {where}; its group's winner is {winner}")
    for row in rows:
        into = merged_into(profile.tasks_dir / row["task_id"])
        if row["task_id"] != task_id and into is not None:
            notes.append(
                f"note: attempt {row['index']} of {group_id} ({row['task_id']}) was already "
                f"merged into {into}"
            )
    return notes
