"""``supervise logs|events`` and the hidden ``supervise _ids``: reading what the engine and
a task wrote (issue 22).

Commands::

    supervise logs -c PROFILE [-n N] [-f]           the engine log (enginelog.py), escaped;
                                                    -f follows it across rotations
    supervise events -c PROFILE ID [-n N] [-f] [--json] [--relative]
                                                    a task's events.jsonl, one line each
                                                    (eventview.py); --json: as stored;
                                                    -f follows until the task ends
    supervise show -c PROFILE ID                    one manifest (moved here from cli.py)
    supervise _ids -c PROFILE                       task ids, one a line (shell completion)

Exit codes (README "Exit codes"): 0 done; 1 no engine log yet (the line says where it will
be), or no such task (the line says whether it is archived, in the spool or rejected);
2 usage error (argparse); 130 interrupted (``-f`` ended with Ctrl-C). ``events`` of an
archived task reads ``events.jsonl`` from its tarball (no ``-f`` then). A damaged line of
``events.jsonl`` is reported on stderr with its number and skipped; the exit stays 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from supervisor.cli.common import err, load_profile
from supervisor.taskdir import layout
from supervisor.taskid import is_task_id
from supervisor.terminal import escape_controls

if TYPE_CHECKING:
    from supervisor.cli.eventview import Parsed
    from supervisor.config import LoadedProfile

#: Seconds between looks at a followed file (``logs -f``, ``events -f``).
FOLLOW_EVERY = 0.25
#: Largest ``manifest.json`` that ``show`` prints, in bytes.
MANIFEST_LIMIT = 64 * 1024 * 1024
#: Most bytes read from a followed file at once.
CHUNK = 1024 * 1024
#: Most bytes of ``events.jsonl`` read from an archived task's tarball.
ARCHIVED_EVENTS_LIMIT = 64 * 1024 * 1024


# ---------------------------------------------------------------- show


def missing_line(profile: LoadedProfile, task_id: str) -> str:
    """:func:`supervisor.taskwhere.missing_line`: why ``task_id`` has no task folder (archived,
    in the spool, rejected, unknown), in one line."""
    from supervisor.taskwhere import missing_line as line

    return line(profile, task_id, str(profile.path))


def cmd_show(args: argparse.Namespace) -> int:
    """``supervise show``: the task's ``manifest.json``, escaped; exit 1 with
    :func:`missing_line` when there is none."""
    profile = load_profile(args.config)
    path = profile.tasks_dir / args.task_id / layout.MANIFEST
    if "/" in args.task_id or not path.exists():
        err(missing_line(profile, args.task_id))
        return 1
    from supervisor.diskio import read_regular
    from supervisor.terminal import escape_json_text

    try:  # never waits on a FIFO put there (an agent can write into its task folder)
        data = read_regular(path, MANIFEST_LIMIT, follow=False)
    except OSError as exc:
        err(f"supervise show: {path}: {exc.strerror or exc}")
        return 1
    sys.stdout.write(escape_json_text(data.decode("utf-8", errors="replace")))
    return 0


# ---------------------------------------------------------------- logs


def cmd_logs(args: argparse.Namespace) -> int:
    """``supervise logs``: the last ``-n`` lines of the engine log, then (``-f``) what is
    appended, across rotations, until interrupted."""
    from supervisor.cli import enginelog

    profile = load_profile(args.config)
    path = enginelog.located(profile.state_dir)
    if not path.is_file():
        err(
            f"supervise logs: no engine log yet; 'supervise run {args.config}' writes it to "
            f"{path} (or to its --log-file)"
        )
        return 1
    follower = enginelog.Follower(path) if args.follow else None  # opened before the tail
    for line in enginelog.tail(path, args.lines):
        print(escape_controls(line, keep="\t"))
    if follower is None:
        return 0
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        while True:
            chunk = follower.read()
            if chunk:
                sys.stdout.write(escape_controls(decoder.decode(chunk), keep="\n\t"))
                sys.stdout.flush()
            else:
                time.sleep(FOLLOW_EVERY)  # a poll interval, not synchronisation
    finally:
        follower.close()


# ---------------------------------------------------------------- events


class _Shown:
    """Prints events as they are parsed: readable or as stored (``--json``), damaged lines
    on stderr; with ``-n N`` only the last ``N`` good ones are printed by :meth:`flush` (the
    earlier ones still set the status a ``from→to`` starts at)."""

    def __init__(self, args: argparse.Namespace, where: str) -> None:
        from collections import deque

        from supervisor.cli.eventview import Renderer

        self.json, self.where = args.json, where
        self.renderer = Renderer(relative=args.relative)
        self.kept: deque[str] | None = None if args.lines is None else deque(maxlen=args.lines)

    def add(self, parsed: list[Parsed]) -> None:
        for item in parsed:
            if item.event is None:
                err(f"{self.where}:{item.number}: damaged line skipped ({item.problem})")
                continue
            # as stored: ASCII-only JSON (taskdir.append_event)
            text = item.text if self.json else self.renderer.line(item.event)
            if self.kept is None:
                print(text)
            else:
                self.kept.append(text)

    def flush(self) -> None:
        """Print the kept lines, then print each later one at once."""
        for text in self.kept or ():
            print(text)
        self.kept = None
        sys.stdout.flush()


def cmd_events(args: argparse.Namespace) -> int:
    """``supervise events``: the task's events, readable or as stored (``--json``)."""
    from supervisor import taskwhere
    from supervisor.cli import eventview
    from supervisor.diskio import open_regular
    from supervisor.taskdir.folder import EVENTS

    profile = load_profile(args.config)
    task_id = args.task_id
    fd = None
    if is_task_id(task_id):
        fd = open_regular(profile.tasks_dir / task_id / EVENTS, follow=False)
    if fd is None and (profile.tasks_dir / task_id / layout.MANIFEST).exists():
        err(f"{profile.tasks_dir / task_id / EVENTS}: missing or not a regular file")
        return 1
    if fd is None:
        tarball = taskwhere.archived_in(profile.state_dir, task_id)
        data = None
        if tarball is not None:
            data = taskwhere.archived_file(tarball, task_id, EVENTS, ARCHIVED_EVENTS_LIMIT)
        if data is None:
            err(missing_line(profile, task_id))
            return 1
        shown = _Shown(args, f"{tarball}:{task_id}/{EVENTS}")
        shown.add(eventview.Splitter().feed(data if data.endswith(b"\n") else data + b"\n"))
        shown.flush()
        return 0
    with open(fd, "rb", buffering=0) as handle:
        return _events_live(handle, profile.tasks_dir / task_id, args)


def _events_live(handle: BinaryIO, folder: Path, args: argparse.Namespace) -> int:
    """Print the events in ``handle``; with ``-f`` go on printing whole new lines until
    the task's manifest says it ended (then one last read: events are written first)."""
    from supervisor.cli.eventview import Splitter

    splitter, shown = Splitter(), _Shown(args, str(folder / layout.EVENTS))
    if args.lines is not None:  # -n N: start at the last N lines, never read the rest
        _from_the_end(handle, args.lines, shown)
    while chunk := handle.read(CHUNK):
        shown.add(splitter.feed(chunk))
    shown.flush()
    ended = not args.follow
    while True:
        chunk = handle.read(CHUNK)
        if chunk:
            shown.add(splitter.feed(chunk))
            sys.stdout.flush()
        elif ended:
            return 0
        else:
            ended = _ended(folder)
            if not ended:
                time.sleep(FOLLOW_EVERY)  # a poll interval, not synchronisation


def _from_the_end(handle: BinaryIO, count: int, shown: _Shown) -> None:
    """Move ``handle`` to where its last ``count`` lines begin (:func:`eventview.tail_offset`)
    and tell ``shown`` the status the event before them set (for the first ``from→to``).
    Damaged lines before that point are not read, so not reported."""
    import os

    from supervisor.cli.eventview import status_before, tail_offset

    fd = handle.fileno()
    offset = tail_offset(lambda at, n: os.pread(fd, n, at), os.fstat(fd).st_size, count)
    shown.renderer.status = status_before(lambda at, n: os.pread(fd, n, at), offset)
    handle.seek(offset)


def _ended(folder: Path) -> bool:
    """Whether the task's manifest says it is in a terminal state (unreadable: not yet)."""
    from supervisor.taskdir.states import TERMINAL
    from supervisor.waiting import read_manifest  # never blocks on a FIFO put there

    manifest = read_manifest(folder / layout.MANIFEST)
    return manifest is not None and manifest.get("status") in TERMINAL


# ---------------------------------------------------------------- _ids


def cmd_ids(args: argparse.Namespace) -> int:
    """``supervise _ids``: every task id of the profile, one a line (task folders, then
    files waiting in the spool), for shell completion. Reads only the profile's two folders
    (:mod:`supervisor.profilepaths`), never validates it; prints nothing on any problem."""
    import os

    from supervisor.profilepaths import read_paths

    paths = read_paths(args.config)
    if paths is None:
        return 1
    ids: list[str] = []
    for folder, suffix in ((paths.tasks_dir, ""), (paths.spool_dir, ".toml")):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.endswith(suffix) and is_task_id(name[: len(name) - len(suffix)]):
                ids.append(name[: len(name) - len(suffix)])
    sys.stdout.write("".join(f"{task_id}\n" for task_id in dict.fromkeys(ids)))
    return 0


# ---------------------------------------------------------------- parser


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of lines") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of lines >= 0")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``logs``, ``events`` and the hidden ``_ids`` to the ``supervise`` parser."""
    logs = sub.add_parser("logs", help="print (and follow) the engine log")
    logs.add_argument("-c", "--config", required=True, help="profile TOML file")
    logs.add_argument("-n", "--lines", type=_count, default=50, help="lines to print (50)")
    logs.add_argument("-f", "--follow", action="store_true", help="follow it, across rotations")
    logs.set_defaults(func=cmd_logs)

    events = sub.add_parser("events", help="print (and follow) a task's events readably")
    events.add_argument("-c", "--config", required=True, help="profile TOML file")
    events.add_argument("task_id", metavar="ID")
    events.add_argument("-n", "--lines", type=_count, help="only the last N events")
    events.add_argument("-f", "--follow", action="store_true", help="follow until the task ends")
    events.add_argument("--json", action="store_true", help="the events as stored, JSON lines")
    events.add_argument("--relative", action="store_true", help="times as ages (3m05s ago)")
    events.set_defaults(func=cmd_events)

    ids = sub.add_parser("_ids")  # no help: left out of the command list and of completion
    ids.add_argument("-c", "--config", required=True)
    ids.set_defaults(func=cmd_ids)
