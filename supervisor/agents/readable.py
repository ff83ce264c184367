"""One readable rendering of an agent's output for every view (issue 22, item 1).

``output.log`` keeps the raw pane output (``supervise tail --raw`` and the manifest's
``output_tail`` show it as it is). Everything a person reads goes through here: ``tail``
and ``tail -f``, the last line of ``status``, ``top`` and the web board, the web page's
output box and the notifier's ``last_lines``. The agent's kind picks the renderer:
``claude`` renders Claude Code's stream-json (:mod:`supervisor.agents.claude.render`;
lines that are not JSON, such as an interactive run's screen text, stay as they are);
every other kind (``generic``) is shown as it is. Either way each line is escaped
(:mod:`supervisor.terminal`) and at most :data:`~supervisor.agents.claude.render.MAX_LINE`
characters.

Reads are bounded: a tail reads the end of ``output.log`` (then of ``output.log.1``, the
rotated file, when the fresh one is short) from :data:`TAIL_START` bytes, growing to at most
:data:`TAIL_MAX` while it finds too few lines; a 50 MB log is never read whole. Files are
opened with ``O_NONBLOCK`` and read only when they are regular files (a FIFO put in a task
folder cannot block a view).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from supervisor.agents import kinds
from supervisor.agents.claude import hooks
from supervisor.agents.claude.render import MAX_PARSE, ClaudeRenderer, cut
from supervisor.diskio import read_end
from supervisor.taskdir.layout import MANIFEST, OUTPUT
from supervisor.terminal import escape_controls
from supervisor.wrapper import END_MARK

#: The built-in agent kinds (``[agent] kind``; :mod:`supervisor.agents.kinds`).
KINDS = frozenset(kinds.builtin_names())
CLAUDE = "claude"
#: The kind shown as it is, and the one assumed when a folder does not say.
GENERIC = "generic"
#: Not an agent kind: ``tail --raw``, every line whole (escaped, never cut).
RAW = "raw"
#: Bytes a tail reads first, and the most it reads (at least :data:`MAX_PARSE`, so the
#: longest line the renderer parses can be read whole).
TAIL_START = 16 * 1024
TAIL_MAX = MAX_PARSE + 64 * 1024
#: The most characters of :func:`last_line` (the board and ``status --json`` carry one per
#: task).
LAST_LINE_CHARS = 300
#: The most bytes :func:`last_line` reads: a view refreshes it for every changed task, so a
#: huge line being written (no whole line in this much) shows no last line for a while.
LAST_LINE_MAX = 1024 * 1024
#: Bytes a follower reads at a time, the most it reads per call (the rest waits for the
#: next), and the head kept of a line longer than :data:`MAX_PARSE` that it holds back.
FOLLOW_CHUNK = 1024 * 1024
FOLLOW_MAX = 4 * MAX_PARSE
_HEAD = 4096


class Renderer(Protocol):
    """Turns one line of output (no newline) into the lines to show."""

    def feed(self, line: str) -> list[str]: ...


class PlainRenderer:
    """The generic agent's output as it is: each line escaped and cut."""

    def feed(self, line: str) -> list[str]:
        """``[line]`` escaped, at most ``MAX_LINE`` characters."""
        return [cut(line)]


class RawRenderer:
    """``tail --raw``: each line as it is, escaped, never cut."""

    def feed(self, line: str) -> list[str]:
        """``[line]`` escaped (tabs kept)."""
        return [escape_controls(line, keep="\t")]


def renderer_for(kind: str) -> Renderer:
    """A fresh renderer for an agent of ``kind`` (:data:`RAW`: the raw lines; an unknown
    kind: shown as it is)."""
    if kind == RAW:
        return RawRenderer()
    return ClaudeRenderer() if kind == CLAUDE else PlainRenderer()


def agent_kind(folder: Path | None, manifest: Mapping[str, Any] | None = None) -> str:
    """The agent kind of a task: the manifest's ``agent`` (a kind, or an object with
    ``kind``) when it names one; ``claude`` when the manifest has a ``claude`` object or
    the folder holds Claude Code's ``stream.jsonl`` or hook settings; else
    :data:`GENERIC` (shown as it is). ``manifest``: the parsed ``manifest.json`` when the
    caller has it (read from ``folder`` otherwise). Never raises."""
    if manifest is None and folder is not None:
        manifest = _read_manifest(folder / MANIFEST)
    manifest = manifest or {}
    named = manifest.get("agent")
    if isinstance(named, Mapping):
        named = named.get("kind")
    if isinstance(named, str) and named in KINDS:
        return named
    if isinstance(manifest.get(CLAUDE), Mapping):
        return CLAUDE
    if folder is not None and any(
        os.path.lexists(folder / name) for name in (hooks.STREAM, hooks.SETTINGS)
    ):
        return CLAUDE
    return GENERIC


def readable_lines(kind: str, lines: Iterable[str], renderer: Renderer | None = None) -> list[str]:
    """Each of ``lines`` (raw output, oldest first, without newlines) rendered for an
    agent of ``kind`` (by ``renderer`` when given: a follower's, which then goes on from
    these lines); escaped, each at most ``MAX_LINE`` characters."""
    renderer = renderer or renderer_for(kind)
    return [out for line in lines for out in renderer.feed(line)]


def readable_text(kind: str, raw: str) -> str:
    """Raw ``output.log`` text of an agent of ``kind`` (``"claude"``, ``"generic"``) as
    readable text, lines joined by ``"\\n"``: Claude Code's stream-json rendered, anything
    else as it is; escaped. Never raises."""
    return "\n".join(readable_lines(kind, raw.split("\n")))


def readable_tail(folder: Path, lines: int) -> str:
    """The last ``lines`` readable lines of a task folder's output (``output.log``, with
    the end of ``output.log.1`` before it when needed), rendered for the task's kind
    (:func:`agent_kind`); ``""`` when there is none. Reads at most :data:`TAIL_MAX`
    bytes. Never raises."""
    return "\n".join(tail_lines(folder, lines))


def tail_lines(
    folder: Path,
    lines: int,
    kind: str | None = None,
    end: int | None = None,
    renderer: Renderer | None = None,
    limit: int = TAIL_MAX,
) -> list[str]:
    """:func:`readable_tail` as a list; ``kind`` when the caller knows it; ``end``: read
    ``output.log`` only up to this byte offset, and ``renderer``: render with it (a
    :class:`Follower`'s: where it starts, and what it knows from the lines before);
    ``limit``: the most bytes read."""
    if lines <= 0:
        return []
    kind = kind or agent_kind(folder)
    budget = min(max(TAIL_START, lines * 1024), limit)
    while True:
        raw, whole = _window(folder, budget, end)
        out = readable_lines(kind, _whole_lines(kind, raw, whole), renderer)
        if len(out) >= lines or whole or budget >= limit:
            return out[-lines:]
        budget = min(budget * 4, limit)


def last_line(folder: Path, manifest: Mapping[str, Any] | None = None) -> str | None:
    """The last readable line of a task's output for a one-line view (``status``,
    ``top``, the web board), at most :data:`LAST_LINE_CHARS` characters: the wrapper's
    own end line only when nothing else is there; ``None`` when there is no output.
    Never raises."""
    kind = agent_kind(folder, manifest)
    found = [line for line in tail_lines(folder, 3, kind, limit=LAST_LINE_MAX) if line.strip()]
    chosen = next((line for line in reversed(found) if not line.startswith(END_MARK)), None)
    chosen = chosen or (found[-1] if found else None)
    if chosen is None:
        return None
    chosen = chosen.strip()
    return chosen if len(chosen) <= LAST_LINE_CHARS else chosen[: LAST_LINE_CHARS - 1] + "…"


def _whole_lines(kind: str, raw: bytes, whole: bool) -> list[str]:
    """The lines of a window: its first one dropped when the window starts inside it;
    a last one without its newline yet dropped for Claude Code when it is JSON (a stream
    line still being written would show as raw JSON)."""
    text = raw.decode("utf-8", errors="replace").split("\n")
    if not whole:
        text = text[1:]
    last = text[-1] if text else None
    if last == "" or (last is not None and kind == CLAUDE and last.lstrip().startswith("{")):
        text.pop()
    return text


def _window(folder: Path, budget: int, end: int | None) -> tuple[bytes, bool]:
    """The last ``budget`` bytes of the output (``output.log``, up to ``end`` when given,
    after the end of ``output.log.1``) and whether they start at its beginning."""
    data, _ = read_end(folder / OUTPUT, budget, end)
    if len(data) >= budget:
        return data, False
    older, older_size = read_end(folder / f"{OUTPUT}.1", budget - len(data), None)
    if older and not older.endswith(b"\n"):
        older += b"\n"  # the rotated file's last line stays a line of its own
    return older + data, len(older) >= older_size


def _read_manifest(path: Path) -> dict[str, Any] | None:
    data, _ = read_end(path, 4 * 1024 * 1024, None)
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return manifest if isinstance(manifest, dict) else None


class Follower:
    """Renders what is appended to a task's ``output.log`` as it comes (``tail -f``, the
    ``top`` tail screen): whole lines only, a partial last line waits for its newline.

    A rotation (``output.log`` renamed to ``output.log.1`` and a new one created) is
    followed: the old file is read to its end through the descriptor held open, then the
    new one from its start. A line longer than :data:`MAX_PARSE` is held only by its head.

    Args:
        folder: the task folder.
        kind: the agent kind (:func:`agent_kind`).
        start: byte offset of ``output.log`` to start at; ``None``: its current end.
    """

    def __init__(self, folder: Path, kind: str, start: int | None = None) -> None:
        self.path = folder / OUTPUT
        self.renderer = renderer_for(kind)
        self.fd: int | None = None
        self.offset = 0
        self.partial = b""
        self.dropped = 0  # bytes of the held line not kept (past its head)
        self._open(start)

    def _open(self, start: int | None) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            return
        self.fd = fd
        self.offset = info.st_size if start is None else min(start, info.st_size)

    def read(self) -> str:
        """The rendered lines appended since the last call (each ending in ``"\\n"``),
        ``""`` when none; at most :data:`FOLLOW_MAX` bytes read per file per call."""
        if self.fd is None:
            self._open(0)
            if self.fd is None:
                return ""
        if os.fstat(self.fd).st_size < self.offset:  # truncated in place: start over
            self.offset, self.partial, self.dropped = 0, b"", 0
        out = self._drain()
        if self._replaced():
            out += self._drain()  # what the old file got before the capture moved on
            os.close(self.fd)
            self.fd = None
            self._open(0)
            out += self._drain() if self.fd is not None else ""
        return out

    def _replaced(self) -> bool:
        """``output.log`` is no longer the file held open (rotated)."""
        assert self.fd is not None
        try:
            now = os.stat(self.path)
        except OSError:
            return False  # rotated, the new file not created yet: keep reading the old
        held = os.fstat(self.fd)
        return (now.st_ino, now.st_dev) != (held.st_ino, held.st_dev)

    def _drain(self) -> str:
        assert self.fd is not None
        lines: list[str] = []
        taken = 0
        while taken < FOLLOW_MAX:
            data = os.pread(self.fd, FOLLOW_CHUNK, self.offset)
            if not data:
                break
            self.offset += len(data)
            taken += len(data)
            lines += self._take(data)
        return "".join(f"{line}\n" for line in lines)

    def _take(self, data: bytes) -> list[str]:
        out: list[str] = []
        while data:
            cut_at = data.find(b"\n")
            if cut_at < 0:
                self._hold(data)
                break
            self._hold(data[:cut_at])
            data = data[cut_at + 1 :]
            out += self._line()
        return out

    def _hold(self, data: bytes) -> None:
        self.partial += data
        if len(self.partial) > MAX_PARSE:
            self.dropped += len(self.partial) - _HEAD
            self.partial = self.partial[:_HEAD]

    def _line(self) -> list[str]:
        text = self.partial.decode("utf-8", errors="replace")
        size, self.partial, self.dropped = len(self.partial) + self.dropped, b"", 0
        if size > MAX_PARSE:
            if text.lstrip().startswith('{"'):
                return [f"[a stream line of {size / 1e6:.1f} MB, not shown]"]
            return [cut(text)]
        return self.renderer.feed(text)

    def close(self) -> str:
        """The held partial line rendered (the output has ended), and the file closed."""
        out = "".join(f"{line}\n" for line in self._line()) if self.partial else ""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        return out
