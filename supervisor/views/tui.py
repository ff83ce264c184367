"""``supervise top``: the status model (:mod:`.model`) as a live Textual app.

One table of every task, grouped by what it needs from a person (Needs you first), with
time in state, retries, cost and the last output line; a header with the engine line, the
spool and the totals; a panel with the selected task's details. The table is Textual's
``DataTable``, which renders only the rows on screen (1,000 tasks stay fluid).

**Refresh.** Every :data:`REFRESH_EVERY` (0.5) seconds a :class:`~.model.Reader` reads the
state dir again (re-parsing only manifests whose mtime changed: ~1,000 ``stat`` calls),
so a manifest change shows within a second; cells are updated in place, and the table is
rebuilt only when tasks come, go or change group. (A poll, not inotify: one ``stat`` per
task per refresh costs less than an inotify watch per task folder, and needs no thread;
``benchmarks/views.py`` measures it.)

Keys (see :data:`.tui_screens.HELP`): ``a`` attach read-only, ``t`` tail, ``y``/``n``
approve/deny, ``s`` stop, ``r`` resume, ``d`` diff, ``p`` the plans (each edge with both
tasks' status, :mod:`.plangraph`), ``?`` help, ``q`` quit. Requests go
through :mod:`.actions` (the CLI verbs' code path).
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.events import Resize
from textual.widgets import DataTable, Footer, Input, Static

from supervisor.taskdir import layout
from supervisor.terminal import escape_controls
from supervisor.views import actions, attach, model, plangraph
from supervisor.views.taskfilter import TaskFilter, sort_tasks
from supervisor.views.tui_columns import Column, cells, columns_for
from supervisor.views.tui_screens import HELP, ConfirmScreen, PlansScreen, TailScreen, TextScreen

#: Seconds between refreshes (see the module docstring).
REFRESH_EVERY = 0.5
#: Id of the filter's input line (``/``).
FILTER_INPUT = "filter"


def details(task: model.Task | None) -> Text:
    """The bottom panel: the selected task's id, outcome, workspace, escalation, last line."""
    if task is None:
        return Text("no task selected")
    safe = escape_controls
    lines = [
        f"{task.task_id}  {task.status}  model {safe(task.model or '-')}  "
        f"retries {task.retries}  age {model.duration(task.age_s)}"
    ]
    if task.escalation:
        e = task.escalation
        lines.append(
            f"waits for: {safe(e.get('tool') or '-')} {safe(e.get('subject') or '')}"
            f"  ({safe(e.get('reason') or '-')})  y approve / n deny"
        )
    if task.resume_in_s is not None:
        lines.append(f"resumes in {model.duration(task.resume_in_s)}")
    if task.verdict or task.reason or task.damaged:
        lines.append(f"outcome: {task.verdict or '-'} {safe(task.reason or task.damaged or '')}")
    if task.branch or task.files_changed is not None:
        lines.append(f"branch {safe(task.branch or '-')}  {task.diffstat() or ''}")
    if task.requests:
        lines.append(f"requested: {', '.join(task.requests)} (not taken by the engine yet)")
    lines.append(f"last: {task.last_line or '-'}")
    return Text("\n".join(lines))


class TopApp(App[None]):
    """The ``supervise top`` app.

    Args:
        state_dir, spool_dir: the profile's folders.
        socket: the profile's tmux socket name (``-L``), for read-only attach.
        title: shown in the header (the profile's path).
        clock: the time source (epoch s); tests pass a fixed one.
        refresh_every: seconds between refreshes (``None``: never; tests call
            :meth:`refresh_view`).
        task_filter: the tasks shown at start (``--status``, ``--filter``); the ``/`` key
            edits its text.
        fleet_host: the profile has ``[cluster]``: a launched task not ended says
            ``(engine not running)`` (or ``stale``) while this host's engine is not running,
            i.e. the fleet's host is stopped or lost (issue 25).
    """

    TITLE = "supervise top"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "attach", "attach"),
        Binding("t", "tail", "tail"),
        Binding("y", "request('approve')", "approve"),
        Binding("n", "request('deny')", "deny"),
        Binding("s", "request('stop')", "stop"),
        Binding("r", "request('resume')", "resume"),
        Binding("d", "diff", "diff"),
        Binding("slash", "filter", "filter"),
        Binding("question_mark", "help", "help"),
        Binding("p", "plans", "plans"),
        Binding("q", "quit", "quit"),
    ]
    CSS = """
    #head { height: 2; padding: 0 1; background: $boost; }
    DataTable { height: 1fr; overflow-x: hidden; }
    #details { height: 5; padding: 0 1; border-top: solid $primary; }
    #filter { display: none; height: 1; border: none; padding: 0 1; }
    #filter.shown { display: block; }
    """

    def __init__(
        self,
        state_dir: Path,
        spool_dir: Path,
        socket: str,
        title: str = "",
        clock: Callable[[], float] = time.time,
        refresh_every: float | None = REFRESH_EVERY,
        task_filter: TaskFilter | None = None,
        fleet_host: bool = False,
    ) -> None:
        super().__init__()
        #: A fleet host's tasks say so when its engine is not running (issue 25).
        self.fleet_host = fleet_host
        self.task_filter = task_filter or TaskFilter()
        self.columns: tuple[Column, ...] = ()
        self.reader = model.Reader(state_dir, spool_dir)
        self.state_dir, self.socket, self.clock = Path(state_dir), socket, clock
        self.profile_title, self.refresh_every = title, refresh_every
        self.snap: model.Snapshot | None = None
        self._order: list[tuple[str, str]] = []  # (task id, group) per row
        self._shown: dict[str, tuple[Text, ...]] = {}

    def compose(self) -> ComposeResult:
        yield Static(id="head")
        yield DataTable[Text](cursor_type="row", zebra_stripes=True)
        yield Input(
            self.task_filter.text,
            placeholder="filter: words of the id, name or status",
            id=FILTER_INPUT,
        )
        yield Static(id="details")
        yield Footer()

    def on_mount(self) -> None:
        self._set_columns(self.size.width)
        if self.task_filter.text:
            self.query_one(f"#{FILTER_INPUT}", Input).add_class("shown")
        self.refresh_view()
        if self.refresh_every:
            self.set_interval(self.refresh_every, self.refresh_view)

    # ------------------------------------------------------------------ refresh
    def refresh_view(self) -> None:
        """Read a new snapshot and show it (cells in place; rows rebuilt when needed)."""
        snap = self.reader.snapshot(self.clock())
        self.snap = snap
        tasks = [t for t in sort_tasks(snap.tasks, "group") if self.task_filter.keeps(t)]
        order = [(t.task_id, t.group) for t in tasks]
        counts, rows, group = Counter(t.group for t in tasks), {}, None
        down = None if not self.fleet_host or snap.engine.state == "running" else snap.engine.state
        for task in tasks:
            first = counts[task.group] if task.group != group else 0
            rows[task.task_id] = cells(task, first, self.columns, down)
            group = task.group
        table = self.query_one(DataTable)
        if order != self._order:
            self._rebuild(table, order, rows)
        else:
            keys = [column.key for column in self.columns]
            for task_id, row in rows.items():
                old = self._shown.get(task_id)
                for i, cell in enumerate(row):
                    if old is None or old[i] != cell:
                        table.update_cell(task_id, keys[i], cell)
        self._shown = rows
        self.query_one("#head", Static).update(self._head(snap, len(tasks)))
        self._show_details()

    def _rebuild(
        self,
        table: DataTable[Text],
        order: list[tuple[str, str]],
        rows: dict[str, tuple[Text, ...]],
    ) -> None:
        selected = self.selected_id()
        table.clear()
        for task_id, _ in order:
            table.add_row(*rows[task_id], key=task_id)
        self._order = order
        ids = [task_id for task_id, _ in order]
        if selected in ids:
            table.move_cursor(row=ids.index(selected), animate=False)

    def _set_columns(self, width: int) -> bool:
        """Show the columns of a terminal ``width`` wide; whether they changed (then the
        rows are rebuilt by the next :meth:`refresh_view`)."""
        wanted = columns_for(width)
        if wanted == self.columns:
            return False
        table = self.query_one(DataTable)
        table.clear(columns=True)
        for column in wanted:
            table.add_column(column.title, key=column.key, width=column.width)
        self.columns, self._order, self._shown = wanted, [], {}
        return True

    def on_resize(self, event: Resize) -> None:
        """A wider or narrower terminal shows more or fewer columns."""
        if self.is_mounted and self._set_columns(event.size.width):
            self.refresh_view()

    def _head(self, snap: model.Snapshot, shown: int) -> Text:
        """Two lines: the engine; tasks (and how many the filter shows), cost, spool files
        waiting, the profile."""
        head = Text(snap.engine.line(), style="bold" if snap.engine.state == "running" else "red")
        tokens = snap.totals.get("tokens")
        line = f"\n{snap.totals['tasks']} tasks  cost ${snap.totals['cost_usd']:.2f}"
        line += f"  {tokens:,} tokens" if tokens else ""
        line += f"  spool: {len(snap.spool)} waiting" if snap.spool else ""
        described = self.task_filter.describe()
        line += f"  filter {escape_controls(described)}: {shown} shown" if described else ""
        head.append(f"{line}  {escape_controls(self.profile_title)}", style="")
        return head

    def on_data_table_row_highlighted(self, _: Any) -> None:
        self._show_details()

    def _show_details(self) -> None:
        self.query_one("#details", Static).update(details(self.selected()))

    def selected_id(self) -> str | None:
        """The task id of the highlighted row, or ``None`` (empty table)."""
        table = self.query_one(DataTable)
        if not self._order or not 0 <= table.cursor_row < len(self._order):
            return None
        return self._order[table.cursor_row][0]

    def selected(self) -> model.Task | None:
        """The highlighted task as last read, or ``None``."""
        task_id = self.selected_id()
        return self.snap.task(task_id) if self.snap and task_id else None

    # ------------------------------------------------------------------ actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The task keys act only on the table's screen (not under help, tail or diff)."""
        if action in ("request", "attach", "tail", "diff", "plans", "help", "filter"):
            return len(self.screen_stack) == 1
        return True

    def action_request(self, verb: str) -> None:
        """Ask first (for approve/deny: the escalation's tool and subject), then write the
        request as ``supervise VERB`` does."""
        task = self.selected()
        if task is None:
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            running = self.snap is not None and self.snap.engine.state == "running"
            outcome = actions.ask(self.state_dir, task.task_id, verb, running)
            self.notify(outcome.message, severity="information" if outcome.ok else "error")
            self.refresh_view()

        self.push_screen(ConfirmScreen(actions.confirm_text(task, verb)), answered)

    def action_attach(self) -> None:
        """``tmux attach -r`` to the task's session with the app suspended; back on detach."""
        task = self.selected()
        if task is not None:
            self._attach(task.session_name or task.task_id)

    @work(thread=True, exclusive=True, group="attach")
    def _attach(self, session: str) -> None:
        """The bounded check (:func:`attach.attach_problem`) runs in a worker thread, so a
        tmux server that does not answer leaves the table live; the attach itself runs on
        the app's thread, with the app suspended."""
        server = attach.BoundedServer(self.socket)
        problem = attach.attach_problem(server, session)
        if problem is not None:
            self.call_from_thread(self.notify, escape_controls(problem), severity="error")
            return
        self.call_from_thread(self._attach_now, session, attach.attach_argv(server, session))

    def _attach_now(self, session: str, argv: list[str]) -> None:
        with self.suspend():
            done = subprocess.run(argv, check=False)
        if done.returncode != 0:
            self.notify(
                f"no tmux session {session} on -L {self.socket} (tmux exit {done.returncode})",
                severity="error",
            )

    def action_tail(self) -> None:
        task = self.selected()
        if task is not None:
            path = self.state_dir / layout.TASKS / task.task_id / layout.OUTPUT
            self.push_screen(TailScreen(f"tail -f {task.task_id}/output.log", path))

    def action_diff(self) -> None:
        task = self.selected()
        if task is not None:
            self._diff(task.task_id)

    @work(thread=True, exclusive=True, group="diff")
    def _diff(self, task_id: str) -> None:
        """git runs in a worker thread (bounded by its own timeout): the table stays live."""
        text = actions.diff_text(self.state_dir / layout.TASKS, task_id)
        self.call_from_thread(self.push_screen, TextScreen(f"supervise diff {task_id}", text))

    def action_plans(self) -> None:
        """``p``: the plan graph of the latest snapshot, kept current while it is open."""
        self.push_screen(PlansScreen(self.plans_text))

    def plans_text(self) -> str:
        """:func:`supervisor.views.plangraph.text` of the latest snapshot (every task,
        whatever the filter shows)."""
        return plangraph.text(plangraph.graph(self.snap.tasks if self.snap else []))

    def action_help(self) -> None:
        self.push_screen(TextScreen("help", HELP))

    # ------------------------------------------------------------------ filter
    def action_filter(self) -> None:
        """``/``: show the filter line and type into it (the table follows each key)."""
        line = self.query_one(f"#{FILTER_INPUT}", Input)
        line.add_class("shown")
        line.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.task_filter = TaskFilter(self.task_filter.statuses, event.value)
        self.refresh_view()

    def on_input_submitted(self, _: Input.Submitted) -> None:
        """Enter keeps the filter and goes back to the table."""
        self._close_filter()

    def on_key(self, event: Any) -> None:
        """Escape in the filter line clears the filter and goes back to the table."""
        line = self.query_one(f"#{FILTER_INPUT}", Input)
        if event.key == "escape" and line.has_focus:
            event.stop()
            line.value = ""  # posts Input.Changed: the table shows every task again
            self._close_filter()

    def _close_filter(self) -> None:
        line = self.query_one(f"#{FILTER_INPUT}", Input)
        if not line.value:
            line.remove_class("shown")
        self.query_one(DataTable).focus()
