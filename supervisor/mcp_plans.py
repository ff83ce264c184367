"""The plan tools of ``supervise mcp`` (issue 26, part 5): ``submit_plan`` and ``plan``,
without the MCP SDK (:mod:`supervisor.mcp_server` binds them).

``submit_plan`` takes a plan as one TOML text of ``[[tasks]]`` tables (what a plan file
holds) or as a list of task tables, checks it as ``supervise submit PLAN.toml`` does
(:func:`supervisor.plans.check_data`: every table as a task file, names unique, ``after``
resolved, no cycle, no ``[cluster]`` profile) and puts it in the spool
(:func:`supervisor.plans.place`). As for ``submit``, no table may name a ``prompt_file``
and each ``project_dir`` is absolute: the server reads no path an argument names.

``plan`` follows one: by the plan file's name ``submit_plan`` gave (in the spool, rejected
with its reason, or claimed: ``state_dir/plans/*/source.txt`` names it) or by the id of any
task of it (the tasks joined to it by ``after``, :func:`supervisor.views.plangraph.graph`).
Each task comes with its status, verdict, predecessors, what it still waits for and why
(:class:`supervisor.views.plangraph.Node`).

Bad input is one line (:class:`supervisor.mcp_tools.ToolRefused`); a plan with many
problems names the first :data:`MAX_PROBLEMS` and counts the others.
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor import plans, spool
from supervisor.config import MAX_TASK_FILE_BYTES
from supervisor.diskio import read_regular
from supervisor.errors import ConfigError
from supervisor.mcp_tools import ToolRefused, page
from supervisor.taskdir import layout
from supervisor.taskid import is_task_id, shown

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile
    from supervisor.views.plangraph import Node

#: Problems one refusal names (a plan of 1,000 bad tables would make a page of them).
MAX_PROBLEMS = 5
#: How error lines name the plan (it has no file).
PLAN = Path("plan")
#: Bytes of a rejected plan's ``.error`` file the ``plan`` tool returns, and the most it
#: reads (the engine writes every problem: a plan of 1,000 bad tables makes a long one).
MAX_ERROR_BYTES = 4096
ERROR_FILE_BYTES = 4 * 1024 * 1024
#: Bytes of a claimed plan's ``members.json`` read at most (1,000 ids of 64 characters).
MAX_MEMBERS = 128 * 1024


def _one_line(problems: list[str]) -> str:
    """The first :data:`MAX_PROBLEMS` problems joined with "; ", and how many more."""
    more = len(problems) - MAX_PROBLEMS
    line = "; ".join(problems[:MAX_PROBLEMS])
    return f"{line}; and {more} more" if more > 0 else line


def _tables(plan_toml: str | None, tasks: list[Any] | None) -> dict[str, Any]:
    """The plan's top level from exactly one of its two forms.

    Raises:
        ToolRefused: neither or both, a TOML text that does not parse or is too big.
    """
    if (plan_toml is None) == (tasks is None):
        raise ToolRefused("give the plan as plan_toml (a TOML text of [[tasks]]) or as tasks")
    if tasks is not None:
        return {"tasks": tasks}
    assert plan_toml is not None
    if len(plan_toml.encode("utf-8", errors="replace")) > MAX_TASK_FILE_BYTES:
        raise ToolRefused(
            f"plan_toml: over {MAX_TASK_FILE_BYTES} bytes; split the plan into several plans"
        )
    try:
        return tomllib.loads(plan_toml)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise ToolRefused(f"plan_toml: not TOML ({exc}); give [[tasks]] tables") from None


def _confined(tables: list[Any]) -> None:
    """No ``prompt_file``, an absolute ``project_dir`` in every table (as ``submit``).

    Raises:
        ToolRefused: the first table that breaks either rule.
    """
    for number, table in enumerate(tables, 1):
        if not isinstance(table, dict):
            continue  # the plan's check names it
        where = f"{PLAN} [[tasks]] #{number}"
        if "prompt_file" in table:
            raise ToolRefused(f"{where}: prompt_file is not taken here: give the text as prompt")
        project = table.get("project_dir")
        if not isinstance(project, str) or not Path(project).is_absolute():
            raise ToolRefused(
                f"{where}: project_dir must be an absolute folder path, got {shown(repr(project))}"
            )


def submit_plan(
    profile: LoadedProfile, plan_toml: str | None, tasks: list[Any] | None
) -> dict[str, Any]:
    """Check a plan and put it in the spool. Returns ``{"plan" (the name to follow it by),
    "tasks" (their names, in order)}`` plus ``"warning"`` when no live engine holds the
    state dir.

    Raises:
        ToolRefused: the plan's problems in one line (a cycle, an unknown name, a bad key,
            a ``[cluster]`` profile, the spool not writable).
    """
    from supervisor import engine_probe

    data = _tables(plan_toml, tasks)
    if isinstance(data.get("tasks"), list):
        _confined(data["tasks"])
    try:
        made = plans.check_data(data, PLAN, profile, Path.cwd())
        placed = plans.place(made, profile)
    except ConfigError as exc:
        raise ToolRefused(_one_line(exc.problems)) from None
    done: dict[str, Any] = {"plan": Path(placed["plan_file"]).name, "tasks": placed["tasks"]}
    warning = engine_probe.warning(profile.state_dir, profile.path, "the plan waits")
    if warning:
        done["warning"] = warning
    return done


def _claimed_members(profile: LoadedProfile, name: str) -> tuple[Path, list[str]] | None:
    """The plan folder and task ids of the claimed plan first dropped as ``name``
    (``source.txt``), else ``None``."""
    root = profile.state_dir / plans.PLANS
    try:
        folders = list(os.scandir(root))
    except OSError:
        return None
    for folder in folders:
        try:  # non-blocking, regular files only, bounded
            if read_regular(os.path.join(folder.path, plans.SOURCE), 1024) != os.fsencode(name):
                continue
            ids = json.loads(read_regular(os.path.join(folder.path, plans.MEMBERS), MAX_MEMBERS))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(ids, list) and all(isinstance(i, str) and is_task_id(i) for i in ids):
            return Path(folder.path), ids
    return None


def _rejected(profile: LoadedProfile, name: str) -> dict[str, Any] | None:
    """The rejected plan ``name`` with its reason, else ``None``."""
    target = profile.spool_dir / spool.REJECTED / name
    if not target.is_file():
        return None
    try:
        raw = read_regular(target.with_name(name + layout.ERROR_SUFFIX), ERROR_FILE_BYTES)
        error = raw[:MAX_ERROR_BYTES].decode("utf-8", errors="replace")
    except OSError as exc:
        error = f"(its .error file cannot be read: {exc})"
    return {"plan": name, "state": "rejected", "error": error.strip(), "file": str(target)}


def _nodes(profile: LoadedProfile, plan: str) -> tuple[str, list[Node]] | dict[str, Any]:
    """``(state, nodes)`` of the plan ``plan`` names, or the whole answer for a plan not
    claimed yet or rejected.

    Raises:
        ToolRefused: ``plan`` names nothing.
    """
    from supervisor.views import model, plangraph

    stem = plan.removesuffix(".toml")
    if not is_task_id(stem):
        raise ToolRefused(
            f"plan: {shown(plan)} is no plan name (what submit_plan gave) nor a task id"
        )
    name = f"{stem}.toml"
    if (profile.spool_dir / name).is_file():
        why = "in the spool: the engine claims it at its next intake"
        return {"plan": name, "state": "waiting to be claimed", "why": why}
    if any(profile.spool_dir.glob(spool.claim_name("*", name))):  # taken, not staged yet
        why = "its claim is being finished: its tasks are being made"
        return {"plan": name, "state": "being claimed", "why": why}
    rejected = _rejected(profile, name)
    if rejected is not None:
        return rejected
    claimed = _claimed_members(profile, name)
    if claimed is not None and any((claimed[0] / i).is_dir() for i in claimed[1]):
        why = "its claim is being finished: its tasks are moving into tasks/"
        return {"plan": name, "state": "being claimed", "why": why}
    # The snapshot comes after the claim was seen finished: one taken before could miss
    # tasks that moved into tasks/ in between, and show a running plan as gone and done.
    tasks = model.snapshot(profile, time.time()).tasks
    if claimed is not None:
        return "claimed", plangraph.members(tasks, claimed[1])
    for found in plangraph.graph(tasks, max_edges=len(tasks) * 64 + 1).plans:
        if stem in found.nodes:
            return "claimed", list(found.nodes.values())
    if any(task.task_id == stem for task in tasks):
        raise ToolRefused(f"plan: task {stem} is in no plan (no task names it in after)")
    raise ToolRefused(
        f"plan: no plan {name} in {profile.spool_dir}, its rejected/ or {profile.state_dir}"
        f"/{plans.PLANS}, and no task {stem}; give the name submit_plan returned"
    )


def follow(
    profile: LoadedProfile, plan: str, offset: int | None = None, limit: int | None = None
) -> dict[str, Any]:
    """The ``plan`` tool: ``{"plan", "state" ("waiting to be claimed" | "being claimed" |
    "rejected" | "claimed"), "done" (every task ended), "counts" (tasks per status), "tasks" (each
    :meth:`supervisor.views.plangraph.Node.to_dict`: status, verdict, after, blocked_on,
    reason: why it waits or why it ended), "total", "offset", "next_offset"}``: ``done`` and
    ``counts`` cover the whole plan, ``tasks`` one page of it (:func:`supervisor.mcp_tools.
    page`); a plan not claimed yet (or whose claim is not finished) has ``why`` instead, a
    rejected one ``error``.

    Raises:
        ToolRefused: ``plan`` is no plan name nor task id, or names nothing; a bad
            ``offset``/``limit``.
    """
    from supervisor.taskdir.states import ENDED
    from supervisor.views.plangraph import GONE

    if not isinstance(plan, str):
        raise ToolRefused("plan: give the plan's name (from submit_plan) or a task id")
    page([], offset, limit)  # a bad offset or limit is refused before any look
    found = _nodes(profile, plan)
    if isinstance(found, dict):
        return found
    state, nodes = found
    shown_nodes, paging = page(nodes, offset, limit)
    return {
        "plan": plan,
        "state": state,
        "done": all(n.status in ENDED or n.status == GONE for n in nodes),
        "counts": dict(Counter(n.status for n in nodes)),
        "tasks": [node.to_dict() for node in shown_nodes],
        **paging,
    }
