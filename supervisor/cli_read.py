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
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor.terminal import escape_controls

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile
    from supervisor.eventview import Parsed, Renderer

#: Seconds between looks at a followed file (``logs -f``, ``events -f``).
FOLLOW_EVERY = 0.25
#: Most bytes of ``events.jsonl`` read from an archived task's tarball.
ARCHIVED_EVENTS_LIMIT = 64 * 1024 * 1024


def _err(message: str) -> None:
    print(escape_controls(message), file=sys.stderr)


def _profile(path: str) -> LoadedProfile:
    from supervisor.config import load_profile

    return load_profile(path)


# ---------------------------------------------------------------- show


def missing_line(profile: LoadedProfile, task_id: str) -> str:
    """:func:`supervisor.taskwhere.missing_line`: why ``task_id`` has no task folder (archived,
    in the spool, rejected, unknown), in one line."""
    from supervisor.taskwhere import missing_line as line

    return line(profile, task_id, str(profile.path))


def cmd_show(args: argparse.Namespace) -> int:
    """``supervise show``: the task's ``manifest.json``, escaped; exit 1 with
    :func:`missing_line` when there is none."""
    profile = _profile(args.config)
    path = profile.tasks_dir / args.task_id / "manifest.json"
    if "/" in args.task_id or not path.exists():
        _err(missing_line(profile, args.task_id))
        return 1
    from supervisor.terminal import escape_json_text

    sys.stdout.write(escape_json_text(path.read_text(encoding="utf-8", errors="replace")))
    return 0


# ---------------------------------------------------------------- logs


def cmd_logs(args: argparse.Namespace) -> int:
    """``supervise logs``: the last ``-n`` lines of the engine log, then (``-f``) what is
    appended, across rotations, until interrupted."""
    from supervisor import enginelog

    profile = _profile(args.config)
    path = enginelog.located(profile.state_dir)
    if not path.is_file():
        _err(
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


def _print(parsed: list[Parsed], args: argparse.Namespace, renderer: Renderer, where: str) -> None:
    for item in parsed:
        if item.event is None:
            _err(f"{where}:{item.number}: damaged line skipped ({item.problem})")
        elif args.json:
            print(item.text)  # as stored: ASCII-only JSON (taskdir.append_event)
        else:
            print(renderer.line(item.event))


def cmd_events(args: argparse.Namespace) -> int:
    """``supervise events``: the task's events, readable or as stored (``--json``)."""
    from supervisor import eventview, taskwhere
    from supervisor.taskdir import EVENTS

    profile = _profile(args.config)
    task_id = args.task_id
    folder = profile.tasks_dir / task_id
    renderer = eventview.Renderer(relative=args.relative)
    if not taskwhere.TASK_ID.fullmatch(task_id) or not (folder / EVENTS).is_file():
        tarball = taskwhere.archived_in(profile.state_dir, task_id)
        data = None
        if tarball is not None:
            data = taskwhere.archived_file(tarball, task_id, EVENTS, ARCHIVED_EVENTS_LIMIT)
        if data is None:
            _err(missing_line(profile, task_id))
            return 1
        parsed = eventview.parse_lines(data.decode("utf-8", errors="replace"))
        _print(_last(parsed, args.lines), args, renderer, f"{tarball}:{task_id}/{EVENTS}")
        return 0
    return _events_live(folder / EVENTS, args, renderer)


def _last(parsed: list[Parsed], lines: int | None) -> list[Parsed]:
    if lines is None:
        return parsed
    good = [p for p in parsed if p.event is not None]
    keep = {id(p) for p in good[-lines:]} if lines > 0 else set()
    return [p for p in parsed if id(p) in keep or p.event is None]


def _events_live(path: Path, args: argparse.Namespace, renderer: Renderer) -> int:
    """Print ``path``'s events; with ``-f`` go on printing whole new lines until the task's
    manifest says it ended (then one last read)."""
    from supervisor import eventview

    with open(path, "rb") as handle:
        data = handle.read()
        whole = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
        parsed = eventview.parse_lines(whole.decode("utf-8", errors="replace"))
        if args.lines is not None:
            for item in parsed[: len(parsed) - len(_last(parsed, args.lines))]:
                if item.event is not None:
                    renderer.line(item.event)  # the status before
        _print(_last(parsed, args.lines), args, renderer, str(path))
        if not args.follow:
            return 0
        number = whole.count(b"\n") + 1
        pending = data[len(whole) :]
        ended = False
        while True:
            chunk = handle.read()
            if not chunk and ended:
                return 0
            if not chunk:
                ended = _ended(path.parent)
                if not ended:
                    time.sleep(FOLLOW_EVERY)  # a poll interval, not synchronisation
                continue
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            text, pending = pending[:cut].decode("utf-8", errors="replace"), pending[cut:]
            _print(eventview.parse_lines(text, number), args, renderer, str(path))
            number += text.count("\n")
            sys.stdout.flush()


def _ended(folder: Path) -> bool:
    """Whether the task's manifest says it is in a terminal state (unreadable: not yet)."""
    from supervisor.states import TERMINAL

    try:
        manifest = json.loads((folder / "manifest.json").read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("status") in TERMINAL


# ---------------------------------------------------------------- _ids


def cmd_ids(args: argparse.Namespace) -> int:
    """``supervise _ids``: every task id of the profile, one a line (task folders, then
    files waiting in the spool), for shell completion. Reads only the profile's two folders
    (:mod:`supervisor.profilepaths`), never validates it; prints nothing on any problem."""
    import os

    from supervisor.profilepaths import read_paths
    from supervisor.taskwhere import TASK_ID

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
            if name.endswith(suffix) and TASK_ID.fullmatch(name[: len(name) - len(suffix)]):
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
