"""Task ids complete in the shells (issue 22): ``supervise completion bash|zsh|fish`` offers
the ids of the profile given with ``-c`` wherever a command takes a task id. Bash runs the
generated script for real; zsh and fish are not on this machine (nor in its apt cache), so
their scripts are checked as text."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Setup

#: Every command that takes task ids (issue 22 lists them; ``continue`` comes with its
#: own branch and is covered by the same rule).
ID_COMMANDS = (
    "show",
    "stop",
    "resume",
    "approve",
    "deny",
    "tail",
    "attach",
    "wait",
    "events",
    "diff",
    "merge",
    "discard",
)
SUPERVISE = str(Path(sys.executable).with_name("supervise"))


def _script(setup: Setup, shell: str) -> str:
    result = setup.supervise("completion", shell)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _profile_with_tasks(setup: Setup) -> list[str]:
    setup.write_profile()
    ids = ["alpha-1a2b3c", "beta-4d5e6f"]
    for task_id in ids:
        (setup.state / "tasks" / task_id).mkdir(parents=True)
    (setup.state / "tasks" / ".hidden").mkdir()
    setup.spool.mkdir(exist_ok=True)
    (setup.spool / "gamma-777777.toml").write_text("name = 'g'\n")
    return [*ids, "gamma-777777"]


def _complete_bash(script: Path, words: list[str]) -> list[str]:
    """Source ``script``, set COMP_WORDS/COMP_CWORD for ``words`` (the last one being
    completed) and call shtab's function; the COMPREPLY words, one a line."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = f"""
        source '{script}'
        COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}
        _shtab_supervise 2>/dev/null
        printf '%s\\n' "${{COMPREPLY[@]}}"
    """
    result = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, timeout=60, cwd=script.parent
    )
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line]


def test_ids_lists_task_folders_and_spool_files(setup: Setup) -> None:
    ids = _profile_with_tasks(setup)
    result = setup.supervise("_ids", "-c", str(setup.profile))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ids
    listed = setup.supervise("--help").stdout.split("positional arguments:")[1].splitlines()
    assert not any(line.strip().startswith("_ids") for line in listed)  # not a listed command


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_task_ids_from_the_profile(setup: Setup, tmp_path: Path) -> None:
    ids = _profile_with_tasks(setup)
    script = tmp_path / "supervise.bash"
    script.write_text(_script(setup, "bash"))
    profile = str(setup.profile)
    for command in ID_COMMANDS:
        got = _complete_bash(script, [SUPERVISE, command, "-c", profile, ""])
        assert got == ids, (command, got)
    assert _complete_bash(script, [SUPERVISE, "show", "-c", profile, "be"]) == ["beta-4d5e6f"]
    assert _complete_bash(script, [SUPERVISE, "show", "--config", profile, "al"]) == [
        "alpha-1a2b3c"
    ]
    # wait takes several ids: the second one completes too
    assert _complete_bash(script, [SUPERVISE, "wait", "-c", profile, ids[0], "g"]) == [ids[2]]
    assert _complete_bash(script, [SUPERVISE, "show", ""]) == []  # no profile: no guess


def test_hostile_folder_names_are_never_offered_nor_run(setup: Setup, tmp_path: Path) -> None:
    ids = _profile_with_tasks(setup)
    marker = tmp_path / "PWNED"  # bash runs in tmp_path
    (setup.state / "tasks" / "$(touch PWNED)").mkdir()
    (setup.state / "tasks" / "x`touch PWNED`").mkdir()
    (setup.state / "tasks" / "bad\nname").mkdir()
    (setup.spool / "$(touch PWNED).toml").write_text("")
    script = tmp_path / "supervise.bash"
    script.write_text(_script(setup, "bash"))
    got = _complete_bash(script, [SUPERVISE, "show", "-c", str(setup.profile), ""])
    assert got == ids
    assert not marker.exists()


def test_zsh_and_fish_scripts_complete_task_ids(setup: Setup) -> None:
    zsh, fish = _script(setup, "zsh"), _script(setup, "fish")
    assert "_supervise_task_ids() {" in zsh and "_ids -c" in zsh and "compadd -a ids" in zsh
    # one argument spec per command taking ids (":task_id:", or "(*)::..." for several)
    assert zsh.count(':_supervise_task_ids"') >= len(ID_COMMANDS)
    assert ":ID:_supervise_task_ids" in zsh  # wait, events
    assert "function _supervise_task_ids" in fish and "_ids -c $profile" in fish
    for command in ID_COMMANDS:
        assert f"_shtab_supervise_using {command};" in fish
        line = next(
            row
            for row in fish.splitlines()
            if f"_shtab_supervise_using {command};" in row and "(_supervise_task_ids)" in row
        )
        assert line
