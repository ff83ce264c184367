"""``supervise init|schema|startup|completion`` and ``--version``: setting supervise up.

Commands::

    supervise init [DIR] [--claude] [--force]   a starter profile (the demo, or Claude Code)
    supervise schema profile|task|manifest|status   print a JSON Schema (the package's copy)
    supervise startup -c PROFILE [--install]    a systemd user unit that runs the engine
    supervise completion bash|zsh|fish          a shell completion script (shtab)

Exit codes (as :mod:`supervisor.cli`): 0 done, 1 refused or failed (an existing file, a
profile that does not load, no systemd for ``--install``, ``systemctl`` failing), 2 usage
error (argparse). A refusal is one line on stderr.

Only the standard library is imported at module level: ``supervise --version`` and every
other command import this module.
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from supervisor import DISTRIBUTION
from supervisor.cli.common import Parser, err, load_profile, private_folders

#: ``supervise schema NAME`` → the shipped schema file.
SCHEMAS = {
    "profile": "profile.schema.json",
    "task": "task.schema.json",
    "manifest": "manifest.schema.json",
    "status": "status.schema.json",
    "permission-event": "permission-event.schema.json",
}

#: Seconds ``supervise init`` waits for another init writing into the same folder.
INIT_WAIT = 30.0
#: Seconds ``supervise startup --install`` waits for another install: its two systemctl
#: calls of at most ``systemd.SYSTEMD_TIMEOUT`` (10) seconds each, with room to spare.
INSTALL_WAIT = 30.0
#: Header of the profile ``supervise init`` writes.
INIT_HEADER = """\
# A starter profile written by `supervise init`: the honest demo agent (no model, no
# network), so the whole path spool -> tmux -> manifest runs with only Python and tmux.
#   supervise run {profile} --exit-when-idle     runs the tasks init put in the spool
#   supervise submit -c {profile} {tasks}/hello.toml
# Relative paths resolve against this file's folder. [tmux] socket_name is left out: it is
# then supervise-<8 hex of the state_dir>, a private tmux server for this folder alone.
# For Claude Code: supervise init --claude DIR (`supervise schema profile` lists keys).

"""


def version() -> str:
    """The installed distribution's version (:data:`DISTRIBUTION`, importlib.metadata), or
    ``supervisor.__version__`` (the same number: pyproject reads it from there) when the
    package runs from a checkout that was never installed."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        from supervisor import __version__

        return __version__


class _VersionAction(argparse.Action):
    """``--version``: print ``supervise VERSION`` and exit 0; the version is looked up only
    when asked (importlib.metadata scans ``sys.path``)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str = argparse.SUPPRESS,
        default: Any = argparse.SUPPRESS,
        help: str | None = None,
    ) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(f"supervise {version()}")
        parser.exit()


def add_version_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--version`` to ``supervise``'s top-level parser."""
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")


# ---------------------------------------------------------------- init


def starter_profile(folder: Path) -> str:
    """The text of the profile ``supervise init`` writes into ``folder``: the shipped demo
    profile with ``spool``, ``state`` beside it and no ``socket_name``."""
    import tomllib

    import tomli_w

    from supervisor import bundled

    data = tomllib.loads(bundled.read_text("profiles", "demo.toml"))
    data["paths"] = {"spool_dir": "spool", "state_dir": "state"}
    data.pop("tmux", None)
    from supervisor.cli.starter_claude import shown

    header = INIT_HEADER.format(
        profile=shown(folder / "profile.toml"), tasks=shown(folder / "tasks")
    )
    return header + tomli_w.dumps(data)


def cmd_init(args: argparse.Namespace) -> int:
    """Write a starter into ``DIR``: the demo (:func:`_write_starter`) or, with
    ``--claude``, a Claude Code profile and a sample task (:mod:`supervisor.cli.starter_claude`).
    Refuses, in one line, to overwrite a file it would write unless ``--force``. Two inits
    into one folder at once: one writes, the other waits for it (a lock on ``DIR``,
    :mod:`supervisor.statelock`) and then refuses, as for any existing file."""
    from supervisor import statelock
    from supervisor.cli import starter_claude

    folder = Path(args.dir)
    names = starter_claude.FILES if args.claude else ("profile.toml",)
    try:
        if args.force or not _taken(folder, names):
            folder.mkdir(parents=True, exist_ok=True)
            with statelock.held(folder, grace=INIT_WAIT):
                if args.force or not _taken(folder, names):
                    (starter_claude.write if args.claude else _write_starter)(folder)
                    return 0
    except statelock.LockBusy:
        err(
            f"supervise init: another 'supervise init' is still writing {folder}; "
            "run it again once that one ends"
        )
        return 1
    except OSError as exc:
        err(f"supervise init: cannot write {exc.filename or folder}: {exc.strerror}")
        return 1
    err(
        f"supervise init: {_taken(folder, names)[0]} exists; not overwriting it (remove it, "
        "give another folder: supervise init DIR, or replace it: --force)"
    )
    return 1


def _taken(folder: Path, names: Sequence[str]) -> list[Path]:
    """The files of ``names`` (relative to ``folder``) that exist, as paths."""
    return [folder / name for name in names if os.path.lexists(folder / name)]


def _write_starter(folder: Path) -> None:
    """The demo's files (the caller holds the folder's lock): ``profile.toml``, the private
    ``spool/`` and ``state/``, each demo task's ``project_dir``, the demo's task files in
    ``tasks/`` and a copy of each in the spool. Raises OSError."""
    from supervisor import bundled
    from supervisor.cli.starter_claude import shown
    from supervisor.diskio import atomic_write

    private_folders(folder)
    (folder / "tasks").mkdir(exist_ok=True)
    tasks = {e.name: e.read_bytes() for e in bundled.folder("demo_tasks").iterdir()}
    tasks = {name: data for name, data in tasks.items() if name.endswith(".toml")}
    for data in tasks.values():  # all made before any task file is written
        # each task's project_dir, relative to the spool it is read from
        _project_folder(folder / "spool" / tomllib.loads(data.decode())["project_dir"])
    for name, data in sorted(tasks.items()):
        atomic_write(folder / "tasks" / name, data, durable=False)
        atomic_write(folder / "spool" / name, data, durable=False)
    atomic_write(folder / "profile.toml", starter_profile(folder).encode(), durable=False)
    profile = shown(folder / "profile.toml")
    print(f"wrote {profile}, and in {shown(folder)}: spool/ (holding the demo tasks), state/")
    print(f"run:  supervise run {profile} --exit-when-idle")


def _project_folder(path: Path) -> None:
    """Make a demo task's ``project_dir`` (``path``: relative to the spool, ``..`` kept for
    the kernel to resolve), or keep the folder that is there. Found by attack: a file in
    its place failed half way, some task files written, in a line with no fix.

    Raises:
        NotADirectoryError: something that is not a folder is there (its line names the fix).
        OSError: it cannot be made.
    """
    try:
        path.mkdir()
    except FileExistsError:
        if not path.is_dir():
            shown = os.path.normpath(path)
            why = "it is not a folder (move it aside, or give another folder: supervise init DIR)"
            raise NotADirectoryError(errno.ENOTDIR, why, shown) from None


# ---------------------------------------------------------------- schema


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the shipped JSON Schema of ``args.name``."""
    from supervisor import bundled

    sys.stdout.write(bundled.read_text("schemas", SCHEMAS[args.name]))
    return 0


# ---------------------------------------------------------------- startup


def supervise_command() -> list[str]:
    """How to run this very ``supervise``, absolute: the console script that is running
    (``sys.argv[0]``) or, from ``python -m supervisor.cli``, the interpreter and ``-m``."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "supervise" and argv0.is_file():
        return [os.path.abspath(argv0)]
    return [sys.executable, "-m", "supervisor.cli"]


def cmd_startup(args: argparse.Namespace) -> int:
    """Print the systemd user unit for ``-c PROFILE``, or write, enable and start it."""
    from supervisor import systemd

    profile = load_profile(args.config).path  # loads it: a broken profile is one clear line
    name = systemd.unit_name(profile)
    text = systemd.unit_text(supervise_command(), profile, os.environ.get("PATH", os.defpath))
    command = " ".join([*supervise_command(), "run", str(profile)])
    if not systemd.booted():
        if not args.install:
            sys.stdout.write(text)
        err(systemd.NO_SYSTEMD.format(command=command, log=profile.with_suffix(".log")))
        return 1 if args.install else 0
    if not args.install:
        sys.stdout.write(text)
        err(f"# install as ~/.config/systemd/user/{name}: supervise startup -c {profile} --install")
        return 0
    return _install(name, text)


def _install(name: str, text: str) -> int:
    """Write, enable and start the unit. Two installs at once run one after the other (a
    lock on the unit folder, :mod:`supervisor.statelock`): the second finds the same unit
    in place, never a half-written one, and enables it again (a no-op)."""
    from supervisor import statelock, systemd

    folder = systemd.USER_UNIT_DIR.expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with statelock.held(folder, grace=INSTALL_WAIT):
            return _install_locked(folder / name, text)
    except statelock.LockBusy:
        err(
            f"supervise startup: another 'supervise startup --install' still runs in {folder}; "
            "run it again once that one ends"
        )
        return 1
    except OSError as exc:
        err(f"supervise startup: cannot write {exc.filename or folder}: {exc.strerror}")
        return 1


def _install_locked(path: Path, text: str) -> int:
    """:func:`_install` under its lock. Raises OSError when the unit cannot be written."""
    from supervisor import systemd
    from supervisor.diskio import atomic_write

    name = path.name
    if path.exists() and path.read_text(encoding="utf-8") != text:
        err(
            f"supervise startup: {path} exists and differs (another profile, or another "
            f"supervise); remove it first: systemctl --user disable --now {name}"
        )
        return 1
    atomic_write(path, text.encode())
    print(f"wrote {path}")
    for argv in (
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", name],
    ):
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=systemd.SYSTEMD_TIMEOUT
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            err(f"supervise startup: {' '.join(argv)}: {exc}")
            return 1
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            err(f"supervise startup: {' '.join(argv)} failed: {last}")
            return 1
    print(f"enabled and started {name}: systemctl --user status {name}")
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or ""
    if user and not systemd.lingering(user):
        err(
            f"note: lingering is off for {user}: the unit starts at your first login, "
            "not at boot, and stops at your last logout. "
            f"Fix: loginctl enable-linger {user}"
        )
    return 0


# ---------------------------------------------------------------- completion

#: Argument destinations completed as paths: files, or folders (``init DIR``).
_FILE_DESTS = {"config", "profile", "task", "files", "log_file"}
_DIR_DESTS = {"dir"}


def cmd_completion(args: argparse.Namespace, whole: Parser) -> int:
    """Print the completion script for ``args.shell``, generated by shtab from the whole
    parser that ``whole()`` builds (:func:`supervisor.cli.app.build_parser`, handed over by
    :func:`register`: this module never imports the parser's)."""
    import shtab

    from supervisor.cli.completion import mark_ids

    parser = whole()
    _mark_paths(parser, shtab.FILE, shtab.DIRECTORY)
    mark_ids(parser)  # task ids from the profile given with -c (completion.py)
    sys.stdout.write(shtab.complete(parser, shell=args.shell))
    return 0


def _mark_paths(parser: argparse.ArgumentParser, files: Any, folders: Any) -> None:
    """Set shtab's ``complete`` on every argument in :data:`_FILE_DESTS` (``files``) and
    :data:`_DIR_DESTS` (``folders``), in every subcommand, so the shell offers paths there."""
    for action in parser._actions:
        if action.dest in _FILE_DESTS:
            action.complete = files  # type: ignore[attr-defined]
        elif action.dest in _DIR_DESTS:
            action.complete = folders  # type: ignore[attr-defined]
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _mark_paths(child, files, folders)


# ---------------------------------------------------------------- parser


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], whole: Parser) -> None:
    """Add ``init``, ``schema``, ``startup`` and ``completion`` to the subcommands;
    ``whole()`` builds the whole ``supervise`` parser (``completion`` prints its script)."""
    init = sub.add_parser("init", help="write a starter profile (the demo) and its folders")
    init.add_argument("dir", nargs="?", default=".", metavar="DIR", help="folder (default: .)")
    init.add_argument(
        "--claude",
        action="store_true",
        help="a Claude Code profile and a sample task, every path inside DIR",
    )
    init.add_argument("--force", action="store_true", help="replace the files it would write")
    init.set_defaults(func=cmd_init)

    schema = sub.add_parser("schema", help="print a JSON Schema (profile, task, manifest...)")
    schema.add_argument("name", choices=sorted(SCHEMAS))
    schema.set_defaults(func=cmd_schema)

    startup = sub.add_parser("startup", help="a systemd user unit that runs the engine")
    startup.add_argument("-c", "--config", required=True, help="profile TOML file")
    startup.add_argument(
        "--install", action="store_true", help="write it to ~/.config/systemd/user/, enable, start"
    )
    startup.set_defaults(func=cmd_startup)

    completion = sub.add_parser("completion", help="print a shell completion script")
    completion.add_argument("shell", choices=["bash", "zsh", "fish"])
    completion.set_defaults(func=functools.partial(cmd_completion, whole=whole))
