"""Text for an operator's terminal: control characters from agents and task files, escaped.

Agent output and task files (names, prompts, file names) are not trusted: an ESC or a C1
control printed raw lets them move the cursor, rewrite what the operator sees, set the
window title or write the clipboard (OSC 52). Everything ``supervise`` prints to a person
(``status``, ``show``, ``tail``, the engine log, the notifier's message) goes through this
module, so such characters show as visible escapes: ``\\x1b`` for C0 controls and DEL,
``\\u009b`` for C1 controls (U+0080-U+009F, ECMA-48 section 5.3), ``\\udc9b`` for a lone
surrogate (a byte that was not UTF-8, decoded with ``surrogateescape``), and ``\\u202e`` or
``\\U000e0001`` for Unicode's format characters (category Cf: bidi overrides and isolates,
zero-width spaces and joiners, the BOM, tag characters), which reorder or hide text without
being seen ("Trojan Source", CVE-2021-42574), and for the line and paragraph separators
U+2028/U+2029, which some terminals and pages break lines at.

Machine-readable output stays exact: JSON encodes these characters itself
(:func:`escape_json_text` covers JSON text read from a file).
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

#: Unicode's format characters (general category Cf, Unicode 14/15 as Python 3.11/3.12 know
#: them; tests/test_terminal.py checks the list against the running Python's unicodedata)
#: and the line/paragraph separators (Zl, Zp). Hard-coded: scanning unicodedata at import
#: would cost every ``supervise`` command 0.2 s.
_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f"
)
#: Every C0 control, DEL, every C1 control, every lone surrogate and every format character.
_CONTROLS = "\x00-\x1f\x7f-\x9f\ud800-\udfff" + _FORMAT


@functools.cache
def _pattern(keep: str) -> re.Pattern[str]:
    kept = "".join(re.escape(ch) for ch in sorted(set(keep)))
    if not kept:
        return re.compile(f"[{_CONTROLS}]")
    # A character class cannot subtract, so a lookahead leaves the kept ones alone.
    return re.compile(f"(?![{kept}])[{_CONTROLS}]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def escape_controls(text: str, keep: str = "") -> str:
    """``text`` with each control character replaced by a visible escape.

    Args:
        text: any string (agent output, a task name, a file name, a log line).
        keep: control characters to leave as they are, e.g. ``"\\n\\t"`` for multi-line
            output; the default escapes newlines too, so one value stays on one line.

    Returns:
        The text with C0 controls and DEL as ``\\xHH``, C1 controls (U+0080-U+009F), lone
        surrogates and format characters as ``\\uHHHH`` (``\\UHHHHHHHH`` above U+FFFF);
        every other character unchanged. Backslashes are not
        doubled: the aim is a safe, readable line, not a reversible encoding.
    """
    return _pattern(keep).sub(_visible, text)


_JSON_UNSAFE = re.compile(f"[{_CONTROLS}]")


def _json_escape(char: str) -> str:
    if char in "\n\t":
        return char
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    # JSON has no escape above U+FFFF: a UTF-16 surrogate pair (RFC 8259, section 7).
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escape_json_text(text: str) -> str:
    """JSON text with each control or format character, wherever it stands, as ``\\uHHHH``.

    Inside a JSON string that is the same value (RFC 8259, section 7), so valid JSON stays
    valid and equal; JSON that holds raw C1 controls (``ensure_ascii=False``, pydantic's
    ``model_dump_json``) or a damaged file prints safely. Newline and tab are kept for
    the layout; a character above U+FFFF becomes its UTF-16 surrogate pair of escapes.
    """
    return _JSON_UNSAFE.sub(lambda m: _json_escape(m.group()), text)


class ControlEscapingFormatter(logging.Formatter):
    """A :class:`logging.Formatter` for the engine log: the message (task names, reasons,
    file names from task files) is escaped whole, newlines included, so it can neither
    drive the terminal nor forge a second log line; a traceback keeps its newlines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return escape_controls(super().formatException(ei), keep="\n")

    def formatStack(self, stack_info: str) -> str:
        return escape_controls(super().formatStack(stack_info), keep="\n")


def counted(count: int, noun: str) -> str:
    """``"1 commit"``, ``"2 commits"``: a count and an English noun that takes ``-s``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
