"""``supervise merge|discard|prune`` never lose a user's file or leave a half-done merge.

Real repositories and worktrees (the ``Repo`` helper of test_workspace_review). Where a git
step must fail or stall at a chosen moment, a ``git`` wrapper first on ``PATH`` (written
here, see :func:`wrap_git`) runs the real git and then holds ``index.lock``, or sleeps, for
one git verb only: the deterministic stand-in for an editor's background ``git status`` and
for a SIGKILL halfway through.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for
from support.review_repo import Repo, _no_git_identity, git

_REAL_GIT = shutil.which("git") or "/usr/bin/git"

#: The wrapper: for the git verb $WRAP_VERB only (the first word after ``-c K=V`` pairs):
#: "slow" marks $WRAP_MARK, sleeps $WRAP_SLEEP s, then runs git; "lock" runs git, then
#: creates index.lock, marks and exits 1; "after" runs git, marks, then becomes ``sleep``
#: (to be SIGKILLed by PID); "before" marks and becomes ``sleep`` without running git.
_WRAPPER = """#!/bin/sh
verb=""; skip=0
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  case "$a" in -c) skip=1;; -*) ;; *) verb=$a; break;; esac
done
[ "$verb" = "$WRAP_VERB" ] || exec {git} "$@"
case "$WRAP_MODE" in
  slow) echo $$ > "$WRAP_MARK"; sleep "$WRAP_SLEEP"; exec {git} "$@";;
  lock) {git} "$@"; touch "$({git} rev-parse --git-path index).lock"; echo $$ > "$WRAP_MARK"
        exit 1;;
  after) {git} "$@"; echo $$ > "$WRAP_MARK"; exec sleep 60;;
  before) echo $$ > "$WRAP_MARK"; exec sleep 60;;
esac
"""


def wrap_git(root: Path, verb: str, mode: str, sleep: float = 1.5) -> dict[str, str]:
    """An environment whose ``git`` is the wrapper (see ``_WRAPPER``) for ``verb``."""
    bin_dir = root / "wrapbin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "git"
    script.write_text(_WRAPPER.replace("{git}", _REAL_GIT))
    script.chmod(0o755)
    wrapped = {"WRAP_VERB": verb, "WRAP_MODE": mode, "WRAP_SLEEP": str(sleep)}
    wrapped["WRAP_MARK"] = str(root / "mark")
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", **wrapped}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Repo:
    _no_git_identity(tmp_path, monkeypatch)
    return Repo(tmp_path)


def snapshot(repo: Path) -> tuple[str, str, bool, str]:
    """HEAD, the index (``ls-files -s``), MERGE_HEAD present, ``status --ignored``."""
    return (
        git(repo, "rev-parse", "HEAD"),
        git(repo, "ls-files", "-s"),
        (repo / ".git" / "MERGE_HEAD").exists(),
        git(repo, "status", "--porcelain", "--ignored"),
    )


def one_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and b"Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def events(env: Repo, task_id: str, name: str) -> list[dict[str, Any]]:
    if not (env.tasks / task_id / "events.jsonl").exists():
        return []
    return env.events(task_id, name)


# ---------------------------------------------------------------- ignored and untracked paths


def _ignore(env: Repo, *patterns: str) -> None:
    (env.repo / ".gitignore").write_text("".join(p + "\n" for p in patterns))
    git(env.repo, "add", ".gitignore")
    git(env.repo, "commit", "-q", "-m", "ignore")


def _commit_forced(worktree: Path, name: str, text: str) -> None:
    """Commit ``name`` on the task branch although it is ignored (``git add -f``)."""
    (worktree / name).parent.mkdir(parents=True, exist_ok=True)
    (worktree / name).write_text(text)
    git(worktree, "add", "-f", name)
    git(worktree, "commit", "-q", "-m", f"adds {name}")


@pytest.mark.parametrize("squash", [False, True])
def test_merge_refuses_to_overwrite_an_ignored_file_and_names_it(env: Repo, squash: bool) -> None:
    _ignore(env, "local.cfg", ".env")
    _commit_forced(env.task("t1", {"new.txt": "n\n"}), "local.cfg", "agent's settings\n")
    (env.repo / "local.cfg").write_text("the user's own settings\n")
    (env.repo / ".env").write_text("SECRET=1\n")  # ignored, not touched by the branch
    before = snapshot(env.repo)
    proc = env.proc("merge", "t1", *(["--squash"] if squash else []))
    line = one_line(proc)
    assert proc.returncode == 1 and "local.cfg" in line and "ignored" in line, line
    assert ".env" not in line and "move" in line
    assert (env.repo / "local.cfg").read_text() == "the user's own settings\n"
    assert snapshot(env.repo) == before and events(env, "t1", "merged") == []


def test_merge_refuses_a_branch_file_inside_an_ignored_directory(env: Repo) -> None:
    """``build/`` is ignored and holds the user's files; the branch adds ``build/x``: git
    would write into it without complaint (it only protects an ignored file at the same
    path)."""
    _ignore(env, "build/")
    _commit_forced(env.task("t1"), "build/x", "agent\n")
    (env.repo / "build").mkdir()
    (env.repo / "build" / "y").write_text("user's build output\n")
    before = snapshot(env.repo)
    proc = env.proc("merge", "t1")
    line = one_line(proc)
    assert proc.returncode == 1 and "build/" in line, line
    assert not (env.repo / "build" / "x").exists() and snapshot(env.repo) == before


def test_merge_refuses_an_untracked_file_at_a_path_the_branch_adds(env: Repo) -> None:
    env.task("t1", {"notes.txt": "agent's notes\n"})
    (env.repo / "notes.txt").write_text("user's notes\n")
    before = snapshot(env.repo)
    proc = env.proc("merge", "t1")
    line = one_line(proc)
    assert proc.returncode == 1 and "notes.txt" in line and "untracked" in line, line
    assert (env.repo / "notes.txt").read_text() == "user's notes\n"
    assert snapshot(env.repo) == before


def test_merge_with_an_ignored_file_the_branch_does_not_touch_succeeds(env: Repo) -> None:
    _ignore(env, ".env")
    env.task("t1", {"a.txt": "a\n"})
    (env.repo / ".env").write_text("SECRET=1\n")
    proc = env.proc("merge", "t1")
    assert proc.returncode == 0, proc.stderr
    assert (env.repo / ".env").read_text() == "SECRET=1\n"
    assert (env.repo / "a.txt").read_text() == "a\n"


# ---------------------------------------------------------------- a merge that fails


def _release_later(mark: Path, lock: Path, after_s: float) -> threading.Thread:
    """Remove ``lock`` ``after_s`` seconds after ``mark`` appears (the editor's git ends)."""

    def run() -> None:
        deadline = time.monotonic() + 60
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(after_s)  # how long the editor's git holds the lock: the case under test
        lock.unlink(missing_ok=True)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("squash", [False, True])
def test_a_merge_that_meets_a_held_index_lock_leaves_the_checkout_exactly_as_it_was(
    env: Repo, squash: bool
) -> None:
    """git's merge step changes the checkout, then fails while another git holds
    ``index.lock`` for 1.5 s: the undo waits for the lock, and HEAD, the index and the
    files are as before, with no MERGE_HEAD."""
    env.task("t1", {"a.txt": "a\n", "shared.txt": "changed\n"})
    before = snapshot(env.repo)
    wrapped = wrap_git(env.root, "merge", "lock")
    thread = _release_later(env.root / "mark", env.repo / ".git" / "index.lock", 1.5)
    proc = env.proc("merge", "t1", *(["--squash"] if squash else []), env=wrapped)
    thread.join()
    line = one_line(proc)
    assert proc.returncode == 1 and "undone" in line, line
    assert snapshot(env.repo) == before and not (env.repo / "a.txt").exists()
    assert events(env, "t1", "merged") == []
    again = env.proc("merge", "t1")  # and the next merge works
    assert again.returncode == 0, again.stderr
    assert (env.repo / "a.txt").read_text() == "a\n"


def test_a_held_ref_lock_fails_the_merge_and_the_checkout_is_restored(env: Repo) -> None:
    """A real lock, no wrapper: ``refs/heads/main.lock`` is held, so git updates the files
    and the index and then cannot move the branch."""
    env.task("t1", {"a.txt": "a\n"})
    before = snapshot(env.repo)
    held = env.repo / ".git" / "refs" / "heads" / "main.lock"
    held.touch()
    proc = env.proc("merge", "t1")
    line = one_line(proc)
    assert proc.returncode == 1 and "main.lock" in line, line
    held.unlink()
    assert snapshot(env.repo) == before and not (env.repo / "a.txt").exists()


def test_an_undo_that_cannot_finish_says_so_in_one_line(
    env: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from supervisor.workspace import checkout

    monkeypatch.setattr(checkout, "UNDO_WAIT", 1.0)
    env.task("t1", {"a.txt": "a\n"})
    for key, value in wrap_git(env.root, "merge", "lock").items():
        monkeypatch.setenv(key, value)
    assert env.cli("merge", "t1") == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "undo failed" in err and "index.lock" in err, err
    (env.repo / ".git" / "index.lock").unlink()


# ---------------------------------------------------------------- two at once, SIGKILL


def _two(
    env: Repo, wrapped: dict[str, str], *args: str
) -> list[subprocess.CompletedProcess[bytes]]:
    argv = [sys.executable, "-m", "supervisor.cli", args[0], "-c", str(env.profile), *args[1:]]
    procs = [subprocess.Popen(argv, env=wrapped, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]  # fmt: skip
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    return done


@pytest.mark.parametrize("squash", [False, True])
def test_two_merges_at_once_merge_once(env: Repo, squash: bool) -> None:
    env.task("t1", {"a.txt": "a\n"})
    base = env.head("main")
    first, second = _two(env, wrap_git(env.root, "merge", "slow"), "merge", "t1",
                         *(["--squash"] if squash else []))  # fmt: skip
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    assert git(env.repo, "rev-list", "--count", f"{base}..main", "--first-parent") == "1"
    assert len(events(env, "t1", "merged")) == 1
    assert git(env.repo, "status", "--porcelain") == ""


def test_two_discards_at_once_both_finish(env: Repo) -> None:
    wt = env.task("t1", {"a.txt": "a\n"})
    results = _two(env, wrap_git(env.root, "worktree", "slow"), "discard", "t1", "--yes")
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert not wt.exists() and "supervise/t1" not in env.branches()
    assert len(events(env, "t1", "discarded")) == 1


def test_two_prunes_at_once_both_finish(env: Repo) -> None:
    paths = [env.task(f"t{i}") for i in range(3)]  # no commits: each is prunable
    results = _two(env, wrap_git(env.root, "worktree", "slow", 0.5), "prune")
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert not any(p.exists() for p in paths)
    assert all(len(events(env, f"t{i}", "pruned")) == 1 for i in range(3))


def _await_mark(env: Repo, proc: subprocess.Popen) -> Path:
    """Wait (60 s at most) until the git wrapper writes its mark (its PID); fail if ``proc``
    ends first. Returns the mark file."""
    mark = env.root / "mark"

    def marked() -> bool:
        assert proc.poll() is None, "the command ended before the git wrapper wrote its mark"
        return mark.exists() and bool(mark.read_text().strip())

    wait_for(marked, timeout=60, every=0.02)
    return mark


def _kill_halfway(env: Repo, wrapped: dict[str, str], *args: str) -> None:
    """Start ``supervise ARGS``, SIGKILL it (and the wrapper) once the wrapper marks."""
    argv = [sys.executable, "-m", "supervisor.cli", args[0], "-c", str(env.profile), *args[1:]]
    proc = subprocess.Popen(argv, env=wrapped, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    mark = _await_mark(env, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):  # the wrapper's sleep (it marked its PID)
        os.kill(int(mark.read_text()), signal.SIGKILL)


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("squash", [False, True])
def test_a_merge_sigkilled_halfway_is_finished_by_the_next_run(
    env: Repo, squash: bool, when: str
) -> None:
    env.task("t1", {"a.txt": "a\n"})
    base = env.head("main")
    flag = ["--squash"] if squash else []
    _kill_halfway(env, wrap_git(env.root, "merge", when), "merge", "t1", *flag)
    again = env.proc("merge", "t1", *flag)
    assert again.returncode == 0, again.stderr
    assert (env.repo / "a.txt").read_text() == "a\n"
    assert git(env.repo, "status", "--porcelain") == ""
    assert git(env.repo, "rev-list", "--count", f"{base}..main", "--first-parent") == "1"
    [event] = events(env, "t1", "merged")
    assert event["commit"] == env.head("main")
    pruned = env.proc("prune")  # the merge is recorded, so its branch goes
    assert pruned.returncode == 0 and "supervise/t1" not in env.branches(), pruned.stdout


def test_a_discard_sigkilled_halfway_is_finished_by_the_next_run(env: Repo) -> None:
    wt = env.task("t1", {"a.txt": "a\n"})
    _kill_halfway(env, wrap_git(env.root, "branch", "before"), "discard", "t1", "--yes")
    assert not wt.exists() and "supervise/t1" in env.branches()
    again = env.proc("discard", "t1", "--yes")
    assert again.returncode == 0, again.stderr
    assert "supervise/t1" not in env.branches()
    assert env.manifest("t1")["workspace"]["removed"] is True
    assert len(events(env, "t1", "discarded")) == 1


def test_a_second_copy_refuses_in_one_line_when_the_lock_stays_held(
    env: Repo, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from supervisor.workspace import repolock

    monkeypatch.setattr(repolock, "LOCK_WAIT", 0.5)
    env.task("t1", {"a.txt": "a\n"})
    with repolock.repo_lock(env.repo, "merge"):
        assert env.cli("merge", "t1") == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another supervise" in err, err
    assert not (env.repo / "a.txt").exists()


# ---------------------------------------------------------------- odd checkouts


def test_a_detached_head_checkout_is_left_alone(env: Repo) -> None:
    env.task("t1", {"a.txt": "a\n"})
    git(env.repo, "checkout", "-q", "--detach")
    before = snapshot(env.repo)
    proc = env.proc("merge", "t1")
    assert proc.returncode == 0, proc.stderr
    assert "checked out nowhere" in proc.stdout.decode()
    assert snapshot(env.repo) == before
    assert git(env.repo, "show", "main:a.txt") == "a"


def test_a_merge_into_a_repository_whose_branch_is_unborn_refuses(env: Repo) -> None:
    env.task("t1", {"a.txt": "a\n"})
    git(env.repo, "checkout", "-q", "--orphan", "fresh")
    git(env.repo, "rm", "-rq", "--cached", ".")
    proc = env.proc("merge", "t1", "--into", "fresh")
    assert proc.returncode == 1 and "not a local branch" in one_line(proc)


def test_a_branch_in_a_submodule_path_merges_and_a_failure_leaves_it(env: Repo) -> None:
    sub = env.root / "subsrc"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    (sub / "f").write_text("f\n")
    git(sub, "add", ".")
    git(sub, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-q", "-m", "s")
    git(env.repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    git(env.repo, "commit", "-q", "-m", "sub")
    env.task("t1", {"a.txt": "a\n"})
    (env.repo / "sub" / "untracked-in-sub").write_text("mine\n")
    before = snapshot(env.repo)
    proc = env.proc("merge", "t1")
    assert proc.returncode == 1 and "uncommitted changes" in one_line(proc)
    assert snapshot(env.repo) == before
    (env.repo / "sub" / "untracked-in-sub").unlink()
    assert env.proc("merge", "t1").returncode == 0
    assert (env.repo / "sub" / "f").read_text() == "f\n"


def test_a_prune_sigkilled_halfway_is_finished_by_the_next_run(env: Repo) -> None:
    paths = [env.task(f"t{i}") for i in range(2)]
    _kill_halfway(env, wrap_git(env.root, "branch", "before"), "prune")
    again = env.proc("prune")
    assert again.returncode == 0, again.stderr
    assert not any(p.exists() for p in paths) and env.branches() == {"main"}
    assert all(len(events(env, f"t{i}", "pruned")) == 1 for i in range(2))


def test_a_checkout_left_half_fast_forwarded_is_restored_by_the_next_merge(env: Repo) -> None:
    """What a fast-forward killed between writing the index and moving the branch leaves
    (the files and index at the merge commit, the branch not moved, the journal there):
    the next merge restores the checkout, says so, and merges."""
    from supervisor.workspace import journal

    env.task("t1", {"a.txt": "a\n"})
    before = env.head("main")
    tree = git(env.repo, "merge-tree", "--write-tree", "main", "supervise/t1")
    commit = git(env.repo, "commit-tree", tree, "-p", "main", "-m", "interrupted")
    intent = journal.MergeIntent(str(env.tasks / "t1"), "main", before, commit,
                                 env.head("supervise/t1"), True, str(env.repo))  # fmt: skip
    journal.write(env.repo / ".git", intent)
    git(env.repo, "read-tree", "-m", "-u", "HEAD", commit)
    assert git(env.repo, "status", "--porcelain") == "A  a.txt"
    proc = env.proc("merge", "t1", "--squash")
    assert proc.returncode == 0, proc.stderr
    assert b"note: an interrupted merge into main had not merged" in proc.stdout
    assert git(env.repo, "rev-parse", "main^") == before
    assert git(env.repo, "status", "--porcelain") == ""
    assert not (env.repo / ".git" / journal.JOURNAL).exists()


def test_colliding_paths_with_odd_names_and_many_of_them_are_one_line(env: Repo) -> None:
    """31 untracked files at paths the branch adds, one named with a newline and an escape
    sequence: one line, ten named, the rest counted, no raw control character."""
    wt = env.task("t1")
    names = [f"f{i:02}" for i in range(30)] + ["new\nline\x1b[31m"]
    for name in names:
        (wt / name).write_text("agent\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "many")
    for name in names:
        (env.repo / name).write_text("the user's\n")
    proc = env.proc("merge", "t1")
    line = one_line(proc)
    assert "f00 (untracked)" in line and "and 21 more" in line and "\x1b" not in line, line
    assert all((env.repo / n).read_text() == "the user's\n" for n in names)


@pytest.mark.parametrize("kind", ["fifo", "dangling-symlink", "directory"])
def test_an_odd_file_type_at_a_path_the_branch_adds_is_refused_and_kept(
    env: Repo, kind: str
) -> None:
    """A FIFO (nothing may open it: git would block), a dangling symlink (ignored) and a
    folder holding a file where the branch adds a file of that name."""
    _ignore(env, "link")
    _commit_forced(env.task("t1", {"fifo": "f\n", "dir": "d\n"}), "link", "agent\n")
    target = env.repo / {"fifo": "fifo", "dangling-symlink": "link", "directory": "dir"}[kind]
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dangling-symlink":
        target.symlink_to(env.root / "nowhere")
    else:
        target.mkdir()
        (target / "inside").write_text("the user's\n")
    before = snapshot(env.repo)
    proc = env.proc("merge", "t1")
    line = one_line(proc)
    assert proc.returncode == 1 and target.name in line, line
    assert snapshot(env.repo) == before and os.path.lexists(target)


def test_a_ctrl_c_during_the_merge_step_lets_it_finish_and_be_recorded(env: Repo) -> None:
    """SIGINT while git moves the checkout: Python would kill git halfway (subprocess.run
    kills its child on KeyboardInterrupt); the step, its event and the journal's removal
    finish first, then the command exits 130."""
    env.task("t1", {"a.txt": "a\n"})
    argv = [sys.executable, "-m", "supervisor.cli", "merge", "-c", str(env.profile), "t1"]
    # SIGINT as a terminal's Ctrl-C finds it: a runner (pytest-xdist's workers) may ignore
    # SIGINT, and an ignored SIGINT is inherited and kept by Python at start.
    proc = subprocess.Popen(
        argv,
        env=wrap_git(env.root, "merge", "slow", 1.5),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _await_mark(env, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and b"Traceback" not in err, err
    assert (env.repo / "a.txt").read_text() == "a\n"
    assert git(env.repo, "rev-parse", "HEAD^2") == env.head("supervise/t1")
    assert git(env.repo, "status", "--porcelain") == ""
    assert len(events(env, "t1", "merged")) == 1
    assert not (env.repo / ".git" / "supervise-merge.json").exists()


def test_a_discard_whose_branch_moved_since_the_question_removes_nothing(env: Repo) -> None:
    """The question showed one branch commit; under the lock the branch has another (more
    work would be lost than was confirmed): refused, nothing removed."""
    from supervisor.workspace import review
    from supervisor.workspace.gitops import ReviewError

    wt = env.task("t1", {"a.txt": "a\n"})
    ws = review.load_task(env.tasks, "t1")
    asked = review.discard_plan(ws)
    (wt / "b.txt").write_text("b\n")
    git(wt, "add", "b.txt")
    git(wt, "commit", "-q", "-m", "more work")
    with pytest.raises(ReviewError, match="changed since the question"):
        review.discard_confirmed(ws, asked)
    assert wt.is_dir() and "supervise/t1" in env.branches()
    assert events(env, "t1", "discarded") == []
