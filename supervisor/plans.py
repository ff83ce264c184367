"""Plans at intake (issue 26, part 1): which task each name in ``after`` means, and a
plan file (one TOML of ``[[tasks]]`` tables) claimed as several tasks, all or nothing.

**Names.** Each entry of ``after`` is resolved once, at claim, to a task id, in this order:
a task of the same plan file (by its ``name``), a task id of the profile's state dir, then
the newest task of the state dir with that ``name``. A single file whose name means nothing
yet goes back to the spool and is tried again at each intake run for up to
:data:`supervisor.engine.intake.AFTER_WAIT` seconds (its predecessor's file may come next),
then is refused in one line (the file goes to ``spool/rejected/``); a plan's names must
mean a task of the plan or one claimed already. The manifest records the ids (``after``).

**Plan files.** A spool file whose top level is only ``[[tasks]]`` is a plan. Every table
is validated as a task file (``task_may_set`` included), names are unique within the plan,
and a cycle is refused; one bad table rejects the whole file. The claim is crash-safe:

1. the file is renamed to ``spool/.claim.<plan id>.<name>`` (atomic; nothing else claims it);
2. every task is made in ``state_dir/plans/<plan id>/<task id>/`` (a staging folder no
   engine adopts), with ``members.json`` listing them and ``source.txt`` naming the spool
   file (how the MCP ``plan`` tool finds a submitted plan) first;
3. the claimed file moves to ``plans/<plan id>/plan.toml``: the commit;
4. each task folder is renamed into ``tasks/`` (same filesystem).

**Attempts** (issue 26, part 2): a task file with ``attempts = N`` is claimed the same way,
its N attempts made by :func:`supervisor.attempts.members` and its group record
(``group.json``) written in the staging folder before the commit; the claim's id is the
group's (the file's own id when ``supervise submit`` named it).

:func:`recover` (at start, before adoption) rolls a committed plan forward (step 4 for the
folders still staged, and the spool's copy of a commit across filesystems removed) and undoes
any other (staging removed, the file back in the spool).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from supervisor import spool
from supervisor.config import MAX_TASK_FILE_BYTES, ConfigError, LoadedProfile, ResolvedTask
from supervisor.config.loading import task_from_table
from supervisor.config.tomlfile import read_bounded, toml_table
from supervisor.diskio import atomic_write, move_file
from supervisor.plannames import known_tasks, resolve_after
from supervisor.policy.plans import find_cycle
from supervisor.taskdir.folder import TaskDir

log = logging.getLogger("supervise.engine")

#: ``state_dir/plans``: one folder per claimed plan file (its staging, then its record).
PLANS = "plans"
#: The plan file as dropped, once its tasks are made (the commit of the claim).
RECORD = "plan.toml"
#: The plan's task ids, in file order (written before any task folder is made).
MEMBERS = "members.json"
#: The spool file's name the plan was claimed from (one line).
SOURCE = "source.txt"
#: Most tasks one plan file may hold (each becomes a task folder at once).
MAX_PLAN_TASKS = 1000


@dataclass(frozen=True)
class Member:
    """One task of a claim: its id, the validated task and its predecessors' ids."""

    task_id: str
    resolved: ResolvedTask
    after: list[str]
    #: An attempt's place in its group (issue 26): ``{"group", "index", "of"}``.
    attempt: dict[str, Any] | None = None


#: Draws of a random id before a claim gives up (each a 1 in 16.7 million collision).
MAX_ID_DRAWS = 64


def reserved_ids(profile: LoadedProfile) -> set[str]:
    """The task ids the spool holds (one scan): those of claims in progress
    (``.claim.<id>.*``) and of submitted files (``<id>.toml``: the id ``supervise submit``
    printed). :func:`free_id` draws none of them."""
    try:
        names = [entry.name for entry in os.scandir(profile.spool_dir)]
    except OSError:
        return set()
    held = {n.removesuffix(".toml") for n in names if n.endswith(".toml")}
    return held | {m.group(1) for n in names if (m := spool.claimed_id(n)) is not None}


def free_id(name: str, profile: LoadedProfile, taken: set[str]) -> str:
    """A fresh task id for ``name`` (:func:`supervisor.spool.new_task_id`) that no task
    folder nor id in ``taken`` holds, added to ``taken`` (start it with
    :func:`reserved_ids`, and pass the same set for every member of a claim). Ids are 6
    random hex digits: among 10,000 tasks of one name a few draws collide, and a plan's
    task published onto another's folder would be lost and the other queued again.

    Raises:
        ConfigError: no free id in :data:`MAX_ID_DRAWS` draws (one line; the file goes to
            the spool's ``rejected/`` with it).
    """
    for _ in range(MAX_ID_DRAWS):
        task_id = spool.new_task_id(name)
        if task_id not in taken and not os.path.lexists(profile.tasks_dir / task_id):
            taken.add(task_id)
            return task_id
    raise ConfigError(
        [f"{profile.tasks_dir}: no free task id for {name!r} in {MAX_ID_DRAWS} draws; try again"]
    )


def is_plan(path: Path) -> bool:
    """Whether the spool file ``path`` is claimed as several tasks: a plan or a task with
    ``attempts`` (:func:`several`)."""
    return several(path) is not None


def several(path: Path) -> str | None:
    """``plan`` for a plan (a regular TOML file whose top level holds ``tasks`` as an array
    of tables), ``attempts`` for a task file with ``attempts`` (:mod:`supervisor.attempts`),
    else ``None``. Never blocks on a FIFO; an unreadable or malformed file is neither (the
    single-file claim then rejects it with the reason)."""
    if spool.not_a_task_file(path, path) is not None:
        return None
    try:
        data = tomllib.loads(read_bounded(path, path, MAX_TASK_FILE_BYTES).decode("utf-8"))
    except (ConfigError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError, OSError):
        return None
    if isinstance(data.get("tasks"), list):
        return "plan"
    return "attempts" if "attempts" in data else None


def members(
    profile: LoadedProfile, tables: list[Any], shown: Path, base: Path | None = None
) -> list[Member]:
    """Validate a plan's tables as tasks (each as a task file would be), give each an id,
    and resolve every ``after``.

    Raises:
        ConfigError: every problem, each line naming the file, the table and the key.
    """
    if not tables or len(tables) > MAX_PLAN_TASKS:
        raise ConfigError(
            [
                f"{shown}: key 'tasks': a plan holds 1 to {MAX_PLAN_TASKS} [[tasks]] tables, "
                f"not {len(tables)}; split it into several plan files"
            ]
        )
    problems: list[str] = []
    checked: list[tuple[str, ResolvedTask]] = []
    for number, table in enumerate(tables, 1):
        where = Path(f"{shown} [[tasks]] #{number}")
        if not isinstance(table, dict):
            problems.append(f"{where}: not a table; each [[tasks]] entry is a task's keys")
            continue
        if "attempts" in table:
            problems.append(
                f"{where}: key 'attempts': a plan's task cannot have attempts yet; submit "
                "that task as a file of its own"
            )
            continue
        try:
            resolved = task_from_table(table, profile, base or profile.spool_dir, where)
        except ConfigError as exc:
            problems += exc.problems
            continue
        checked.append((str(where), resolved))
    local: dict[str, str] = {}
    taken = reserved_ids(profile)
    for where, resolved in checked:
        if resolved.spec.name in local:
            problems.append(
                f"{where}: key 'name': {resolved.spec.name!r} names two tasks of this plan; "
                "give each task of a plan its own name"
            )
        local[resolved.spec.name] = free_id(resolved.spec.name, profile, taken)
    if problems:
        raise ConfigError(problems)
    known = known_tasks(profile.tasks_dir)
    made = [
        Member(local[r.spec.name], r, resolve_after(r, local, known, where)) for where, r in checked
    ]
    cycle = find_cycle({m.task_id: m.after for m in made})
    if cycle is not None:
        names = {m.task_id: m.resolved.spec.name for m in made}
        loop = " -> ".join(names.get(i, i) for i in cycle)
        raise ConfigError(
            [
                f"{shown}: key 'after': the plan's tasks wait for each other ({loop}); "
                "break the cycle"
            ]
        )
    return made


def claim(path: Path, profile: LoadedProfile) -> list[spool.Claimed] | None:
    """Claim the plan file ``path`` (see the module docstring): one :class:`spool.Claimed`
    per task made, or one rejection (the whole file, every problem), or ``None`` when
    another claimer took the file first.

    Raises:
        OSError: a step could not be written; the claim is undone (the file back in the
            spool, nothing staged left) as far as the error allows, else at the next start.
    """
    from supervisor import attempts

    plan_id = _claim_id(path, profile)
    staging = profile.state_dir / PLANS / plan_id
    staging.mkdir(parents=True, mode=0o700)
    claimed = path.with_name(spool.claim_name(plan_id, path.name))
    try:
        os.rename(path, claimed)
    except FileNotFoundError:
        staging.rmdir()
        return None
    group = None
    try:
        text, data = toml_table(read_bounded(claimed, path, MAX_TASK_FILE_BYTES), path)
        if "attempts" in data and "tasks" not in data:
            made, group = attempts.members(profile, data, path, plan_id, text)
        else:
            _only_tasks(data, path)
            made = members(profile, data["tasks"], path)
    except ConfigError as exc:
        staging.rmdir()
        rejected = spool.reject(claimed, profile.spool_dir, exc.problems, name=path.name)
        return [spool.Claimed(source=path, error="\n".join(exc.problems), rejected_to=rejected)]
    try:
        _stage(staging, made, path, profile)
        if group is not None:  # before the commit: a committed group has its record
            attempts.write(staging / attempts.GROUP, group)
        move_file(claimed, staging / RECORD)  # the commit
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if os.path.lexists(claimed):  # never over a file dropped under that name since
            spool.put_back(claimed, path)
        raise
    published = publish(staging, profile)
    by_id = {m.task_id: m.resolved for m in made}
    return [
        spool.Claimed(source=path, task_dir=task, resolved=by_id[task.task_id])
        for task in published
    ]


def _claim_id(path: Path, profile: LoadedProfile) -> str:
    """The claim's id: a fresh ``plan-…``, or for attempts the file's own id when
    ``supervise submit`` named it (it printed that id: the group's) and no group or task
    has it yet, else ``attempts-…``. Only the id follows this look; the claimed text
    decides what the claim makes."""
    if several(path) == "plan":
        return spool.new_task_id("plan")
    wanted = path.stem if spool.TASK_ID_RE.fullmatch(path.stem) else None
    taken = wanted is None or any(
        os.path.lexists(folder / wanted)
        for folder in (profile.state_dir / PLANS, profile.tasks_dir)
    )
    return spool.new_task_id("attempts") if taken or wanted is None else wanted


def _only_tasks(data: dict[str, Any], path: Path) -> None:
    """Refuse a plan file with keys beside ``[[tasks]]``.

    Raises:
        ConfigError: one line naming the first such key.
    """
    extra = sorted(set(data) - {"tasks"})
    if extra:
        raise ConfigError(
            [
                f"{path}: key {extra[0]!r}: a plan file holds only [[tasks]] tables; "
                "move the key into each task"
            ]
        )


def _stage(staging: Path, made: list[Member], path: Path, profile: LoadedProfile) -> None:
    """Write ``members.json``, then every task's folder in the staging folder."""
    atomic_write(staging / MEMBERS, json.dumps([m.task_id for m in made]).encode())
    atomic_write(staging / SOURCE, os.fsencode(path.name))
    for member in made:
        folder = staging / member.task_id
        folder.mkdir(mode=0o700)
        spool.materialize(
            TaskDir(folder),
            member.resolved,
            source=f"{path} [[tasks]]",
            state_dir=profile.state_dir,
            after=member.after,
            home=profile.tasks_dir / member.task_id,
            attempt=member.attempt,
        )


def publish(staging: Path, profile: LoadedProfile) -> list[TaskDir]:
    """Move a committed plan's staged task folders into ``tasks/`` (those not moved yet),
    in the plan's order; returns every task of the plan."""
    ids = json.loads((staging / MEMBERS).read_bytes())
    profile.tasks_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    tasks = []
    for task_id in ids:
        home = profile.tasks_dir / task_id
        if (staging / task_id).is_dir():
            try:
                os.rename(staging / task_id, home)  # never over a folder (ENOTEMPTY)
            except OSError as exc:
                if not os.path.lexists(home):
                    raise
                why = f"plan {staging.name}: {task_id} is another task's id; left staged"
                log.error("%s: %s", why, exc)
                continue  # another task's folder: never handed back as this plan's
        tasks.append(TaskDir(home))
    return tasks


def recover(profile: LoadedProfile) -> list[str]:
    """At start, before adoption: roll committed plan claims forward, undo the others
    (their staged folders removed, their file back in the spool under its own name).
    A committed claim's copy still in the spool (a commit across filesystems is a copy
    then an unlink: :func:`supervisor.diskio.move_file`) is removed: ``plan.toml`` is whole.
    Returns one line per claim it finished or undid, for the engine's log."""
    lines: list[str] = []
    root = profile.state_dir / PLANS
    for staging in sorted(root.iterdir()) if root.is_dir() else ():
        claims = _claims_of(profile, staging.name)
        if (staging / RECORD).exists():
            for leftover in claims:
                os.unlink(leftover)
            moved = [t for t in staging.iterdir() if t.is_dir()]
            if moved:
                publish(staging, profile)
            if moved or claims:
                lines.append(
                    f"plan {staging.name}: its claim was cut short; its tasks were moved in"
                )
            continue
        prefix = spool.claim_name(staging.name, "")
        for leftover in claims:  # beside a new file of its name, if one came meanwhile
            target = spool.put_back(leftover, profile.spool_dir / leftover.name[len(prefix) :])
            lines.append(f"plan {staging.name}: its claim was cut short; {target} put back")
        shutil.rmtree(staging, ignore_errors=True)
    return lines


def _claims_of(profile: LoadedProfile, claim_id: str) -> list[Path]:
    """The spool's ``.claim.<claim_id>.*`` files (a claim's file, by its name)."""
    prefix = spool.claim_name(claim_id, "")
    try:
        entries = list(os.scandir(profile.spool_dir))
    except FileNotFoundError:
        return []
    return [Path(e.path) for e in entries if e.name.startswith(prefix)]


def check(path: Path, profile: LoadedProfile) -> list[Member]:
    """Validate the plan file ``path`` as the engine will (relative paths against the
    file's folder, made absolute): ``supervise validate`` and ``submit``.

    Raises:
        ConfigError: a ``[cluster]`` profile, or any problem of the plan (every line).
    """
    from supervisor.config.tomlfile import read_toml

    refuse_cluster(path, profile)
    _, data = read_toml(path, path, MAX_TASK_FILE_BYTES)
    return check_data(data, path, profile, path.parent)


def refuse_cluster(shown: Path, profile: LoadedProfile) -> None:
    """Raise :class:`ConfigError` for a ``[cluster]`` profile: the fleet does not run plans
    (docs/conformance.md says why)."""
    if profile.spec.cluster is not None:
        raise ConfigError(
            [f"{shown}: a [cluster] profile does not run plans yet; submit each task alone"]
        )


def check_data(
    data: dict[str, Any], shown: Path, profile: LoadedProfile, base: Path
) -> list[Member]:
    """Validate a plan file's parsed top level (only ``tasks``, a list of tables) with
    relative paths against ``base``; ``shown`` names it in the lines.

    Raises:
        ConfigError: a ``[cluster]`` profile, or any problem of the plan (every line).
    """
    refuse_cluster(shown, profile)
    extra = sorted(set(data) - {"tasks"})
    if extra or not isinstance(data.get("tasks"), list):
        raise ConfigError([f"{shown}: a plan file holds only [[tasks]] tables"])
    return members(profile, data["tasks"], shown, base=base)


def submit(path: Path, profile: LoadedProfile) -> dict[str, Any]:
    """``supervise submit PLAN.toml``: :func:`check` the plan, then :func:`place` it.

    Raises:
        ConfigError: a ``[cluster]`` profile, or any problem of the plan (every line).
    """
    return place(check(path, profile), profile)


def place(made: list[Member], profile: LoadedProfile) -> dict[str, Any]:
    """Put a checked plan (:func:`check`, :func:`check_data`) in the spool under a fresh
    name, every path absolute. Returns ``{"plan_file", "tasks"}`` (the spool file, the
    tasks' names).

    Raises:
        ConfigError: the spool cannot be written (:class:`supervisor.submission.SpoolUnwritable`)
            or no free name was found.
    """
    import tomli_w

    from supervisor.submission import place as place_file

    tables = []
    for member in made:
        spec = member.resolved.spec
        table = spec.model_dump(
            mode="json", exclude_none=True, exclude_defaults=True, by_alias=True
        )
        table["name"] = spec.name
        table["project_dir"] = str(spec.project_dir)
        tables.append(table)
    body = tomli_w.dumps({"tasks": tables}).encode()
    plan_id = place_file(profile.spool_dir, profile.tasks_dir, "plan", body)
    names = [m.resolved.spec.name for m in made]
    return {"plan_file": str(profile.spool_dir / f"{plan_id}.toml"), "tasks": names}
