"""``supervise archive`` and ``status --archived`` (issue 14): ended task folders move into
one gzip tarball per month in ``state_dir/archive/``; never a live task or one whose
worktree is unreviewed; an archive that cannot be written removes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from conftest import Setup, wait_for
from support.archive_tasks import _age, archived_sizes, ended_tasks, places
from support.repos import make_repo

from supervisor import statelock


def _archive(setup: Setup, *extra: str) -> subprocess.CompletedProcess:
    return setup.supervise("archive", "-c", str(setup.profile), "--older-than", "30d", *extra)


def test_archive_moves_old_ended_tasks_and_keeps_live_and_unreviewed(setup: Setup) -> None:
    repo = setup.root / "repo"
    make_repo(repo, {"README": "hello\n"})
    setup.write_profile()
    for name, prompt in (("done", "exit: 0"), ("bad", "exit: 3"), ("recent", "exit: 0")):
        setup.drop(f"{name}.toml", setup.task(name, prompt))  # a folder outside git: shared
    setup.drop("work.toml", setup.task("work", "print: x\nexit: 0", project=repo))
    assert setup.run().returncode == 0
    assert setup.manifests()["work"]["workspace"]["mode"] == "worktree"
    ids = {name: _age(setup, name) for name in ("done", "bad", "work")}
    # a live task: its engine stopped (SIGTERM), its agent still running in tmux
    setup.drop("live.toml", setup.task("live", "tick: 0.5\nsleep: 60"))
    engine = subprocess.Popen([sys.executable, "-m", "supervisor.cli", "run", str(setup.profile)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(lambda: setup.manifests().get("live", {}).get("status") == "running")
    finally:
        engine.send_signal(signal.SIGTERM)
        assert engine.wait(timeout=60) == 0
    tasks = setup.state / "tasks"
    before = sorted(p.name for p in tasks.iterdir())

    dry = _archive(setup, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    rows = {r["task_id"]: r for r in json.loads(dry.stdout)}
    assert {t for t, r in rows.items() if r["action"] == "archive"} == {ids["done"], ids["bad"]}
    assert "unreviewed worktree: unmerged" in rows[ids["work"]]["reason"]
    live = setup.manifests()["live"]["task_id"]
    assert rows[live]["reason"] == "not ended (running)"
    assert sorted(p.name for p in tasks.iterdir()) == before
    assert not (setup.state / "archive").exists()

    done = _archive(setup)
    assert done.returncode == 0, done.stderr
    tarball = setup.state / "archive" / "2026-10.tar.gz"
    assert sorted(p.name for p in tasks.iterdir()) == sorted(
        set(before) - {ids["done"], ids["bad"]})  # fmt: skip
    assert tarball.stat().st_mode & 0o777 == 0o600
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
        manifest = json.loads(archive.extractfile(f"{ids['bad']}/manifest.json").read())
    assert f"{ids['done']}/events.jsonl" in names and f"{ids['done']}/output.log" in names
    assert manifest["status"] == "failed" and manifest["exit_code"] == 3

    # A second run adds to the month's tarball (rewritten whole, the old members kept).
    ids["recent"] = _age(setup, "recent", "2026-10-20T08:00:00Z")
    assert _archive(setup).returncode == 0
    listed = setup.supervise("status", "-c", str(setup.profile), "--archived", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    shown = {r["task_id"]: (r["name"], r["status"], r["archive"]) for r in rows}
    assert shown == {ids["done"]: ("done", "completed", "2026-10.tar.gz"),
                     ids["bad"]: ("bad", "failed", "2026-10.tar.gz"),
                     ids["recent"]: ("recent", "completed", "2026-10.tar.gz")}  # fmt: skip
    table = setup.supervise("status", "-c", str(setup.profile), "--archived")
    assert ids["recent"] in table.stdout and "2026-10.tar.gz" in table.stdout
    current = setup.supervise("status", "-c", str(setup.profile), "--json")
    assert {r["name"] for r in json.loads(current.stdout)} == {"work", "live"}


def test_an_archive_that_cannot_be_written_removes_nothing(setup: Setup) -> None:
    setup.write_profile()
    setup.drop("done.toml", setup.task("done", "exit: 0"))
    assert setup.run().returncode == 0
    task_id = _age(setup, "done")
    # The month's tarball is a folder: it cannot be read nor replaced.
    (setup.state / "archive" / "2026-10.tar.gz").mkdir(parents=True)
    failed = _archive(setup)
    assert failed.returncode == 1
    assert f"supervise archive: {task_id}: error:" in failed.stderr
    assert "nothing removed" in failed.stderr
    assert (setup.state / "tasks" / task_id / "manifest.json").exists()
    assert (setup.state / "archive" / "2026-10.tar.gz").is_dir()
    bad = _archive(setup, "--older-than", "soon")
    assert bad.returncode == 2 and "--older-than" in bad.stderr


def _start_archive(setup: Setup) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "archive", "-c", str(setup.profile),
         "--older-than", "30d"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _kill_when(proc: subprocess.Popen[str], moment: Callable[[], bool]) -> None:
    """SIGKILL our archive process (by pid) at ``moment`` (or once it ended by itself)."""
    wait_for(lambda: moment() or proc.poll() is not None, timeout=60, every=0.002)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def test_an_archive_killed_halfway_loses_nothing_and_the_next_run_finishes(setup: Setup) -> None:
    """Issue 20: SIGKILL while the tarball is written, then while the folders are removed.
    After each kill every task is somewhere, whole; the next run leaves each in exactly one
    place (the tarball), with its full output, and no temporary file behind."""
    sizes = ended_tasks(setup, 12, size=1_500_000, files=300)
    folder, tasks = setup.state / "archive", setup.state / "tasks"

    writing = _start_archive(setup)
    _kill_when(writing, lambda: any(folder.glob(".*.tmp")))
    assert set(places(setup)) == set(sizes) and min(places(setup).values()) >= 1

    removing = _start_archive(setup)
    watched = [tasks / t / n for t in sizes for n in ("manifest.json", "output.log",
               "extra-000.txt", "extra-150.txt", "extra-299.txt")]  # fmt: skip
    _kill_when(removing, lambda: not all(p.exists() for p in watched))  # removal began
    found = places(setup)
    assert set(found) == set(sizes) and min(found.values()) >= 1, found

    again = _archive(setup)
    assert again.returncode == 0, again.stderr
    assert places(setup) == Counter(dict.fromkeys(sizes, 1))
    assert archived_sizes(setup) == sizes  # every output whole
    assert [p.name for p in tasks.iterdir() if p.is_dir()] == []
    assert [p.name for p in folder.iterdir()] == ["2026-10.tar.gz"]


def test_a_task_whose_notifier_still_runs_is_archived_next_time(
    setup: Setup, tmp_path: Path
) -> None:
    """Issue 20: archiving while the engine's notifier still ran on an ended task raised a
    traceback in the engine and lost the ``notified`` event. Now the task stays (one reason)
    until the notifier is done; the next archive takes it, ``notified`` included."""
    began, release = tmp_path / "notifier-began", tmp_path / "release"
    notifier = [sys.executable, "-c",
                "import pathlib, sys, time\n"
                f"pathlib.Path({str(began)!r}).touch()\n"
                "for _ in range(600):\n"
                f"    if pathlib.Path({str(release)!r}).exists(): sys.exit(0)\n"
                "    time.sleep(0.05)\n"]  # fmt: skip
    setup.write_profile(notifier=notifier, notifier_timeout=60)
    setup.drop("done.toml", setup.task("done", "exit: 0"))
    log = (tmp_path / "engine.log").open("w")
    engine = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile)],
        stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    try:
        wait_for(began.exists, timeout=30)
        task_id = setup.manifests()["done"]["task_id"]
        early = setup.supervise("archive", "-c", str(setup.profile), "--older-than", "0s",
                                "--json")  # fmt: skip
        assert early.returncode == 0, early.stderr
        (row,) = [r for r in json.loads(early.stdout) if r["task_id"] == task_id]
        assert row["action"] == "keep" and "notifier" in row["reason"]
        assert (setup.state / "tasks" / task_id / "manifest.json").exists()
        release.touch()
        wait_for(lambda: any(e["event"] == "notified" for e in setup.events(task_id)))
        later = setup.supervise("archive", "-c", str(setup.profile), "--older-than", "0s")
        assert later.returncode == 0, later.stderr
        assert not (setup.state / "tasks" / task_id).exists()
    finally:
        release.touch()
        engine.send_signal(signal.SIGTERM)
        engine.wait(timeout=30)
        log.close()
    err = (tmp_path / "engine.log").read_text()
    assert engine.returncode == 0 and "Traceback" not in err, err
    tarball = next((setup.state / "archive").glob("*.tar.gz"))
    with tarfile.open(tarball) as archive:
        events = archive.extractfile(f"{task_id}/events.jsonl").read().decode()
    assert '"notified"' in events


def test_an_odd_inflight_file_an_agent_left_neither_blocks_nor_keeps_the_task(
    setup: Setup, tmp_path: Path
) -> None:
    """An agent can write into its own task folder: a FIFO or a symlink (to a FIFO) at the
    engine's hold file must not block ``archive`` in ``open()`` nor keep the task forever."""
    sizes = ended_tasks(setup, 2)
    fifo_task, link_task = sorted(sizes)
    fifo, link = (setup.state / "tasks" / t / statelock.TASK_HOLD for t in (fifo_task, link_task))
    fifo.unlink(missing_ok=True)  # the engine's own, from the seed task's ending
    link.unlink(missing_ok=True)
    os.mkfifo(fifo)
    os.mkfifo(tmp_path / "elsewhere")
    link.symlink_to(tmp_path / "elsewhere")
    done = setup.supervise("archive", "-c", str(setup.profile), "--older-than", "30d",
                           timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert places(setup) == Counter(dict.fromkeys(sizes, 1))
    assert not any((setup.state / "tasks").iterdir())
