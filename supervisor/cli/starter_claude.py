"""``supervise init --claude DIR``: a working Claude Code profile and a sample task, with
every path inside ``DIR`` (issue 22 item 8).

The profile is the shipped ``profiles/long.toml`` (one owner of the Claude Code defaults:
headless, manual permissions answered by its approval rules, the seed monitor's values)
with its paths made ``DIR``-relative: ``spool/`` and ``state/`` (the task folders and the
worktrees, ``state/worktrees``, live under it), no ``[tmux] socket_name`` (then
``supervise-<8 hex of state_dir>``, a server private to this folder) and no notifier (none
is sure to exist; README "Notifications" has recipes). Nothing is put in the spool: a task
costs money, so the user submits the sample when ready. Only the standard library is
imported at module level (``supervise --version`` imports the CLI).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from supervisor.taskdir import layout

#: What ``init --claude`` writes, relative to ``DIR``; one that exists is refused unless
#: ``--force`` (:func:`supervisor.cli.setup.cmd_init`).
FILES = ("profile.toml", "tasks/hello.toml")

#: The sample task (``tasks/hello.toml``); relative paths resolve against its folder.
SAMPLE_TASK = """\
# A sample Claude Code task. Submit it with
#   supervise submit -c {profile} {task}
# project_dir is the folder the agent works in (a git repository gets a worktree per task;
# one without a commit yet, or a plain folder, is worked in place). Relative paths resolve
# against this file's folder. `supervise schema task` lists every key.
name = "hello"
project_dir = "../project"
prompt = "Create hello.txt holding a one-line greeting, then say DONE."
"""

#: Header of the profile; ``{...}`` are filled with absolute paths.
HEADER = """\
# A Claude Code profile written by `supervise init --claude`: the shipped long.toml with
# every path inside {folder} (spool/, state/ with the task folders and worktrees, the
# engine log below). Relative paths resolve against this file's folder.
#   supervise validate -c {profile} {profile} {task}
#   supervise run {profile} --log-file {log}    # the engine; leave it running
#   supervise submit -c {profile} {task}                      # prints the task id
#   supervise submit -c {profile} --prompt 'Say hello.' --project {project}   # no file
#   supervise wait -c {profile} TASK_ID && supervise show -c {profile} TASK_ID
# [agent] binary is `claude` on the engine's PATH: set an absolute path if it is elsewhere.
# [agent.env] adds environment for every agent, e.g. a gateway's ANTHROPIC_BASE_URL and
# ANTHROPIC_AUTH_TOKEN (this file is readable by you alone).
# No notifier is set (README "Notifications" has recipes); `supervise schema profile`
# lists every key.

"""


def claude_profile(folder: Path) -> str:
    """The text of ``DIR/profile.toml`` for ``folder`` (see the module docstring)."""
    import tomli_w

    from supervisor import bundled

    data = tomllib.loads(bundled.read_text("profiles", "long.toml"))
    data["paths"] = {"spool_dir": "spool", "state_dir": "state"}
    data.pop("tmux", None)
    data.get("monitor", {}).pop("notifier", None)
    data.get("workspace", {}).pop("root", None)
    names = _names(folder)
    return HEADER.format(**names) + tomli_w.dumps(data)


def _names(folder: Path) -> dict[str, str]:
    """The paths shown in comments and printed: absolute, quoted for a shell, control
    characters escaped (a newline in ``DIR`` would end a TOML comment and start a key)."""
    folder = Path(os.path.abspath(folder))
    return {
        "folder": shown(folder),
        "profile": shown(folder / "profile.toml"),
        "task": shown(folder / "tasks" / "hello.toml"),
        "log": shown(folder / layout.ENGINE_LOG),
        "project": shown(folder / "project"),
    }


def shown(path: Path) -> str:
    """``path`` for a comment or a suggested command: shell-quoted, control characters
    escaped (:func:`supervisor.terminal.escape_controls`)."""
    import shlex

    from supervisor.terminal import escape_controls

    return escape_controls(shlex.quote(str(path)))


def write(folder: Path) -> None:
    """Write ``DIR/profile.toml``, ``DIR/tasks/hello.toml``, ``DIR/project/`` and the
    private ``DIR/spool/`` and ``DIR/state/`` (mode 0700), replacing the two files when they
    exist (the caller refused them unless ``--force`` and holds the folder's lock); print
    what was written and the next commands.

    Raises:
        OSError: a file or folder cannot be written.
    """
    from supervisor.cli.common import private_folders
    from supervisor.diskio import atomic_write

    names = _names(folder)
    private_folders(folder)
    (folder / "project").mkdir(exist_ok=True)
    (folder / "tasks").mkdir(exist_ok=True)
    task = SAMPLE_TASK.format(**names).encode()
    atomic_write(folder / "tasks" / "hello.toml", task, durable=False)
    atomic_write(folder / "profile.toml", claude_profile(folder).encode(), durable=False)
    profile, sample = names["profile"], names["task"]
    print(
        f"wrote {profile} (Claude Code), {sample}, and in {names['folder']}: project/, "
        "spool/, state/"
    )
    print("next:")
    print(f"  supervise validate -c {profile} {profile} {sample}")
    print(f"  supervise run {profile} --log-file {names['log']} &")
    print(f"  supervise submit -c {profile} {sample}")
    print(f"  supervise submit -c {profile} --prompt 'Say hello.' --project {names['project']}")
    print(f"  supervise wait -c {profile} ID --json --brief")
    print(f"  supervise status -c {profile}")
