"""Every mutating verb run twice at once (issue 20): each copy finishes correctly or
refuses in one line, and the state is consistent after. Real processes throughout.
(``merge``, ``discard`` and ``prune`` have their own module.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import tomli_w
from conftest import Setup
from support.archive_tasks import archived_sizes, ended_tasks, places
from support.cluster_support import fresh_database, postgres_server

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


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "supervisor.cli", *args]


def test_two_inits_into_one_folder_at_once(tmp_path: Path) -> None:
    """One writes the starter profile and the demo's tasks, the other refuses in one line
    (the profile exists); the folder is whole: every demo task once in the spool."""
    folder = tmp_path / "here"
    results = _together(_cli("init", str(folder)), _cli("init", str(folder)))
    assert sorted(code for code, _, _ in results) == [0, 1], results
    (refusal,) = [err for code, _, err in results if code == 1]
    assert len(refusal.strip().splitlines()) == 1 and "exists; not overwriting" in refusal
    tasks = sorted(p.name for p in (folder / "tasks").iterdir())
    assert tasks and sorted(p.name for p in (folder / "spool").iterdir()) == tasks
    for name in tasks:
        assert (folder / "spool" / name).read_bytes() == (folder / "tasks" / name).read_bytes()
    check = subprocess.run(_cli("validate", str(folder / "profile.toml")), capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert check.returncode == 0, check.stderr


INSTALL = """
import sys
from supervisor import systemd
systemd.booted = lambda root=None: True  # this test box runs no systemd; systemctl is faked
from supervisor.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_two_installs_at_once_run_one_after_the_other(setup: Setup, tmp_path: Path) -> None:
    """``startup --install`` twice at once: both end 0 with the same unit, and their
    systemctl calls never interleave (the second waits for the first instead of reading a
    unit half written and calling it "another profile's")."""
    setup.write_profile()
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    bin_dir.mkdir()
    home.mkdir()
    calls = tmp_path / "calls"
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "start $PPID $*" >> {calls}\nsleep 0.3\n'
                         f'echo "end $PPID" >> {calls}\n')  # fmt: skip
    systemctl.chmod(0o755)
    env = {**os.environ, "HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    argv = [sys.executable, "-c", INSTALL, "startup", "-c", str(setup.profile), "--install"]
    results = _together(argv, argv, env=env)
    assert [code for code, _, _ in results] == [0, 0], results
    (unit,) = (home / ".config/systemd/user").glob("*.service")
    assert str(setup.profile) in unit.read_text()
    lines = calls.read_text().splitlines()
    assert len(lines) == 8
    for start, end in zip(lines[::2], lines[1::2], strict=True):
        assert start.startswith("start ") and end == f"end {start.split()[1]}", lines


def test_two_cluster_inits_at_once_against_one_database() -> None:
    """Both end 0: one applies every schema, the other waits for it (an advisory lock in
    the same transaction) and finds the database up to date; ``check`` is clean after."""
    pytest.importorskip("psycopg")
    with postgres_server() as server, fresh_database(server) as dsn:
        env = {**os.environ, "SUPERVISE_CLUSTER_DSN": dsn}
        argv = _cli("cluster", "init")
        results = _together(argv, argv, env=env)
        assert [code for code, _, _ in results] == [0, 0], results
        outs = sorted(out for _, out, _ in results)
        assert outs[0].startswith("already up to date") and outs[1].startswith("applied")
        check = subprocess.run(_cli("cluster", "check", "--json"), capture_output=True,
                               text=True, env=env, timeout=60)  # fmt: skip
        assert check.returncode == 0 and not json.loads(check.stdout)["problems"], check.stdout


def test_two_submits_of_one_task_file_at_once_spool_two_tasks(setup: Setup) -> None:
    """Two submits of the same file at once: two tasks, each its own id and spool file
    (the staging and spool names carry the new id; nothing is overwritten)."""
    setup.write_profile()
    task = setup.root / "t.toml"
    task.write_text(tomli_w.dumps(setup.task("same", "exit: 0")))
    argv = _cli("submit", "-c", str(setup.profile), str(task))
    results = _together(argv, argv)
    assert [code for code, _, _ in results] == [0, 0], results
    ids = sorted(out.strip() for _, out, _ in results)
    assert ids[0] != ids[1]
    assert sorted(p.name for p in setup.spool.iterdir()) == [f"{i}.toml" for i in ids]
