"""Spool intake on real machines (issue 10): a spool on another filesystem, entries named
``*.toml`` that are not regular files, oversized and unbounded task values, and README
command 1 in a clone made under ``umask 002`` / ``022``.

Everything here runs the real engine (``supervise run --exit-when-idle`` as a process) on
real files, FIFOs, sockets, symlinks and, as root, a real tmpfs mount.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from apscheduler.triggers.interval import IntervalTrigger
from conftest import Setup
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor import spool
from supervisor.config import (
    MAX_PROMPT_BYTES,
    MAX_SECONDS,
    MAX_TASK_FILE_BYTES,
    MIN_INTERVAL,
    ConfigError,
    load_profile,
    load_task,
)

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ helpers


def _listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder)) if folder.exists() else []


@contextlib.contextmanager
def tmpfs(where: Path, size: str = "8m") -> Iterator[Path]:
    """A real tmpfs mounted at ``where`` (root only), unmounted and removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a second filesystem) needs root; run the suite as root")
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) on this machine")
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?): {done.stderr}"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            where.rmdir()


# ------------------------------------------------------------------ 1. spool on another filesystem


def test_spool_on_another_filesystem_claims_exactly_once(setup: Setup) -> None:
    """A spool on a tmpfs, state on the test's filesystem: each task is claimed once and
    runs (today: EXDEV, every task rejected and an empty task folder left behind)."""
    with tmpfs(setup.spool):
        assert os.stat(setup.spool).st_dev != os.stat(setup.root).st_dev
        setup.write_profile()
        setup.drop("ok.toml", setup.task("ok", "print: hello\nexit: 0"))
        typo = setup.task("typo", "exit: 0")
        typo["promt"] = "x"
        setup.drop("typo.toml", typo)
        done = setup.run(timeout=60)
        assert done.returncode == 0, done.stderr
        manifests = setup.manifests()
        assert set(manifests) == {"ok"}, manifests
        assert manifests["ok"]["status"] == "completed"
        assert manifests["ok"]["retry_count"] == 0
        task_dirs = list((setup.state / "tasks").iterdir())
        assert len(task_dirs) == 1 and (task_dirs[0] / "task.toml").is_file()
        # the spool holds nothing but rejected/: no claim left behind, nothing doubled
        assert _listing(setup.spool) == ["rejected"]
        assert _listing(setup.spool / "rejected") == ["typo.toml", "typo.toml.error"]
        assert "promt" in (setup.spool / "rejected" / "typo.toml.error").read_text()
        assert tomli_w.dumps(typo) == (setup.spool / "rejected" / "typo.toml").read_text()


def test_state_on_another_filesystem_claims_exactly_once(setup: Setup) -> None:
    """The other way round: ``state_dir`` on a tmpfs, the spool on the test's filesystem."""
    with tmpfs(setup.state):
        setup.write_profile()
        setup.drop("ok.toml", setup.task("ok", "exit: 0"))
        setup.drop("bad.toml", "name = \n")
        done = setup.run(timeout=60)
        assert done.returncode == 0, done.stderr
        assert setup.manifests()["ok"]["status"] == "completed"
        assert len(list((setup.state / "tasks").iterdir())) == 1
        assert _listing(setup.spool) == ["rejected"]
        assert _listing(setup.spool / "rejected") == ["bad.toml", "bad.toml.error"]


def test_interrupted_cross_filesystem_claims_are_recovered(setup: Setup) -> None:
    """supervise died at each step of a cross-filesystem claim; the next start finishes
    or undoes each one: every file runs exactly once and no empty task folder remains."""
    with tmpfs(setup.spool):
        setup.write_profile()
        tasks = setup.state / "tasks"
        tasks.mkdir(parents=True)
        profile = load_profile(setup.profile)
        # (a) died right after mkdir: an empty task folder, the file still in the spool
        (tasks / "early-aaaaaa").mkdir()
        setup.drop("early.toml", setup.task("early", "exit: 0"))
        # (b) died after the claim rename, before the copy: claim file + empty folder
        (tasks / "mid-bbbbbb").mkdir()
        (tasks / "mid-bbbbbb" / ".task.toml.x.tmp").write_text("half")
        (setup.spool / ".claim.mid-bbbbbb.mid.toml").write_text(
            tomli_w.dumps(setup.task("mid", "exit: 0"))
        )
        # (c) died after the copy, before unlinking the claim: both copies exist
        (tasks / "late-cccccc").mkdir()
        text = tomli_w.dumps(setup.task("late", "exit: 0"))
        (tasks / "late-cccccc" / "task.toml").write_text(text)
        (setup.spool / ".claim.late-cccccc.late.toml").write_text(text)
        # a claim of another engine sharing this spool: no folder here, left alone
        (setup.spool / ".claim.other-dddddd.other.toml").write_text("not ours")
        assert spool.recover_claims(profile) == [setup.spool / "mid.toml"]
        done = setup.run(timeout=60)
        assert done.returncode == 0, done.stderr
        manifests = setup.manifests()
        assert sorted(manifests) == ["early", "late", "mid"]
        assert {m["status"] for m in manifests.values()} == {"completed"}
        assert manifests["late"]["task_id"] == "late-cccccc"
        assert len(list(tasks.iterdir())) == 3, "one folder per task, none empty"
        assert _listing(setup.spool) == [".claim.other-dddddd.other.toml"]


def test_failed_move_puts_the_file_back(setup: Setup) -> None:
    """A move into the task folder that fails (here a real ENOSPC: ``state_dir`` on a full
    tmpfs, the spool elsewhere) leaves the file in the spool under its own name and no task
    folder."""
    with tmpfs(setup.state, size="256k"):
        setup.write_profile()
        profile = load_profile(setup.profile)
        (setup.state / "tasks").mkdir()
        with contextlib.suppress(OSError), open(setup.state / "filler", "wb", buffering=0) as fill:
            while True:  # fill the filesystem to the last block
                fill.write(b"x" * 4096)
        text = tomli_w.dumps(setup.task("full", "p" * 65536))
        path = setup.drop("full.toml", text)
        with pytest.raises(OSError) as caught:
            spool.claim(path, profile)
        assert caught.value.errno == errno.ENOSPC
        assert _listing(setup.spool) == ["full.toml"]
        assert path.read_text() == text
        assert _listing(setup.state / "tasks") == []


# ------------------------------------------------------------------ 2. non-regular *.toml entries


def test_non_regular_toml_entries_are_rejected_and_idle_exits(setup: Setup) -> None:
    """A directory, FIFO, socket, dangling symlink and symlink to a directory named
    ``*.toml`` are moved to ``rejected/`` with a reason, unopened; ``--exit-when-idle``
    then exits (today: none is moved and the engine never exits)."""
    setup.write_profile()
    setup.spool.mkdir(mode=0o700)
    (setup.spool / "dir.toml").mkdir()
    (setup.spool / "dir.toml" / "inner").write_text("kept")
    os.mkfifo(setup.spool / "fifo.toml")
    sock = socket.socket(socket.AF_UNIX)
    sock_path = setup.spool / "sock.toml"
    if len(os.fsencode(sock_path)) >= 108:
        pytest.skip(f"socket path too long for AF_UNIX: {sock_path}")
    sock.bind(str(sock_path))
    (setup.spool / "dangling.toml").symlink_to(setup.root / "no-such-file")
    (setup.spool / "linkdir.toml").symlink_to(setup.project)
    setup.drop("good.toml", setup.task("good", "exit: 0"))
    try:
        done = setup.run(timeout=30)
    finally:
        sock.close()
    assert done.returncode == 0, done.stderr
    assert setup.manifests()["good"]["status"] == "completed"
    assert _listing(setup.spool) == ["rejected"]
    rejected = setup.spool / "rejected"
    expected = {
        "dir.toml": "a directory",
        "fifo.toml": "a FIFO",
        "sock.toml": "a socket",
        "dangling.toml": "dangling symbolic link",
        "linkdir.toml": "symbolic link to a directory",
    }
    assert _listing(rejected) == sorted([*expected, *(f"{n}.error" for n in expected)])
    for name, kind in expected.items():
        error = (rejected / f"{name}.error").read_text()
        assert error.count("\n") == 1 and kind in error and name in error, error
        assert "remove it from the spool" in error
    assert (rejected / "dir.toml" / "inner").read_text() == "kept"
    assert (rejected / "fifo.toml").is_fifo()
    assert os.readlink(rejected / "dangling.toml") == str(setup.root / "no-such-file")
    assert len(list((setup.state / "tasks").iterdir())) == 1


# ------------------------------------------------------------------ 3. inline prompt size


def test_inline_prompt_over_10_mib_is_rejected(setup: Setup) -> None:
    """An inline prompt gets the same 10 MiB limit as ``prompt_file``."""
    setup.write_profile()
    profile = load_profile(setup.profile)
    path = setup.drop("big.toml", setup.task("big", "x" * (MAX_PROMPT_BYTES + 1)))
    claimed = spool.claim(path, profile)
    assert claimed is not None and claimed.error is not None
    assert "key 'prompt'" in claimed.error and f"at most {MAX_PROMPT_BYTES}" in claimed.error
    assert "shorten it" in claimed.error and str(path) in claimed.error
    assert _listing(setup.state / "tasks") == []
    at_limit = setup.drop("limit.toml", setup.task("limit", "y" * MAX_PROMPT_BYTES))
    claimed = spool.claim(at_limit, profile)
    assert claimed is not None and claimed.error is None, claimed.error


def test_huge_spool_file_is_rejected_without_reading_it(setup: Setup) -> None:
    """A task file over the limit is refused on its size (``lstat``), not read: a 200 MB
    file (sparse, so the test stays cheap) is rejected without the peak RSS growing."""
    setup.write_profile()
    profile = load_profile(setup.profile)
    path = setup.spool / "huge.toml"
    setup.spool.mkdir()
    head = tomli_w.dumps(setup.task("huge", "z")).encode()
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(200 * 1024 * 1024)
    os.utime(path, (time.time() - 10, time.time() - 10))
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    claimed = spool.claim(path, profile)
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grew < 50 * 1024, f"peak RSS grew by {grew} KiB: the file was read"
    assert claimed is not None and claimed.error is not None
    assert f"at most {MAX_TASK_FILE_BYTES} bytes" in claimed.error and "shorten" in claimed.error
    assert (setup.spool / "rejected" / "huge.toml").stat().st_size == 200 * 1024 * 1024
    validated = setup.supervise(
        "validate", "-c", str(setup.profile), str(setup.spool / "rejected" / "huge.toml")
    )
    assert validated.returncode == 1 and "at most" in validated.stderr
    assert "Traceback" not in validated.stderr


# ------------------------------------------------------------------ 4. bounded intervals


BAD_SECONDS = {"big": "1e12", "inf": "inf", "nan": "nan", "negative": "-1"}


def test_unbounded_monitor_values_are_rejected_one_line_each(setup: Setup) -> None:
    """``base_interval = 1e12`` / ``inf`` / ``nan`` / ``-1`` in a spool file: rejected with
    one line each, and the engine stays idle-exitable (today 1e12 crashed the scheduler for
    the task, which then stayed ``running`` forever)."""
    setup.write_profile()
    setup.spool.mkdir(mode=0o700)
    for label, value in BAD_SECONDS.items():
        text = (
            tomli_w.dumps(setup.task(label, "exit: 0")) + f"\n[monitor]\nbase_interval = {value}\n"
        )
        setup.drop(f"{label}.toml", text)
    setup.drop(
        "deadline.toml",
        tomli_w.dumps(setup.task("dl", "exit: 0")) + "\n[monitor]\ndeadline = 1e12\n",
    )
    done = setup.run(timeout=30)
    assert done.returncode == 0, done.stderr
    assert setup.manifests() == {}
    assert _listing(setup.state / "tasks") == []
    for label in [*BAD_SECONDS, "deadline"]:
        error = (setup.spool / "rejected" / f"{label}.toml.error").read_text()
        assert error.count("\n") == 1, error
        assert f"{label}.toml:" in error
        key = "deadline" if label == "deadline" else "base_interval"
        assert f"key 'monitor.{key}'" in error, error
        if label in ("big", "deadline"):
            assert "at most 31536000 seconds (1 year)" in error
        elif label == "negative":
            assert "greater than or equal to 0.1; allowed: from 0.1 to 31536000" in error
        else:
            assert "finite number" in error
        validated = setup.supervise(
            "validate", "-c", str(setup.profile), str(setup.spool / "rejected" / f"{label}.toml")
        )
        assert validated.returncode == 1 and validated.stderr.count("\n") == 1, validated.stderr


@pytest.mark.parametrize("value", ["1e12", "inf", "nan", "-1"])
def test_unbounded_env_values_are_refused(setup: Setup, value: str) -> None:
    setup.write_profile()
    env = {**os.environ, "MONITOR_DEADLINE": value}
    done = setup.supervise("validate", str(setup.profile), env=env)
    assert done.returncode == 1 and "MONITOR_DEADLINE" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_profile_seconds_are_bounded(setup: Setup) -> None:
    """Every seconds key of a profile is bounded: intake_interval, acceptance.timeout,
    the [monitor] intervals and notifier_timeout."""
    for extra in (
        {"intake_interval": 1e12},
        {"acceptance": {"artifacts": ["x"], "timeout": math.inf}},
    ):
        setup.write_profile(extra=extra)
        with pytest.raises(ConfigError) as caught:
            load_profile(setup.profile)
        assert len(caught.value.problems) == 1
    for key in ("max_interval", "grace_period", "stale_threshold"):
        setup.write_profile(**{key: 4e7})
        with pytest.raises(ConfigError) as caught:
            load_profile(setup.profile)
        assert "at most 31536000 seconds" in caught.value.problems[0], caught.value.problems


SECONDS_KEYS = ("base_interval", "max_interval", "deadline", "grace_period", "stale_threshold")


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(key=st.sampled_from(SECONDS_KEYS), value=st.floats(allow_nan=True, allow_infinity=True))
def test_any_float_is_bounded_or_rejected(tmp_path: Path, key: str, value: float) -> None:
    """Any float in any seconds key: a bounded, schedulable policy or a ConfigError; never
    another exception (here or in the scheduler's date arithmetic)."""
    folder = tmp_path / "h"
    folder.mkdir(exist_ok=True)
    profile_path = folder / "profile.toml"
    if not profile_path.exists():
        # the widest base/max range, so only the bound itself can refuse a value
        profile_path.write_text(
            '[agent]\ncommand = ["x"]\n\n[monitor]\nbase_interval = 0.1\nmax_interval = 31536000\n'
        )
    profile = load_profile(profile_path)
    task: dict[str, Any] = {"name": "t", "prompt": "p", "project_dir": str(folder)}
    text = tomli_w.dumps(task) + f"\n[monitor]\n{key} = {_toml_float(value)}\n"
    path = folder / "t.toml"
    path.write_text(text)
    try:
        resolved = load_task(path, profile)
    except ConfigError as exc:
        lowest = {"grace_period": 0.0, "deadline": math.ulp(0.0)}.get(key, MIN_INTERVAL)
        assert not (math.isfinite(value) and lowest <= value <= MAX_SECONDS), exc.problems
        assert len(exc.problems) == 1 and exc.problems[0].startswith(str(path))
        return
    assert math.isfinite(value) and 0 <= value <= MAX_SECONDS
    policy = resolved.policy
    for name in SECONDS_KEYS:
        seconds = getattr(policy, name)
        assert seconds is not None and math.isfinite(seconds) and 0 <= seconds <= 3 * MAX_SECONDS
    # what the engine does with them: an interval job, and dates that far ahead
    now = datetime.now(UTC)
    trigger = IntervalTrigger(seconds=policy.base_interval, start_date=now)
    assert trigger.get_next_fire_time(now, now) is not None
    for name in ("max_interval", "deadline", "stale_after"):
        datetime.fromtimestamp(time.time() + getattr(policy, name), UTC)


def _toml_float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


# ------------------------------------------------------------------ 5. README command 1 and umask


def _clone(dest: Path, umask: int) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of supervise")
    done = subprocess.run(
        ["bash", "-c", f"umask {umask:03o} && git clone -q --no-hardlinks {REPO} {dest}"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("umask", [0o002, 0o022])
def test_readme_command_1_in_a_fresh_clone(tmp_path: Path, umask: int) -> None:
    """README command 1 (its copy and engine part; the venv is this one) in a clone made
    under ``umask 002`` (Ubuntu's and Fedora's user default: a group-writable spool whose
    group is the user's private group) and ``022``. Today 002 ended in a traceback."""
    clone = tmp_path / "clone"
    _clone(clone, umask)
    tmux_dir = tmp_path / "tmux"  # the demo's socket name, but on a private tmux server
    tmux_dir.mkdir()
    env = {**os.environ, "TMUX_TMPDIR": str(tmux_dir), "PYTHONPATH": str(REPO)}
    env.pop("TMUX", None)
    command = (
        f"umask {umask:03o} && cp examples/demo/tasks/*.toml examples/demo/spool/ && "
        f"{sys.executable} -P -m supervisor.cli run profiles/demo.toml --exit-when-idle && "
        f"{sys.executable} -P -m supervisor.cli status -c profiles/demo.toml"
    )
    try:
        done = subprocess.run(
            ["bash", "-c", command], cwd=clone, env=env,
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
    finally:
        subprocess.run(
            ["tmux", "-L", "supervise-demo", "kill-server"],
            env=env,
            capture_output=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    demo = clone / "examples" / "demo"
    manifests = {
        m["task_name"]: m
        for m in (json.loads(p.read_text()) for p in demo.glob("state/tasks/*/manifest.json"))
    }
    assert {name: m["status"] for name, m in manifests.items()} == {
        "demo hello": "completed",
        "demo fails": "failed",
    }, manifests
    assert _listing(demo / "spool" / "rejected") == ["typo.toml", "typo.toml.error"]
    assert "completed" in done.stdout and "failed" in done.stdout


def _foreign_group() -> int:
    """A gid that is not this user's private group (root can chgrp to it)."""
    if os.geteuid() != 0:
        pytest.skip("chgrp to a group of another user needs root")
    import grp

    for group in grp.getgrall():
        if not spool.is_private_group(group.gr_gid):
            return group.gr_gid
    pytest.skip("no group on this machine that is not our private group")


@pytest.mark.parametrize("case", ["world", "group"])
def test_shared_spool_is_one_clear_line(setup: Setup, case: str) -> None:
    """A spool anyone can write to (or the members of a group that is not our user private
    group) is refused with one line naming the folder, its mode, its owner and the fix, and
    no traceback (today: a traceback)."""
    setup.write_profile()
    setup.spool.mkdir()
    mode = 0o777 if case == "world" else 0o775
    if case == "group":
        os.chown(setup.spool, -1, _foreign_group())
    os.chmod(setup.spool, mode)
    done = setup.run()
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert str(setup.spool) in line and oct(mode) in line and "owner uid" in line
    assert f"chmod 700 {setup.spool}" in line and "allow_shared_spool" in line
    assert ("world-write bit" if case == "world" else "members of group") in line
    assert "Traceback" not in done.stderr
