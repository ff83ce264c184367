"""Reading a profile or task file, and pointing at its lines when it is wrong.

Files are read bounded (a FIFO, ``/dev/zero`` or a 200 MB task file is refused without
being read) and parsed with :mod:`tomllib`. A pydantic validation error becomes one line per
problem, naming the file, the TOML key with its line where known, what is wrong and what is
allowed: the format of every :class:`~supervisor.errors.ConfigError` about a file.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from supervisor.config.models import MAX_PROMPT_BYTES, MAX_TASK_FILE_BYTES
from supervisor.config.monitor import error_message
from supervisor.diskio import FileTooBig, NotRegularFile, read_regular
from supervisor.errors import ConfigError


def key_line(text: str, loc: tuple[Any, ...]) -> int | None:
    """Best-effort 1-based line of the TOML key at ``loc`` (e.g. ``('monitor', 'deadline')``).

    Walks table headers (``[a.b]``, ``[[tasks]]``) and ``key =`` lines; dotted keys and inline
    tables are matched on their last component. Returns ``None`` when not found.
    """
    parts = [p for p in loc if isinstance(p, str)]
    indexes = [p for p in loc if isinstance(p, int)]
    if not parts:
        return None
    table: list[str] = []
    array_seen: dict[str, int] = {}
    target_table, key = parts[:-1], parts[-1]
    header_line: int | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        header = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", line)
        if header:
            table = [h.strip().strip('"') for h in header.group(1).split(".")]
            if line.startswith("[["):
                array_seen[table[0]] = array_seen.get(table[0], -1) + 1
            this_entry = not (indexes and table[0] in array_seen) or (
                array_seen[table[0]] == indexes[0]
            )
            if table == parts and header_line is None and this_entry:
                header_line = number
            continue
        match = re.match(r'^"?([A-Za-z0-9_.-]+)"?\s*=', line)
        if not match:
            continue
        written = match.group(1).split(".")
        full = table + written
        if table and table[0] in array_seen and indexes and array_seen[table[0]] != indexes[0]:
            continue
        if full == [*target_table, key] or (written[-1] == key and table == target_table):
            return number
    return header_line


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    current: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return None
        annotation = fields[part].annotation
        inner = getattr(annotation, "__args__", None)
        candidates = [annotation, *(inner or ())]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if current is None:
            return None
    return current if isinstance(current, type) else None


def format_errors(
    error: ValidationError, file: Path, text: str, root: type[BaseModel], prefix: tuple = ()
) -> list[str]:
    """One problem line per error in ``error``, raised validating ``text`` (the file's
    contents) against ``root``: ``FILE:LINE: key 'a.b': what is wrong (got VALUE)``, an
    unknown key with its closest known one and every key allowed there, a missing key, or
    a rule across keys at the first of them written. ``prefix`` is prepended to every
    location (an inline ``[[tasks]]`` entry)."""
    problems = []
    for item in error.errors():
        loc = prefix + tuple(item["loc"])
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        line = key_line(text, loc)
        where = f"{file}:{line}" if line else f"{file}"
        kind = item["type"]
        if kind == "extra_forbidden":
            parent = _model_at(root, loc[len(prefix) : -1] if prefix else loc[:-1])
            allowed = list(parent.model_fields) if parent else []
            guess = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            hint = f" (did you mean '{guess[0]}'?)" if guess else ""
            problems.append(
                f"{where}: unknown key '{dotted}'{hint}; allowed keys here: {', '.join(allowed)}"
            )
        elif kind == "missing":
            problems.append(f"{where}: missing required key '{dotted}'")
        else:
            keys = tuple(p for p in loc[len(prefix) :] if isinstance(p, str))
            message = error_message(item, _model_at(root, keys[:-1]))
            model = _model_at(root, loc[len(prefix) :]) if kind == "value_error" else None
            named = [
                k
                for k in dict.fromkeys(re.findall(r"'(\w+)'", message))
                if model and k in model.model_fields
            ]
            if named:  # a rule across keys (prompt / prompt_file): at the first one written
                line = next((n for k in named if (n := key_line(text, (*loc, k)))), None)
                where = f"{file}:{line}" if line else f"{file}"
                dotted = "', '".join(".".join(str(p) for p in (*loc, k)) for k in named)
            got = item.get("input")
            shown = "" if isinstance(got, dict | list) else f" (got {_clipped(got)})"
            label = "keys" if len(named) > 1 else "key"
            problems.append(f"{where}: {label} '{dotted}': {message}{shown}")
    return problems


#: Characters of a refused value's ``repr`` shown in its error line (a 10 MB value is not
#: echoed whole).
SHOWN_VALUE_CHARS = 120


def _clipped(value: object) -> str:
    """``repr(value)``, cut to :data:`SHOWN_VALUE_CHARS` with its full length named."""
    text = repr(value)
    if len(text) <= SHOWN_VALUE_CHARS:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters"
    return f"{text[:SHOWN_VALUE_CHARS]}… ({size})"


def too_big(shown: Path, size: int, limit: int = MAX_TASK_FILE_BYTES) -> str:
    """The error line for a task file of ``size`` bytes over ``limit``."""
    return (
        f"{shown}: {size} bytes; a task file may be at most {limit} bytes (its prompt at "
        f"most {MAX_PROMPT_BYTES}); shorten the prompt"
    )


def read_bounded(path: Path, shown: Path, limit: int | None) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (``None``: any size).

    Opened non-blocking and checked with ``fstat`` before reading: a FIFO would block the
    reader, ``/dev/zero`` never ends, and a huge file is refused without being read.

    Raises:
        ConfigError: unreadable, not a regular file, or too big.
    """
    try:
        return read_regular(path, limit)
    except NotRegularFile as exc:
        raise ConfigError([f"{shown}: {exc.kind}, not a regular file; give a TOML file"]) from exc
    except FileTooBig as exc:
        raise ConfigError([too_big(shown, exc.size, exc.limit)]) from exc
    except OSError as exc:
        raise ConfigError([f"{shown}: cannot read: {exc.strerror}"]) from exc


def read_toml(
    path: Path, shown: Path | None = None, limit: int | None = None
) -> tuple[str, dict[str, Any]]:
    """``(text, table)`` of the TOML file ``path`` (see :func:`read_bounded` for ``limit``);
    errors name ``shown`` (default ``path``).

    Raises:
        ConfigError: unreadable, too big, not UTF-8, or malformed TOML.
    """
    return toml_table(read_bounded(path, shown or path, limit), shown or path)


def toml_table(raw: bytes, path: Path) -> tuple[str, dict[str, Any]]:
    """``(text, table)`` of TOML bytes read from ``path`` (a file, or stdin's name).

    Raises:
        ConfigError: not UTF-8, or malformed TOML.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"{path}: not UTF-8 text (byte {exc.start}); TOML must be UTF-8"
        raise ConfigError([problem]) from exc
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: malformed TOML: {exc}"]) from exc
    except RecursionError as exc:  # tomllib recurses on nested arrays/tables
        raise ConfigError([f"{path}: malformed TOML: nested too deeply"]) from exc


def policy_line(text: str, prefix: tuple[Any, ...]) -> int | None:
    """Line of the ``[monitor]`` interval key in ``text`` that a ``max >= base`` error is about."""
    lines = (key_line(text, (*prefix, "monitor", k)) for k in ("max_interval", "base_interval"))
    return next((line for line in lines if line), None)
