"""tmux control mode's wire format, pure (tmux(1), CONTROL MODE; tmux 1.8 and later).

A control client (``tmux -C``) reads one command line per line on its stdin. tmux answers
every command it runs with a block: ``%begin TIME NUMBER FLAGS``, the output lines, then
``%end TIME NUMBER FLAGS`` (success) or ``%error TIME NUMBER FLAGS`` (failure, the output
is the error message), the three fields repeated from ``%begin``. A line that chains
commands with ``;`` gets one block per command that ran (measured on tmux 3.3a; a parse
error gives one ``%error`` block; a failed command stops the chain). Other lines starting
with ``%`` are notifications (``%sessions-changed``, ``%window-close @1``, ``%exit``).

Output lines are not escaped: a pane that printed ``%end 1 2 1`` and is read back with
``capture-pane`` yields that very line inside a block. :class:`Parser` therefore ends a
block only at the ``%end``/``%error`` carrying its ``%begin``'s three fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: The tmux command separator when it stands as an argument of its own (tmux(1), COMMANDS).
SEPARATOR = ";"


@dataclass(frozen=True)
class Block:
    """One command's reply: ``ok`` (``%end``) or not (``%error``), and its output lines
    (decoded as UTF-8, other bytes as backslash escapes)."""

    ok: bool
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Notification:
    """A line tmux pushed outside any block: ``name`` without the ``%`` (e.g.
    ``"sessions-changed"``) and its space-separated ``args``."""

    name: str
    args: tuple[str, ...]


def _header(line: str) -> tuple[str, str] | None:
    """``("begin"|"end"|"error", "TIME NUMBER FLAGS")`` for a block guard line, else None."""
    word, _, rest = line.partition(" ")
    if word not in ("%begin", "%end", "%error"):
        return None
    fields = rest.split(" ")
    if len(fields) != 3 or not all(field.isdigit() for field in fields):
        return None
    return word[1:], rest


class Parser:
    """Turns control-mode output lines into :class:`Block` and :class:`Notification` values.

    Feed it one line at a time (bytes, without the newline). Any bytes are accepted: a line
    that is neither a guard nor a notification outside a block is dropped.
    """

    def __init__(self) -> None:
        self._open: str | None = None  # the "TIME NUMBER FLAGS" of the open block
        self._lines: list[str] = []

    def feed(self, raw: bytes) -> Block | Notification | None:
        """The block this line ends, the notification it is, or ``None``."""
        line = raw.decode("utf-8", "backslashreplace")
        guard = _header(line)
        if self._open is not None:
            if guard is not None and guard[0] != "begin" and guard[1] == self._open:
                block = Block(guard[0] == "end", tuple(self._lines))
                self._open, self._lines = None, []
                return block
            self._lines.append(line)
            return None
        if guard is not None:
            if guard[0] == "begin":
                self._open = guard[1]
            return None
        if line.startswith("%") and len(line) > 1:
            name, *args = line[1:].split(" ")
            return Notification(name, tuple(args))
        return None


def quote(arg: str) -> str:
    """``arg`` as one word of a tmux command line: single quotes, inside which tmux takes
    every character literally; a ``'`` is written ``'\\''`` (close, escaped quote, open)."""
    return "'" + arg.replace("'", "'\\''") + "'"


def command_line(args: Sequence[str]) -> str | None:
    """The argv ``args`` (as a tmux client process takes them) as one control-mode line, or
    ``None`` when it cannot be one: an argument holds a newline, a carriage return or NUL
    (the line would end there), is not valid UTF-8, or ends in ``;`` without being ``;``
    (tmux's argv parser would split it there). An argument ``;`` separates commands."""
    words: list[str] = []
    for arg in args:
        if arg == SEPARATOR:
            words.append(SEPARATOR)
            continue
        if arg.endswith(SEPARATOR) or any(c in arg for c in "\n\r\0"):
            return None
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return None
        words.append(quote(arg))
    return " ".join(words) if words else None
