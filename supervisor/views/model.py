"""The status model every view shares: ``supervise status``, ``supervise top``, ``supervise serve``.

:func:`snapshot` reads a state dir (and the engine's heartbeat) and returns a
:class:`Snapshot`: the engine's state, the spool files not claimed yet, and every task with
its **group** (what it needs from a person) and the figures an operator scans for. A
:class:`Reader` does the same repeatedly, re-reading only the task folders that changed
(a live view refreshes every second). Plain ``os`` and ``json``, no pydantic, no
third-party import: this runs over thousands of folders
(``benchmarks/views.py``), and the core install needs nothing more.

**Engine state** and spool files: :mod:`.sources` (re-exported here).

**Groups** (:data:`GROUPS`, in display order) from the task's status
(:mod:`supervisor.taskdir.states`): ``needs_you`` (escalated), ``waiting`` (waiting),
``running`` (running, verifying), ``recovering`` (crashed, hung, and any live task with a
``stop`` request not yet applied), ``failed`` (failed, abandoned, a damaged folder),
``queued`` (queued), ``done`` (completed). An unknown status counts as failed.

**Time in state** (``since``, epoch s; ``state_s``, seconds). From manifest fields, not
from the whole event log (which is long at 1,000 tasks): queued since ``created_at``;
running since ``launched_at`` (else ``started_at``); escalated since the escalation's
``since``; completed, failed and abandoned since ``finished_at`` (else ``abandoned_at``).
Waiting, crashed, hung and verifying have no manifest field for their start: for those
(a handful at any time) the last 16 KiB of ``events.jsonl`` are read, and ``since`` is the
first event of the trailing run whose ``status`` is the task's status (else
``launched_at``).

Text fields are as the manifest holds them (exact, for JSON) except ``last_line``, which
is already terminal-safe (:func:`supervisor.terminal.escape_controls`); a view shows every
other text through ``escape_controls`` (and HTML-escapes it on a page).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from supervisor import accounts, costs
from supervisor.agents import kinds
from supervisor.diskio import read_end
from supervisor.taskdir import control, layout
from supervisor.taskdir.states import DAMAGED, ENDED, HOST_LOST, Status
from supervisor.taskid import is_task_id
from supervisor.views import plangraph
from supervisor.views.fields import count, items, text
from supervisor.views.sources import (
    HEARTBEAT,
    STALE_AFTER,
    Engine,
    SpoolFile,
    duration,
    engine_state,
    epoch,
    lock_held,
    pid_alive,
    read_json,
    spool_files,
)

#: The model's API; the names from :mod:`.sources` are part of it.
__all__ = [
    "GROUPS",
    "GROUP_OF",
    "HEARTBEAT",
    "STALE_AFTER",
    "Engine",
    "Reader",
    "Snapshot",
    "SpoolFile",
    "Task",
    "duration",
    "engine_state",
    "epoch",
    "finish",
    "lock_held",
    "pid_alive",
    "read_json",
    "readable_last_line",
    "snapshot",
    "spool_files",
    "status_since",
    "task_from_manifest",
    "totals",
]

#: Bytes read from the end of ``events.jsonl`` (time in state).
EVENTS_TAIL_BYTES = 16384

#: Group name → its title in a view, in display order.
GROUPS: dict[str, str] = {
    "needs_you": "Needs you",
    "waiting": "Waiting",
    "running": "Running",
    "recovering": "Recovering",
    "failed": "Failed",
    "queued": "Queued",
    "done": "Done",
}
#: Status → group (see the module docstring).
GROUP_OF: dict[str, str] = {
    Status.ESCALATED: "needs_you",
    Status.WAITING: "waiting",
    Status.RUNNING: "running",
    Status.VERIFYING: "running",
    Status.CRASHED: "recovering",
    Status.HUNG: "recovering",
    Status.FAILED: "failed",
    Status.ABANDONED: "failed",
    DAMAGED: "failed",
    Status.QUEUED: "queued",
    Status.COMPLETED: "done",
    Status.SUPERSEDED: "done",  # the task lives on in the fleet; nothing here needs anyone
}
GROUP_OF[Status.BLOCKED] = GROUP_OF[Status.QUEUED]  # waits for its predecessors (issue 26)
#: The group of each state that only the fleet's database holds (``status --cluster``).
FLEET_GROUP_OF: dict[str, str] = {"claimed": "queued", "rejected": "failed", HOST_LOST: "failed"}
_FROM_EVENTS = frozenset(
    {Status.WAITING, Status.CRASHED, Status.HUNG, Status.VERIFYING, Status.ESCALATED}
)


@dataclass(slots=True)
class Task:
    """One task, for every view. The first eleven fields are ``supervise status``'s
    historical row (kept for ``--json``); the rest were added with this model.

    ``retries``: ``retry_count``; ``reason``: ``failure_reason`` or ``abandon_reason``, or
    why a queued task waits (``budget_hold``: ``daily budget reached: $X of $Y``);
    ``age_s``: seconds since it started (else since it was created); ``since_output_s``:
    seconds since ``output.log`` last changed; ``damaged``: why the folder is damaged.
    ``group``: see :data:`GROUPS`; ``since`` (epoch s) and ``state_s`` (seconds): time in
    the current status; ``resume_at`` (epoch s) and ``resume_in_s`` (seconds, ≥ 0) for a
    task due to resume; ``last_line``: the last readable line of the output (rendered for
    the agent's kind, :func:`readable_last_line`), terminal-safe;
    ``cost_usd``: what the agent reports it spent (USD); ``tokens``: input + output tokens
    when the manifest reports them (both from the agent kind's columns,
    :func:`supervisor.agents.kinds.columns`); ``columns``: the agent kind's own other
    columns (name → value; ``{}`` for the built-in kinds); ``branch``, ``files_changed``,
    ``insertions``, ``deletions``: the task's workspace (``None`` without one);
    ``escalation``: ``{"reason", "tool", "subject"}`` of an escalated task; ``requests``:
    operator requests (``stop``, ``resume``, ``approve``, ``deny``) the engine has not
    taken yet; ``session_name``: its tmux session; ``account``: its credentials'
    fingerprint (:mod:`supervisor.accounts`); ``held``: why a queued task its account
    holds back waits (``account limited until HH:MM``, issue 26). ``after``: the ids of its
    predecessors (issue 26); ``blocked_on``: those a ``blocked`` task still waits for (its
    ``reason`` says ``blocked on NAME (ID)``: :mod:`supervisor.views.plangraph`);
    ``attempt``: ``K/N GROUP`` for an attempt of a group (issue 26, ``supervise attempts``).
    """

    task_id: str
    name: str | None
    status: str
    model: str | None = None
    retries: int = 0
    exit_code: int | None = None
    verdict: str | None = None
    reason: str | None = None
    age_s: float | None = None
    since_output_s: float | None = None
    damaged: str | None = None
    group: str = "failed"
    since: float | None = None
    state_s: float | None = None
    resume_at: float | None = None
    resume_in_s: float | None = None
    last_line: str | None = None
    cost_usd: float | None = None
    tokens: int | None = None
    branch: str | None = None
    files_changed: int | None = None
    insertions: int | None = None
    deletions: int | None = None
    escalation: dict[str, str | None] | None = None
    requests: list[str] = field(default_factory=list)
    session_name: str | None = None
    columns: dict[str, Any] = field(default_factory=dict)
    account: str | None = None
    held: str | None = None
    after: list[str] = field(default_factory=list)
    blocked_on: list[str] = field(default_factory=list)
    attempt: str | None = None

    def row(self) -> dict[str, Any]:
        """The task as a plain dict (``supervise status --json``'s row): what
        ``dataclasses.asdict`` gives (no field is a dataclass; the dicts and the list are
        copied one level, their values are scalars), at a fifth of its cost (its deep copy
        was a third of ``status --json`` over 1,000 tasks)."""
        return {
            name: (value.copy() if isinstance(value, dict | list) else value)
            for name in _TASK_FIELDS
            for value in (getattr(self, name),)
        }

    def label(self, fallback: str = "-") -> str:
        """The name every view shows (``fallback`` when the task has none), with
        ``[attempt K/N]`` for an attempt of a group (issue 26). Not escaped."""
        base = self.name or fallback
        return f"{base} [attempt {self.attempt.split()[0]}]" if self.attempt else base

    def diffstat(self) -> str | None:
        """``"3 files +10 -2"``, or ``None`` without a workspace report."""
        if self.files_changed is None:
            return None
        return f"{self.files_changed} files +{self.insertions or 0} -{self.deletions or 0}"


#: The fields of :class:`Task`, in order (``Task.row``'s keys).
_TASK_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Task))


@dataclass(slots=True)
class Snapshot:
    """Everything a view shows, read at ``now`` (epoch s).

    ``state_dir``: the folder read; ``engine``: :class:`Engine`; ``spool``: waiting spool
    files, oldest first; ``tasks``: every task, by task id; ``totals``: tasks per group
    (every key of :data:`GROUPS`), plus ``tasks``, ``cost_usd`` (sum of known costs) and
    ``tokens`` (sum of known token counts, ``None`` when none is known).
    """

    now: float
    state_dir: str
    engine: Engine
    spool: list[SpoolFile]
    tasks: list[Task]
    totals: dict[str, Any]

    def group(self, name: str) -> list[Task]:
        """The tasks of one group (a key of :data:`GROUPS`), in ``tasks`` order."""
        return [t for t in self.tasks if t.group == name]

    def task(self, task_id: str) -> Task | None:
        """One task by id, or ``None``."""
        return next((t for t in self.tasks if t.task_id == task_id), None)

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as plain JSON-ready data (``schemas/snapshot.schema.json``)."""
        return asdict(self)


# ---------------------------------------------------------------- tasks


def readable_last_line(folder: str, manifest: dict[str, Any]) -> str | None:
    """The last line of a task's output as every view shows it: rendered for its agent
    kind (:func:`supervisor.agents.readable.last_line`; imported here, on first use, so the
    model's import stays free of the agent adapters and pydantic)."""
    from supervisor.agents import readable

    return readable.last_line(Path(folder), manifest)


def status_since(events_path: str, status: str) -> float | None:
    """When the trailing run of ``events.jsonl`` events carrying ``"status": status``
    began (epoch s), from the file's last 16 KiB; ``None`` if no such event is there."""
    since = None
    for raw in reversed(read_end(events_path, EVENTS_TAIL_BYTES)[0].splitlines()):
        try:
            event = json.loads(raw)
        except (ValueError, RecursionError):
            continue  # the cut first line, a torn one, or one nested too deep
        if not isinstance(event, dict) or "status" not in event:
            continue
        if event["status"] != status:
            break
        since = epoch(event.get("ts")) or since
    return since


def _since(m: dict[str, Any], status: str, folder: str) -> float | None:
    if status == Status.QUEUED:
        return epoch(m.get("created_at"))
    if status in ENDED:
        return epoch(m.get("finished_at")) or epoch(m.get("abandoned_at"))
    started = epoch(m.get("launched_at")) or epoch(m.get("started_at"))
    if status == Status.RUNNING:
        return started
    if status == Status.ESCALATED:
        record = m.get("escalation")
        found = epoch(record.get("since")) if isinstance(record, dict) else None
        if found is not None:
            return found
    if status in _FROM_EVENTS:
        return status_since(os.path.join(folder, layout.EVENTS), status) or started
    return started


def _held(m: dict[str, Any]) -> str | None:
    """Why a queued task waits for the profile's daily budget (``budget_hold.reason``,
    issue 26), else ``None``."""
    hold = m.get("budget_hold")
    if m.get("status") != Status.QUEUED or not isinstance(hold, dict):
        return None
    return text(hold.get("reason"))


def task_from_manifest(m: dict[str, Any], folder: str, has_output: bool) -> Task:
    """The time-independent part of a :class:`Task` from a manifest dict (``state_s``,
    ``age_s``, ``since_output_s``, ``resume_in_s`` and ``requests`` are filled in by
    :func:`finish`). ``has_output``: whether ``output.log`` exists."""
    status = m["status"]
    columns = kinds.columns(m)  # the agent kind's values: cost_usd, tokens, its own
    ws = m.get("workspace") if isinstance(m.get("workspace"), dict) else {}
    record = m.get("escalation") if status == Status.ESCALATED else None
    escalation = None
    if isinstance(record, dict):
        escalation = {k: text(record.get(k)) for k in ("reason", "tool", "subject")}
    task = Task(
        task_id=str(m.get("task_id") or os.path.basename(folder)),
        name=text(m.get("task_name")),
        status=status,
        model=text(m.get("model")),
        retries=count(m.get("retry_count")) or 0,
        exit_code=count(m.get("exit_code")),
        verdict=text(m.get("verdict")),
        reason=text(m.get("failure_reason")) or text(m.get("abandon_reason")) or _held(m),
        damaged=text(m.get("damaged")),
        group=GROUP_OF.get(status, "failed"),
        since=_since(m, status, folder),
        resume_at=epoch(m.get("resume_at")) if status not in ENDED else None,
        last_line=readable_last_line(folder, m) if has_output else None,
        cost_usd=costs.total_of(m) if columns.pop("cost_usd", None) is not None else None,
        tokens=count(columns.pop("tokens", None)),
        branch=text(ws.get("branch")),
        files_changed=count(ws.get("files_changed")),
        insertions=count(ws.get("insertions")),
        deletions=count(ws.get("deletions")),
        escalation=escalation,
        session_name=text(m.get("session_name")),
        columns=columns,
        account=text(m.get("account")),
        after=[i for i in items(m.get("after")) if isinstance(i, str)],
        attempt=_attempt(m.get("attempt")),
    )
    return task


def _attempt(ref: Any) -> str | None:
    """``K/N GROUP`` of a manifest's ``attempt`` (two counts and a task id), else ``None``."""
    ref = ref if isinstance(ref, dict) else {}
    k, n, group = count(ref.get("index")), count(ref.get("of")), text(ref.get("group"))
    ok = k is not None and n is not None and group is not None and is_task_id(group)
    return f"{k}/{n} {group}" if ok else None


def finish(
    task: Task,
    now: float,
    requests: list[str],
    started: float | None,
    output_mtime: float | None,
    limits: Mapping[str, Mapping[str, Any]] | None = None,
) -> Task:
    """A copy of a cached :class:`Task` with its time-dependent fields computed for ``now``
    (epoch s): ``started`` (``started_at``, else ``created_at``) and ``output_mtime`` (of
    ``output.log``) are epochs or ``None``; ``requests`` the task's pending requests;
    ``limits`` the accounts' limits (:func:`supervisor.accounts.read_limits`)."""

    def ago(moment: float | None) -> float | None:
        return None if moment is None else round(now - moment, 1)

    out = Task(**{name: getattr(task, name) for name in Task.__dataclass_fields__})
    out.age_s, out.since_output_s = ago(started), ago(output_mtime)
    if task.since is not None:
        out.state_s = round(max(0.0, now - task.since), 1)
    if task.resume_at is not None:
        out.resume_in_s = round(max(0.0, task.resume_at - now), 1)
    out.requests = requests
    if task.status == Status.QUEUED and limits:
        out.held = accounts.hold_of(limits, task.account, now)
    if "stop" in requests and task.status not in ENDED:
        out.group = "recovering"  # a stop in progress
    return out


class Reader:
    """Reads snapshots of one state dir again and again, re-reading a task folder only when
    its ``manifest.json`` or ``output.log`` changed (mtime, size, inode), and a waiting or
    recovering task's ``events.jsonl`` tail with it.

    Args:
        state_dir: the profile's ``state_dir``.
        spool_dir: the profile's spool folder.

    Not thread-safe: one reader per view thread.
    """

    def __init__(self, state_dir: Path, spool_dir: Path) -> None:
        self.state_dir, self.spool_dir = Path(state_dir), Path(spool_dir)
        self.tasks_dir = self.state_dir / layout.TASKS
        # task folder name -> (change key, task, started epoch, output.log mtime)
        self._cache: dict[str, tuple[tuple[Any, ...], Task, float | None, float | None]] = {}

    def _task(self, entry: os.DirEntry[str]) -> tuple[Task, float | None, float | None] | None:
        """A task folder's cached parts (see :func:`finish`), re-read if it changed;
        ``None`` for an entry that is no task (a file, a claim still to finish)."""
        name, folder = entry.name, entry.path
        manifest_path = os.path.join(folder, layout.MANIFEST)
        try:
            info = os.stat(manifest_path)
            key: tuple[Any, ...] = (info.st_mtime_ns, info.st_size, info.st_ino)
        except OSError:
            key = (None,)
        try:
            out = os.stat(os.path.join(folder, layout.OUTPUT))
            output_key: tuple[Any, ...] = (out.st_mtime_ns, out.st_size)
        except OSError:
            out, output_key = None, (None,)
        key += output_key
        cached = self._cache.get(name)
        if cached is not None and cached[0] == key and key[0] is not None:
            return cached[1:]
        manifest = read_json(manifest_path)
        if manifest is None or not isinstance(manifest.get("status"), str):
            from supervisor.views import tasklist  # repair's reasons, as status always showed them

            manifest = tasklist.damaged_row(entry)
            if manifest is None:
                self._cache.pop(name, None)
                return None
        task = task_from_manifest(manifest, folder, out is not None)
        started = epoch(manifest.get("started_at") or manifest.get("created_at"))
        self._cache[name] = (key, task, started, out.st_mtime if out else None)
        return task, started, out.st_mtime if out else None

    def snapshot(self, now: float | None = None) -> Snapshot:
        """A :class:`Snapshot` at ``now`` (epoch s, default the clock)."""
        now = time.time() if now is None else now
        try:
            entries = sorted(os.scandir(self.tasks_dir), key=lambda e: e.name)
        except OSError:
            entries = []
        requests = control.pending_verbs(self.state_dir)
        limits = accounts.read_limits(self.state_dir)
        tasks = []
        for entry in entries:
            parts = self._task(entry)
            if parts is not None:
                task, started, output_mtime = parts
                wanted = requests.get(task.task_id, [])
                tasks.append(finish(task, now, wanted, started, output_mtime, limits))
        plangraph.mark_blocked(tasks)
        names = {e.name for e in entries}
        for gone in set(self._cache) - names:
            del self._cache[gone]
        return Snapshot(
            now=now,
            state_dir=str(self.state_dir),
            engine=engine_state(self.state_dir, now),
            spool=spool_files(self.spool_dir, now),
            tasks=tasks,
            totals=totals(tasks),
        )


def totals(tasks: Iterable[Task]) -> dict[str, Any]:
    """Tasks per group (every group, 0 included), ``tasks`` (all), ``cost_usd`` (sum of known
    costs, rounded to 1/10,000 USD) and ``tokens`` (sum of known counts, else ``None``)."""
    counts: dict[str, Any] = dict.fromkeys(GROUPS, 0)
    cost, tokens, n = 0.0, None, 0
    for task in tasks:
        n += 1
        counts[task.group] = counts.get(task.group, 0) + 1
        cost += task.cost_usd or 0.0
        if task.tokens is not None:
            tokens = (tokens or 0) + task.tokens
    return {**counts, "tasks": n, "cost_usd": round(cost, 4), "tokens": tokens}


def snapshot(profile: Any, now: float | None = None) -> Snapshot:
    """A :class:`Snapshot` of a profile's state dir (``profile``: a
    :class:`supervisor.config.LoadedProfile`, or anything with ``state_dir`` and
    ``spool_dir``). One-shot; a live view keeps a :class:`Reader` instead."""
    return Reader(profile.state_dir, profile.spool_dir).snapshot(now)
