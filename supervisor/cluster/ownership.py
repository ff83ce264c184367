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
(:func:`supervisor.control.request`), which the policy carries out.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from supervisor.states import TERMINAL
from supervisor.terminal import escape_controls

#: The claim record in a task folder: ``{"host_id", "generation"}``.
CLAIM_FILE = "cluster.json"

_ROWS = "SELECT id, owner_host, generation, state FROM supervise_tasks WHERE id = ANY(%s)"


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
            status = json.loads((folder / "manifest.json").read_text()).get("status")
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
    rows = conn.execute(_ROWS, (list(owned),)).fetchall()
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
