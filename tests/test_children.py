"""Every child supervise starts (acceptance, notifier, workspace setup, git) runs in a process
group of its own that is ended at its timeout and at its end, with its output read under a
cap (issue 20); the notifier's argv and environment stay under Linux's per-string limit.

All with real processes: a grandchild's PID is looked up after the run, the engine's memory
is the peak RSS of a real Python process that ran a flooding notifier."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import alive, wait_for
from support.repos import make_repo, new_task

from supervisor import children
from supervisor.config import AcceptanceSpec
from supervisor.config.workspace import WorkspaceSpec
from supervisor.engine import acceptance, notify
from supervisor.workspace import git, lifecycle

#: A shell line that starts a background grandchild, writes its PID to the file named by
#: $1 and exits 0 at once (the grandchild keeps stdout and stderr open).
LEAVE_CHILD = 'sleep 300 & echo $! > "$1"'


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    """A file a test's grandchild writes its PID to; the grandchild is ended by that PID
    afterwards, should a test fail with it alive."""
    path = tmp_path / "grandchild.pid"
    yield path
    if path.exists() and path.read_text().strip().isdigit():
        pid = int(path.read_text())
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def grandchild(pidfile: Path) -> int:
    return int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), 60))


# ------------------------------------------------------------------ the runner itself


def test_runner_keeps_head_and_tail_of_a_flood_and_says_how_much_it_left_out() -> None:
    flood = "import sys; sys.stdout.write('A' * 1000 + 'B' * 5_000_000 + 'Z' * 1000)"
    done = children.run([sys.executable, "-c", flood], timeout=30, stdout=children.Capture(4096))
    assert done.returncode == 0
    assert done.stdout.startswith(b"A" * 1000) and done.stdout.endswith(b"Z" * 1000)
    assert b"[supervise: 4997904 bytes left out]" in done.stdout  # 5_002_000 - 4096
    assert len(done.stdout) < 4096 + 100


def test_runner_feeds_stdin_to_a_child_that_never_reads_it() -> None:
    done = children.run(["true"], timeout=10, stdin=b"x" * 5_000_000)
    assert done.returncode == 0 and not done.timed_out


def test_runner_ends_a_child_that_ignores_sigterm_at_its_timeout(pidfile: Path) -> None:
    script = f"trap '' TERM; {LEAVE_CHILD}; sleep 300"
    done = children.run(["sh", "-c", script, "sh", str(pidfile)], timeout=1)
    assert done.timed_out and done.returncode is None
    assert not alive(grandchild(pidfile))


def test_runner_returns_when_an_escaped_grandchild_holds_the_pipe(pidfile: Path) -> None:
    """A grandchild that left the group (``setsid``) is out of reach of the group signal;
    the runner stops reading its output soon after the group ended instead of waiting."""
    script = 'setsid sleep 300 & echo $! > "$1"; sleep 0.5; echo done'  # setsid ran by then
    done = children.run(
        ["sh", "-c", script, "sh", str(pidfile)], timeout=30, stdout=children.Capture()
    )
    assert done.returncode == 0 and done.stdout == b"done\n"
    assert not done.timed_out  # it returned on its own, not at its 30 s timeout
    assert alive(grandchild(pidfile))  # the documented limit; the fixture ends it


def test_runner_reports_a_program_that_cannot_start() -> None:
    done = children.run(["/nonexistent/notifier"], timeout=5)
    assert done.returncode is None and done.error == "No such file or directory"


# ------------------------------------------------------------------ acceptance


def test_acceptance_that_leaves_a_background_child_ends_it(tmp_path: Path, pidfile: Path) -> None:
    task = new_task(tmp_path)
    spec = AcceptanceSpec(command=["sh", "-c", LEAVE_CHILD, "sh", str(pidfile)], timeout=20)
    result = acceptance.run(task, tmp_path, spec)
    assert result["passed"] and result["exit_code"] == 0
    # Passed: it returned before its 20 s timeout; the grandchild holding the pipe was not
    # waited for.
    assert "ended the background process(es)" in result["output_tail"]
    assert not alive(grandchild(pidfile))


def test_acceptance_timeout_ends_the_whole_group(tmp_path: Path, pidfile: Path) -> None:
    task = new_task(tmp_path)
    script = f"{LEAVE_CHILD}; echo working; sleep 300"
    spec = AcceptanceSpec(command=["sh", "-c", script, "sh", str(pidfile)], timeout=1)
    result = acceptance.run(task, tmp_path, spec)
    assert not result["passed"] and result["exit_code"] == -1
    assert "working" in result["output_tail"] and "timed out after 1 s" in result["output_tail"]
    assert not alive(grandchild(pidfile))


# ------------------------------------------------------------------ the notifier


def test_notifier_that_leaves_a_background_child_ends_it(pidfile: Path) -> None:
    code = notify.run_notifier(
        ["sh", "-c", LEAVE_CHILD, "sh", str(pidfile)],
        {"task_id": "t-1", "status": "failed"},
        timeout=20,
    )
    assert code == 0
    assert not alive(grandchild(pidfile))


ENGINE_WITH_FLOOD = """
import resource, sys
from supervisor.engine.notify import run_notifier
flood = [sys.executable, "-c", "import os\\nb = b'e' * (1 << 20)\\n"
         "for _ in range(200): os.write(2, b)\\nraise SystemExit(3)"]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
code = run_notifier(flood, {"task_id": "t-1", "status": "failed"}, timeout=120)
print(code, base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def test_a_notifier_flooding_stderr_keeps_the_engine_small() -> None:
    """200 MB on the notifier's stderr: the peak RSS of the process that ran it (the
    kernel's ``ru_maxrss``, KiB) grows by far less than the flood."""
    done = subprocess.run(
        [sys.executable, "-c", ENGINE_WITH_FLOOD],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    code, base, peak = (int(x) for x in done.stdout.split())
    assert code == 3
    assert peak - base < 30 * 1024, f"peak RSS grew by {(peak - base) // 1024} MiB"
    assert "notifier" in done.stderr and "exited 3" in done.stderr
    assert len(done.stderr) < 4000  # the log line holds a tail, not the flood


def test_a_200_kb_last_line_still_notifies_with_a_bounded_argv_and_env(tmp_path: Path) -> None:
    """Linux refuses one argv or env string over 128 KiB (MAX_ARG_STRLEN, E2BIG): the
    values there are cut with a marker; stdin carries the whole payload."""
    out = tmp_path / "got.json"
    record = (
        "import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': {k: v for k, v in "
        "os.environ.items() if k.startswith('SUPERVISE_')}, 'stdin': json.load(sys.stdin)}, "
        f"open({str(out)!r}, 'w'))"
    )
    line = "x" * 200_000
    event = {
        "task_id": "t-1",
        "status": "failed",
        "last_lines": line,
        "summary": line,
        "reason": line,
    }
    many = "{last_lines}" * 20  # 20 cut values in one element: cut again as a whole
    argv = [sys.executable, "-c", record, "{message}", "{last_lines}", "{summary} {reason}", many]
    assert notify.run_notifier(argv, event, timeout=30) == 0
    got = json.loads(out.read_text())
    assert got["stdin"]["last_lines"] == line  # exact on stdin
    shown = [*got["argv"][:-1], *got["env"].values()]
    assert all(len(v.encode()) <= notify.FIELD_BYTES * 2 + 200 for v in shown)
    assert notify.ARGV_BYTES < len(got["argv"][-1].encode()) < notify.ARGV_BYTES + 200
    assert got["env"]["SUPERVISE_LAST_LINES"].startswith("x" * 1000)
    assert "[cut: 200000 bytes, whole on stdin]" in got["env"]["SUPERVISE_LAST_LINES"]
    assert got["argv"][1].endswith("[cut: 200000 bytes, whole on stdin]")


# ------------------------------------------------------------------ workspace setup and git


def test_setup_that_leaves_a_background_child_ends_it(tmp_path: Path, pidfile: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    spec = WorkspaceSpec(setup=["sh", "-c", f"echo installing; {LEAVE_CHILD}", "sh", str(pidfile)])
    task = new_task(tmp_path)
    report = lifecycle.resolve(task.task_id, repo, spec, tmp_path / "state")
    lifecycle.prepare(task, report, spec, repo)
    assert not alive(grandchild(pidfile))
    assert "installing" in task.file("output.log").read_text()


def test_setup_output_in_the_log_is_capped(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    flood = "import sys; sys.stdout.write('s' * 40_000_000); print('end')"
    spec = WorkspaceSpec(setup=[sys.executable, "-c", flood])
    task = new_task(tmp_path)
    report = lifecycle.resolve(task.task_id, repo, spec, tmp_path / "state")
    lifecycle.prepare(task, report, spec, repo)
    log = task.file("output.log")
    assert log.stat().st_size < lifecycle.SETUP_LOG_BYTES + 4096
    assert "output beyond" in log.read_text()[-200:]


def test_git_that_leaves_a_background_child_ends_it(tmp_path: Path, pidfile: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    # git appends "$@" to a shell alias given arguments: the path is in the alias itself
    alias = f"alias.bg=!sleep 300 & echo $! > '{pidfile}'"
    done = git.run_git(["-c", alias, "bg"], repo, timeout=20)
    assert done.returncode == 0  # not held until the timeout (no exit code) by the open pipe
    assert not alive(grandchild(pidfile))
