"""Issue 22 items 2 and 5 under attack (docs/conformance.md "wait and fleet-scale verbs"):
odd files where a manifest should be, hostile ids and values, many ids at once."""

from __future__ import annotations

import json
import os

from conftest import Setup

from supervisor.taskdir.folder import atomic_write


def _manifest(setup: Setup, task_id: str, status: str) -> None:
    folder = setup.state / "tasks" / task_id
    folder.mkdir(parents=True, exist_ok=True)
    data = {"task_id": task_id, "task_name": task_id, "status": status, "retry_count": 0}
    atomic_write(folder / "manifest.json", json.dumps(data).encode())


def test_a_fifo_or_a_huge_file_as_a_manifest_blocks_nothing(setup: Setup) -> None:
    """A FIFO opened for reading blocks until a writer comes: ``wait``, ``stop ID`` and
    ``stop --all`` must read it non-blocking and pass over it (the one with a good
    manifest is still handled)."""
    setup.write_profile()
    _manifest(setup, "good-1", "running")
    fifo = setup.state / "tasks" / "fifo-1"
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "manifest.json")
    huge = setup.state / "tasks" / "huge-1"
    huge.mkdir()
    with open(huge / "manifest.json", "wb") as handle:  # sparse: 2 GiB, no disk used
        handle.truncate(2 << 30)
    conf = str(setup.profile)
    waited = setup.supervise("wait", "-c", conf, "fifo-1", "huge-1", "--timeout", "1", timeout=30)
    assert waited.returncode == 124, waited.stderr
    stopped = setup.supervise("stop", "-c", conf, "fifo-1", "huge-1", timeout=30)
    assert stopped.returncode == 1, stopped.stderr
    assert stopped.stderr.count("cannot read the manifest") == 2, stopped.stderr
    every = setup.supervise("stop", "-c", conf, "--all", "--json", timeout=30)
    assert every.returncode == 3, every.stderr  # no engine: queued
    assert [r["task_id"] for r in json.loads(every.stdout)] == ["good-1"]


def test_hostile_ids_and_values_are_one_line_each(setup: Setup) -> None:
    setup.write_profile()
    _manifest(setup, "good-1", "running")
    conf = str(setup.profile)
    ids = ["../etc", "a\nb", "x" * 5000, "\u202eevil", "GOOD-1"]
    done = setup.supervise("stop", "-c", conf, *ids, timeout=30)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == len(ids), lines
    assert all(line.startswith("supervise stop: no task ") for line in lines), lines
    assert "\u202e" not in done.stderr and "\n" not in "".join(lines)
    for bad in ("nan", "inf", "-1", "x"):
        verb = setup.supervise("resume", "-c", conf, "good-1", "--wait", bad, timeout=30)
        assert verb.returncode == 2 and "--wait" in verb.stderr, (bad, verb.stderr)
    assert not (setup.state / "control").exists()  # nothing was requested by any of them


def test_a_thousand_ids_are_each_reported(setup: Setup) -> None:
    setup.write_profile()
    for n in range(50):
        _manifest(setup, f"t-{n}", "completed")
    ids = [f"t-{n}" for n in range(50)] + [f"nope-{n}" for n in range(950)]
    done = setup.supervise("stop", "-c", str(setup.profile), *ids, "--json", timeout=60)
    assert done.returncode == 1
    rows = json.loads(done.stdout)
    assert len(rows) == 1000 and {r["result"] for r in rows} == {"refused"}
    waited = setup.supervise("wait", "-c", str(setup.profile), *ids[:50], timeout=60)
    assert waited.returncode == 1  # completed without a PASS verdict
    assert len(waited.stdout.splitlines()) == 50
