"""Whether a task's prompt can reach its agent: the size rules of argv (issue 21).

Linux caps one argv or environment string at 128 KiB (``MAX_ARG_STRLEN``,
:data:`supervisor.wrapper.ARG_STRLEN_MAX`); a longer one makes ``execve`` fail with
``E2BIG`` and the agent never starts. A prompt may be 10 MiB
(:data:`supervisor.config.models.MAX_PROMPT_BYTES`), so:

* Claude Code's adapter never puts a prompt over :data:`ARGV_PROMPT_MAX` in argv: ``-p``
  reads it from stdin, the TUI gets it as a paste (:mod:`supervisor.agents.claude.delivery`);
* a ``generic`` agent whose argv holds ``{prompt}`` takes a prompt only while the element
  it fills stays within :data:`ARGV_PROMPT_MAX`: :func:`prompt_problems` refuses a longer
  one when the task is validated, submitted or claimed, naming the fix (``{prompt_file}``).

Environment strings (``KEY=VALUE``) and the profile's own argv strings have only the
kernel's cap: :func:`env_problems` (a task's ``env``, checked with the task) and
:func:`check_env` / :func:`check_args` / :func:`check_resume_prompt` (``[agent]``, checked
when the profile is loaded) refuse what would fail every launch.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from supervisor.wrapper import ARG_STRLEN_MAX

if TYPE_CHECKING:  # models validates with the checks below: no import cycle at run time
    from supervisor.config.models import AgentSpec

#: Largest prompt in bytes of UTF-8 that Claude Code's adapter passes in argv: half the
#: kernel's cap, so the prompt's element and the rest of the command line stay well clear
#: of it. A longer prompt goes on stdin (``-p``) or as a paste (the TUI).
ARGV_PROMPT_MAX = 64 * 1024

#: Largest total in bytes of a task's ``env`` strings: ``execve`` takes argv and env
#: together up to a quarter of the stack limit (2 MiB at the usual 8 MiB), and the
#: engine's own environment and the argv need room beside them.
ENV_TOTAL_MAX = 1024 * 1024

_PROMPT = "{prompt}"


def element_bytes(template: str, prompt_bytes: int) -> int:
    """Bytes of the argv element ``template`` once ``{prompt}`` is filled with a prompt of
    ``prompt_bytes`` bytes, counting the NUL the kernel counts; other placeholders are
    counted as written (their values are short: paths, ids, model names)."""
    count = template.count(_PROMPT)
    return len(template.encode("utf-8")) + count * (prompt_bytes - len(_PROMPT)) + 1


def prompt_problems(agent: AgentSpec, prompt: str, where: str, profile_name: str) -> list[str]:
    """One line per ``[agent] command`` / ``resume_command`` element that the prompt would
    make longer than :data:`ARGV_PROMPT_MAX`, or one line for a NUL byte in a prompt bound
    for argv (a generic ``{prompt}``, the TUI's argument); ``[]`` when the prompt fits (and
    for headless ``kind = "claude"``, whose prompt goes on stdin).

    Args:
        agent: the profile's ``[agent]``.
        prompt: the task's prompt.
        where: the task file and key the line names (``FILE:LINE: key 'prompt_file'``).
        profile_name: the profile's path, named with the key to change.
    """
    in_argv = agent.kind == "generic" and any(
        _PROMPT in element for element in (*(agent.command or ()), *(agent.resume_command or ()))
    )
    if "\0" in prompt and (in_argv or agent.mode == "interactive"):
        return [
            f"{where}: the prompt holds a NUL byte, which no argv element can carry "
            "(execve takes C strings); fix: remove it"
        ]
    if agent.kind != "generic":
        return []
    size = len(prompt.encode("utf-8"))
    lines = []
    for key, template in (("command", agent.command), ("resume_command", agent.resume_command)):
        for index, element in enumerate(template or ()):
            total = element_bytes(element, size) if _PROMPT in element else 0
            if total > ARGV_PROMPT_MAX:
                lines.append(
                    f"{where}: the prompt ({size} bytes) makes [agent] {key}[{index}] of "
                    f"{profile_name} {total} bytes with its NUL, over the {ARGV_PROMPT_MAX} "
                    f"a prompt may take in argv (Linux refuses one over {ARG_STRLEN_MAX}: "
                    "E2BIG); fix: pass {prompt_file} instead of {prompt} in that argv, or "
                    "shorten the prompt"
                )
    return lines


def string_bytes(text: str) -> int:
    """Bytes ``execve`` counts for one string: its UTF-8 and the NUL."""
    return len(text.encode("utf-8", "surrogatepass")) + 1


def env_problems(env: dict[str, str], where: Callable[[str | None], str]) -> list[str]:
    """One line per ``KEY=VALUE`` over the kernel's cap, else one when all of them take more
    than :data:`ENV_TOTAL_MAX`; ``where(KEY)`` names the file and key (``FILE:LINE: key
    'env.KEY'``; ``where(None)``: the ``env`` table)."""
    lines = [f"{where(key)}: {_env_line(key, value)}" for key, value in _too_long(env)]
    total = sum(string_bytes(f"{k}={v}") for k, v in env.items())
    if total > ENV_TOTAL_MAX and not lines:
        lines.append(
            f"{where(None)}: {len(env)} variables take {total} bytes in total, over the "
            f"{ENV_TOTAL_MAX} a task's environment may take (execve would refuse the whole: "
            "E2BIG); fix: pass large values in a file the agent reads"
        )
    return lines


def _too_long(env: dict[str, str]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in env.items() if string_bytes(f"{k}={v}") > ARG_STRLEN_MAX]


def _env_line(key: str, value: str) -> str:
    size = string_bytes(f"{key}={value}")
    return (
        f"{key}=VALUE is {size} bytes, over Linux's {ARG_STRLEN_MAX} per environment string "
        "(the agent could not start: E2BIG); fix: shorten the value, or put it in a file "
        "the agent reads"
    )


def check_env(env: dict[str, str]) -> dict[str, str]:
    """``[agent] env`` unchanged when every ``KEY=VALUE`` fits the kernel's cap.

    Raises:
        ValueError: the first one that does not, with the fix.
    """
    for key, value in _too_long(env):
        raise ValueError(_env_line(key, value))
    return env


def check_args(args: Iterable[str]) -> list[str]:
    """``[agent] extra_args`` (or another argv list) unchanged when every element fits.

    Raises:
        ValueError: an element over the kernel's cap, with its index and the fix.
    """
    items = list(args)
    for index, item in enumerate(items):
        size = string_bytes(item) if "{prompt}" not in item else 0
        if size > ARG_STRLEN_MAX:
            raise ValueError(
                f"element {index} is {size} bytes, over Linux's {ARG_STRLEN_MAX} per argument "
                "(the agent could not start: E2BIG); fix: shorten it, or pass a file"
            )
    return items


def check_resume_prompt(text: str) -> str:
    """``[agent] resume_prompt`` unchanged when it fits :data:`ARGV_PROMPT_MAX` (it is the
    resumed run's argument in both modes).

    Raises:
        ValueError: it is longer, with the fix.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > ARGV_PROMPT_MAX:
        raise ValueError(
            f"{size} bytes, over the {ARGV_PROMPT_MAX} a prompt may take in argv (Linux "
            f"refuses one over {ARG_STRLEN_MAX}: E2BIG); fix: shorten it"
        )
    return text
