"""A profile's two folders, read without validating the whole profile.

``supervise status`` needs only ``[paths] state_dir`` and ``spool_dir``; validating the whole
profile imports pydantic, which was about 217 ms of the 0.38 s that ``status --json`` took over
1,000 tasks (benchmarks/README.md). A profile this cannot read (bad TOML, wrong types) is
left to the full loader, whose one-line errors name the key and the fix.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from supervisor.taskdir import layout

#: ``[paths]`` defaults, relative to the profile's folder (``config.models.PathsSpec``).
DEFAULT_SPOOL = "spool"
DEFAULT_STATE = "state"
#: Largest profile read here, in bytes; a bigger one goes to the full loader.
MAX_PROFILE_BYTES = 1024 * 1024


def resolve(base: Path, value: Path) -> Path:
    """``value`` made absolute against ``base`` (``~`` expanded): the rule for every path in a
    profile or task file.

    Raises:
        ValueError: the path cannot name a file (a NUL byte, a part over NAME_MAX).
    """
    with contextlib.suppress(RuntimeError):  # "~nosuchuser": keep it; it will not exist
        value = value.expanduser()
    if "\0" in str(value):
        raise ValueError("a path cannot contain a NUL byte")
    if any(len(os.fsencode(part)) > 255 for part in value.parts):
        raise ValueError("a path component is longer than 255 bytes")
    try:
        return value if value.is_absolute() else (base / value).resolve()
    except OSError as exc:
        raise ValueError(str(exc)) from exc


@dataclass(frozen=True)
class ProfilePaths:
    """The folders of a profile (absolute): what the status views need of it.

    Attributes:
        path: the profile file.
        spool_dir: where task files are dropped.
        state_dir: the engine's state (``tasks/``, ``engine-stats.json``, ``control/``).
    """

    path: Path
    spool_dir: Path
    state_dir: Path

    @property
    def tasks_dir(self) -> Path:
        return self.state_dir / layout.TASKS


def read_paths(path: Path | str) -> ProfilePaths | None:
    """The folders of the profile at ``path``, or ``None`` when the file cannot be read this
    way (missing, too big, not TOML, ``[paths]`` not a table of strings): the caller then
    loads it fully and reports the problem."""
    try:
        profile = Path(path).resolve()
        if profile.stat().st_size > MAX_PROFILE_BYTES:
            return None
        data = tomllib.loads(profile.read_text(encoding="utf-8"))
        paths = data.get("paths", {})
        if not isinstance(paths, dict):
            return None
        spool, state = paths.get("spool_dir", DEFAULT_SPOOL), paths.get("state_dir", DEFAULT_STATE)
        if not isinstance(spool, str) or not isinstance(state, str):
            return None
        base = profile.parent
        return ProfilePaths(profile, resolve(base, Path(spool)), resolve(base, Path(state)))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
