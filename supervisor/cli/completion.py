"""Task ids in ``supervise completion bash|zsh|fish`` (issue 22): every argument that takes a
task id (``show``, ``stop``, ``resume``, ``approve``, ``deny``, ``tail``, ``attach``,
``wait``, ``events``, ``diff``, ``merge``, ``discard``, ``continue``, and any later command
whose positional is named ``task_id``/``task_ids`` or shown as ``ID``) completes to the ids
of the profile given with ``-c``/``--config`` on the same command line.

The ids come from the hidden ``supervise _ids -c PROFILE`` (:func:`supervisor.cli.read.cmd_ids`:
the task folders and spool files, read without validating the profile), run by a shell
function that shtab's generated script calls (shtab's ``complete`` dict with a
``preamble`` per shell). Without ``-c`` nothing is offered. Standard library only.
"""

from __future__ import annotations

import argparse
from textwrap import dedent
from typing import Any

#: Argument destinations that hold task ids.
ID_DESTS = frozenset({"task_id", "task_ids", "ids"})
#: The shell function each script defines and calls for a task id.
FUNCTION = "_supervise_task_ids"

_BASH = dedent(
    f"""
    # Task ids of the profile named by -c/--config on this command line (supervise _ids).
    {FUNCTION}() {{
      local i profile=""
      for ((i = 1; i < ${{#COMP_WORDS[@]}}; i++)); do
        case "${{COMP_WORDS[i]}}" in
          -c|--config) profile="${{COMP_WORDS[i+1]}}" ;;
          --config=*) profile="${{COMP_WORDS[i]#--config=}}" ;;
        esac
      done
      [ -n "$profile" ] || return 0
      profile="${{profile/#\\~/$HOME}}"
      compgen -W "$("${{COMP_WORDS[0]}}" _ids -c "$profile" 2>/dev/null)" -- "$1"
    }}
    """
)

_ZSH = dedent(
    f"""
    # Task ids of the profile named by -c/--config on this command line (supervise _ids).
    {FUNCTION}() {{
      local i profile
      local -a ids
      for ((i = 1; i <= $#words; i++)); do
        case $words[i] in
          -c|--config) profile=$words[i+1] ;;
          --config=*) profile=${{words[i]#--config=}} ;;
        esac
      done
      [[ -n $profile ]] || return 1
      ids=(${{(f)"$(${{service:-supervise}} _ids -c ${{~profile}} 2>/dev/null)"}})
      compadd -a ids
    }}
    """
)

_FISH = dedent(
    f"""
    # Task ids of the profile named by -c/--config on this command line (supervise _ids).
    function {FUNCTION}
      set -l words (commandline -opc)
      set -l profile
      for i in (seq (count $words))
        switch $words[$i]
          case -c --config
            set profile $words[(math $i + 1)]
          case '--config=*'
            set profile (string replace -- --config= '' $words[$i])
        end
      end
      test -n "$profile"; or return 0
      set profile (string replace -r -- '^~' $HOME $profile)
      $words[1] _ids -c $profile 2>/dev/null
    end
    """
)

#: shtab's ``complete`` value for a task-id argument.
TASK_IDS: dict[str, Any] = {
    "bash": FUNCTION,
    "zsh": FUNCTION,
    "fish": f"({FUNCTION})",
    "preamble": {"bash": _BASH, "zsh": _ZSH, "fish": _FISH},
}


def mark_ids(parser: argparse.ArgumentParser) -> None:
    """Set shtab's ``complete`` to :data:`TASK_IDS` on every positional of every subcommand
    whose ``dest`` is in :data:`ID_DESTS` or whose ``metavar`` is ``ID``."""
    for action in parser._actions:
        positional = not action.option_strings
        if positional and (action.dest in ID_DESTS or action.metavar == "ID"):
            action.complete = TASK_IDS  # type: ignore[attr-defined]
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                mark_ids(child)
