"""``supervise init|schema|startup|completion`` and ``--version`` (issue 14, items 1, 2, 8),
and the tmux server's start outside the login scope (``systemd-run --user --scope``)."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import _tmux_socket_path, wait_for

import supervisor
from supervisor import systemd
from supervisor.cli import app as cli
from supervisor.cli import setup as cli_setup
from supervisor.config import default_socket_name
from supervisor.tmux import Tmux

REPO = Path(__file__).resolve().parent.parent
SUPERVISE = [sys.executable, "-m", "supervisor.cli"]


def _supervise(*args: str, cwd: Path, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run([*SUPERVISE, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False, **kw)  # type: ignore[call-overload]  # fmt: skip


# ---------------------------------------------------------------- init


def test_init_writes_a_private_starter_that_runs_the_demo(tmp_path: Path) -> None:
    old = os.umask(0)  # a permissive umask must not make the spool writable by others
    try:
        assert cli.main(["init", str(tmp_path / "demo")]) == 0
    finally:
        os.umask(old)
    demo = tmp_path / "demo"
    for name in ("spool", "state"):
        assert stat.S_IMODE((demo / name).stat().st_mode) == 0o700, name
    assert sorted(p.name for p in (demo / "spool").iterdir()) == [
        "fails.toml", "hello.toml", "typo.toml"]  # fmt: skip
    text = (demo / "profile.toml").read_text()
    assert "socket_name" not in text.split("\n\n", 1)[1]  # default: one server per state_dir
    assert 'mode = "shared"' in text and "supervisor.demo_agent" in text
    socket = default_socket_name((demo / "state").resolve())
    try:
        done = _supervise("run", "demo/profile.toml", "--exit-when-idle", cwd=tmp_path)
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)
        _tmux_socket_path(socket).unlink(missing_ok=True)
    assert done.returncode == 0, done.stderr
    assert "demo-hello" in done.stderr and "-> completed" in done.stderr
    assert "-> failed (done-file with exit code 3)" in done.stderr


def test_init_refuses_an_existing_profile_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "profile.toml").write_text("# mine\n")
    done = _supervise("init", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == ("supervise init: profile.toml exists; not overwriting it (remove "
                           "it, give another folder: supervise init DIR, or replace it: "
                           "--force)\n")  # fmt: skip
    assert (tmp_path / "profile.toml").read_text() == "# mine\n"
    assert not (tmp_path / "spool").exists()


@pytest.mark.parametrize("kind", ["file", "dangling"])
def test_init_demo_refuses_a_non_folder_project_in_one_line_writing_no_task(
    tmp_path: Path, kind: str
) -> None:
    """Found by attack: a file in the place of the demo's ``project`` folder failed half
    way (``File exists``, no fix; some task files already written), and a dangling link
    there made its target, outside the folder. Now one line with the fix, and no task
    file is written; once it is moved aside, init writes the whole demo."""
    demo = tmp_path / "demo"
    demo.mkdir()
    if kind == "file":
        (demo / "project").write_text("mine\n")
    else:
        (demo / "project").symlink_to(tmp_path / "elsewhere" / "x")
    done = _supervise("init", "demo", cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == ""
    line = "supervise init: cannot write demo/project: it is not a folder (move it aside, or "
    assert done.stderr == line + "give another folder: supervise init DIR)\n"
    assert not list((demo / "spool").iterdir()) and not list((demo / "tasks").iterdir())
    assert not (tmp_path / "elsewhere").exists()
    (demo / "project").rename(tmp_path / "aside")
    assert _supervise("init", "demo", cwd=tmp_path).returncode == 0
    assert (demo / "project").is_dir() and (demo / "project-fails").is_dir()
    assert len(list((demo / "spool").iterdir())) == 3


# ---------------------------------------------------------------- schema, version


@pytest.mark.parametrize("name", ["profile", "task", "manifest", "status", "permission-event"])
def test_schema_prints_the_package_copy(name: str, tmp_path: Path) -> None:
    done = _supervise("schema", name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (REPO / "schemas" / f"{name}.schema.json").read_text()


def test_schema_of_an_unknown_kind_is_a_usage_error(tmp_path: Path) -> None:
    done = _supervise("schema", "profiles", cwd=tmp_path)
    assert done.returncode == 2 and "invalid choice: 'profiles'" in done.stderr


def test_version_is_the_distribution_version(tmp_path: Path) -> None:
    done = _supervise("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"supervise {supervisor.__version__}\n")
    assert cli_setup.version() == supervisor.__version__


# ---------------------------------------------------------------- startup


def _profile(folder: Path) -> Path:
    assert cli.main(["init", str(folder)]) == 0
    return (folder / "profile.toml").resolve()


def test_the_unit_runs_this_supervise_on_the_profile_and_keeps_agents(tmp_path: Path) -> None:
    profile = _profile(tmp_path / "my 100% demo")  # a space and a specifier in the path
    done = _supervise("startup", "-c", str(profile), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    quoted = str(profile).replace("%", "%%")
    assert f'ExecStart={sys.executable} -m supervisor.cli run "{quoted}"' in lines
    for line in ("Restart=on-failure", "KillMode=process", "WantedBy=default.target",
                 f"Environment=PATH={os.environ['PATH']}", "Type=exec"):  # fmt: skip
        assert line in lines, line
    if systemd.booted():
        assert "--install" in done.stderr
    else:  # what to do instead, in one paragraph
        assert done.stderr.count("\n") == 1 and "does not run systemd" in done.stderr
        assert "@reboot" in done.stderr and "setsid" in done.stderr


def test_the_unit_names_the_console_script_when_run_through_it(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "supervise"
    if not script.is_file():
        pytest.skip(f"no console script {script} (supervise not installed in this venv)")
    profile = _profile(tmp_path / "p")
    done = subprocess.run([str(script), "startup", "-c", str(profile)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert f"ExecStart={script} run {profile}" in done.stdout.splitlines()


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    profile = _profile(tmp_path / "my 100% $demo")  # every character systemd treats apart
    unit = tmp_path / systemd.unit_name(profile)
    assert unit.name == "supervise-my-100---demo.service"
    assert systemd.unit_name(Path("/x/long.toml")) == "supervise-long.service"
    unit.write_text(systemd.unit_text(cli_setup.supervise_command(), profile, "/a b:/usr/bin"))
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    done = subprocess.run([analyze, "--user", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60, env=env, check=False)  # fmt: skip
    # verify exits 0 on settings it ignores; those print a line naming the file
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_a_profile_that_does_not_load_gets_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text("max_concurrent = 'x'\n")
    done = _supervise("startup", "-c", "bad.toml", cwd=tmp_path)
    assert done.returncode == 1 and "bad.toml" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(systemd.booted(), reason="this machine runs systemd: --install would "
                    "enable a real unit")  # fmt: skip
def test_install_without_systemd_says_what_to_do_and_writes_nothing(tmp_path: Path) -> None:
    profile = _profile(tmp_path / "p")
    done = _supervise("startup", "-c", str(profile), "--install", cwd=tmp_path,
                      env={**os.environ, "HOME": str(tmp_path)})  # fmt: skip
    assert done.returncode == 1 and done.stdout == ""
    assert "does not run systemd" in done.stderr
    assert not (tmp_path / ".config").exists()


# ---------------------------------------------------------------- the tmux server's scope


def _root(tmp_path: Path, booted: bool) -> Path:
    if booted:
        (tmp_path / "run/systemd/system").mkdir(parents=True)
    return tmp_path


def test_the_scope_is_used_only_where_it_helps(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemd-run").write_text("")
    (bin_dir / "systemd-run").chmod(0o755)
    root = _root(tmp_path / "root", booted=True)
    env = {"PATH": str(bin_dir), "XDG_RUNTIME_DIR": "/run/user/1000"}
    expected = [str(bin_dir / "systemd-run"), "--user", "--scope", "--quiet", "--collect", "--"]
    assert systemd.scope_prefix(env, root) == expected
    assert systemd.scope_prefix({**env, "INVOCATION_ID": "ab12"}, root) == []  # a unit runs us
    assert systemd.scope_prefix({**env, systemd.SCOPE_ENV: "0"}, root) == []  # turned off
    assert systemd.scope_prefix({"PATH": str(bin_dir)}, root) == []  # no user manager reachable
    assert systemd.scope_prefix({**env, "PATH": str(tmp_path)}, root) == []  # no systemd-run
    assert systemd.scope_prefix(env, _root(tmp_path / "other", booted=False)) == []


def test_a_scope_that_cannot_start_falls_back_to_a_plain_server(
    socket_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The real ``systemd-run`` with no user manager behind ``XDG_RUNTIME_DIR`` fails
    ("Failed to connect to bus"); the session starts anyway, and the reason is logged."""
    program = shutil.which("systemd-run")
    if program is None:
        pytest.skip("systemd-run is not installed here")
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    tmux = Tmux(socket_name, owner=str(tmp_path), scope=[program, "--user", "--scope", "--"])
    with caplog.at_level(logging.WARNING, logger="supervisor.tmux"):
        tmux.launch("x", tmp_path, tmp_path)
    assert wait_for(lambda: tmux.panes().get("x")).owner == str(tmp_path)
    assert "could not start the tmux server in its own systemd scope" in caplog.text
    assert "bus" in caplog.text
    caplog.clear()
    tmux.launch("y", tmp_path, tmp_path)  # a server runs: no scope tried, nothing logged
    assert tmux.has_session("y") and caplog.text == ""


def _user_manager() -> bool:
    if not systemd.scope_prefix():
        return False
    done = subprocess.run(["systemctl", "--user", "is-system-running"], capture_output=True,
                          text=True, timeout=10, check=False)  # fmt: skip
    return done.stdout.strip() in ("running", "degraded")


@pytest.mark.skipif(not _user_manager(), reason="no systemd user manager here (PID 1 is not "
                    "systemd, or no XDG_RUNTIME_DIR): the scope cannot be shown")  # fmt: skip
def test_the_server_lives_in_its_own_scope_not_the_login(socket_name: str, tmp_path: Path) -> None:
    tmux = Tmux(socket_name, owner=str(tmp_path), scope=systemd.scope_prefix())
    tmux.launch("x", tmp_path, tmp_path)
    pid = int(tmux.cmd("display-message", "-p", "#{pid}").stdout[0])
    cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    assert "/session-" not in cgroup and ".scope" in cgroup, cgroup


# ---------------------------------------------------------------- completion


def test_bash_completion_loads_in_bash(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed here")
    script = _supervise("completion", "bash", cwd=tmp_path)
    assert script.returncode == 0, script.stderr
    (tmp_path / "c.bash").write_text(script.stdout)
    done = subprocess.run([bash, "-c", f"source {tmp_path / 'c.bash'} && complete -p supervise"],
                          capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(" supervise") and "-F " in done.stdout
    # what bash offers after "supervise sta" and "supervise schema "
    complete = (f"source {tmp_path / 'c.bash'}; "
                'f=$(complete -p supervise | sed -E "s/.* -F ([^ ]+) .*/\\1/"); '
                'COMP_WORDS=(supervise "$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); '
                'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; '
                '$f supervise "${COMP_WORDS[COMP_CWORD]}"; echo "${COMPREPLY[*]}"')  # fmt: skip
    offered = [subprocess.run([bash, "-c", complete, "-", *words], capture_output=True,
                              text=True, timeout=30, check=True).stdout.split()
               for words in (["sta"], ["schema", ""])]  # fmt: skip
    assert offered == [
        ["status", "startup"],
        ["manifest", "permission-event", "profile", "status", "task"],
    ]
    # every subcommand is offered, the ones added by other modules too
    for verb in ("run", "submit", "status", "prune", "serve", "init", "startup", "completion"):
        assert verb in script.stdout, verb


@pytest.mark.parametrize(("shell", "marker"), [("zsh", "#compdef supervise"),
                                               ("fish", "complete -c supervise")])  # fmt: skip
def test_zsh_and_fish_completion_are_generated(shell: str, marker: str, tmp_path: Path) -> None:
    done = _supervise("completion", shell, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert marker in done.stdout and "startup" in done.stdout


# ---------------------------------------------------------------- SKILL.md


def test_skill_install_entry_is_a_kind_openclaw_runs_and_names_this_project() -> None:
    """OpenClaw's install kinds are brew, node, go, uv and download; another kind ("pip") is
    dropped silently. The package must be this distribution, not PyPI's other
    "supervise"."""
    import json
    import tomllib

    front = (REPO / "SKILL.md").read_text().split("---\n")[1]
    fields = dict(line.split(": ", 1) for line in front.splitlines())
    assert "homepage" not in fields  # no placeholder; no public host exists yet
    (entry,) = json.loads(fields["metadata"])["openclaw"]["install"]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert entry["kind"] in {"brew", "node", "go", "uv", "download"}
    assert (entry["kind"], entry["bins"]) == ("uv", ["supervise"])
    assert entry["package"] == project["name"] == "supervise-agents"
    assert project["scripts"] == {"supervise": "supervisor.cli:main"}
