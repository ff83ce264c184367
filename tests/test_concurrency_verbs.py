"""Every mutating verb run twice at once (issue 20): each copy finishes correctly or
refuses in one line, and the state is consistent after. Real processes throughout.
(``merge``, ``discard`` and ``prune`` have their own module.)"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from conftest import Setup
from test_archive import archived_sizes, ended_tasks, places

BUSY = "another 'supervise archive' is writing"


def _together(*argvs: list[str], env: dict[str, str] | None = None) -> list[tuple[int, str, str]]:
    """Start every command at once, then wait for all: ``(exit code, stdout, stderr)``."""
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for argv in argvs
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append((proc.returncode, out, err))
    return results


def test_two_archives_at_once_leave_one_good_tarball(setup: Setup) -> None:
    """Issue 20: both runs wrote one fixed temporary name without a lock; the tarball did
    not open and the second run's tasks were in neither place."""
    sizes = ended_tasks(setup, 16, size=1_500_000)
    argv = [sys.executable, "-m", "supervisor.cli", "archive", "-c", str(setup.profile),
            "--older-than", "30d"]  # fmt: skip
    results = _together(argv, argv)
    for code, _, err in results:
        refused = code == 1 and len(err.strip().splitlines()) == 1 and BUSY in err
        assert code == 0 or refused, (code, err)
    assert any(code == 0 for code, _, _ in results)
    assert places(setup) == Counter(dict.fromkeys(sizes, 1))
    assert archived_sizes(setup) == sizes
    again = setup.supervise("archive", "-c", str(setup.profile), "--older-than", "30d")
    assert again.returncode == 0, again.stderr
    assert places(setup) == Counter(dict.fromkeys(sizes, 1))
