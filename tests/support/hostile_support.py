"""Hostile task files against one live engine (issue 20): the generator and the harness
shared by ``tests/test_hostile_intake.py`` (a short budget) and ``benchmarks/hostile.py``
(a long one).

:func:`task_files` is a hypothesis strategy for a batch of spool entries within the
default ``task_may_set``: every key, extreme values (0, negative, 1e-9, 1e12, ``inf``,
``nan``, empty, huge strings, many list items, wrong types), NUL, newline, bidi and
zero-width characters, invalid UTF-8, and odd file types for every path a task names
(``prompt_file``, ``project_dir``) and for the spool entry itself (a FIFO, a socket, a
folder, a dangling symlink, ``/dev/zero``, a file over the size limit).

:class:`LiveEngine` runs ``supervise run`` on a profile, drops a batch beside a plain task,
waits until the plain task is done and every entry is accounted for (claimed into a task
folder, or in ``spool/rejected/`` with its ``.error``), and stops the engine with SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import strategies as st

from supervisor.config import MAX_PROMPT_BYTES
from supervisor.taskdir.states import TERMINAL

FAKE_AGENT = Path(__file__).resolve().parent / "fake_agent.py"

#: Odd kinds of file a path may name (see :func:`make_path`).
PATH_KINDS = (
    "regular", "fifo", "socket", "folder", "dangling", "devzero", "huge", "missing",
    "symlink_to_fifo", "invalid_utf8",
)  # fmt: skip
#: Odd kinds of spool entry (the rest are regular files).
ENTRY_KINDS = ("fifo", "socket", "folder", "dangling", "symlink_to_devzero", "huge")

_INTS = [0, -1, 1, 3, 100, 101, 255, 256, 4096, 2**30, 2**30 + 1, 10**8, 2**63 - 1, -(2**63)]
_FLOATS = [0.0, -0.5, 1e-9, 0.1, 0.5, 1e6, 3.2e7, 1e12, 1e300, math.inf, -math.inf, math.nan]
_NUMBERS = st.sampled_from([*_INTS, *_FLOATS])
_ODD_TEXT = st.sampled_from(
    ["", "\x00", "a\nb", "\u202eevil", "\u200b", "x" * 300_000, "sonnet", "opus", "-rf", "é"]
)
#: Artifact paths: odd text, a name over NAME_MAX (``ENAMETOOLONG``), another user's file.
_ARTIFACTS = st.one_of(_ODD_TEXT, st.just("a" * 300), st.just("/root/x"))
_WRONG = st.sampled_from(["x", True, [1, "a"], {"a": 1}, ""])
_SCALAR = st.one_of(_NUMBERS, _WRONG)
_MONITOR_KEYS = (
    "base_interval", "max_interval", "deadline", "grace_period", "stale_threshold",
    "max_retries", "resume_exit_codes", "max_log_bytes", "log_backups", "max_cost_usd",
    "tool_budget",
)  # fmt: skip
_PROMPTS = st.sampled_from(
    ["exit: 0\n", "print: hi\nexit: 3\n", "sleep: 0.5\n", "free text \u202e\u200b é\n", ""]
)
#: Commands an acceptance check may run here: harmless whatever their arguments.
_SAFE_COMMANDS = st.sampled_from([["true"], ["false"], ["sleep", "0.2"], ["echo"]])


@st.composite
def _monitor(draw: st.DrawFn) -> Any:
    keys = draw(st.lists(st.sampled_from(_MONITOR_KEYS), max_size=4, unique=True))
    table: dict[str, Any] = {}
    for key in keys:
        if key == "resume_exit_codes":
            table[key] = draw(
                st.one_of(
                    st.lists(_NUMBERS, max_size=5),
                    st.just(list(range(1, 256)) * 40),
                    _WRONG,
                )
            )
        else:
            table[key] = draw(_SCALAR)
    return table if draw(st.integers(0, 5)) else draw(_WRONG)


@st.composite
def _acceptance(draw: st.DrawFn) -> Any:
    table: dict[str, Any] = {}
    if draw(st.booleans()):
        args = draw(st.lists(_ODD_TEXT, max_size=2))
        table["command"] = draw(_SAFE_COMMANDS) + args
    if draw(st.booleans()) or not table:
        table["artifacts"] = draw(
            st.one_of(
                st.lists(_ARTIFACTS, max_size=3),
                st.just(["f"] * 5000),
                _WRONG,
            )
        )
    if draw(st.booleans()):
        table["timeout"] = draw(_SCALAR)
    return table


@dataclass(frozen=True)
class Entry:
    """One spool entry to drop: a task ``table`` (written as TOML, then ``mutate``d), or an
    odd ``kind`` of entry. ``prompt_kind`` / ``project_kind``: what those paths name."""

    table: dict[str, Any] = field(default_factory=dict)
    kind: str = "regular"
    prompt_kind: str | None = None
    project_kind: str | None = "real"
    mutate: str | None = None


#: The faults an entry may carry, each alone or with others (none: a valid task).
FAULTS = ("name", "prompt", "prompt_file", "project_dir", "monitor", "model", "acceptance",
          "unknown_key", "mutate", "entry")  # fmt: skip


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    """One spool entry: a valid task with 0 to 3 faults (see :data:`FAULTS`), so that the
    batch holds tasks that run beside the ones that are rejected."""
    faults = draw(st.lists(st.sampled_from(FAULTS), max_size=3, unique=True))
    table: dict[str, Any] = {"name": "hostile", "prompt": draw(_PROMPTS)}
    kind, prompt_kind, project_kind, mutate = "regular", None, "real", None
    if "name" in faults:
        table["name"] = draw(st.one_of(_ODD_TEXT, _WRONG))
    if "prompt" in faults:
        table["prompt"] = draw(st.one_of(_ODD_TEXT, _WRONG))
    if "prompt_file" in faults:
        prompt_kind = draw(st.sampled_from(PATH_KINDS))
        if draw(st.integers(0, 3)):
            del table["prompt"]
    if "project_dir" in faults:
        project_kind = draw(st.sampled_from(("missing", "fifo", "regular", "dangling")))
    if "monitor" in faults:
        table["monitor"] = draw(_monitor())
    if "model" in faults:
        table["model"] = draw(st.one_of(_ODD_TEXT, _WRONG))
    if "acceptance" in faults:
        table["acceptance"] = draw(_acceptance())
    if "unknown_key" in faults:
        table[draw(st.sampled_from(["notifier", "env", "modle", "approval"]))] = "x"
    if "mutate" in faults:
        mutate = draw(st.sampled_from(("invalid_utf8", "nul", "truncate", "bidi")))
    if "entry" in faults:
        kind = draw(st.sampled_from(ENTRY_KINDS))
    return Entry(table, kind, prompt_kind, project_kind, mutate)


_LONG_LINE = "print: " + "x" * 9000 + "\nsleep: 1\n"
#: The batch the issue reported, tried first in every run: ``log_backups = 100000000`` with
#: a line longer than ``max_log_bytes`` (the engine spun at 93 % CPU and ignored SIGTERM),
#: the same at the largest ``log_backups`` allowed, a ``prompt_file`` that is a FIFO (it
#: blocked the claim thread), and FIFO, socket and ``/dev/zero`` entries in the spool.
ISSUE_BATCH = [
    Entry({"name": "rotation", "prompt": _LONG_LINE,
           "monitor": {"log_backups": 10**8, "max_log_bytes": 4096}}),
    Entry({"name": "rotation-max", "prompt": _LONG_LINE,
           "monitor": {"log_backups": 100, "max_log_bytes": 4096}}),
    Entry({"name": "fifo-prompt"}, prompt_kind="fifo"),
    Entry({"name": "fifo-entry"}, kind="fifo"),
    Entry({"name": "socket-entry"}, kind="socket"),
    Entry({"name": "zero-entry"}, kind="symlink_to_devzero"),
    Entry({"name": "nul-argv", "prompt": "exit: 0\n",
           "acceptance": {"command": ["true", "\x00"], "artifacts": ["a" * 300]}}),
    Entry({"name": "long-artifact", "prompt": "exit: 0\n",
           "acceptance": {"artifacts": ["a" * 300]}}),
]  # fmt: skip


def batches(size: int) -> st.SearchStrategy[list[Entry]]:
    """A batch of ``size`` hostile entries."""
    return st.lists(entries(), min_size=size, max_size=size)


# ------------------------------------------------------------------ making files


def make_path(folder: Path, kind: str, name: str, sockets: Path) -> str:
    """Create a thing of ``kind`` named ``name`` in ``folder``; return its path. Sockets
    live in the short folder ``sockets`` (AF_UNIX paths are limited to 108 bytes) and are
    linked from ``folder``."""
    path = folder / name
    if kind in ("regular", "invalid_utf8"):
        path.write_bytes(b"exit: 0\n" if kind == "regular" else b"\xff\xfe bad \x80\n")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        target = sockets / f"s{len(os.listdir(sockets))}"
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(target))  # the socket file stays after close
        return str(target)
    elif kind == "folder":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to(folder / f"{name}.nowhere")
    elif kind == "devzero":
        return "/dev/zero"
    elif kind == "huge":
        with open(path, "wb") as handle:
            handle.truncate(MAX_PROMPT_BYTES + 2 * 1024 * 1024)  # sparse
    elif kind == "symlink_to_fifo":
        os.mkfifo(folder / f"{name}.fifo")
        path.symlink_to(folder / f"{name}.fifo")
    elif kind == "missing":
        pass
    return str(path)


def _mutate(data: bytes, how: str | None) -> bytes:
    if how == "invalid_utf8":
        return data + b'\nname2 = "\xff\xfe"\n'
    if how == "nul":
        return data.replace(b"=", b"=\x00", 1)
    if how == "truncate":
        return data[: len(data) // 2]
    if how == "bidi":
        return "\u202e".encode() + data
    return data


def write_entry(spool: Path, odd: Path, sockets: Path, entry: Entry, name: str,
                project: Path) -> None:  # fmt: skip
    """Drop ``entry`` into ``spool`` as ``name`` (a careful writer's rename for files)."""
    table = dict(entry.table)
    if entry.prompt_kind is not None:
        table["prompt_file"] = make_path(odd, entry.prompt_kind, f"{name}.prompt", sockets)
    if entry.project_kind == "real":
        table["project_dir"] = str(project)
    elif entry.project_kind is not None:
        table["project_dir"] = make_path(odd, entry.project_kind, f"{name}.project", sockets)
    target = spool / name
    if entry.kind == "regular":
        data = _mutate(tomli_w.dumps(table).encode(), entry.mutate)
        temp = spool / f".{name}.tmp"
        temp.write_bytes(data)
        temp.rename(target)
    elif entry.kind == "symlink_to_devzero":
        target.symlink_to("/dev/zero")
    else:
        made = make_path(odd, entry.kind, f"{name}.entry", sockets)
        if entry.kind == "socket":
            target.symlink_to(made)  # the socket itself lives in the short folder
        else:
            os.rename(made, target)


# ------------------------------------------------------------------ the live engine


def profile_text(root: Path, socket_name: str, max_concurrent: int = 8) -> str:
    """A profile running the fake agent, its spool and state in ``root``."""
    agent = [sys.executable, str(FAKE_AGENT), "--prompt-file", "{prompt_file}",
             "--session-id", "{session_id}", "--model", "{model}"]  # fmt: skip
    return tomli_w.dumps({
        "max_concurrent": max_concurrent,
        "intake_interval": 0.2,
        "paths": {"spool_dir": "spool", "state_dir": "state"},
        "tmux": {"socket_name": socket_name},
        "agent": {"command": agent, "resume_command": agent},
        "monitor": {"base_interval": 0.5, "max_interval": 2, "deadline": 120,
                    "stale_threshold": 30},
    })  # fmt: skip


@dataclass
class BatchResult:
    """What one batch gave: entries ``claimed`` and ``rejected``, and the seconds until
    the plain task was ``completed`` (``plain_s``) and everything accounted (``all_s``)."""

    claimed: int
    rejected: int
    plain_s: float
    all_s: float


class LiveEngine:
    """One ``supervise run`` on a profile in ``root`` (started by :meth:`start`).

    Raises:
        AssertionError: from :meth:`drop` when the plain task does not complete or an entry
            is lost within ``patience`` seconds, or from :meth:`stop` when SIGTERM does not
            stop the engine within ``stop_patience`` seconds.
    """

    def __init__(self, root: Path, socket_name: str, stop_bound: float = 10.0) -> None:
        self.root = root
        self.spool = root / "spool"
        self.state = root / "state"
        self.odd = root / "odd"
        self.project = root / "project"
        for folder in (self.spool, self.odd, self.project):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.sockets = Path(tempfile.mkdtemp(prefix="svh-", dir="/tmp"))
        self.profile = root / "profile.toml"
        self.profile.write_text(profile_text(root, socket_name))
        self.log = root / "engine.log"
        self.stop_bound = stop_bound
        self.process: subprocess.Popen[bytes] | None = None
        self.batches = 0

    def start(self) -> None:
        env = {**os.environ, "SUPERVISE_STOP_BOUND": str(self.stop_bound)}
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "supervisor.cli", "run", str(self.profile)],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip

    def _sources(self) -> dict[str, str]:
        """spool file name → task status, from each task's ``queued`` event."""
        found = {}
        for folder in (self.state / "tasks").glob("*"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                first = (folder / "events.jsonl").read_text().splitlines()[0]
                source = Path(json.loads(first)["source"]).name
                status = json.loads((folder / "manifest.json").read_text())["status"]
                found[source] = status
        return found

    def drop(self, batch: list[Entry], patience: float = 60.0) -> BatchResult:
        """Drop ``batch`` and a plain task; wait for both outcomes (see the class)."""
        self.batches += 1
        tag = f"b{self.batches}"
        names = [f"{tag}-{index}.toml" for index in range(len(batch))]
        started = time.monotonic()
        for entry, name in zip(batch, names, strict=True):
            write_entry(self.spool, self.odd, self.sockets, entry, name, self.project)
        plain = f"{tag}-plain.toml"
        data = tomli_w.dumps({"name": f"{tag}-plain", "prompt": "print: plain ok\n",
                              "project_dir": str(self.project)})  # fmt: skip
        (self.spool / f".{plain}.tmp").write_text(data)
        (self.spool / f".{plain}.tmp").rename(self.spool / plain)
        rejected = self.spool / "rejected"
        plain_s: float | None = None
        while time.monotonic() - started < patience:
            assert self.process is not None and self.process.poll() is None, self.tail()
            sources = self._sources()
            if plain_s is None and sources.get(plain) == "completed":
                plain_s = time.monotonic() - started
            lost = [n for n in names
                    if n not in sources and not (rejected / f"{n}.error").exists()]  # fmt: skip
            if plain_s is not None and not lost:
                claimed = sum(n in sources for n in names)
                return BatchResult(claimed, len(names) - claimed, plain_s,
                                   time.monotonic() - started)  # fmt: skip
            time.sleep(0.1)
        raise AssertionError(
            f"within {patience} s: plain task {self._sources().get(plain)!r}; unaccounted "
            f"{[n for n in names if n not in self._sources()]}; spool "
            f"{sorted(os.listdir(self.spool))}\n{self.tail()}"
        )

    def tail(self, size: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-size:]
        return ""

    def stop(self, stop_patience: float = 60.0) -> float:
        """SIGTERM; returns the seconds the engine took to exit."""
        assert self.process is not None
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=stop_patience)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"SIGTERM did not stop the engine in {stop_patience} s") from None
        return time.monotonic() - began

    def close(self) -> None:
        """Kill the engine if it still runs (by its PID) and remove the socket folder."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.sockets, ignore_errors=True)

    def settle(self, patience: float = 60.0) -> dict[str, int]:
        """Wait until every claimed task is in a terminal state; returns :meth:`ended`.

        Raises:
            AssertionError: a task is still live after ``patience`` seconds (a hostile
                value keeps it from ending: the engine works on it forever).
        """
        end = time.monotonic() + patience
        while time.monotonic() < end:
            if self.ended()["not_terminal"] == 0:
                return self.ended()
            time.sleep(0.2)
        live = {name: status for name, status in self._sources().items()
                if status not in TERMINAL}  # fmt: skip
        raise AssertionError(f"tasks still live after {patience} s: {live}\n{self.tail()}")

    def ended(self) -> dict[str, int]:
        """How many claimed tasks are in a terminal state, and how many not."""
        statuses = list(self._sources().values())
        done = sum(status in TERMINAL for status in statuses)
        return {"terminal": done, "not_terminal": len(statuses) - done}
