"""Claude Code's headless stream-json as text a person can read (issue 22, item 1).

Pure: :class:`ClaudeRenderer` is fed one line of ``output.log`` (or ``stream.jsonl``) at a
time and returns the lines to show, each escaped (:mod:`supervisor.terminal`) and at most
:data:`MAX_LINE` characters. No I/O, no clock. What each line of the stream becomes
(shapes measured with CLI 2.1.328: tests/fixtures/claude/headless/, tests/fixtures/claude/
tools/; the fields :mod:`supervisor.agents.claude.stream` reads):

* ``assistant``: its text as text (at most :data:`MAX_TEXT_LINES` lines a message); each
  ``tool_use`` as one line ``Name(argument)`` (:func:`tool_call`); an API error the CLI
  reports as a synthetic message (``"error"`` set) as ``error: TEXT``;
* ``user``: each ``tool_result`` as ``  ⎿ FIRST LINE … (N lines)``, ``  ⎿ error: …`` when
  ``is_error``; other user text as ``> TEXT``;
* ``result``: its text (unless the last assistant text said the same) and a summary
  ``result: success · 3 turns · $0.0123 · 12.3 s`` (``error`` and ``API 529`` when it
  failed);
* ``system``: ``init`` as ``init: MODEL · session ID``, ``api_retry`` as ``api retry 2/10
  in 4.0 s (529 overloaded)``, ``permission_denied`` as ``denied: TOOL: MESSAGE``, a failed
  hook as one line; hook starts, successful hooks, ``status`` and the background-task
  notes dropped; any other subtype as ``system: SUBTYPE``;
* ``tool_progress`` (the 30 s heartbeat while a tool runs) as ``  … Bash running (60 s)``;
  a rejected ``rate_limit_event`` as one line;
* the supervisor's own lines: ``supervise_launch`` as ``--- launch at HH:MM:SS UTC ---``;
  ``supervise_fold`` and ``supervise_carry`` dropped, as are ``stream_event`` lines
  (``--include-partial-messages``: deltas and pings);
* a line that is not a JSON object (the CLI's stderr, the wrapper's end line, the screen
  text of an interactive run) as it is; a JSON object of an unknown ``type`` as
  ``[TYPE]``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from supervisor.agents.claude.stream import finite_number
from supervisor.streamcopy import FOLD, LAUNCH_MARK, STREAM_EVENT
from supervisor.terminal import escape_controls

#: Most characters of one rendered line (longer ones end in ``…``).
MAX_LINE = 2000
#: Most characters of a tool call's argument and of a tool result's first line.
MAX_ARG = 120
#: Most lines of one message's text shown (the rest counted in one line).
MAX_TEXT_LINES = 200
#: Lines longer than this (characters) are not parsed: a JSON one (a Write of a huge file)
#: shows as one line saying its size, anything else cut as text.
MAX_PARSE = 8 * 1024 * 1024
#: ``type`` of the rotation carry line (:data:`supervisor.agents.claude.stream.CARRY`).
_CARRY = "supervise_carry"
#: The tool-result prefix, as Claude Code's own screen draws it.
RESULT = "  ⎿ "
#: ``system`` subtypes that say nothing the other lines do not (hook starts, the
#: ``requesting`` status, a background tool's start and end notes).
_QUIET_SYSTEM = frozenset({"hook_started", "status", "task_started", "task_notification"})
#: The input key whose value names what a tool works on, by tool.
_ARG_KEY = {
    "Bash": "command",
    "Write": "file_path",
    "Read": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
    "Glob": "pattern",
    "Grep": "pattern",
    "WebFetch": "url",
    "WebSearch": "query",
    "Task": "description",
    "Agent": "description",
}


def cut(text: str, limit: int = MAX_LINE) -> str:
    """``text`` escaped and at most ``limit`` characters, the last one ``…`` when cut."""
    text = escape_controls(text[: limit * 2], keep="\t")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_call(name: str, tool_input: Any, cwd: str | None = None) -> str:
    """One line for a tool call: ``Bash(pytest -q)``, ``Write(src/app.py)`` (a path under
    ``cwd`` relative to it), another tool's first short string argument, ``Name()`` when
    it has none. Escaped, the argument at most :data:`MAX_ARG` characters."""
    args = tool_input if isinstance(tool_input, dict) else {}
    value = args.get(_ARG_KEY.get(name, ""))
    if not isinstance(value, str):
        value = next((v for v in args.values() if isinstance(v, str) and v.strip()), "")
    lines = value.strip().splitlines()
    arg = lines[0] if lines else ""
    if cwd and arg.startswith(cwd.rstrip("/") + "/"):
        arg = arg[len(cwd.rstrip("/")) + 1 :]
    more = " …" if len(lines) > 1 else ""
    return f"{cut(name or '?', MAX_ARG)}({cut(arg, MAX_ARG)}{more})"


def tool_result(content: Any, is_error: bool) -> str:
    """One line for a tool's result: its first non-blank line, ``… (N lines)`` when it has
    more, ``error:`` in front when the call failed or was denied."""
    text = _block_text(content)
    lines = [line for line in text.splitlines() if line.strip()]
    first = cut(lines[0].strip(), MAX_ARG) if lines else "(no output)"
    more = f" … ({len(lines)} lines)" if len(lines) > 1 else ""
    return f"{RESULT}{'error: ' if is_error else ''}{first}{more}"


def summary(obj: dict[str, Any]) -> str:
    """The ``result`` line's facts in one line: ``result: success · 3 turns · $0.0123 ·
    12.3 s``; ``error`` (and ``API 529``) in front of them when the run failed."""
    subtype = obj.get("subtype") if isinstance(obj.get("subtype"), str) else "ended"
    parts = ["error" if obj.get("is_error") and subtype == "success" else subtype]
    status = obj.get("api_error_status")
    if isinstance(status, int) and not isinstance(status, bool):
        parts.append(f"API {status}")
    turns = finite_number(obj.get("num_turns"))
    if turns is not None:
        parts.append("1 turn" if turns == 1 else f"{turns:g} turns")
    cost = finite_number(obj.get("total_cost_usd"))
    if cost is not None:
        parts.append(f"${cost:.4f}")
    duration = finite_number(obj.get("duration_ms"))
    if duration is not None:
        parts.append(f"{duration / 1000:.1f} s")
    return cut("result: " + " · ".join(parts))


class ClaudeRenderer:
    """Renders a stream line by line, in order (see the module docstring).

    Keeps two facts between lines: the session's working directory (from ``system/init``,
    so paths under it show relative) and the last text the agent wrote (so a ``result``
    that repeats it shows only its summary line).
    """

    def __init__(self) -> None:
        self.cwd: str | None = None
        self.last_text: str | None = None

    def feed(self, line: str) -> list[str]:
        """The rendered lines of one line of the stream (without its newline): none for a
        line that is dropped; escaped, each at most :data:`MAX_LINE` characters."""
        if len(line) > MAX_PARSE and line.lstrip().startswith('{"'):
            return [f"[a stream line of {len(line) / 1e6:.1f} MB, not shown]"]
        obj = _parse(line)
        if obj is None:
            return [cut(line)] if line.strip() else []
        kind = obj.get("type")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            return handler(self, obj)
        if kind in (STREAM_EVENT, FOLD, _CARRY):
            return []
        return [cut(f"[{kind}]" if isinstance(kind, str) else line)]

    def _assistant(self, obj: dict[str, Any]) -> list[str]:
        out: list[str] = []
        failed = isinstance(obj.get("error"), str)
        for block in _content(obj):
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                self.last_text = block["text"].strip()
                out += _text_lines(block["text"], "error: " if failed else "")
            elif kind == "tool_use":
                name = block.get("name") if isinstance(block.get("name"), str) else "?"
                out.append(tool_call(name, block.get("input"), self.cwd))
        return out

    def _user(self, obj: dict[str, Any]) -> list[str]:
        message = obj.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return _text_lines(content, "> ")
        out: list[str] = []
        for block in _content(obj):
            if block.get("type") == "tool_result":
                out.append(tool_result(block.get("content"), bool(block.get("is_error"))))
            elif block.get("type") == "text" and isinstance(block.get("text"), str):
                out += _text_lines(block["text"], "> ")
        return out

    def _result(self, obj: dict[str, Any]) -> list[str]:
        text = obj.get("result")
        out: list[str] = []
        if isinstance(text, str) and text.strip() and text.strip() != self.last_text:
            out = _text_lines(text, "error: " if obj.get("is_error") else "")
        self.last_text = None
        return [*out, summary(obj)]

    def _system(self, obj: dict[str, Any]) -> list[str]:
        subtype = obj.get("subtype") if isinstance(obj.get("subtype"), str) else None
        if subtype == "init":
            self.cwd = obj["cwd"] if isinstance(obj.get("cwd"), str) else None
            model, session = _text(obj.get("model")), _text(obj.get("session_id"))
            return [cut(f"init: {model} · session {session}")]
        if subtype == "api_retry":
            return [_retry(obj)]
        if subtype == "permission_denied":
            why = _text(obj.get("message") or obj.get("decision_reason"))
            return [cut(f"denied: {_text(obj.get('tool_name'))}: {why}", MAX_ARG * 2)]
        if subtype == "hook_response":
            if obj.get("outcome") in (None, "success") and obj.get("exit_code") in (None, 0):
                return []
            name, outcome = _text(obj.get("hook_name")), _text(obj.get("outcome"))
            return [cut(f"hook {name}: {outcome} (exit {_text(obj.get('exit_code'))})")]
        if subtype in _QUIET_SYSTEM:
            return []
        return [cut(f"system: {_text(subtype)}")]

    def _progress(self, obj: dict[str, Any]) -> list[str]:
        elapsed = finite_number(obj.get("elapsed_time_seconds"))
        took = f" ({elapsed:g} s)" if elapsed is not None else ""
        return [cut(f"  … {_text(obj.get('tool_name'))} running{took}")]

    def _rate_limit(self, obj: dict[str, Any]) -> list[str]:
        info = obj.get("rate_limit_info")
        info = info if isinstance(info, dict) else {}
        if info.get("status") == "allowed":
            return []
        line = f"rate limit: {_text(info.get('status'))} ({_text(info.get('rateLimitType'))})"
        resets = finite_number(info.get("resetsAt"))
        if resets is not None and 0 < resets < 1e11:
            line += time.strftime(", resets %Y-%m-%d %H:%M UTC", time.gmtime(resets))
        return [cut(line)]

    def _launch(self, obj: dict[str, Any]) -> list[str]:
        self.last_text = None
        at = finite_number(obj.get("at"))
        ok = at is not None and 0 < at < 1e11
        when = time.strftime(" at %H:%M:%S UTC", time.gmtime(at)) if ok else ""
        return [f"--- launch{when} ---"]


_HANDLERS = {
    "assistant": ClaudeRenderer._assistant,
    "user": ClaudeRenderer._user,
    "result": ClaudeRenderer._result,
    "system": ClaudeRenderer._system,
    "tool_progress": ClaudeRenderer._progress,
    "rate_limit_event": ClaudeRenderer._rate_limit,
    LAUNCH_MARK: ClaudeRenderer._launch,
}


def render_lines(lines: list[str]) -> list[str]:
    """Each of ``lines`` (a stream's lines, oldest first) rendered by one renderer."""
    renderer = ClaudeRenderer()
    return [out for line in lines for out in renderer.feed(line)]


def _parse(line: str) -> dict[str, Any] | None:
    """The JSON object on ``line``, or ``None`` (not JSON, not an object, too long)."""
    stripped = line.strip()
    if not stripped.startswith("{") or len(stripped) > MAX_PARSE:
        return None
    try:
        obj = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _retry(obj: dict[str, Any]) -> str:
    attempt, most = finite_number(obj.get("attempt")), finite_number(obj.get("max_retries"))
    count = "" if attempt is None else f" {attempt:g}" + ("" if most is None else f"/{most:g}")
    delay = finite_number(obj.get("retry_delay_ms"))
    wait = "" if delay is None else f" in {delay / 1000:.1f} s"
    named = [obj.get(key) for key in ("error_status", "error")]
    why = " ".join(_text(value) for value in named if value is not None)
    return cut(f"api retry{count}{wait}" + (f" ({why})" if why else ""))


def _text_lines(text: str, prefix: str = "") -> list[str]:
    lines = text.strip("\n").split("\n")
    out = [cut(prefix + line.rstrip("\r")) for line in lines[:MAX_TEXT_LINES]]
    if len(lines) > MAX_TEXT_LINES:
        out.append(f"… ({len(lines) - MAX_TEXT_LINES} more lines)")
    return out


def _block_text(content: Any) -> str:
    """The text of a tool result's ``content``: a string, or a list of blocks whose
    ``text`` ones are joined (an image block counts as ``[image]``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif isinstance(block, dict) and isinstance(block.get("type"), str):
            parts.append(f"[{block['type']}]")
    return "\n".join(parts)


def _content(obj: dict[str, Any]) -> list[dict[str, Any]]:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text(value: Any) -> str:
    """A JSON value as a short string for a one-line fact (``?`` when missing)."""
    if value is None:
        return "?"
    return value if isinstance(value, str) else json.dumps(value)[:MAX_ARG]
