"""Issue 22 item 8: ``supervise init --claude DIR`` writes a working Claude Code profile whose
paths stay inside DIR, and a copied ``profiles/long.toml`` keeps its state beside itself.

The e2e test runs the written profile with the real Claude Code CLI (pinned) against the
mock Messages API, changing only what points at them: ``[agent] binary`` and ``[agent.env]``
(tests/support/claude_support.py)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from support.claude_support import (
    agent_env,
    kill_tmux_server,
    make_home,
    require_claude,
    scrubbed_environ,
    start_mock,
    stop_mock,
)

from supervisor.config import default_socket_name, effective_policy, load_profile

REPO = Path(__file__).resolve().parent.parent


def _supervise(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "supervisor.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def _inside(path: Path, folder: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def test_init_claude_writes_a_profile_whose_paths_stay_inside_the_folder(tmp_path: Path) -> None:
    old = os.umask(0)  # a permissive umask must not make the spool writable by others
    try:
        done = _supervise("init", "--claude", "mine", cwd=tmp_path)
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "mine"
    for name in ("spool", "state"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o700, name
    assert list((folder / "spool").iterdir()) == []  # a model costs money: nothing queued
    profile = load_profile(folder / "profile.toml")
    assert profile.spec.agent.kind == "claude"
    assert _inside(profile.spool_dir, folder) and _inside(profile.state_dir, folder)
    assert profile.spec.workspace.root is None  # worktrees: state/worktrees, inside
    assert profile.spec.tmux.socket_name == default_socket_name(profile.state_dir)
    assert effective_policy(profile.spec.monitor)[0].notifier == []
    assert profile.spec.approval.rules  # the shipped rules, not "deny everything"
    task = folder / "tasks" / "hello.toml"
    assert tomllib.loads(task.read_text())["name"] == "hello"
    assert (folder / "project").is_dir()
    for command in ("supervise validate", "supervise run", "supervise submit"):
        assert command in done.stdout, done.stdout
    check = _supervise("validate", "-c", "mine/profile.toml", "mine/profile.toml",
                       "mine/tasks/hello.toml", cwd=tmp_path)  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert check.stdout.count("ok: ") == 2, check.stdout


def test_init_claude_refuses_to_overwrite_in_one_line_unless_forced(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    (folder / "tasks").mkdir(parents=True)
    (folder / "tasks" / "hello.toml").write_text("# mine\n")
    done = _supervise("init", "--claude", "mine", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "hello.toml exists; not overwriting it" in done.stderr and "--force" in done.stderr
    assert (folder / "tasks" / "hello.toml").read_text() == "# mine\n"
    assert not (folder / "profile.toml").exists() and not (folder / "spool").exists()
    forced = _supervise("init", "--claude", "--force", "mine", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert 'name = "hello"' in (folder / "tasks" / "hello.toml").read_text()
    assert load_profile(folder / "profile.toml").spec.agent.kind == "claude"


def test_init_force_replaces_the_demo_profile_too(tmp_path: Path) -> None:
    (tmp_path / "profile.toml").write_text("# mine\n")
    assert _supervise("init", cwd=tmp_path).returncode == 1
    done = _supervise("init", "--force", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "supervisor.demo_agent" in (tmp_path / "profile.toml").read_text()


def test_a_copied_long_toml_keeps_its_state_beside_itself_without_a_notifier(
    tmp_path: Path,
) -> None:
    copy = tmp_path / "mine" / "long.toml"
    copy.parent.mkdir()
    shutil.copy(REPO / "profiles" / "long.toml", copy)
    profile = load_profile(copy)
    assert _inside(profile.state_dir, copy.parent) and _inside(profile.spool_dir, copy.parent)
    assert profile.spec.tmux.socket_name == default_socket_name(profile.state_dir)
    assert effective_policy(profile.spec.monitor)[0].notifier == []


@pytest.mark.e2e
def test_init_claude_profile_runs_a_task_with_the_real_cli(tmp_path: Path) -> None:
    claude = require_claude()
    assert _supervise("init", "--claude", "mine", cwd=tmp_path).returncode == 0
    folder = tmp_path / "mine"
    path = folder / "profile.toml"
    data = tomllib.loads(path.read_text())
    mock = start_mock(final_text="DONE: hello.txt written")
    state = load_profile(path).state_dir
    try:
        home = make_home(tmp_path / "home", [folder / "project"])
        data["agent"]["binary"] = claude
        data["agent"]["env"] = {**data["agent"].get("env", {}),
                                **agent_env(home, mock.base_url)}  # fmt: skip
        path.write_text(tomli_w.dumps(data))
        env = scrubbed_environ()
        submitted = _supervise("submit", "-c", str(path), str(folder / "tasks" / "hello.toml"),
                               cwd=tmp_path, env=env)  # fmt: skip
        assert submitted.returncode == 0, submitted.stderr
        run = _supervise("run", str(path), "--exit-when-idle", cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stdout + run.stderr
        shown = _supervise("show", "-c", str(path), submitted.stdout.strip(), cwd=tmp_path)
        m = json.loads(shown.stdout)
        assert (m["status"], m["verdict"]) == ("completed", "PASS"), m
        assert (folder / "project" / "hello.txt").exists()
        assert _inside(Path(m["tmpdir"]), folder)
    finally:
        kill_tmux_server(default_socket_name(state))
        stop_mock(mock)


@pytest.mark.parametrize("claude", [True, False])
def test_a_folder_name_with_a_newline_cannot_write_keys_into_the_profile(
    tmp_path: Path, claude: bool
) -> None:
    """The folder's path is written into the profile's comments: a newline there would end
    the comment and start TOML of its own (found by attack: hostile values)."""
    name = "x\n[agent]\nbinary = 'evil'"
    done = _supervise("init", *(["--claude"] if claude else []), name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\n[agent]" not in done.stdout and "\\x0a" in done.stdout
    profile = load_profile(tmp_path / name / "profile.toml")
    assert profile.spec.agent.binary == "claude"


def test_two_init_claude_into_one_folder_at_once(tmp_path: Path) -> None:
    """One writes, the other waits on the folder's lock and refuses in one line."""
    argv = [sys.executable, "-m", "supervisor.cli", "init", "--claude", "both"]
    procs = [subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]  # fmt: skip
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    assert sorted(code for code, _, _ in results) == [0, 1], results
    (refusal,) = [err for code, _, err in results if code == 1]
    assert len(refusal.splitlines()) == 1 and "exists; not overwriting" in refusal
    assert load_profile(tmp_path / "both" / "profile.toml").spec.agent.kind == "claude"
