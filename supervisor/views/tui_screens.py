"""The screens ``supervise top`` opens over its table: confirm, tail, diff, plans, help.

Every text shown comes from :mod:`.actions`, :mod:`.model` or :mod:`supervisor.agents.
readable` (the tail, rendered) already terminal-safe, and is put on screen as
:class:`rich.text.Text` (never parsed as Textual markup: a task name ``[red]x`` stays as
it is).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Footer, Log, Static

#: Seconds between reads of ``output.log`` while tailing (a cheap ``fstat`` + read), and
#: the lines shown when the tail opens.
TAIL_EVERY = 0.5
TAIL_LINES = 500

HELP = """\
supervise top: every task of the profile, grouped by what it needs from you.

  ↑/↓ PgUp/PgDn   move            Enter   details of the task (bottom panel)
  a   attach read-only (tmux attach -r; leave with the tmux prefix, then d)
  t   tail: follow the task's output.log
  y   approve what an escalated task waits for (asks first)
  n   deny it (asks first)
  s   stop: end the task as abandoned, reason "stopped" (asks first)
  r   resume now (asks first)
  d   diff: the task branch against its base (supervise diff)
  p   plans: each plan's edges (predecessor → successor) with both tasks'
      status, and what each blocked task waits for
  /   filter: type words of the task id, name or status (Enter keeps it,
      Escape clears it); 'supervise top --status S --filter TEXT' starts with one
  ?   this help          q   quit

Columns: the group, task id, status, time in state, outcome (verdict and
  reason) and last output line; from 120 columns model, cost and retries; from
  160 the time since the last output and the branch; from 200 the name.
Groups: Needs you (escalated); Waiting (usage limit or transient failure,
  resumes at resume_at: "→" is the time left); Running (running, verifying);
  Recovering (crashed, hung, a stop requested); Failed (failed, abandoned,
  damaged); Queued; Done. A "*" after a status: a request not taken yet.
Requests go to the engine as the CLI verbs do (state_dir/control); with no
engine running they wait for the next 'supervise run'.
"""


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; dismisses with ``True`` for yes (``y``, Enter on Yes)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 70; max-width: 95%; height: auto; border: thick $warning;
                               background: $surface; padding: 1 2; }
    ConfirmScreen Horizontal { height: auto; margin-top: 1; }
    ConfirmScreen Button { margin-right: 2; }
    """

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.question), id="question")
            with Horizontal():
                yield Button("Yes (y)", variant="warning", id="yes")
                yield Button("No (n)", variant="primary", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class TextScreen(Screen[None]):
    """A full screen of read-only text (help, a diff); ``q``/Escape closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("q,escape", "app.pop_screen", "close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text, self.text = title, text

    def compose(self) -> ComposeResult:
        yield Static(Text(self.title_text, style="bold"), id="title")
        with VerticalScroll():
            yield Static(Text(self.text), id="body")
        yield Footer()


#: Seconds between two looks at the plan graph while the plan screen is open.
PLANS_EVERY = 1.0


class PlansScreen(Screen[None]):
    """The plan graph (``p``): ``source()`` gives its text (terminal-safe,
    :func:`supervisor.views.plangraph.text` of the app's latest snapshot), looked at again
    every :data:`PLANS_EVERY` seconds and shown again when it changed; ``q``/Escape closes
    it. A :class:`~textual.widgets.Log` (plain text, never markup) renders only the lines on
    screen: a plan of 1,000 tasks (2,000 edges) scrolls as freely as a short one."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("q,escape", "app.pop_screen", "close")]

    def __init__(self, source: Callable[[], str]) -> None:
        super().__init__()
        self.source = source
        self.shown = source()

    def compose(self) -> ComposeResult:
        yield Static(Text("plans: predecessor → successor [status]", style="bold"), id="title")
        yield Log(auto_scroll=False, id="body")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#body", Log).write(self.shown)
        self.set_interval(PLANS_EVERY, self.follow)

    def body(self) -> str:
        """The text on screen now (what tests read)."""
        return "\n".join(self.query_one("#body", Log).lines)

    def follow(self) -> None:
        """Show the graph again when it changed (the scroll position kept)."""
        now = self.source()
        if now != self.shown:
            self.shown = now
            log = self.query_one("#body", Log)
            y = log.scroll_y
            log.clear()
            log.write(now)
            log.scroll_to(y=y, animate=False)


class TailScreen(Screen[None]):
    """Follows a task's output (like ``supervise tail -f``), rendered for its agent kind
    (:mod:`supervisor.agents.readable`): the last :data:`TAIL_LINES` lines, then whatever
    is appended, read every :data:`TAIL_EVERY` seconds. ``path``: the task's
    ``output.log``."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("q,escape", "app.pop_screen", "close")]

    def __init__(self, title: str, path: Path) -> None:
        from supervisor.agents import readable

        super().__init__()
        self.title_text = title
        kind = readable.agent_kind(path.parent)
        self.follower = readable.Follower(path.parent, kind)
        start, renderer = self.follower.offset, self.follower.renderer
        lines = readable.tail_lines(path.parent, TAIL_LINES, kind, start, renderer)
        self.first = "".join(f"{line}\n" for line in lines)

    def compose(self) -> ComposeResult:
        yield Static(Text(self.title_text, style="bold"), id="title")
        yield Log(max_lines=5000, auto_scroll=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(Log).write(self.first)
        self.set_interval(TAIL_EVERY, self.follow)

    def on_unmount(self) -> None:
        self.follower.close()

    def follow(self) -> None:
        text = self.follower.read()
        if text:
            self.query_one(Log).write(text)
