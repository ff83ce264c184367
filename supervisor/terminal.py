"""Text for an operator's terminal: control characters from agents and task files, escaped.

Agent output and task files (names, prompts, file names) are not trusted: an ESC or a C1
control printed raw lets them move the cursor, rewrite what the operator sees, set the
window title or write the clipboard (OSC 52). Everything ``supervise`` prints to a person
(``status``, ``show``, ``tail``, the engine log, the notifier's message) goes through this
module, so such characters show as visible escapes: ``\\x1b`` for C0 controls and DEL,
``\\u009b`` for C1 controls (U+0080-U+009F, ECMA-48 section 5.3), ``\\udc9b`` for a lone
surrogate (a byte that was not UTF-8, decoded with ``surrogateescape``).

Machine-readable output stays exact: JSON encodes these characters itself
(:func:`escape_json_text` covers JSON text read from a file).
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any

#: Every C0 control, DEL, every C1 control and every lone surrogate.
_CONTROLS = "\x00-\x1f\x7f-\x9f\ud800-\udfff"


@functools.cache
def _pattern(keep: str) -> re.Pattern[str]:
    kept = "".join(re.escape(ch) for ch in sorted(set(keep)))
    if not kept:
        return re.compile(f"[{_CONTROLS}]")
    # A character class cannot subtract, so a lookahead leaves the kept ones alone.
    return re.compile(f"(?![{kept}])[{_CONTROLS}]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def escape_controls(text: str, keep: str = "") -> str:
    """``text`` with each control character replaced by a visible escape.

    Args:
        text: any string (agent output, a task name, a file name, a log line).
        keep: control characters to leave as they are, e.g. ``"\\n\\t"`` for multi-line
            output; the default escapes newlines too, so one value stays on one line.

    Returns:
        The text with C0 controls and DEL as ``\\xHH``, C1 controls (U+0080-U+009F) and lone
        surrogates as ``\\uHHHH``; every other character unchanged. Backslashes are not
        doubled: the aim is a safe, readable line, not a reversible encoding.
    """
    return _pattern(keep).sub(_visible, text)


_JSON_UNSAFE = re.compile(f"[{_CONTROLS}]")


def escape_json_text(text: str) -> str:
    """JSON text with each control character, wherever it stands, as a ``\\uHHHH`` escape.

    Inside a JSON string that is the same value (RFC 8259, section 7), so valid JSON stays
    valid and equal; JSON that holds raw C1 controls (``ensure_ascii=False``, pydantic's
    ``model_dump_json``) or a damaged file prints safely. Newline and tab are kept for
    the layout.
    """
    return _JSON_UNSAFE.sub(
        lambda m: m.group() if m.group() in "\n\t" else f"\\u{ord(m.group()):04x}", text
    )


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
