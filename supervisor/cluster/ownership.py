"""Whether this host still owns the cluster tasks it runs (issue 15: "a host that finds a
newer generation stops its copy and reports ``superseded``; it never resumes it").

A host owns a task while the task's row in ``supervise_tasks`` names it as ``owner_host``
with the generation of its claim (``cluster.json`` in the task folder). The sweeper of the
fleet takes a silent host's tasks away by raising their generation (state ``host_lost``, or
``queued`` again for another host); a host that was stopped, partitioned or SIGKILLed meanwhile
finds out here:

* at engine start, after adoption: :func:`adopted_claims` lists the live task folders this
  host claimed, and :func:`lost_claims` compares them with their rows in one query;
* while running: the writer's generation-guarded task UPDATE that matches no row, and
  :func:`lost_claims` with every heartbeat (a partitioned host that writes nothing notices
  within a heartbeat of the database's return).

Pure reads: the caller turns a lost claim into a ``supersede`` request for the engine
(:func:`supervisor.taskdir.control.request`), which the policy carries out.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg

from supervisor.cluster.db import ClusterError, connect, one_line
from supervisor.cluster.lease import CLAIM_FILE
from supervisor.cluster.sqlfiles import query
from supervisor.cluster.submit import TASK_NAME
from supervisor.cluster.sweeper import REQUEUE_PRIORITY
from supervisor.taskdir import layout
from supervisor.taskdir.states import TERMINAL
from supervisor.terminal import escape_controls

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: Lends a connection for a ``with`` block (the claim's :func:`supervisor.cluster.claim.
#: lent`): borrowed from the engine's pool at the block's start, given back at its end.
Lend = Callable[[], AbstractContextManager[psycopg.Connection]]
log = logging.getLogger("supervise.cluster")


def adopted_claims(tasks_dir: Path, host_id: str) -> dict[str, int]:
    """Task id -> claimed generation, for each folder in ``tasks_dir`` holding this host's
    claim record whose manifest is not terminal (what adoption watches again). Folders
    that cannot be read are left out (adoption reports them).

    A plain directory scan: one ``stat`` per folder, two small reads per cluster folder.
    """
    found: dict[str, int] = {}
    try:
        folders = list(tasks_dir.iterdir())
    except OSError:
        return found
    for folder in folders:
        try:
            claim = json.loads((folder / CLAIM_FILE).read_text())
            status = json.loads((folder / layout.MANIFEST).read_text()).get("status")
            if claim.get("host_id") == host_id and status not in TERMINAL:
                found[folder.name] = int(claim["generation"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return found


def lost_claims(conn: psycopg.Connection, host_id: str, owned: dict[str, int]) -> dict[str, str]:
    """Task id -> why (one line, terminal-safe) for each task of ``owned`` (task id ->
    claimed generation) whose row no longer names this host with that generation: a newer
    generation, another owner, or no row at all. One query, bounded by the connection's
    ``statement_timeout``.

    Raises:
        psycopg.Error: the query failed (the caller tries again later).
    """
    if not owned:
        return {}
    rows = conn.execute(query("owned_rows"), (list(owned),)).fetchall()
    seen = {row[0]: (row[1], int(row[2]), row[3]) for row in rows}
    lost = {}
    for task_id, generation in owned.items():
        if task_id not in seen:
            lost[task_id] = "its row is gone from the fleet's database"
            continue
        owner, current, state = seen[task_id]
        if owner != host_id or current != generation:
            lost[task_id] = escape_controls(
                f"its row is at generation {current} ({state}, host {owner}); this copy "
                f"is host {host_id} generation {generation}"
            )
    return lost


def lost_before_adoption(dsn: str, tasks_dir: Path, host_id: str) -> dict[str, str]:
    """:func:`lost_claims` of :func:`adopted_claims` at engine start, before adoption
    (issue 20: a returning host checks ownership before it records an ending). A database
    that does not answer is logged and gives ``{}``: the first heartbeat checks again."""
    found = adopted_claims(tasks_dir, host_id)
    if not found:
        return {}
    try:
        with connect(dsn) as conn:
            return lost_claims(conn, host_id, found)
    except (ClusterError, psycopg.Error) as exc:
        log.warning(
            "cluster: cannot check the ownership of %d task(s) before adopting them: %s",
            len(found),
            one_line(exc),
        )
        return {}


#: Where an earlier generation's folder of a task goes when this host claims the task again
#: (``state_dir/superseded/<id>.g<generation>``): the record of that copy is kept, out of
#: ``tasks/`` (``status`` lists the new run; the fleet's database has both).
SET_ASIDE = "superseded"
#: Seconds a claim waits for an earlier copy on this host to end (it is being stopped:
#: supersede request, then the stop's grace period and SIGKILL).
EARLIER_COPY_WAIT = 60.0
#: Seconds between looks at the earlier copy's manifest.
EARLIER_COPY_POLL = 0.2


def set_aside_earlier_copy(
    tasks_dir: Path,
    state_dir: Path,
    task_id: str,
    stopping: threading.Event,
    timeout: float = EARLIER_COPY_WAIT,
) -> bool:
    """Before this host claims ``task_id`` again (``on_host_lost = "restart"`` re-queued it
    and this very host, back from the dead, took its job): wait until the earlier copy's
    folder ``tasks_dir/<id>`` is terminal (its copy is stopped as superseded by then), then
    rename it to ``state_dir/superseded/<id>.g<generation>``, so the new run gets a fresh
    folder and tmux session of the same name. Runs on the claim's own thread.

    Returns:
        True: no earlier folder, or it was set aside; False: the earlier copy did not end
        within ``timeout`` seconds, or the engine stops (the caller leaves the task for
        another host or a later job).

    Raises:
        OSError: the rename failed (the claim rejects the task with the reason).
    """
    folder = tasks_dir / task_id
    deadline = time.monotonic() + timeout
    while True:
        try:
            manifest = json.loads((folder / layout.MANIFEST).read_text())
        except FileNotFoundError:
            if not folder.exists():
                return True
            manifest = {}
        except (OSError, ValueError):
            manifest = {}
        if manifest.get("status") in TERMINAL:
            break
        if time.monotonic() >= deadline or stopping.wait(EARLIER_COPY_POLL):
            return False
    try:
        generation = int(json.loads((folder / CLAIM_FILE).read_text())["generation"])
    except (OSError, ValueError, KeyError, TypeError):
        generation = 0
    target = state_dir / SET_ASIDE / f"{task_id}.g{generation}"
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.rename(target)
    _set_aside_worktree(target, generation)
    return True


def _set_aside_worktree(folder: Path, generation: int) -> None:
    """The earlier copy's worktree and branch renamed with the same ``.g<generation>``
    suffix (``git worktree move``, ``git branch -m``: git-worktree(1), git-branch(1)), so
    the new run can make ``supervise/<id>`` again; its record (the manifest set aside)
    names the new places. A git that refuses (a worktree with submodules cannot be moved)
    is logged: the new run then fails its workspace in one line ("branch taken")."""
    from supervisor.taskdir.folder import TaskDir
    from supervisor.workspace.git import GitError, run_git

    task = TaskDir(folder)
    try:
        ws = task.read_manifest().workspace
    except (OSError, ValueError):
        return
    if ws is None or ws.mode != "worktree" or ws.removed or not ws.branch or not ws.repository:
        return
    path, branch = Path(ws.path), f"{ws.branch}.g{generation}"
    moved = path.with_name(f"{path.name}.g{generation}")
    try:
        if path.is_dir():
            run_git(["worktree", "move", str(path), str(moved)], ws.repository)
        run_git(["branch", "-m", ws.branch, branch], ws.repository)
    except GitError as exc:
        log.warning("cluster: cannot set aside the worktree of %s: %s", folder.name, exc)
        return

    def renamed(manifest: Any) -> None:
        if manifest.workspace is not None:
            manifest.workspace = manifest.workspace.model_copy(
                update={"path": str(moved) if moved.is_dir() else ws.path, "branch": branch}
            )

    task.update_manifest(renamed)


def still_queued(conn: psycopg.Connection, task_id: str) -> bool:
    """Whether ``task_id``'s row waits for a claim (``queued``).

    Raises:
        psycopg.Error: the query failed.
    """
    return conn.execute(query("still_queued"), (task_id,)).fetchone() is not None


def defer_again(conn: psycopg.Connection, task_name: str, task_id: str, seconds: float) -> None:
    """A new job for the still ``queued`` ``task_id`` on its queue, ``seconds`` from now
    (the job that declined it is done; without this the task would wait with no job). A
    task claimed before (``generation`` > 0: put back by the sweeper) keeps its place
    ahead of new submissions (:data:`~supervisor.cluster.sweeper.REQUEUE_PRIORITY`).

    Raises:
        psycopg.Error: the database refused (the caller's job fails and is logged).
    """
    args = json.dumps({"task_id": task_id})
    conn.execute(query("defer_later"), (task_name, REQUEUE_PRIORITY, args, seconds, task_id))


def ready_to_claim(
    lend: Lend, profile: LoadedProfile, task_id: str, stopping: threading.Event
) -> bool:
    """Whether this host's job may go on to claim ``task_id``: yes when no folder of it is
    here, or the row is not ``queued`` (a duplicate job: its claim takes nothing), or an
    earlier copy's folder was set aside (:func:`set_aside_earlier_copy`). When that copy
    does not end in time the task is left ``queued`` with a job 5 s later (any host).
    ``lend()`` lends a connection for one statement: none is held while the earlier copy
    is waited for (up to :data:`EARLIER_COPY_WAIT` s), so the engine's small pool stays free
    for its heartbeats and fetches (issue 25).

    Raises:
        psycopg.Error: the database refused (the job fails; the task stays ``queued``).
    """
    tasks_dir, state_dir = profile.tasks_dir, profile.state_dir
    if not (tasks_dir / task_id).exists():
        return True
    with lend() as conn:
        if not still_queued(conn, task_id):
            return True
    if set_aside_earlier_copy(tasks_dir, state_dir, task_id, stopping):
        return True
    log.warning("cluster: an earlier copy of %s still runs here; left for later", task_id)
    with lend() as conn:
        defer_again(conn, TASK_NAME, task_id, 5.0)
    return False
