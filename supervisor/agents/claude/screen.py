"""Reading Claude Code's interactive screen (a ``tmux capture-pane`` of its TUI).

Pure functions, standard library only. Every rule below was written against a captured screen
of Claude Code 2.1.328 in ``tests/fixtures/claude/screens/`` (the file is named next to the
rule; ``README.md`` there tells how each was produced). Re-check them when the pinned CLI
version changes.

* :func:`normalize` / :func:`screen_hash`: a screen with the volatile parts (spinner glyph,
  elapsed timers, token counters, retry countdowns, the blinking tool bullet) taken out, so
  that a session that is stuck hashes the same from one capture to the next, and a session
  that makes progress does not.
* :func:`find_permission_prompt`: the permission dialog ("Do you want to proceed?" and its
  numbered choices) when it is what the screen ends with, as a :class:`PermissionPrompt` that
  knows which keys answer it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = [
    "SPINNER_GLYPHS",
    "PermissionPrompt",
    "find_permission_prompt",
    "normalize",
    "screen_hash",
    "strip_ansi",
]

# ---------------------------------------------------------------------------------- escapes

_ANSI_RE = re.compile(
    r"""
    \x1b\[[0-?]*[\x20-/]*[@-~]               # CSI: colours (SGR), cursor moves, ...
    | \x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)    # OSC (hyperlinks, titles), BEL/ST ended
    | \x1b[PX^_][^\x1b]*(?:\x1b\\|$)         # DCS / SOS / PM / APC strings
    | \x1b[\x20-/]*[0-~]                     # other two-byte escapes (ESC 7, ESC =, ...)
    | \x1b                                   # a lone ESC left over
    """,
    re.VERBOSE,
)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences and stray control characters (keeps ``\\n`` and tabs).

    ``capture-pane -e`` output (fixtures ``*.ansi``) carries SGR colour codes such as
    ``\\x1b[38;5;246m``; stripped, it reads like the plain capture (``*.txt``) of the same
    moment. ``\\r`` is dropped too.
    """
    return _CONTROL_RE.sub("", _ANSI_RE.sub("", text)).replace("\r", "")


# ---------------------------------------------------------------------------------- normalize

SPINNER_GLYPHS = "·✢✳✶✻✽*"
"""The spinner frames of Claude Code 2.1.328: ``["·","✢","*","✶","✻","✽"]`` (``✳`` instead
of ``*`` under ``TERM=xterm-ghostty``), found in the binary (``var p=["\\xB7","\\u2722","*",
"\\u2736","\\u273B","\\u273D"]``) and seen in ``working_spinner_*.txt``. ``✻`` also leads the
"Waiting for API response" and "API error · retrying" lines and the idle "✻ Baked for 30s"
line."""

_GLYPH_CLASS = "[" + re.escape(SPINNER_GLYPHS) + "]"
_SPINNER_LINE_RE = re.compile(rf"^{_GLYPH_CLASS} (?=\S)")
"""A status line: one spinner glyph in column 0, a space, text (``✽ Wibbling… (18s)``)."""

_DURATION = r"\d+(?:\.\d+)?(?:ms|[hms])(?: \d+(?:\.\d+)?[ms])*(?!\w)"
"""``40s``, ``1m 20s``, ``1h 2m 3s``, ``250ms``: how the CLI prints elapsed times."""

_TRAILING_PAREN_RE = re.compile(r"\s*\([^()]*\)\s*$")
"""The statistics group at the end of a spinner line: ``(18s)``, ``(3s · ↓ 60 tokens)``,
``(12s · thinking)``: timer, token counter, thinking state (``working_spinner_*.txt``,
``working_streaming_*.txt``). All of it changes while the agent is silent."""

_COUNTDOWN_RE = re.compile(rf"\b((?:will )?retry(?:ing)? in|resets in) {_DURATION}", re.IGNORECASE)
"""``will retry in 4m 10s`` (``working_stalled_retry_*.txt``), ``retrying in 9s``
(``api_retry_countdown_*.txt``, ``api_retry_429_message_*.txt``)."""

_TRAILING_TIMER_RE = re.compile(rf"(?: · {_DURATION}| \({_DURATION}\))$")
"""A timer at the end of a line: ``Writing a file · 13s`` and ``$ cmd (13s)`` while a tool
runs (``working_tool_running_*.txt``)."""

_SPINNER_DURATION_RE = re.compile(rf"\b(for|in) {_DURATION}")
"""``✻ Baked for 30s`` style durations on a status line (``idle_after_turn.txt``)."""

_TOKENS_RE = re.compile(r"[↓↑] ?[\d.,]+[kKmM]? tokens\b")
"""``↓ 1.2k tokens``: a token counter wherever it shows."""

_BULLET_RE = re.compile(r"^[●⏺](?= )")
"""The ``●`` (``⏺`` on macOS) that leads a message blinks while its tool runs
(``working_tool_running_a.txt`` has none, ``_b`` has it), so it is dropped everywhere."""

_THINKING_RE = re.compile(r"\b(still thinking|thinking more|thinking some more|deep in thought)\b")
"""The thinking label grows with time (``thinking`` → ``still thinking`` after 10 s, ...)."""


def _normalize_line(line: str) -> str:
    line = line.replace("\xa0", " ").rstrip()
    line = _BULLET_RE.sub(" ", line)
    if _SPINNER_LINE_RE.match(line):
        line = "✻" + line[1:]
        line = _TRAILING_PAREN_RE.sub("", line)
        line = _SPINNER_DURATION_RE.sub(r"\1 <t>", line)
    line = _COUNTDOWN_RE.sub(r"\1 <t>", line)
    line = _TOKENS_RE.sub("<n> tokens", line)
    line = _THINKING_RE.sub("thinking", line)
    line = _TRAILING_TIMER_RE.sub(_timer_placeholder, line)
    return line.rstrip()


def _timer_placeholder(match: re.Match[str]) -> str:
    return " (<t>)" if match.group(0).startswith(" (") else " · <t>"


def normalize(text: str) -> str:
    """Return ``text`` (a pane capture, with or without escapes) minus its volatile parts.

    Shape: lines joined by ``\\n``; no escapes, no trailing spaces, no blank lines at the end.
    Applied per line, in order:

    1. escapes and control characters removed (:func:`strip_ansi`), ``\\xa0`` → space;
    2. a leading message bullet ``●``/``⏺`` → space (it blinks while a tool runs);
    3. on a status line (a :data:`SPINNER_GLYPHS` glyph in column 0): the glyph → ``✻``, the
       trailing ``(...)`` statistics group dropped, ``for 30s``/``in 4s`` → ``for <t>``;
    4. anywhere: ``retry in``/``retrying in``/``will retry in``/``resets in`` + duration →
       ``... <t>``; ``↓ 123 tokens`` → ``<n> tokens``; ``still thinking`` etc. → ``thinking``;
       a timer ending the line (`` · 13s``, `` (13s)``) → ``<t>``.

    The spinner verb (``Wibbling…``), notices, the ``attempt 1/2`` counter and all real text
    stay, so a new line of output, a new status or a dialog changes the result. Idempotent;
    never raises.
    """
    lines = [_normalize_line(line) for line in strip_ansi(text).split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def screen_hash(text: str) -> str:
    """SHA-256 hex digest of :func:`normalize` ``(text)`` (64 lowercase hex characters)."""
    return hashlib.sha256(normalize(text).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------- prompts

TITLE_TOOLS: dict[str, str] = {
    "Bash command": "Bash",
    "Run command": "Bash",
    "PowerShell command": "PowerShell",
    "Run PowerShell command": "PowerShell",
    "Create file": "Write",
    "Overwrite file": "Write",
    "Write file": "Write",
    "Edit file": "Edit",
    "Edit notebook": "NotebookEdit",
    "Fetch": "WebFetch",
}
"""Dialog title → tool name. Seen: ``Bash command`` (``permission_bash.txt``), ``Create file``
(``permission_write_create.txt``), ``Overwrite file`` (``permission_write_overwrite.txt``),
``Edit file`` (``permission_edit.txt``). The others are the titles the 2.1.328 binary gives
the same dialogs (``"Run command"`` when the dialog is cut to fit the screen, ``"Bash command
(unsandboxed)"``, ``"Write file"``, ``"Edit notebook"``, ``"Fetch"``); ``"Tool use"`` (MCP and
other tools) maps to no tool."""

_QUESTION_TOOLS = {
    "create": "Write",
    "overwrite": "Write",
    "write to": "Write",
    "make this edit to": "Edit",
}
"""``Do you want to <verb> <file>?`` → tool, for a dialog whose title scrolled away."""

_FOOTER_RE = re.compile(r"^ ?Esc to cancel\b")
"""The dialog's last line ``Esc to cancel · Tab to amend``, indented by one space. Agent text
is indented by two (``agent_text_fake_prompt.txt``), and while the agent works or idles the
screen ends with the input box and its status bar instead."""

_QUESTION_RE = re.compile(r"^ ?(Do you want to (?:proceed|(?P<verb>.+?) (?P<file>\S.*))\?)$")
_CHOICE_RE = re.compile(r"^ ?(?:❯ )?\s*(?P<num>\d{1,2})\. (?P<label>\S.*)$")
_MORE_RE = re.compile(r"^ ?[↑↓] \d+ more lines?\b")
"""``↑ 11 more lines``: the dialog was cut to fit a small pane
(``permission_bash_cropped_80x16.txt``)."""
_GUTTER_RE = re.compile(r"^ (?:│ )?")
"""The one-space margin of a dialog line, and the ``│ `` gutter of a multi-line command
(``permission_bash_long.txt``); what follows, indentation included, is the command."""
_RULE_RE = re.compile(r"^─{8,}$")
"""The full-width ``────`` rule that opens the dialog box."""
_DASHED_RE = re.compile(r"^╌{8,}$")
"""The ``╌╌╌╌`` rules around the command or the file preview."""


@dataclass(frozen=True)
class PermissionPrompt:
    """A permission dialog at the bottom of the screen (see :func:`find_permission_prompt`).

    Attributes:
        tool: the tool as Claude Code names it (``"Bash"``, ``"Write"``, ``"Edit"``, ...), or
            None when the title is off screen or unknown (``"Tool use"``).
        title: the dialog title as shown (``"Bash command"``, ``"Create file"``, ...), or None
            when it scrolled away (``cropped``).
        detail: what is to be allowed: the command for a shell tool (lines joined by
            ``\\n``, without the ``│`` gutter of multi-line commands), the file path for
            file tools (their subtitle), else the subtitle or the boxed text.
        question: ``"Do you want to proceed?"``, ``"Do you want to create hello.txt?"``, ...
        choices: ``((1, "Yes"), (2, "Yes, and ..."), ..., (4, "No"))``: number and label, a
            label wrapped over several lines joined with one space.
        subtitle: the line(s) under the title, without the ``Tip:`` line: the Bash tool's
            description, a file tool's path.
        cropped: True when the dialog's top (rule and title) is not on screen.
    """

    tool: str | None
    title: str | None
    detail: str
    question: str
    choices: tuple[tuple[int, str], ...]
    subtitle: str = ""
    cropped: bool = False

    def choice_number(self, *labels: str) -> int | None:
        """The number of the first choice whose label equals one of ``labels``, else None."""
        for number, label in self.choices:
            if label in labels:
                return number
        return None

    def approve_keys(self) -> list[str]:
        """``tmux send-keys`` arguments that allow this call once: the "Yes" choice's digit.

        Measured (``README.md``): a digit selects at once, no Enter needed. ``Enter`` also
        approves as long as the cursor ``❯`` is still on choice 1 (the default).
        """
        number = self.choice_number("Yes")
        return [str(number)] if number is not None else ["Enter"]

    def deny_keys(self) -> list[str]:
        """``tmux send-keys`` arguments that refuse the call: the "No" choice's digit.

        "No" is 4 in a Bash dialog, 3 in a file dialog (and in a Bash dialog without the
        "don't ask again" choice, ``permission_bash_three_choices.txt``), so the number is
        read from the choices. ``Escape`` is the fallback: measured to refuse the same way
        (Bash: "Interrupted · What should Claude do instead?", Write: "Rejected write to").
        """
        number = self.choice_number("No")
        return [str(number)] if number is not None else ["Escape"]


def _plain_lines(text: str) -> list[str]:
    return [line.replace("\xa0", " ").rstrip() for line in strip_ansi(text).split("\n")]


def _parse_choices(lines: list[str]) -> tuple[tuple[int, str], ...] | None:
    """Choices from the lines between the question and the footer, or None if malformed."""
    labels: list[str] = []
    for line in lines:
        if _MORE_RE.match(line):
            continue
        match = _CHOICE_RE.match(line)
        if match and int(match["num"]) == len(labels) + 1:
            labels.append(match["label"].strip())
        elif labels and line.startswith("    "):  # a wrapped label goes on, indented
            labels[-1] = f"{labels[-1]} {line.strip()}"
        else:
            return None
    if len(labels) < 2:
        return None
    return tuple(enumerate(labels, start=1))


def find_permission_prompt(text: str, last_lines: int = 15) -> PermissionPrompt | None:
    """Find the permission dialog that the screen ``text`` ends with, or None.

    Only the last ``last_lines`` non-empty lines are searched for the dialog's end: they must
    hold the question (``Do you want to ...?``), then only numbered choices (a wrapped label
    and a ``↑ N more lines`` marker are allowed), and the last of them must be the footer
    ``Esc to cancel ...``. So a dialog that was answered and scrolled up, or agent text that
    quotes one (``agent_text_fake_prompt.txt``), does not match. The title, subtitle and
    command are then read upward from the question up to the box's ``────`` rule
    (``permission_bash.txt``, ``permission_bash_long.txt`` whose command is 12 lines long);
    a dialog cut to fit a small pane has no title on screen (``cropped``).
    """
    lines = [line for line in _plain_lines(text) if line.strip()]
    window = lines[-last_lines:] if last_lines > 0 else []
    if not window or not _FOOTER_RE.match(window[-1]):
        return None
    q_index = None
    for i in range(len(window) - 2, -1, -1):
        if _QUESTION_RE.match(window[i]):
            q_index = i
            break
    if q_index is None:
        return None
    choices = _parse_choices(window[q_index + 1 : -1])
    if choices is None:
        return None
    question_match = _QUESTION_RE.match(window[q_index])
    assert question_match is not None
    question = question_match.group(1)

    # Read the box upward from the question (may go above the window).
    q_abs = len(lines) - len(window) + q_index
    top = None
    for i in range(q_abs - 1, -1, -1):
        if _RULE_RE.match(lines[i].strip()):
            top = i
            break
    box = lines[(top + 1 if top is not None else 0) : q_abs]
    cropped = top is None
    dashed = [i for i, line in enumerate(box) if _DASHED_RE.match(line.strip())]

    title: str | None = None
    head = box[: dashed[0]] if dashed else box
    if not cropped and head:
        title = head[0].strip()
        head = head[1:]
    elif cropped:
        head = []
    subtitle = "\n".join(s.strip() for s in head if not s.strip().startswith("Tip:"))
    if len(dashed) >= 2:
        boxed = box[dashed[0] + 1 : dashed[1]]
    elif len(dashed) == 1 and cropped:
        boxed = box[: dashed[0]]
    else:
        boxed = []
    boxed_text = "\n".join(_GUTTER_RE.sub("", b).rstrip() for b in boxed)

    tool = None
    if title is not None:
        tool = TITLE_TOOLS.get(re.sub(r" \(.*\)$", "", title))
    verb = question_match.group("verb")
    if tool is None and verb in _QUESTION_TOOLS:
        tool = _QUESTION_TOOLS[verb]
    if tool in ("Bash", "PowerShell"):
        detail = boxed_text
    elif tool in ("Write", "Edit", "NotebookEdit"):
        detail = subtitle or question_match.group("file") or ""
    else:
        detail = subtitle or boxed_text
    return PermissionPrompt(
        tool=tool,
        title=title,
        detail=detail,
        question=question,
        choices=choices,
        subtitle=subtitle,
        cropped=cropped,
    )
