"""The HTML of ``supervise serve`` (Jinja2 templates in ``views/templates``) and what it
reads: the board from the status model, one task's manifest, events and output tail.

Escaping: every value a template prints goes through Jinja2's ``finalize`` hook, which
applies :func:`supervisor.terminal.escape_controls` to strings (an ESC shows as ``\\x1b``),
and then through autoescape (``<script>`` shows as text). Multi-line text (the output tail,
the manifest) uses the ``lines`` filter: the same, keeping newlines and tabs.

Blocking I/O: everything here reads files; :mod:`supervisor.views.web` calls it on a worker
thread.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup, escape

from supervisor.agents.readable import readable_tail
from supervisor.diskio import read_end, read_regular
from supervisor.taskdir import control, layout
from supervisor.taskdir.folder import TaskDir
from supervisor.taskid import is_task_id
from supervisor.terminal import escape_controls
from supervisor.views import fleet, model, plangraph, timeline
from supervisor.waiting import MANIFEST_MAX

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile
    from supervisor.views.webauth import Access

#: Lines of ``output.log`` a task's page shows.
TAIL_LINES = 200
#: Events of ``events.jsonl`` a task's page shows (the newest), read from at most
#: :data:`EVENT_BYTES` at its end (a long task's log grows to megabytes; the page is
#: re-rendered at each change).
EVENT_LIMIT = 500
EVENT_BYTES = 512 * 1024


def _finalize(value: Any) -> Any:
    """Jinja2's hook on every printed value: control characters of strings made visible
    (``Markup`` built by the ``lines`` filter is already safe and left alone)."""
    if isinstance(value, Markup) or not isinstance(value, str):
        return value
    return escape_controls(value)


def _lines(value: Any) -> Markup:
    """A multi-line text, controls escaped except newline and tab, then HTML-escaped."""
    return Markup(escape(escape_controls(str(value or ""), keep="\n\t")))


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(Path(__file__).parent / "templates")),
        autoescape=True,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["lines"] = _lines
    env.globals["duration"] = model.duration
    env.globals["groups"] = model.GROUPS
    return env


def fingerprint(profile: LoadedProfile) -> tuple[Any, ...]:
    """What the board hub compares at each poll: one ``stat`` per ``manifest.json`` (the
    engine replaces it atomically: new mtime and inode), the task folders' names, the
    spool and control folders' listings, and the accounts' limits. No file is read."""
    out: list[Any] = []
    try:
        entries = sorted(os.scandir(profile.tasks_dir), key=lambda e: e.name)
    except FileNotFoundError:
        entries = []
    for entry in entries:
        out.append((entry.name, _stat_key(os.path.join(entry.path, layout.MANIFEST))))
    for folder in (profile.spool_dir, profile.state_dir / control.CONTROL):
        try:
            out.append(tuple(sorted(os.listdir(folder))))
        except OSError:
            out.append(None)
    out.append(_stat_key(str(profile.state_dir / layout.ACCOUNTS)))  # the held tasks' reason
    return tuple(out)


def slow_fingerprint(profile: LoadedProfile) -> tuple[Any, ...]:
    """What changes all the time and is shown at most every few seconds: each task's
    ``output.log`` (the last line) and the engine's heartbeat (``engine-stats.json``)."""
    out = [_stat_key(str(profile.state_dir / layout.ENGINE_STATS))]
    try:
        entries = list(os.scandir(profile.tasks_dir))
    except FileNotFoundError:
        entries = []
    out += sorted((e.name, _stat_key(os.path.join(e.path, layout.OUTPUT))) for e in entries)
    return tuple(out)


def _stat_key(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ino, st.st_size)


def task_fingerprint(folder: Path) -> tuple[Any, ...]:
    """What a task page's stream compares: its manifest, event log and output."""
    return tuple(
        _stat_key(str(folder / name))
        for name in (layout.MANIFEST, layout.EVENTS, layout.OUTPUT, layout.OUTPUT_ROTATED)
    )


class Pages:
    """Renders the pages of one ``supervise serve`` (see :mod:`supervisor.views.web`)."""

    def __init__(self, profile: LoadedProfile, access: Access) -> None:
        self.profile = profile
        self.access = access
        self.env = _environment()
        self.reader = model.Reader(profile.state_dir, profile.spool_dir)
        self._lock = threading.Lock()  # a Reader is not thread-safe; renders run on threads
        self.fleet = fleet.cache_for(profile)  # None: a single host (no [cluster])

    def fleet_key(self) -> int | None:
        """What changes when the fleet shown changed (``None`` without ``[cluster]``);
        starts a read of the database when one is due (:class:`~.fleet.FleetCache`)."""
        return None if self.fleet is None else self.fleet.key()

    def snapshot(self) -> model.Snapshot:
        """The status model now (:class:`supervisor.views.model.Snapshot`)."""
        with self._lock:
            return self.reader.snapshot()

    def _context(self) -> dict[str, Any]:
        return {
            "actions": self.access.allow_actions,
            "csrf": self.access.csrf,
            "profile": str(self.profile.path),
        }

    def board(self) -> str:
        """The board's HTML fragment (the fleet by host with ``[cluster]``, then this
        host's engine line, spool and groups of tasks)."""
        snap = self.snapshot()
        shown = None if self.fleet is None else self.fleet.get()
        return self.env.get_template("board.html").render(snap=snap, fleet=shown, **self._context())

    def index(self, board_html: str) -> str:
        """The whole board page around ``board_html``."""
        return self.env.get_template("index.html").render(
            board_html=Markup(board_html), **self._context()
        )

    def task_dir(self, task_id: str) -> Path | None:
        """The folder of task ``task_id``, or ``None`` for no such task (or not a task id)."""
        if not is_task_id(task_id):
            return None
        folder = self.profile.tasks_dir / task_id
        return folder if folder.is_dir() else None

    def task_body(self, task_id: str) -> str | None:
        """One task's page body (manifest, events, output tail), or ``None``: no such task."""
        folder = self.task_dir(task_id)
        if folder is None:
            return None
        data = task_view(folder)
        return self.env.get_template("task_body.html").render(**data, **self._context())

    def task(self, task_id: str, body_html: str) -> str:
        """The whole page of one task around ``body_html``."""
        return self.env.get_template("task.html").render(
            task_id=task_id, body_html=Markup(body_html), **self._context()
        )

    def spend(self) -> str:
        """The spend page (issue 26): per day and per hour of today, as inline SVG bars
        (:mod:`supervisor.views.spendchart`)."""
        from supervisor.views.spendchart import spend_view

        data = spend_view(self.profile)
        return self.env.get_template("spend.html").render(**data, **self._context())

    def plans_body(self) -> str:
        """The plans page's body (issue 26), what its stream sends on each change: each
        plan's edges with each task's status and why a blocked one waits
        (:func:`supervisor.views.plangraph.graph`, at most
        :data:`~supervisor.views.plangraph.MAX_EDGES` edges)."""
        found = plangraph.graph(self.snapshot().tasks)
        return self.env.get_template("plans_body.html").render(graph=found, **self._context())

    def plans(self, body_html: str) -> str:
        """The whole plans page around ``body_html`` (:meth:`plans_body`)."""
        return self.env.get_template("plans.html").render(
            plans_html=Markup(body_html), **self._context()
        )

    def plans_json(self) -> str:
        """``/api/plans``: :meth:`supervisor.views.plangraph.Graph.to_dict` as JSON."""
        return json.dumps(plangraph.graph(self.snapshot().tasks).to_dict())

    def cost_json(self) -> str:
        """``/api/cost``: ``supervise cost --json`` of this profile, all time."""
        from supervisor import costs

        now = time.time()
        named = [(self.profile.path.stem, self.profile)]
        return json.dumps(costs.profiles_report(named, costs.Window(), now))

    def snapshot_json(self) -> str:
        """The board as JSON (``/api/snapshot``)."""
        return json.dumps(self.snapshot().to_dict())

    def act(self, task_id: str, verb: str) -> tuple[int, dict[str, Any]]:
        """Leave an operator request, after the CLI's checks. Returns ``(HTTP status,
        JSON answer)``: 202 written (``message`` says whether an engine runs to take it),
        404 no such task, 409 refused (task ended, not escalated), 400 an unknown verb."""
        if verb not in control.VERBS:
            return 400, {"error": f"unknown action {verb!r}; one of {', '.join(control.VERBS)}"}
        folder = self.task_dir(task_id)
        manifest = model.read_json(folder / layout.MANIFEST) if folder else None
        if not isinstance(manifest, dict) or not isinstance(manifest.get("status"), str):
            return 404, {"error": f"no task {task_id!r} with a readable manifest"}
        refused = control.refusal(task_id, manifest["status"], verb)
        if refused:
            return 409, {"error": refused}
        path = control.request(self.profile.state_dir, task_id, verb)
        if model.engine_state(self.profile.state_dir).state == "running":
            message = f"{verb} requested for {task_id}; the engine applies it on its next tick"
        else:
            message = (
                f"{verb} queued for {task_id}; no engine runs, so it happens when "
                "'supervise run' starts"
            )
        return 202, {"requested": verb, "task_id": task_id, "file": str(path), "message": message}


def task_view(folder: Path) -> dict[str, Any]:
    """What a task's page shows: ``task_id``, ``manifest`` (the dict, or ``None`` when it
    is missing or unreadable), ``manifest_text`` (the file as it is, for the page),
    ``events`` (the newest :data:`EVENT_LIMIT` of ``events.jsonl``, each as
    ``(ts, event, status, other fields as compact JSON)``), ``events_cut`` (whether older
    ones were left out), ``timeline`` (the SVG of :mod:`.timeline`, from every event read)
    and ``tail`` (the last :data:`TAIL_LINES` lines of :func:`output_text`)."""
    task = TaskDir(folder)
    try:  # non-blocking, regular files only: an agent can put a FIFO in its folder
        raw = read_regular(task.file(layout.MANIFEST), MANIFEST_MAX)
        text = raw.decode("utf-8", errors="replace")
    except OSError as exc:
        text = f"(cannot read manifest.json: {exc.strerror or exc})"
    manifest = model.read_json(task.file(layout.MANIFEST))
    if manifest is not None:
        text = json.dumps(manifest, indent=2, ensure_ascii=False)
    events, cut = _events_tail(task.file(layout.EVENTS))
    rows = []
    for event in events[-EVENT_LIMIT:]:
        rest = {k: v for k, v in event.items() if k not in ("ts", "event", "status")}
        rows.append(
            (
                event.get("ts"),
                event.get("event"),
                event.get("status"),
                json.dumps(rest, ensure_ascii=False) if rest else "",
            )
        )
    return {
        "task_id": task.task_id,
        "manifest": manifest,
        "manifest_text": text,
        "events": rows,
        "events_cut": cut or len(events) > EVENT_LIMIT,
        "timeline": timeline.svg(timeline.timeline(events, time.time())),
        "tail": output_text(folder, TAIL_LINES),
    }


def output_text(folder: Path, lines: int) -> str:
    """The output a task's page shows: the last ``lines`` lines of the task folder's output
    (``output.log``, across its rotation), rendered for the agent's kind by
    :func:`supervisor.agents.readable.readable_tail` (control characters escaped there; the
    template escapes markup). The one place the page reads output."""
    return readable_tail(folder, lines)


def _events_tail(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """The events in the last :data:`EVENT_BYTES` of an event log, oldest first, and whether
    older ones were left out (a torn or cut line is skipped)."""
    data, size = read_end(path, EVENT_BYTES)  # never blocks on a FIFO
    lines = data.split(b"\n")
    if size > EVENT_BYTES:
        lines = lines[1:]  # starts mid-line
    out = []
    for line in lines:
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):  # an agent can append to its own log
            continue
        if isinstance(event, dict):
            out.append(event)
    return out, size > EVENT_BYTES
