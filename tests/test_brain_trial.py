"""Issue 22, the Brain's loop tried from SKILL.md alone: what the trial found, kept.

- ``status`` right after ``shutdown`` said ``engine: stale`` while the stopped engine was a
  zombie (ended, not yet reaped by its parent): it has stopped, so ``not running``.
- A ``project_dir`` inside a repository that does not track it (``init --claude DIR``
  inside a home folder kept in git) failed ``launch``, blaming the agent's program: it
  runs in place, and a missing working folder is named as such.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
from conftest import Setup, stop_engine, wait_for

from supervisor.wrapper import LAUNCH_ERROR

REPO = Path(__file__).resolve().parents[1]


def test_status_after_shutdown_says_not_running_while_the_engine_is_unreaped(
    setup: Setup,
) -> None:
    setup.write_profile()
    engine = setup.start()  # our child: after its exit it stays a zombie until we wait()
    try:
        wait_for(
            lambda: setup.supervise("status", "-c", str(setup.profile)).stdout.startswith(
                "engine: running"
            ),
            timeout=60,
        )
        done = setup.supervise("shutdown", "-c", str(setup.profile))
        assert done.returncode == 0, done.stderr
        # not reaped (poll() would reap it): a zombie, as under a parent that reaps late
        assert psutil.Process(engine.pid).status() == psutil.STATUS_ZOMBIE
        status = setup.supervise("status", "-c", str(setup.profile))
        assert status.stdout.splitlines()[0] == "engine: not running", status.stdout
    finally:
        stop_engine(engine)


def _git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@x", "-C", str(folder), *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_a_project_dir_its_repository_does_not_track_runs_in_place(setup: Setup) -> None:
    """``init --claude DIR`` inside a repository (a home folder kept in git) left ``DIR/project``
    untracked: the worktree of that repository had no such folder, and the task failed
    ``launch`` blaming the agent's program. It runs in place, with one warning event."""
    _git(setup.root, "init", "-q", "-b", "main")
    (setup.root / "README").write_text("a repository around the profile\n")
    _git(setup.root, "add", "README")
    _git(setup.root, "commit", "-q", "-m", "first")
    setup.write_profile()
    setup.drop("inner.toml", setup.task("inner", "print: hello from the project folder\nexit: 0"))
    assert setup.run().returncode == 0
    m = setup.manifests()["inner"]
    assert (m["status"], m["verdict"]) == ("completed", "PASS"), m["summary"]
    assert m["workspace"]["mode"] == "shared" and m["workspace"]["path"] == str(setup.project)
    warned = [e for e in setup.events(m["task_id"]) if e["event"] == "workspace_in_place"]
    assert len(warned) == 1 and "not tracked" in warned[0]["message"]
    assert str(setup.project) in warned[0]["message"]


def test_a_missing_working_folder_is_named_not_blamed_on_the_program(tmp_path: Path) -> None:
    """The wrapper's chdir into a folder that is gone said "cannot run 'PROGRAM': No such
    file or directory", sending the reader to look for the program."""
    task = tmp_path / "task"
    task.mkdir()
    gone = tmp_path / "gone"
    launch = {"argv": [sys.executable, "-c", "pass"], "cwd": str(gone), "env": {}}
    (task / "launch.json").write_text(json.dumps(launch))
    done = subprocess.run(
        [sys.executable, str(REPO / "supervisor" / "wrapper.py"), str(task)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 127
    line = (task / LAUNCH_ERROR).read_text().strip()
    assert line == (
        f"supervise: cannot run {sys.executable!r}: its working folder {gone} cannot be "
        "entered: No such file or directory"
    )


def test_only_a_tracked_sub_folder_gets_a_worktree(tmp_path: Path) -> None:
    """A tracked sub-folder keeps its worktree (the agent works in the same sub-folder of
    it); an ignored one runs in place, like an untracked one."""
    from supervisor.config.workspace import WorkspaceSpec
    from supervisor.workspace import lifecycle

    repo = tmp_path / "repo"
    (repo / "app").mkdir(parents=True)
    (repo / "app" / "main.py").write_text("print(1)\n")
    odd = repo / "we ird:dir -x"  # a space, a colon (git's REV:PATH) and a dash
    odd.mkdir()
    (odd / "f").write_text("x\n")
    (repo / ".gitignore").write_text("scratch/\n")
    (repo / "scratch").mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "first")
    state = tmp_path / "state"
    tracked = lifecycle.resolve("t-abc123", repo / "app", WorkspaceSpec(), state)
    assert (tracked.mode, tracked.warning) == ("worktree", None)
    assert lifecycle.agent_dir(tracked, repo / "app") == state / "worktrees" / "t-abc123" / "app"
    assert lifecycle.resolve("t-abc125", odd, WorkspaceSpec(), state).mode == "worktree"
    (repo / "new:folder").mkdir()
    untracked = lifecycle.resolve("t-abc126", repo / "new:folder", WorkspaceSpec(), state)
    assert untracked.mode == "shared"
    ignored = lifecycle.resolve("t-abc124", repo / "scratch", WorkspaceSpec(), state)
    assert (ignored.mode, ignored.path) == ("shared", str(repo / "scratch"))
    assert "not tracked" in (ignored.warning or "")


def test_the_command_list_does_not_show_the_hidden_ids_helper(setup: Setup) -> None:
    """``supervise --help`` listed ``_ids`` (the completion helper) among the commands."""
    shown = setup.supervise("--help")
    assert shown.returncode == 0
    assert "_ids" not in shown.stdout and "\n    continue " in shown.stdout
    assert shown.stdout.startswith("usage: supervise [-h] [--version] COMMAND ...")
    bare = setup.supervise()
    assert bare.returncode == 2 and "_ids" not in bare.stderr


def test_stop_all_with_nothing_to_stop_says_so_plainly(setup: Setup) -> None:
    """``stop --all`` on a state dir with nothing left to stop said "... applies to with any
    status", which reads as if a status were missing from the command."""
    setup.write_profile()
    (setup.state / "tasks").mkdir(parents=True)
    done = setup.supervise("stop", "-c", str(setup.profile), "--all")
    assert done.returncode == 1
    assert done.stderr == (
        f"supervise stop: no task in {setup.state / 'tasks'} that 'stop' applies to; "
        f"see 'supervise status -c {setup.profile}'\n"
    )
    picked = setup.supervise("stop", "-c", str(setup.profile), "--status", "running")
    assert picked.returncode == 1
    assert f"no task in {setup.state / 'tasks'} with status running that 'stop'" in picked.stderr


def test_wait_after_a_queued_continue_waits_for_the_new_turn(setup: Setup) -> None:
    """``continue`` with no engine running queues the follow-up (exit 3); a ``wait`` right
    after it returned at once, exit 0, with the previous turn's result, which the Brain
    would have read as the follow-up's answer. It waits for the new turn."""
    setup.write_profile()
    setup.drop("two.toml", setup.task("two", "print: turn one\nexit: 0"))
    assert setup.run().returncode == 0
    task_id = setup.manifests()["two"]["task_id"]
    queued = setup.supervise("continue", "-c", str(setup.profile), task_id, "print: turn two")
    assert queued.returncode == 3, queued.stderr
    early = setup.supervise("wait", "-c", str(setup.profile), task_id, "--timeout", "1")
    assert early.returncode == 124, early.stdout  # the follow-up has not run: not ended yet
    # shown as the new turn waiting, not as turn 1's "completed PASS" beside "still running"
    assert early.stdout.splitlines()[0] == f"{task_id}: queued - (a follow-up, turn 2)"
    engine = setup.start()
    try:
        done = setup.supervise("wait", "-c", str(setup.profile), task_id, "--timeout", "120")
        assert done.returncode == 0, done.stdout + done.stderr
        assert setup.manifests()["two"]["turn"] == 2
    finally:
        stop_engine(engine)
