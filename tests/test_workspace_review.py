"""``supervise diff|merge|discard|prune`` on real repositories and real worktrees.

Each test builds the state the engine leaves behind when a task ends in a worktree: a real
repository, ``git worktree add -b supervise/ID PATH BASE``, commits made in it, and the task's
``manifest.json`` with its ``workspace`` report written through the Manifest model. Commands
run through the real entry point: ``supervisor.cli.main`` in-process, or ``python -m
supervisor.cli`` as a process where stdin, stdout or the terminal matter.
"""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.review_repo import Repo, _no_git_identity, git

from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso
from supervisor.taskdir.states import FailureReason, Status
from supervisor.workspace.model import WorkspaceReport
from supervisor.workspace.prune import parse_duration


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repo:
    _no_git_identity(tmp_path, monkeypatch)
    return Repo(tmp_path)


# ---------------------------------------------------------------- diff


def test_diff_shows_each_tasks_own_change_byte_exact(env: Repo) -> None:
    env.task("task-a", {"shared.txt": "one\nTWO by a\nthree\n"})
    env.task("task-b", {"shared.txt": "one\ntwo\nthree by b\n", "new.bin": "x\x1b[2Jy\n"})
    a = env.proc("diff", "task-a")
    b = env.proc("diff", "task-b")
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    assert b"+TWO by a" in a.stdout and b"three by b" not in a.stdout
    assert b"+three by b" in b.stdout and b"TWO by a" not in b.stdout
    # Piped: git's bytes unchanged (the ESC the agent wrote included), a patch git applies.
    base = env.manifest("task-b")["workspace"]["base_commit"]
    expected = subprocess.run(["git", "diff", base, "supervise/task-b", "--"], cwd=env.repo,
                              capture_output=True, check=True).stdout  # fmt: skip
    assert b.stdout == expected and b"\x1b[2J" in b.stdout
    subprocess.run(["git", "apply", "--check"], cwd=env.repo, input=b.stdout, check=True)
    stat = env.proc("diff", "task-b", "--stat")
    assert b"shared.txt" in stat.stdout and b"2 files changed" in stat.stdout


def test_diff_on_a_terminal_escapes_control_characters(env: Repo) -> None:
    env.task("task-t", {"evil.txt": "title\x1b]0;pwned\x07\n"})
    leader, follower = pty.openpty()
    try:
        proc = env.proc("diff", "task-t", stdout=follower)
        os.close(follower)
        follower = -1
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the writer side is closed
                break
            if not chunk:
                break
            out += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" not in out and b"\\x1b]0;pwned\\x07" in out


# ---------------------------------------------------------------- merge


def test_merge_first_of_two_tasks_succeeds_second_names_the_conflict(
    env: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    env.task("task-a", {"shared.txt": "one\nTWO by a\nthree\n"})
    env.task("task-b", {"shared.txt": "one\nTWO by b\nthree\n"})
    assert env.cli("merge", "task-a") == 0
    assert "merged supervise/task-a into main" in capsys.readouterr().out
    assert (env.repo / "shared.txt").read_text() == "one\nTWO by a\nthree\n"
    merge_commit = env.head("main")
    assert git(env.repo, "log", "-1", "--format=%s") == (
        "Merge task task-a (edit task-a) from supervise/task-a"
    )
    assert git(env.repo, "rev-parse", "HEAD^2") == env.head("supervise/task-a")
    [event] = env.events("task-a", "merged")
    assert event["into"] == "main" and event["commit"] == merge_commit

    assert env.cli("merge", "task-b") == 1
    err = capsys.readouterr().err
    assert "conflicts in: shared.txt" in err and len(err.strip().splitlines()) == 1
    # The target checkout is exactly as it was: same commit, clean, no merge in progress.
    assert env.head("main") == merge_commit
    assert git(env.repo, "status", "--porcelain") == ""
    assert not (env.repo / ".git" / "MERGE_HEAD").exists()
    assert (env.repo / "shared.txt").read_text() == "one\nTWO by a\nthree\n"
    assert not (env.tasks / "task-b" / "events.jsonl").exists()


@pytest.mark.parametrize("squash", [False, True])
def test_a_target_that_moves_after_the_checks_is_left_as_the_user_made_it(
    env: Repo, squash: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user commits on the target between the merge's checks and its one git step
    (here: right after ``merge-tree``): the merge refuses and changes nothing."""
    from supervisor.workspace import review

    env.task("task-a", {"shared.txt": "one\nTWO by a\nthree\n"})
    real = review.merge_tree

    def then_the_user_commits(*args: Any) -> tuple[str, list[str]]:
        result = real(*args)
        (env.repo / "mine.txt").write_text("mine\n")
        git(env.repo, "add", "mine.txt")
        git(env.repo, "commit", "-q", "-m", "the user's commit")
        return result

    monkeypatch.setattr(review, "merge_tree", then_the_user_commits)
    assert env.cli("merge", "task-a", *(["--squash"] if squash else [])) == 1
    assert "main moved in" in capsys.readouterr().err
    assert git(env.repo, "log", "-1", "--format=%s") == "the user's commit"
    assert git(env.repo, "status", "--porcelain") == ""
    assert not (env.repo / ".git" / "MERGE_HEAD").exists()
    assert (env.repo / "shared.txt").read_text() == "one\ntwo\nthree\n"
    assert not (env.tasks / "task-a" / "events.jsonl").exists()


@pytest.mark.parametrize("kind", ["modified", "untracked", "staged"])
def test_merge_refuses_a_dirty_target_checkout(
    env: Repo, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    env.task("task-a", {"shared.txt": "one\nTWO by a\nthree\n"})
    if kind == "untracked":
        (env.repo / "notes.txt").write_text("mine\n")
    else:
        (env.repo / "README").write_text("my own edit\n")
        if kind == "staged":
            git(env.repo, "add", "README")
    before = (env.head("main"), git(env.repo, "status", "--porcelain"))
    assert env.cli("merge", "task-a") == 1
    err = capsys.readouterr().err
    assert "uncommitted changes or untracked files" in err and str(env.repo) in err
    assert (env.head("main"), git(env.repo, "status", "--porcelain")) == before
    assert (env.repo / "shared.txt").read_text() == "one\ntwo\nthree\n"


@pytest.mark.parametrize("squash", [False, True])
def test_merge_into_a_branch_checked_out_nowhere_moves_only_its_ref(
    env: Repo, squash: bool
) -> None:
    git(env.repo, "branch", "integration")
    env.task("task-a", {"shared.txt": "one\nTWO by a\nthree\n"})
    (env.repo / "README").write_text("operator's work in progress\n")  # main is dirty: untouched
    before = env.head("integration")
    args = ["merge", "task-a", "--into", "integration"] + (["--squash"] if squash else [])
    assert env.cli(*args) == 0
    after = env.head("integration")
    parents = git(env.repo, "log", "-1", "--format=%P", after).split()
    assert parents == ([before] if squash else [before, env.head("supervise/task-a")])
    assert git(env.repo, "show", f"{after}:shared.txt") == "one\nTWO by a\nthree"
    assert (env.repo / "README").read_text() == "operator's work in progress\n"
    assert env.head("main") == before


def test_merge_squash_in_checkout_and_fallback_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _no_git_identity(tmp_path, monkeypatch)
    env = Repo(tmp_path, identity=False)
    wt = env.task("task-a", {})
    (wt / "shared.txt").write_text("one\nTWO by a\nthree\n")
    git(wt, "-c", "user.name=agent", "-c", "user.email=a@x", "commit", "-qam", "a")
    before = env.head("main")
    assert env.cli("merge", "task-a", "--squash") == 0
    assert git(env.repo, "log", "-1", "--format=%P|%an|%s") == (
        f"{before}|supervise|Squash task task-a (edit task-a) from supervise/task-a"
    )
    assert (env.repo / "shared.txt").read_text() == "one\nTWO by a\nthree\n"
    assert git(env.repo, "status", "--porcelain") == ""
    # A second merge finds nothing new in the branch's ancestry... but prune knows it merged.
    assert env.proc("prune", "--dry-run").stdout.decode().count("merged into main") == 1


def test_merge_of_an_already_contained_branch_does_nothing(
    env: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    env.task("task-e")
    before = env.head("main")
    assert env.cli("merge", "task-e") == 0
    assert "already contains" in capsys.readouterr().out
    assert env.head("main") == before


def _shared_task(env: Repo) -> None:
    folder = env.tasks / "task-s"
    folder.mkdir(parents=True)
    TaskDir(folder).write_manifest(Manifest(
        task_id="task-s", task_name="s", model="m", status=Status.COMPLETED,
        project_dir=str(env.repo), session_name="task-s", session_id="x", tmpdir=str(folder),
        created_at=utc_iso(), workspace=WorkspaceReport(mode="shared", path=str(env.repo)),
    ))  # fmt: skip


def _bare_task(env: Repo) -> None:
    folder = env.tasks / "task-n"
    folder.mkdir(parents=True)
    TaskDir(folder).write_manifest(Manifest(
        task_id="task-n", task_name="n", model="m", status=Status.COMPLETED,
        project_dir=str(env.repo), session_name="task-n", session_id="x", tmpdir=str(folder),
        created_at=utc_iso(),
    ))  # fmt: skip


def _failed_workspace_task(env: Repo) -> None:
    """A task whose worktree could not be made because ``supervise/task-f`` was already
    there (someone else's branch): the manifest names that branch."""
    git(env.repo, "branch", "supervise/task-f")
    folder = env.tasks / "task-f"
    folder.mkdir(parents=True)
    TaskDir(folder).write_manifest(Manifest(
        task_id="task-f", task_name="f", model="m", status=Status.FAILED,
        failure_reason=FailureReason.WORKSPACE, project_dir=str(env.repo),
        session_name="task-f", session_id="x", tmpdir=str(folder), created_at=utc_iso(),
        workspace=WorkspaceReport(
            mode="worktree", path=str(env.worktrees / "task-f"), repository=str(env.repo),
            branch="supervise/task-f", base="main", base_commit=env.head("main"),
        ),
    ))  # fmt: skip


@pytest.mark.parametrize(
    ("verb", "task_id", "expected"),
    [
        ("merge", "task-r", "is running, not ended"),
        ("discard", "task-r", "is running, not ended"),
        ("merge", "nope", "no task 'nope'"),
        ("diff", "nope", "no task 'nope'"),
        ("diff", "task-s", "ran in shared mode"),
        ("merge", "task-s", "ran in shared mode"),
        ("discard", "task-n", "has no 'workspace'"),
        ("diff", "../x", "no task '../x'"),
        ("discard", "task-f", "failed making its workspace"),
    ],
)
def test_refusals_are_one_line_and_exit_1(env: Repo, verb: str, task_id: str,
                                          expected: str) -> None:  # fmt: skip
    env.task("task-r", {"shared.txt": "r\n"}, status=Status.RUNNING)
    _shared_task(env)
    _bare_task(env)
    _failed_workspace_task(env)
    before = (env.head("main"), env.branches(), env.worktree_paths())
    proc = env.proc(verb, task_id, "--yes" if verb == "discard" else "--stat"
                    if verb == "diff" else "--squash")  # fmt: skip
    lines = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and expected in lines[0], proc.stderr
    assert b"Traceback" not in proc.stderr
    assert (env.head("main"), env.branches(), env.worktree_paths()) == before


# ---------------------------------------------------------------- discard


def test_discard_needs_confirmation_then_removes_worktree_and_branch(env: Repo) -> None:
    wt = env.task("task-d", {"shared.txt": "changed\n"}, dirty={"scratch.txt": "wip\n"})
    refused = env.proc("discard", "task-d")  # stdin is /dev/null: no terminal to ask on
    assert refused.returncode == 1 and b"pass --yes" in refused.stderr
    assert wt.is_dir() and "supervise/task-d" in env.branches()

    done = env.proc("discard", "task-d", "--yes")
    assert done.returncode == 0, done.stderr
    assert not wt.exists() and "supervise/task-d" not in env.branches()
    assert wt not in env.worktree_paths()
    assert env.manifest("task-d")["workspace"]["removed"] is True
    [event] = env.events("task-d", "discarded")
    assert event["unmerged"] == 1 and event["dirty"] == 1
    again = env.proc("discard", "task-d", "--yes")
    assert again.returncode == 0 and b"already gone" in again.stdout


def test_discard_asks_on_a_terminal(env: Repo) -> None:
    wt = env.task("task-q", {"shared.txt": "changed\n"})
    leader, follower = pty.openpty()
    try:
        os.write(leader, b"n\n")
        no = env.proc("discard", "task-q", stdin=follower)
        assert no.returncode == 1 and wt.is_dir()
        os.write(leader, b"y\n")
        yes = env.proc("discard", "task-q", stdin=follower)
        assert yes.returncode == 0, yes.stderr
        assert not wt.exists() and "supervise/task-q" not in env.branches()
    finally:
        os.close(follower)
        os.close(leader)


# ---------------------------------------------------------------- prune


def _rows(output: bytes) -> dict[str, str]:
    """task id -> the table line."""
    lines = output.decode().splitlines()[2:]
    return {line.split()[0]: line for line in lines if line.strip()}


def test_prune_dry_run_then_prune_removes_exactly_merged_and_empty(env: Repo) -> None:
    merged = env.task("t-merged", {"a.txt": "a\n"})
    git(env.repo, "merge", "-q", "--no-ff", "-m", "merge by hand", "supervise/t-merged")
    empty = env.task("t-empty")
    dirty = env.task("t-dirty", dirty={"b.txt": "work in progress\n"})
    unmerged = env.task("t-unmerged", {"c.txt": "c\n"})
    running = env.task("t-running", {"d.txt": "d\n"}, status=Status.RUNNING)
    _failed_workspace_task(env)  # its branch is someone else's, and has no commits: kept
    all_paths = {merged, empty, dirty, unmerged, running}

    dry = env.proc("prune", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    rows = _rows(dry.stdout)
    assert set(rows) == {"t-merged", "t-empty", "t-dirty", "t-unmerged"}
    assert "would remove" in rows["t-merged"] and "merged into main" in rows["t-merged"]
    assert "would remove" in rows["t-empty"] and "no commits beyond" in rows["t-empty"]
    assert "keep" in rows["t-dirty"] and "uncommitted changes" in rows["t-dirty"]
    assert "keep" in rows["t-unmerged"] and "unmerged: 1 commit not in" in rows["t-unmerged"]
    assert all(p.is_dir() for p in all_paths) and all_paths <= env.worktree_paths()

    done = env.proc("prune")
    assert done.returncode == 0, done.stderr
    assert not merged.exists() and not empty.exists()
    assert dirty.is_dir() and unmerged.is_dir() and running.is_dir()
    assert (dirty / "b.txt").read_text() == "work in progress\n"
    assert env.worktree_paths() == {env.repo, dirty, unmerged, running}
    assert env.branches() == {"main", "supervise/t-dirty", "supervise/t-unmerged",
                              "supervise/t-running", "supervise/task-f"}  # fmt: skip
    for task_id, removed in (("t-merged", True), ("t-empty", True), ("t-dirty", False)):
        assert env.manifest(task_id)["workspace"]["removed"] is removed
    assert env.events("t-merged", "pruned")[0]["branch_deleted"] is True
    # A second prune has nothing more to remove.
    assert set(_rows(env.proc("prune", "--dry-run").stdout)) == {"t-dirty", "t-unmerged"}


def test_prune_force_removes_dirty_and_unmerged_worktrees_but_keeps_the_branch(env: Repo) -> None:
    unmerged = env.task("t-unmerged", {"c.txt": "c\n"})
    dirty = env.task("t-dirty", dirty={"b.txt": "wip\n"})
    assert env.proc("prune", "--force").returncode == 0
    assert not unmerged.exists() and not dirty.exists()
    assert "supervise/t-unmerged" in env.branches()  # its commit stays reachable
    assert "supervise/t-dirty" not in env.branches()  # no commits of its own


def test_prune_older_than_keeps_recent_tasks(env: Repo) -> None:
    old = env.task("t-old", finished_at=time.time() - 8 * 86400)
    new = env.task("t-new", finished_at=time.time() - 3600)
    proc = env.proc("prune", "--older-than", "7d")
    assert proc.returncode == 0, proc.stderr
    assert not old.exists() and new.is_dir()
    assert "within --older-than" in _rows(proc.stdout)["t-new"]
    bad = env.proc("prune", "--older-than", "7 days")
    assert bad.returncode == 2 and b"not a duration" in bad.stderr


def test_prune_reports_an_orphaned_worktree_and_removes_it_only_with_force(env: Repo) -> None:
    env.task("t-known", {"c.txt": "c\n"})  # a task that makes the repository known
    ghost = env.task("t-ghost", {"g.txt": "g\n"})
    shutil.rmtree(env.tasks / "t-ghost")  # its task folder is gone
    proc = env.proc("prune")
    assert proc.returncode == 0, proc.stderr
    row = _rows(proc.stdout)["t-ghost"]
    assert "orphan" in row and "task folder gone" in row
    assert ghost.is_dir() and ghost in env.worktree_paths()
    forced = env.proc("prune", "--force")
    assert forced.returncode == 0, forced.stderr
    assert not ghost.exists() and ghost not in env.worktree_paths()
    assert "supervise/t-ghost" in env.branches()


def test_parse_duration() -> None:
    assert parse_duration("7d") == 7 * 86400
    assert parse_duration("12h") == 43200
    assert parse_duration("30m") == 1800
    assert parse_duration("45s") == 45 and parse_duration("90") == 90
    assert parse_duration("2w") == 14 * 86400 and parse_duration("1.5h") == 5400
    for bad in ("", "7x", "-1d", "d", "1d2h"):
        with pytest.raises(ValueError):
            parse_duration(bad)
