"""Ended tasks and their archive places and sizes (moved from tests/test_archive.py)."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from collections import Counter

from conftest import Setup

from supervisor.taskdir.folder import atomic_write

OLD = "2026-10-03T10:00:00Z"  # the month of the tarball: 2026-10


def _age(setup: Setup, name: str, finished_at: str = OLD) -> str:
    """Make a task look ended long ago (its manifest's ``finished_at``); returns its id."""
    m = setup.manifests()[name]
    m["finished_at"] = finished_at
    atomic_write(setup.state / "tasks" / m["task_id"] / "manifest.json", json.dumps(m).encode())
    return str(m["task_id"])


# ---------------------------------------------------------------- issue 20: interruption


def ended_tasks(setup: Setup, count: int, size: int = 0, files: int = 0) -> dict[str, int]:
    """``count`` ended task folders (ended in 2026-10): one real run, cloned. Each gets
    ``size`` random bytes in ``output.log`` (gzip cannot shrink them: writing takes a
    while) and ``files`` small extra files (removing takes a while). Returns id -> the
    size of its ``output.log``."""
    setup.write_profile()
    setup.drop("seed.toml", setup.task("seed", "exit: 0"))
    assert setup.run().returncode == 0
    seed = _age(setup, "seed")
    tasks = setup.state / "tasks"
    ids = [seed] + [f"clone-{i:03d}-a1b2c3" for i in range(count - 1)]
    for task_id in ids[1:]:
        shutil.copytree(tasks / seed, tasks / task_id)
        m = json.loads((tasks / task_id / "manifest.json").read_text())
        m["task_id"] = task_id
        atomic_write(tasks / task_id / "manifest.json", json.dumps(m).encode())
    for task_id in ids:
        if size:
            (tasks / task_id / "output.log").write_bytes(os.urandom(size))
        for n in range(files):
            (tasks / task_id / f"extra-{n:03d}.txt").write_text(f"{task_id} {n}\n")
    return {task_id: (tasks / task_id / "output.log").stat().st_size for task_id in ids}


def places(setup: Setup) -> Counter[str]:
    """How many times each task id is found: a folder in ``tasks/`` (hidden ones are no
    task) plus a manifest in any tarball (each tarball must open)."""
    found: Counter[str] = Counter(
        p.name for p in (setup.state / "tasks").iterdir() if not p.name.startswith(".")
    )
    for tarball in sorted((setup.state / "archive").glob("*.tar.gz")):
        with tarfile.open(tarball) as archive:
            for name in archive.getnames():
                parts = name.split("/")
                if len(parts) == 2 and parts[1] == "manifest.json":
                    found[parts[0]] += 1
    return found


def archived_sizes(setup: Setup) -> dict[str, int]:
    """id -> size of its ``output.log`` in the month's tarball."""
    with tarfile.open(setup.state / "archive" / "2026-10.tar.gz") as archive:
        return {
            m.name.split("/")[0]: m.size
            for m in archive.getmembers()
            if m.name.endswith("/output.log")
        }
