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

Pure: no I/O.
"""

from __future__ import annotations

from supervisor.config.models import AgentSpec
from supervisor.wrapper import ARG_STRLEN_MAX

#: Largest prompt in bytes of UTF-8 that Claude Code's adapter passes in argv: half the
#: kernel's cap, so the prompt's element and the rest of the command line stay well clear
#: of it. A longer prompt goes on stdin (``-p``) or as a paste (the TUI).
ARGV_PROMPT_MAX = 64 * 1024

_PROMPT = "{prompt}"


def element_bytes(template: str, prompt_bytes: int) -> int:
    """Bytes of the argv element ``template`` once ``{prompt}`` is filled with a prompt of
    ``prompt_bytes`` bytes, counting the NUL the kernel counts; other placeholders are
    counted as written (their values are short: paths, ids, model names)."""
    count = template.count(_PROMPT)
    return len(template.encode("utf-8")) + count * (prompt_bytes - len(_PROMPT)) + 1


def prompt_problems(agent: AgentSpec, prompt: str, where: str, profile_name: str) -> list[str]:
    """One line per ``[agent] command`` / ``resume_command`` element that the prompt would
    make longer than :data:`ARGV_PROMPT_MAX`; ``[]`` when every element fits (and for ``kind =
    "claude"``, whose adapter never puts a long prompt in argv).

    Args:
        agent: the profile's ``[agent]``.
        prompt: the task's prompt.
        where: the task file and key the line names (``FILE:LINE: key 'prompt_file'``).
        profile_name: the profile's path, named with the key to change.
    """
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
                    f"{profile_name} {total} bytes, over the {ARGV_PROMPT_MAX} a prompt may "
                    f"take in argv (Linux refuses one over {ARG_STRLEN_MAX}: E2BIG); fix: "
                    "pass {prompt_file} instead of {prompt} in that argv, or shorten the prompt"
                )
    return lines
