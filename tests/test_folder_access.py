"""A spool or state dir that other users can read (made by hand under umask 022) is named
in one warning line at ``supervise run`` start and by ``validate`` (issue 20): task files
and prompts can hold secrets. The user's folder modes are left as they are."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from conftest import Setup

from supervisor.spool import is_private_group


def _folders(setup: Setup, mode: int) -> None:
    for folder in (setup.spool, setup.state):
        folder.mkdir(exist_ok=True)
        os.chmod(folder, mode)


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "can be read by other users" in line]


def _mode(folder: Path) -> int:
    return stat.S_IMODE(folder.stat().st_mode)


def test_run_warns_once_per_folder_others_can_read_and_changes_no_mode(setup: Setup) -> None:
    setup.write_profile()
    _folders(setup, 0o755)
    setup.drop("t.toml", setup.task("t", "exit: 0"))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    lines = _warnings(done.stderr)
    assert len(lines) == 2, done.stderr
    for line, folder in zip(lines, (setup.spool, setup.state), strict=True):
        assert str(folder) in line and "0o755" in line and f"chmod 700 {folder}" in line
    assert (_mode(setup.spool), _mode(setup.state)) == (0o755, 0o755)
    assert setup.manifests()["t"]["status"] == "completed"


@pytest.mark.parametrize("mode", [0o705, 0o711])  # search alone opens every known name
def test_validate_names_each_readable_folder_and_still_says_ok(setup: Setup, mode: int) -> None:
    profile = setup.write_profile()
    _folders(setup, mode)
    task = setup.root / "t.toml"
    task.write_text('name = "t"\nprompt = "exit: 0"\nproject_dir = "project"\n')
    for args in (["-c", str(profile), str(task)], [str(profile)]):
        done = setup.supervise("validate", *args)
        assert done.returncode == 0, done.stderr
        assert len(_warnings(done.stderr)) == 2, done.stderr
        assert all(oct(mode) in line for line in _warnings(done.stderr))
    assert (_mode(setup.spool), _mode(setup.state)) == (mode, mode)


@pytest.mark.parametrize("mode", [0o700, 0o750])
def test_folders_only_we_can_read_give_no_warning(setup: Setup, mode: int) -> None:
    profile = setup.write_profile()
    _folders(setup, mode)
    done = setup.supervise("validate", str(profile))
    assert done.returncode == 0, done.stderr
    shared_group = mode & 0o050 and not is_private_group(setup.state.stat().st_gid)
    assert len(_warnings(done.stderr)) == (2 if shared_group else 0), done.stderr


def test_validate_before_the_folders_exist_warns_of_nothing(setup: Setup) -> None:
    profile = setup.write_profile()
    done = setup.supervise("validate", str(profile))
    assert done.returncode == 0, done.stderr
    assert _warnings(done.stderr) == []
