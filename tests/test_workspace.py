"""Workspaces on real git repositories: resolve at claim, prepare (worktree, submodules,
copies, setup) with nothing left behind on failure, finish (commit and stats), and the
engine running agents, resumes, adoption and acceptance in the worktree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import Setup, wait_for
from support.repos import make_repo, new_task, sh
from support.small_fs import small_fs  # noqa: F401  (a real small tmpfs, root only)

from supervisor.config import ConfigError, load_profile, load_task
from supervisor.config.workspace import WorkspaceSpec, workspace_rows
from supervisor.workspace import git, lifecycle
from supervisor.workspace.lifecycle import WorkspaceError


def left_behind(repo: Path, path: Path, branch: str) -> list[str]:
    """What a failed preparation could have left: a registered worktree, the branch, the
    folder."""
    found = []
    if str(path) in sh(repo, "worktree", "list"):
        found.append("worktree")
    if branch in sh(repo, "branch", "--list", branch):
        found.append("branch")
    if os.path.lexists(path):
        found.append("folder")
    return found


def prepared(tmp_path: Path, repo: Path, spec: WorkspaceSpec, task_id: str = "t-abc123"):
    task = new_task(tmp_path, task_id)
    report = lifecycle.resolve(task_id, repo, spec, tmp_path / "state")
    return task, report, lifecycle.prepare(task, report, spec, repo)


# ------------------------------------------------------------------ resolve


def test_resolve_a_repository_gives_a_worktree_on_the_checked_out_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    sh(repo, "checkout", "-q", "-b", "dev")
    report = lifecycle.resolve("t-1", repo, WorkspaceSpec(), tmp_path / "state")
    assert report.mode == "worktree"
    assert report.branch == "supervise/t-1"
    assert report.base == "dev"
    assert report.base_commit == sh(repo, "rev-parse", "HEAD")
    assert report.path == str(tmp_path / "state" / "worktrees" / "t-1")
    assert report.repository == str(repo.resolve())


def test_resolve_a_plain_folder_is_shared(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    report = lifecycle.resolve("t-1", folder, WorkspaceSpec(), tmp_path / "state")
    assert report.mode == "shared" and report.path == str(folder) and report.repository is None
    assert lifecycle.agent_dir(report, folder) == folder


@pytest.mark.parametrize("case", ["empty", "detached", "missing_base", "not_a_repo"])
def test_no_usable_base_fails_prepare_with_one_line(tmp_path: Path, case: str) -> None:
    repo = tmp_path / "repo"
    spec = WorkspaceSpec()
    if case == "empty":  # without a base it runs in place (test_workspace_unborn.py)
        repo.mkdir()
        sh(repo, "init", "-q", "-b", "main")
        spec = WorkspaceSpec(base="main")
    elif case == "not_a_repo":
        repo.mkdir()
        spec = WorkspaceSpec(mode="worktree")
    else:
        make_repo(repo)
        if case == "detached":
            sh(repo, "checkout", "-q", "--detach")
        else:
            spec = WorkspaceSpec(base="no-such-branch")
    task = new_task(tmp_path)
    report = lifecycle.resolve(task.task_id, repo, spec, tmp_path / "state")
    with pytest.raises(WorkspaceError) as caught:
        lifecycle.prepare(task, report, spec, repo)
    message = str(caught.value)
    assert "\n" not in message
    expected = {
        "empty": "names no commit",
        "detached": "detached",
        "missing_base": "'no-such-branch' names no commit",
        "not_a_repo": "not in a git repository",
    }
    assert expected[case] in message
    assert not (tmp_path / "state" / "worktrees" / task.task_id).exists()


# ------------------------------------------------------------------ prepare


def test_prepare_checks_out_submodules_and_copies_ignored_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # git >= 2.38.1 refuses file:// submodule clones unless told (CVE-2022-39253); a
    # user's real submodules come over https/ssh. supervise never weakens that default.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.file.allow")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "always")
    lib = make_repo(tmp_path / "lib", {"lib.txt": "library\n"})
    repo = make_repo(tmp_path / "repo", {".gitignore": ".env\nconf/\n", "app.txt": "app\n"})
    sh(repo, "submodule", "add", "-q", str(lib), "vendor/lib")
    sh(repo, "commit", "-q", "-m", "add lib")
    (repo / ".env").write_text("SECRET=1\n")
    (repo / "conf").mkdir()
    (repo / "conf" / "local.toml").write_text("x = 1\n")
    spec = WorkspaceSpec.model_validate({"copy": [".env", "conf", "missing.txt"]})
    task, report, _ = prepared(tmp_path, repo, spec)
    tree = Path(report.path)
    assert (tree / "vendor" / "lib" / "lib.txt").read_text() == "library\n"
    assert (tree / ".env").read_text() == "SECRET=1\n"
    assert (tree / "conf" / "local.toml").read_text() == "x = 1\n"
    assert "missing.txt not found" in task.file("output.log").read_text()
    assert sh(tree, "rev-parse", "--abbrev-ref", "HEAD") == "supervise/t-abc123"
    assert lifecycle.is_ready(task)


def test_setup_runs_in_the_worktree_and_its_output_goes_to_the_log(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    spec = WorkspaceSpec(setup=[sys.executable, "-c", "import os; print('setup in', os.getcwd())"])
    task, report, _ = prepared(tmp_path, repo, spec)
    assert f"setup in {report.path}" in task.file("output.log").read_text()


@pytest.mark.parametrize("case", ["exit", "timeout", "not_found", "branch_taken", "copy_escape"])
def test_a_failed_preparation_leaves_nothing_behind(tmp_path: Path, case: str) -> None:
    repo = make_repo(tmp_path / "repo")
    spec = {
        "exit": WorkspaceSpec(setup=[sys.executable, "-c", "import sys; sys.exit(3)"]),
        "timeout": WorkspaceSpec(setup=["sleep", "30"], setup_timeout=0.5),
        "not_found": WorkspaceSpec(setup=["no-such-program-xyz"]),
        "branch_taken": WorkspaceSpec(),
        "copy_escape": WorkspaceSpec.model_validate({"copy": ["../outside"]}),
    }[case]
    (tmp_path / "outside").write_text("x")
    if case == "branch_taken":
        sh(repo, "branch", "supervise/t-abc123")
    task = new_task(tmp_path)
    report = lifecycle.resolve(task.task_id, repo, spec, tmp_path / "state")
    with pytest.raises(WorkspaceError) as caught:
        lifecycle.prepare(task, report, spec, repo)
    expected = {
        "exit": "exited 3",
        "timeout": "ran out of time",
        "not_found": "cannot run",
        "branch_taken": "already exists",
        "copy_escape": "leaves project_dir",
    }
    assert expected[case] in str(caught.value)
    leftovers = left_behind(repo, Path(report.path), "supervise/t-abc123")
    # a branch that existed before is not ours to delete
    assert leftovers == (["branch"] if case == "branch_taken" else [])
    assert not lifecycle.is_ready(task)


def test_prepare_cut_short_by_a_crash_is_done_again_reusing_our_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    spec = WorkspaceSpec()
    task = new_task(tmp_path)
    report = lifecycle.resolve(task.task_id, repo, spec, tmp_path / "state")
    lifecycle.prepare(task, report, spec, repo)
    # a crash after the worktree was made, before "ready": the event is lost
    lines = task.file("events.jsonl").read_text().splitlines()
    task.file("events.jsonl").write_text("".join(f"{x}\n" for x in lines if "ready" not in x))
    assert not lifecycle.is_ready(task)
    (Path(report.path) / "work.txt").write_text("kept")
    lifecycle.prepare(task, report, spec, repo)
    assert (Path(report.path) / "work.txt").read_text() == "kept"
    assert lifecycle.is_ready(task)


def test_setup_is_ended_when_supervise_stops(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    spec = WorkspaceSpec(setup=["sleep", "30"])
    task = new_task(tmp_path)
    report = lifecycle.resolve(task.task_id, repo, spec, tmp_path / "state")
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    with pytest.raises(InterruptedError):
        lifecycle.prepare(task, report, spec, repo, cancel.is_set)
    assert Path(report.path).is_dir()  # kept: prepared again on the next start


# ------------------------------------------------------------------ finish


@pytest.mark.parametrize("identity", [True, False])
def test_finish_commits_what_the_agent_left_and_counts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, identity: bool
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "one\ntwo\n", ".gitignore": ".env\n"})
    (repo / ".env").write_text("S=1\n")
    spec = WorkspaceSpec.model_validate({"copy": [".env"]})
    task, report, _ = prepared(tmp_path, repo, spec)
    tree = Path(report.path)
    (tree / "a.txt").write_text("one\nTWO\nthree\n")
    (tree / "new.txt").write_text("new\n")
    if not identity:
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-such-config"))
        monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        monkeypatch.setenv("HOME", str(tmp_path))
        assert not git.has_identity(tree)
    message = lifecycle.commit_message(task.task_id, "fix it", "sess-1")
    done = lifecycle.finish(report, spec, repo, message)
    assert done.head_commit == sh(tree, "rev-parse", "HEAD") != report.base_commit
    assert (done.files_changed, done.insertions, done.deletions) == (2, 3, 1)
    assert done.uncommitted is False
    log = sh(tree, "log", "-1", "--format=%an <%ae>%n%B")
    assert "task t-abc123" in log and "session sess-1" in log and "fix it" in log
    assert ("supervise <supervise@localhost>" in log) is not identity
    assert ".env" not in sh(tree, "show", "--name-only", "--format=", "HEAD")
    assert sh(repo, "status", "--porcelain") == "?? .env" or not sh(repo, "status", "--porcelain")


def test_finish_without_commit_reports_uncommitted_work(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    spec = WorkspaceSpec(commit=False)
    _, report, _ = prepared(tmp_path, repo, spec)
    (Path(report.path) / "README").write_text("changed\n")
    done = lifecycle.finish(report, spec, repo, "m")
    assert done.head_commit == report.base_commit
    assert done.uncommitted is True and done.files_changed == 0


def test_shortstat_parsing() -> None:
    assert git.parse_shortstat(" 1 file changed, 1 insertion(+)\n") == (1, 1, 0)
    assert git.parse_shortstat(" 3 files changed, 2 deletions(-)\n") == (3, 0, 2)
    assert git.parse_shortstat("") == (0, 0, 0)


def test_run_git_is_bounded_and_says_why(tmp_path: Path) -> None:
    with pytest.raises(git.GitError) as caught:
        git.run_git(["rev-parse", "HEAD"], tmp_path)
    assert "not a git repository" in str(caught.value)
    assert git.toplevel(tmp_path) is None


# ------------------------------------------------------------------ the engine


def git_project(setup: Setup) -> Path:
    """Turn ``setup.project`` into a repository with one commit (branch main)."""
    make_repo(setup.project, {"README": "hello\n", ".gitignore": ".env\n"})
    return setup.project


IN_WORKTREE = (
    "import os, sys; here = os.getcwd(); "
    "sys.exit(0 if '/worktrees/' in here and os.path.exists('received_prompt.bin') else 1)"
)


def test_engine_runs_the_agent_and_acceptance_in_the_worktree_and_commits(setup: Setup) -> None:
    project = git_project(setup)
    (project / ".env").write_text("TOKEN=1\n")
    setup.write_profile(extra={"workspace": {"copy": [".env"]}})
    task = setup.task(
        "wt", "print: hi\nexit: 0", acceptance={"command": [sys.executable, "-c", IN_WORKTREE]}
    )
    setup.drop("wt.toml", task)
    assert setup.run().returncode == 0
    m = setup.manifests()["wt"]
    ws = m["workspace"]
    assert (m["status"], m["verdict"]) == ("completed", "PASS"), m["summary"]
    tree = Path(ws["path"])
    assert tree == setup.state / "worktrees" / m["task_id"]
    launch = json.loads((setup.state / "tasks" / m["task_id"] / "launch.json").read_text())
    assert launch["cwd"] == str(tree)
    assert (tree / ".env").read_text() == "TOKEN=1\n"
    # the agent's files are on the task branch, not in the project's own checkout
    assert not (project / "received_prompt.bin").exists()
    assert ws["branch"] == f"supervise/{m['task_id']}" and ws["base"] == "main"
    assert ws["head_commit"] == sh(project, "rev-parse", ws["branch"]) != ws["base_commit"]
    assert ws["files_changed"] >= 3 and ws["uncommitted"] is False
    shown = sh(project, "show", "--name-only", "--format=%B", ws["branch"])
    assert "received_prompt.bin" in shown and m["session_id"] in shown and ".env" not in shown
    names = [e["event"] for e in setup.events(m["task_id"])]
    assert names.index("workspace_ready") < names.index("launched")
    assert names.index("workspace_finished") < names.index("acceptance")


def test_a_failing_setup_ends_the_task_failed_workspace_with_nothing_left(setup: Setup) -> None:
    project = git_project(setup)
    failing = [sys.executable, "-c", "import sys; print('installing'); sys.exit(7)"]
    setup.write_profile(extra={"workspace": {"setup": failing}})
    setup.drop("bad.toml", setup.task("bad", "print: never\nexit: 0"))
    assert setup.run().returncode == 0
    m = setup.manifests()["bad"]
    assert (m["status"], m["failure_reason"], m["verdict"]) == ("failed", "workspace", "FAIL")
    assert "exited 7" in m["summary"] and "\n" not in m["summary"]
    ws = m["workspace"]
    assert left_behind(project, Path(ws["path"]), ws["branch"]) == []
    log = (setup.state / "tasks" / m["task_id"] / "output.log").read_text()
    assert "installing" in log and "never" not in log
    assert m["launched_at"] is None


def test_crash_resume_and_engine_restart_keep_the_same_worktree(setup: Setup) -> None:
    git_project(setup)
    setup.write_profile(base_interval=0.3, max_retries=3)
    release = setup.root / "release"  # each run lives until the test releases it
    prompt = f"tick: 0.5\nsleep: 1\nuntil_file: {release}\nexit: 0"
    setup.drop("c.toml", setup.task("crashy", prompt))
    engine = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "run", str(setup.profile)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        m = wait_for(
            lambda: (
                (setup.manifests().get("crashy") or {}).get("pid") and setup.manifests()["crashy"]
            )
        )
        tree = Path(m["workspace"]["path"])
        pid = int(
            wait_for(lambda: (tree / "agent_pid").exists() and (tree / "agent_pid").read_text())
        )
        os.kill(pid, signal.SIGKILL)  # a crash: resumed in the same worktree
        wait_for(lambda: setup.manifests()["crashy"]["retry_count"] == 1)
        wait_for(
            lambda: (
                (tree / "fake_runs").exists() and (tree / "fake_runs").read_text().strip() == "2"
            )
        )
        engine.send_signal(signal.SIGTERM)  # the engine stops; the agent runs on in tmux
        assert engine.wait(timeout=60) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
    release.touch()  # the resumed run, adopted by the next engine, ends now
    assert setup.run(timeout=60).returncode == 0
    m = setup.manifests()["crashy"]
    assert (m["status"], m["retry_count"]) == ("completed", 1)
    assert m["workspace"]["path"] == str(tree)
    argv = json.loads((tree / "received_argv.json").read_text())
    assert "--resume" in argv and m["session_id"] in argv
    names = [e["event"] for e in setup.events(m["task_id"])]
    assert names.count("workspace_preparing") == 1 and "adopted" in names
    assert f"resumed session {m['session_id']}" in m["output_tail"]
    assert "fake_runs" in sh(setup.project, "show", "--name-only", m["workspace"]["branch"])


def test_shared_mode_warns_and_lists_the_other_live_task(setup: Setup) -> None:
    setup.write_profile(extra={"workspace": {"mode": "shared"}})
    setup.drop("a.toml", setup.task("a", "tick: 0.5\nsleep: 3\nexit: 0"))
    setup.drop("b.toml", setup.task("b", "tick: 0.5\nsleep: 3\nexit: 0"))
    engine = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "run", str(setup.profile),
                               "--exit-when-idle"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:

        def both() -> bool:
            ms = setup.manifests()
            return len(ms) == 2 and all(m["workspace"]["shared_with"] for m in ms.values())

        wait_for(both)
        ms = setup.manifests()
        assert ms["a"]["workspace"]["shared_with"] == [ms["b"]["task_id"]]
        assert ms["b"]["workspace"]["shared_with"] == [ms["a"]["task_id"]]
        assert engine.wait(timeout=60) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
    kinds = {n: [e["event"] for e in setup.events(m["task_id"])] for n, m in ms.items()}
    warned = [n for n, names in kinds.items() if "shared_workspace" in names]
    assert len(warned) == 1  # on the second task only
    assert all(m["workspace"]["mode"] == "shared" for m in setup.manifests().values())


# ------------------------------------------------------------------ configuration


def _files(tmp_path: Path, may_set: list[str]) -> tuple[Path, Path]:
    profile = tmp_path / "p.toml"
    profile.write_text(
        '[agent]\ncommand = ["x"]\n[workspace]\nsetup = ["make", "deps"]\nbase = "main"\n'
        f"[security]\ntask_may_set = {json.dumps(may_set)}\n"
    )
    task = tmp_path / "t.toml"
    task.write_text(
        f'name = "t"\nprompt = "p"\nproject_dir = "{tmp_path}"\n'
        '[workspace]\nbase = "dev"\ncopy = [".env"]\n'
    )
    return profile, task


def test_a_task_workspace_is_refused_unless_task_may_set_has_it(tmp_path: Path) -> None:
    profile, task = _files(tmp_path, ["model"])
    with pytest.raises(ConfigError) as caught:
        load_task(task, load_profile(profile))
    [line] = caught.value.problems
    assert "key 'workspace'" in line and "task_may_set" in line


def test_a_task_workspace_is_laid_over_the_profile_key_by_key(tmp_path: Path) -> None:
    profile, task = _files(tmp_path, ["workspace"])
    resolved = load_task(task, load_profile(profile))
    ws = resolved.workspace
    assert (ws.base, ws.copy_paths, ws.setup) == ("dev", [".env"], ["make", "deps"])
    rows = {key: source for key, _, source in workspace_rows(
        load_profile(profile).spec.workspace, resolved.spec.workspace)}  # fmt: skip
    assert rows["workspace.base"] == "task" and rows["workspace.setup"] == "profile"
    assert rows["workspace.copy"] == "task" and rows["workspace.commit"] == "default"


def test_a_lost_manifest_is_rebuilt_with_its_workspace(setup: Setup) -> None:
    """The claim's workspace and the finish's result are in events.jsonl, so a manifest
    lost after the end (or while queued) is rebuilt with them (repair.rebuild)."""
    git_project(setup)
    setup.write_profile()
    setup.drop("w.toml", setup.task("w", "print: hi\nexit: 0"))
    assert setup.run().returncode == 0
    before = setup.manifests()["w"]
    (setup.state / "tasks" / before["task_id"] / "manifest.json").unlink()
    assert setup.run().returncode == 0  # adoption rebuilds it from the event log
    after = setup.manifests()["w"]
    assert after["status"] == "completed"
    assert after["workspace"] == before["workspace"] and after["workspace"]["head_commit"]


def test_a_full_disk_fails_the_preparation_and_leaves_nothing(
    tmp_path: Path,
    small_fs: Path,  # noqa: F811  (the fixture imported from test_disk)
) -> None:
    """A real 4 MiB tmpfs as the worktree root, a repository with a 6 MiB file: the
    checkout hits ENOSPC; the half-made worktree and its branch are removed."""
    repo = make_repo(tmp_path / "repo", {"README": "x\n"})
    (repo / "big.bin").write_bytes(os.urandom(6 * 1024 * 1024))
    sh(repo, "add", "-A")
    sh(repo, "commit", "-q", "-m", "big")
    spec = WorkspaceSpec(root=str(small_fs / "worktrees"))
    task = new_task(tmp_path)
    report = lifecycle.resolve(task.task_id, repo, spec, tmp_path / "state")
    with pytest.raises(WorkspaceError) as caught:
        lifecycle.prepare(task, report, spec, repo)
    # git names no errno here (git 2.39): "error: unable to write file big.bin; fatal: ..."
    assert "unable to write file big.bin" in str(caught.value), caught.value
    assert "\n" not in str(caught.value)
    assert left_behind(repo, Path(report.path), report.branch or "") == []


def test_a_stop_during_setup_ends_it_and_removes_the_worktree(setup: Setup) -> None:
    """``supervise stop`` while the worktree is being made: the setup is ended at once, the
    task ends abandoned/stopped, and the worktree and branch it made are removed."""
    project = git_project(setup)
    setup.write_profile(extra={"workspace": {"setup": ["sleep", "60"]}})
    setup.drop("s.toml", setup.task("s", "print: never\nexit: 0"))
    engine = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "run", str(setup.profile),
                               "--exit-when-idle"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        m = wait_for(lambda: setup.manifests().get("s"))
        wait_for(lambda: "workspace_preparing" in [e["event"] for e in setup.events(m["task_id"])])
        stopped = setup.supervise("stop", "-c", str(setup.profile), m["task_id"])
        assert stopped.returncode == 0, stopped.stderr
        assert engine.wait(timeout=30) == 0  # not 60 s: the setup was ended
    finally:
        if engine.poll() is None:
            engine.kill()
    m = setup.manifests()["s"]
    assert (m["status"], m["abandon_reason"]) == ("abandoned", "stopped")
    ws = m["workspace"]
    assert left_behind(project, Path(ws["path"]), ws["branch"]) == []
