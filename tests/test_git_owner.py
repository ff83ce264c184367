"""One owner for how ``supervise`` runs git (issue 23): a single ``run_git`` and a single
``GIT_TIMEOUT``, both in :mod:`supervisor.workspace.git`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import supervisor


def definitions(root: Path, pattern: str) -> list[str]:
    """``file:line`` of each line under ``root`` matching ``pattern`` (a regex)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.match(pattern, line):
                found.append(f"{path.relative_to(root).as_posix()}:{number}")
    return found


@pytest.mark.parametrize("pattern", [r"def run_git\(", r"GIT_TIMEOUT(: float)? ="])
def test_git_has_one_runner_and_one_timeout(pattern: str) -> None:
    root = Path(supervisor.__file__).parent
    [where] = definitions(root, pattern)
    assert where.startswith("workspace/git.py:")
