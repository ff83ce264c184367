"""What the tools of ``supervise mcp`` do (issue 22 item 6), without the MCP SDK.

Each function takes the profile the server was started with and plain arguments, and
returns JSON-ready data or text; a refusal raises :class:`ToolRefused` with one line (the
tool's error text). They are the CLI's code paths: :func:`supervisor.inline_submit.
submit_fields` (``submit``), the status model (``status``), the manifest (``show``),
:func:`supervisor.waiting.wait_tasks` (``wait``), :func:`supervisor.agents.readable.
readable_tail` (``tail``), :func:`supervisor.requests.apply_request` (the four requests)
and :func:`supervisor.followup.request_continue` (``continue``).

Confinement: every task is named by its id, checked by
:func:`supervisor.taskid.is_task_id` and looked up only in the profile's own ``tasks_dir``;
no argument is a path the server reads, and a submitted task may not name a
``prompt_file`` (the prompt is given as text). A task's
``project_dir`` is a task key like any other, checked by the task file's rules.

Bounds: ``wait`` at most :data:`MAX_WAIT_S` seconds per call (default
:data:`DEFAULT_WAIT_S`), a request's wait at most :data:`MAX_REQUEST_WAIT_S`, ``tail`` at
most :data:`MAX_TAIL_LINES` lines, ``wait`` at most :data:`MAX_IDS` ids.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor.errors import ConfigError, SuperviseError
from supervisor.taskdir import layout
from supervisor.taskid import is_task_id, refusal
from supervisor.terminal import escape_json_text

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: A task id: what :func:`supervisor.spool.new_task_id` makes (never a path).
#: Seconds one ``wait`` call blocks by default, and at most: an MCP client's tool call has
#: its own timeout, so a long wait is several calls.
DEFAULT_WAIT_S = 60.0
MAX_WAIT_S = 300.0
#: Seconds a request waits for the engine to apply it (the CLI's ``--wait`` default) and
#: at most.
DEFAULT_REQUEST_WAIT_S = 15.0
MAX_REQUEST_WAIT_S = 60.0
#: Lines ``tail`` returns by default and at most.
DEFAULT_TAIL_LINES = 40
MAX_TAIL_LINES = 2000
#: Task ids one ``wait`` call takes at most.
MAX_IDS = 100
#: Rows (tasks, spool files) ``status`` and ``plan`` return per call by default, and at
#: most: Claude Code keeps an MCP answer in the conversation only up to
#: ``MAX_MCP_OUTPUT_TOKENS`` (25,000 tokens by default) and 50,000 characters (a longer one
#: is saved to a file; Claude Code docs, MCP, "output limits"); a task's row is about 300
#: characters. A later page: ``offset`` = the answer's ``next_offset``.
DEFAULT_ROWS = 100
MAX_ROWS = 500
#: Seconds a wait blocks between two looks at :data:`CLOSING`.
SLICE_S = 1.0
#: Set once the client has gone (``supervise mcp`` after its stdio loop ends): waits and
#: requests still running on worker threads return at their next slice, so the process
#: exits at once instead of after the longest wait (up to :data:`MAX_WAIT_S`).
CLOSING = threading.Event()


class ToolRefused(SuperviseError):
    """A tool call that cannot be done: ``str(exc)`` is one line naming what is wrong and
    the fix (the MCP tool's error text)."""


def as_text(data: Any) -> str:
    """``data`` as JSON text with every control or format character as ``\\uHHHH``
    (:func:`supervisor.terminal.escape_json_text`): what every tool returns."""
    return escape_json_text(json.dumps(data, ensure_ascii=False, indent=1))


def task_folder(profile: LoadedProfile, task_id: str) -> Path:
    """The folder of task ``task_id`` in the profile's ``tasks_dir``.

    Raises:
        ToolRefused: not a task id, or no such task (the line names the tasks folder).
    """
    if not isinstance(task_id, str) or not is_task_id(task_id):
        raise ToolRefused(f"task_id: {refusal(str(task_id))}")
    folder = profile.tasks_dir / task_id
    if not (folder / layout.MANIFEST).is_file():  # archived, in the spool, rejected, or none
        from supervisor.taskwhere import missing_line

        raise ToolRefused(missing_line(profile, task_id, str(profile.path)))
    return folder


def _bounded(value: float | int | None, default: float, top: float, what: str) -> float:
    """``value`` (``None``: ``default``) checked to lie in ``0 .. top``."""
    if value is None:
        return default
    if not isinstance(value, int | float) or not 0 <= value <= top:  # NaN fails too
        raise ToolRefused(f"{what} must be a number from 0 to {top:g}, got {value!r}")
    return float(value)


def manifest(profile: LoadedProfile, task_id: str) -> dict[str, Any]:
    """The task's ``manifest.json`` (``supervise show``).

    Raises:
        ToolRefused: a bad or unknown id, or a manifest that cannot be read.
    """
    path = task_folder(profile, task_id) / layout.MANIFEST
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ToolRefused(f"{path}: cannot read the manifest ({exc})") from None
    if not isinstance(data, dict):
        raise ToolRefused(f"{path}: not a manifest (a JSON object)")
    return data


def submit(profile: LoadedProfile, fields: dict[str, Any]) -> dict[str, Any]:
    """Validate and submit a task given as a task file's keys (``prompt``, not
    ``prompt_file``; ``project_dir`` absolute). Returns ``{"task_id", "name"}`` plus
    ``"warning"`` when no live engine holds the state dir.

    Raises:
        ToolRefused: the task file's one-line problems, joined with "; ".
    """
    from supervisor import engine_probe
    from supervisor.inline_submit import submit_fields

    if "prompt_file" in fields:
        raise ToolRefused("prompt_file is not taken here: give the prompt's text as 'prompt'")
    project = fields.get("project_dir")
    if not isinstance(project, str) or not Path(project).is_absolute():
        raise ToolRefused(f"project_dir must be an absolute folder path, got {project!r}")
    try:
        task_id = submit_fields(profile, fields, shown=Path("task"))
    except ConfigError as exc:
        raise ToolRefused("; ".join(exc.problems)) from None
    done: dict[str, Any] = {"task_id": task_id, "name": fields.get("name")}
    if profile.spec.cluster is None:
        warning = engine_probe.warning(profile.state_dir, profile.path, "the task waits")
        if warning:
            done["warning"] = warning
    return done


def page(rows: list[Any], offset: int | None, limit: int | None) -> tuple[list[Any], dict]:
    """One page of ``rows``: the rows from ``offset`` (default 0), at most ``limit``
    (default :data:`DEFAULT_ROWS`, at most :data:`MAX_ROWS`), and ``{"total", "offset",
    "next_offset"}`` (``next_offset`` ``None`` on the last page).

    Raises:
        ToolRefused: ``offset`` below 0, or ``limit`` outside 1 to :data:`MAX_ROWS`.
    """
    start = 0 if offset is None else offset
    count = DEFAULT_ROWS if limit is None else limit
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ToolRefused(f"offset: give 0 or more (the answer's next_offset), not {start!r}")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_ROWS:
        raise ToolRefused(f"limit: give 1 to {MAX_ROWS} rows, not {count!r}")
    end = start + count
    after = end if end < len(rows) else None
    return rows[start:end], {"total": len(rows), "offset": start, "next_offset": after}


def status(
    profile: LoadedProfile,
    statuses: list[str] | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """``supervise status --json``, a page at a time: ``{"engine": line, "spool": [the
    first :data:`MAX_ROWS` names], "spool_count", "tasks": rows, "total", "offset",
    "next_offset"}`` (:func:`page`), rows filtered by status or group names (``statuses``;
    ``None``: all).

    Raises:
        ToolRefused: an unknown status name, or a bad ``offset``/``limit``.
    """
    from supervisor.views import model
    from supervisor.views.status import STATUS_CHOICES, select

    unknown = [s for s in statuses or [] if s not in STATUS_CHOICES]
    if unknown:
        raise ToolRefused(f"unknown status {unknown[0]!r}; give any of {', '.join(STATUS_CHOICES)}")
    snap = model.snapshot(profile, time.time())
    chosen = select(snap, statuses or None, None)
    shown_tasks, paging = page(chosen, offset, limit)  # rows made for this page only
    spool = [item.name for item in snap.spool]
    return {
        "engine": snap.engine.line(),
        "spool": spool[:MAX_ROWS],
        "spool_count": len(spool),
        "tasks": [task.row() for task in shown_tasks],
        **paging,
    }


#: Days the ``cost`` tool covers at most.
MAX_COST_DAYS = 366


def cost(profile: LoadedProfile, days: int | None = None) -> dict[str, Any]:
    """``supervise cost --json`` of the server's profile (issue 26): spend per day,
    account and task, and its daily budget; ``days``: today and the ``days - 1`` before
    (``None``: all time).

    Raises:
        ToolRefused: ``days`` outside 1 to :data:`MAX_COST_DAYS`.
    """
    from supervisor import costs

    if days is not None and not 1 <= days <= MAX_COST_DAYS:
        raise ToolRefused(f"days: give 1 to {MAX_COST_DAYS}, or none for all time")
    now = time.time()
    since = None if days is None else costs.days_back(now, days)
    name = profile.path.stem
    return costs.profiles_report([(name, profile)], costs.Window(since, None), now)


def attempts(profile: LoadedProfile, ident: str) -> dict[str, Any]:
    """``supervise attempts ID --json`` (issue 26): the group ``ident`` names (its id, or
    any attempt's task id) and each attempt's model, status, verdict, cost and diff size.

    Raises:
        ToolRefused: a bad id, or one that names no group nor an attempt.
    """
    from supervisor import attempts as groups

    if not is_task_id(ident):
        raise ToolRefused(refusal(ident))
    try:
        return groups.listing(profile, ident)
    except groups.NotFound as exc:
        raise ToolRefused(str(exc)) from None


def tail(profile: LoadedProfile, task_id: str, lines: int | None = None) -> str:
    """The last ``lines`` lines of the task's output, escaped (``supervise tail``).

    Raises:
        ToolRefused: a bad or unknown id, or ``lines`` out of range.
    """
    count = int(_bounded(lines, DEFAULT_TAIL_LINES, MAX_TAIL_LINES, "lines"))
    return rendered_tail(task_folder(profile, task_id), count)


def rendered_tail(folder: Path, lines: int) -> str:
    """A task folder's last ``lines`` lines as ``tail`` shows them: Claude Code's stream
    rendered readable, escaped (:func:`supervisor.agents.readable.readable_tail`)."""
    from supervisor.agents.readable import readable_tail

    return readable_tail(folder, lines)


def wait(
    profile: LoadedProfile,
    task_ids: list[str],
    timeout: float | None,
    terminal_only: bool = False,
    full: bool = False,
) -> dict[str, Any]:
    """``supervise wait``: block until every task has ended, or one needs a person (unless
    ``terminal_only``), or ``timeout`` seconds (at most :data:`MAX_WAIT_S`) pass. Returns
    ``{"tasks": [per id, in order: what it needs, or the ended task as ``wait --brief``
    gives it (:func:`supervisor.waitbrief.brief`: an agent pays for every byte it reads,
    and the raw ``output_tail`` is the most of a manifest), its whole manifest with
    ``full``], "needs_you": ids,
    "pending": ids still going, "timed_out": bool, "code": supervise wait's exit status}``
    (:func:`supervisor.waiting.wait_tasks`, waited in :data:`SLICE_S` slices so that
    :data:`CLOSING` ends it).

    Raises:
        ToolRefused: no ids, too many, a bad id, an id that names no task, a bad timeout.
    """
    from supervisor.waiting import EXIT_TIMEOUT, UnknownTasks, wait_tasks

    seconds = _bounded(timeout, DEFAULT_WAIT_S, MAX_WAIT_S, "timeout")
    ids = list(dict.fromkeys(task_ids or []))
    if not ids or len(ids) > MAX_IDS:
        raise ToolRefused(f"give 1 to {MAX_IDS} task ids in task_ids")
    for task_id in ids:
        if not is_task_id(task_id):
            raise ToolRefused(f"task_ids: {refusal(task_id)}")
    deadline = time.monotonic() + seconds
    while True:
        left = max(0.0, deadline - time.monotonic())
        try:
            outcome = wait_tasks(profile, ids, min(left, SLICE_S), terminal_only=terminal_only)
        except UnknownTasks as exc:
            raise ToolRefused(str(exc)) from None
        if outcome.code != EXIT_TIMEOUT or left <= SLICE_S or CLOSING.is_set():
            break
    from supervisor.waitbrief import brief

    return {
        "tasks": outcome.shown if full else [brief(entry) for entry in outcome.shown],
        "needs_you": list(outcome.needs_you),
        "pending": list(outcome.pending),
        "timed_out": outcome.code == EXIT_TIMEOUT,
        "code": outcome.code,
    }


def request(
    profile: LoadedProfile, task_id: str, verb: str, wait_s: float | None = None
) -> dict[str, Any]:
    """``supervise stop|resume|approve|deny ID --json``
    (:func:`supervisor.requests.apply_request`): leave the request, wait up to ``wait_s``
    seconds for the engine to apply it. Returns ``{"task_id", "verb", "result" (applied |
    queued | not_applied), "status", "retry_count"}``.

    Raises:
        ToolRefused: a bad or unknown id, or the request's refusal line.
    """
    from supervisor.requests import RequestRefused, apply_request

    seconds = _bounded(wait_s, DEFAULT_REQUEST_WAIT_S, MAX_REQUEST_WAIT_S, "wait_s")
    task_folder(profile, task_id)
    try:
        return apply_request(profile, task_id, verb, seconds)
    except RequestRefused as exc:
        raise ToolRefused(str(exc)) from None


def follow_up(
    profile: LoadedProfile, task_id: str, prompt: str, wait_s: float | None = None
) -> dict[str, Any]:
    """``supervise continue ID PROMPT`` (:func:`supervisor.followup.request_continue`):
    the task's conversation goes on with ``prompt`` as a new turn. Returns ``{"task_id",
    "verb": "continue", "result", "status", "retry_count", "turn"}``.

    Raises:
        ToolRefused: a bad or unknown id, a bad ``wait_s``, or the follow-up's refusal line.
    """
    from supervisor.followup import FollowUpRefused, request_continue

    seconds = _bounded(wait_s, DEFAULT_REQUEST_WAIT_S, MAX_REQUEST_WAIT_S, "wait_s")
    task_folder(profile, task_id)
    try:
        return request_continue(profile, task_id, prompt, seconds)
    except FollowUpRefused as exc:
        raise ToolRefused(str(exc)) from None
