"""How a Claude Code run gets its prompt: never as an argv element beyond a safe size.

Linux caps one argv string at 128 KiB (``E2BIG``, :mod:`supervisor.config.argsize`), and a
task's prompt may be 10 MiB. Measured with the real CLI 2.1.328 (tests/test_prompt_e2e.py):

* ``claude -p`` reads its prompt from stdin when no prompt argument is given, also with
  ``--session-id`` or ``--resume``; a regular file as stdin ends at its end, nothing has to
  be closed. A headless first run therefore always gets the task's ``prompt`` file as
  stdin (``launch.json`` ``stdin``) and no prompt in argv.
* The TUI needs the terminal as stdin. A prompt up to :data:`ARGV_PROMPT_MAX` bytes stays
  its positional argument; a longer one is typed into the TUI by the wrapper as one
  bracketed paste (``launch.json`` ``paste``): the TUI shows a 300 KB paste as
  ``[Pasted text #1 +N lines]`` within a second and sends all of it on Enter. The wrapper
  waits for the input box (:data:`READY`) before pasting and for :data:`PASTED` before
  Enter.
* tmux (3.3a) pastes a buffer as it is: a prompt holding ``ESC [201~`` would end the
  bracketed paste early and its next characters would be keystrokes to the TUI (Ctrl-C,
  Shift-Tab cycles the permission mode, CR submits). The TUI is therefore given
  :func:`inert` text, written to :data:`PASTE_FILE` in the task folder: control characters
  but tab and newline become visible escapes (``\\x1b``), as they would be harmless
  bytes in argv.
* A prompt over the model's context window is refused by the CLI before any API call
  (sonnet-4-6, 200k tokens: 650 KB pass, 700 KB do not): ``-p`` exits 1 with "Prompt is
  too long"; the TUI shows :data:`REFUSED` and waits, with no Stop or StopFailure hook, so
  the wrapper looks for it after Enter (``refused``) and ends the run as not launched.
* A resume passes ``resume_prompt`` (a profile value, at most :data:`ARGV_PROMPT_MAX`
  bytes) as the positional argument, in both modes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from supervisor.config import AgentSpec
from supervisor.config.argsize import ARGV_PROMPT_MAX
from supervisor.diskio import atomic_write
from supervisor.taskdir import layout

#: The TUI's empty input box: a rule line, then the ``❯`` prompt on the next line, not a
#: numbered choice (a dialog's cursor is ``❯ 1. Yes``), as ``capture-pane -p`` shows it
#: (the CLI may put a no-break space after ``❯``: ``\s`` takes it).
READY = r"^─{8,}[ ]*\n❯(?!\s*\d+\.)"
#: What the TUI shows once it holds a long paste (``[Pasted text #1 +11112 lines]``).
PASTED = r"\[Pasted text #\d+"
#: The TUI's answer to a prompt over its model's context window (measured: sonnet-4-6's
#: 200k tokens; about 650 KB pass, 700 KB do not): no API call, no Stop or StopFailure
#: hook, the TUI just waits. The wrapper looks for it after Enter.
REFUSED = r"^\s*⎿\s+Context limit reached\b"
#: The launch error the wrapper records when it sees :data:`REFUSED`.
REFUSED_WHY = (
    "the prompt is larger than the model's context window (Claude Code: Context limit "
    "reached); shorten it or pick a model with a larger window"
)
#: Seconds the wrapper waits for the input box before it gives up (the TUI starts in about
#: a second; a loaded machine or a first-run dialog takes longer).
PASTE_TIMEOUT = 60.0
#: The task folder's file the wrapper pastes: the prompt made :func:`inert` (mode 0600).
PASTE_FILE = "prompt.paste"
#: Characters a terminal application takes as keys, not text: C0 but tab and newline, DEL,
#: C1 (ECMA-48).
_KEYS_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(prompt: str) -> str:
    """``prompt`` with every character a TUI would take as a key (see :data:`_KEYS_RE`)
    written as a visible escape, ``\\x1b`` or ``\\x9b``: pasted, it stays text."""
    return _KEYS_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", prompt)


@dataclass(frozen=True)
class Delivery:
    """How one run gets its prompt.

    Attributes:
        tail: the end of the argv: ``["--", PROMPT]`` (a placeholder or the resume prompt),
            or ``[]`` when the prompt goes another way.
        stdin: the file the wrapper gives the agent as stdin, or ``None`` (the pane's tty).
        paste: the wrapper's ``paste`` spec (:mod:`supervisor.wrapper`, step 7), or ``None``.
    """

    tail: list[str]
    stdin: str | None = None
    paste: dict[str, object] | None = None


def delivery(
    agent: AgentSpec, resume: bool, prompt: str, task_dir: Path, prompt_name: str = layout.PROMPT
) -> Delivery:
    """The way the prompt reaches this run (see the module docstring); for a paste, the
    :func:`inert` prompt is written to ``task_dir/``:data:`PASTE_FILE` first.

    Args:
        agent: the profile's ``[agent]`` (``mode``, ``resume_prompt``).
        resume: a resume (the prompt is ``resume_prompt``).
        prompt: the task's prompt.
        task_dir: the task folder, holding ``prompt`` (written at claim time).
        prompt_name: the file of ``task_dir`` that holds ``prompt`` (a follow-up's turn:
            ``turn.prompt``), given as stdin to a headless run.

    Raises:
        OSError: the paste file cannot be written (the launch is retried as for
            ``launch.json``).
    """
    prompt_file = task_dir / prompt_name
    # "--" ends the options, so a prompt that starts with "-" is still the prompt.
    if resume:
        return Delivery(["--", agent.resume_prompt])
    if agent.mode == "headless":
        return Delivery([], stdin=str(prompt_file))
    if len(prompt.encode("utf-8")) <= ARGV_PROMPT_MAX:
        return Delivery(["--", "{prompt}"])
    pasted = task_dir / PASTE_FILE
    atomic_write(pasted, inert(prompt).encode("utf-8"))
    os.chmod(pasted, 0o600)
    paste = {
        "path": str(pasted),
        "ready": READY,
        "pasted": PASTED,
        "timeout": PASTE_TIMEOUT,
        "refused": REFUSED,
        "refused_why": REFUSED_WHY,
    }
    return Delivery([], paste=paste)
