"""Issue 20, intake and bounds: every number a task file may set is bounded in the models
(so the schemas and ``validate`` show it), rotation costs what exists on disk, and reading
the files a task names never blocks.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import Setup

from supervisor import logrotate, schemas, spool
from supervisor.config import (
    ConfigError,
    load_profile,
    load_task,
)
from supervisor.taskdir.folder import TaskDir

# ------------------------------------------------------------------ 1. bounds in the models


def _profile(folder: Path, may_set: list[str] | None = None) -> Path:
    security = {"task_may_set": may_set} if may_set is not None else {}
    data: dict[str, Any] = {"agent": {"command": ["x"]}, "security": security}
    path = folder / "profile.toml"
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path


def _schema_of(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The non-null branch of an ``anyOf [X, null]``, with a ``$ref`` followed."""
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") != "null":
            schema = branch
            break
    ref = schema.get("$ref")
    return defs[ref.rsplit("/", 1)[-1]] if ref else schema


def _unbounded(name: str, schema: dict[str, Any], defs: dict[str, Any]) -> Iterator[str]:
    """Each number, list or string inside ``schema`` that has no upper bound."""
    schema = _schema_of(schema, defs)
    kind = schema.get("type")
    if kind in ("integer", "number") and "maximum" not in schema:
        yield f"{name}: no maximum"
    elif kind == "array":
        if "maxItems" not in schema:
            yield f"{name}: no maxItems"
        yield from _unbounded(f"{name}[]", schema.get("items", {}), defs)
    elif kind == "object" and "properties" in schema:
        for key, sub in schema["properties"].items():
            yield from _unbounded(f"{name}.{key}", sub, defs)


#: Task keys whose values are bounded elsewhere: ``name`` and ``prompt`` by their own
#: validators, the free text of an approval message, and the table of ``env`` (not a
#: number a task sets by default, and bounded by the task file's size).
_STRINGS_ALLOWED = ("name", "prompt", "approval", "env", "host", "prompt_file", "project_dir")


def test_every_number_a_task_file_may_set_is_bounded() -> None:
    """Every number and list a task file may set (each key ``task_may_set`` can name, with
    ``monitor`` whole) has an upper bound in ``schemas/task.schema.json``, and the seconds
    a check runs at a lower one."""
    schema = schemas.schemas()["task.schema.json"]
    defs = schema["$defs"]
    problems: list[str] = []
    for key, sub in schema["properties"].items():
        if key in _STRINGS_ALLOWED:
            continue
        problems.extend(_unbounded(key, sub, defs))
    assert problems == [], problems
    monitor = defs["MonitorOverrides"]["properties"]
    for key in ("base_interval", "max_interval", "stale_threshold"):
        assert _schema_of(monitor[key], defs).get("minimum", 0) >= 0.1, key


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("log_backups", 100_000_000, "from 0 to 100"),
        ("max_log_bytes", 10**15, "from 4096 to 1073741824"),
        ("max_retries", 10**9, "from 0 to 100"),
        ("base_interval", 1e-9, "from 0.1 to 31536000"),
        ("resume_exit_codes", list(range(1, 256)) * 2, "at most 255 items"),
    ],
)
def test_a_value_past_its_bound_is_one_line_with_the_range(
    tmp_path: Path, key: str, value: Any, allowed: str
) -> None:
    """``[monitor] log_backups = 100000000`` (the issue's value) and its kin: rejected in one
    line naming the file and line, the key and the allowed range."""
    profile = load_profile(_profile(tmp_path))
    task = tmp_path / "t.toml"
    data = {"name": "t", "prompt": "p", "project_dir": str(tmp_path), "monitor": {key: value}}
    task.write_text(tomli_w.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_task(task, profile)
    assert len(caught.value.problems) == 1, caught.value.problems
    line = caught.value.problems[0]
    assert line.startswith(f"{task}:6: key 'monitor.{key}'"), line
    assert allowed in line, line


# ------------------------------------------------------------------ 1. rotation cost


@contextlib.contextmanager
def _counted_renames(limit: int = 1000) -> Iterator[list[str]]:
    """Count ``os.replace``/``os.rename``/``unlink`` calls; fail past ``limit`` (the loop of
    today's main over 100 million indexes would run for minutes)."""
    calls: list[str] = []
    real = {"replace": os.replace, "rename": os.rename, "unlink": os.unlink}

    def counted(name: str) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            calls.append(name)
            if len(calls) > limit:
                raise AssertionError(f"{len(calls)} file operations for one rotation")
            return real[name](*args, **kw)

        return call

    with pytest.MonkeyPatch.context() as patch:
        for name in real:
            patch.setattr(os, name, counted(name))
        yield calls


def test_rotation_touches_only_the_backups_that_exist(tmp_path: Path) -> None:
    """``log_backups`` huge (as a profile could once set it) costs a few renames, not one
    per index: rotation is O(backups on disk). Backups past the limit are removed."""
    task = TaskDir(tmp_path)
    log = tmp_path / "output.log"
    for index, text in ((1, "one"), (2, "two"), (7, "seven")):
        (tmp_path / f"output.log.{index}").write_text(text)
    log.write_bytes(b"x" * 5000)
    with _counted_renames() as calls:
        assert task.rotate_output(4096, 100_000_000)
    assert len(calls) <= 5, calls
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["output.log.1", "output.log.2", "output.log.3", "output.log.8"]
    assert (tmp_path / "output.log.3").read_text() == "two"
    # a lower limit removes every backup at or past it
    log.write_bytes(b"y" * 5000)
    with _counted_renames():
        assert task.rotate_output(4096, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["output.log.1", "output.log.2"]
    assert (tmp_path / "output.log.2").read_bytes() == b"x" * 5000


def test_stream_rotation_touches_only_the_backups_that_exist(tmp_path: Path) -> None:
    path = tmp_path / "stream.jsonl"
    path.write_text("old\n")
    with _counted_renames():
        logrotate.rotate(path, 100_000_000, b"carry\n")
    assert path.read_bytes() == b"carry\n"
    assert (tmp_path / "stream.jsonl.1").read_text() == "old\n"


# ------------------------------------------------------------------ 2. non-blocking reads

_SWAP_CHILD = """
import os, sys
from pathlib import Path
from supervisor import spool
from supervisor.config import load_profile
prompt = os.path.realpath(sys.argv[3])
real_stat = os.stat

def stat(path, *args, **kw):
    # The race, forced: the prompt file is a regular file when looked at, and a FIFO by
    # the time it is opened (a writer swapping it, or a hostile one).
    info = real_stat(path, *args, **kw)
    if isinstance(path, (str, os.PathLike)) and os.path.realpath(path) == prompt:
        if not os.path.exists(prompt + ".swapped"):
            os.unlink(prompt)
            os.mkfifo(prompt)
            open(prompt + ".swapped", "w").close()
    return info

os.stat = stat
print(spool.claim(Path(sys.argv[1]), load_profile(sys.argv[2])))
"""


def test_prompt_file_swapped_to_a_fifo_never_blocks_the_claim(tmp_path: Path) -> None:
    """A ``prompt_file`` that is a regular file when checked and a FIFO when opened: the
    claim opens it once, non-blocking, and checks that descriptor (``fstat``), so it is
    rejected in one line instead of blocking the claim thread in ``open()``."""
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    (tmp_path / "state").mkdir()
    profile = _profile(tmp_path)
    text = profile.read_text() + '\n[paths]\nspool_dir = "spool"\nstate_dir = "state"\n'
    profile.write_text(text)
    prompt = tmp_path / "prompt.md"
    prompt.write_text("hello\n")
    task = spool_dir / "swap.toml"
    task.write_text(
        tomli_w.dumps({"name": "swap", "prompt_file": str(prompt), "project_dir": str(tmp_path)})
    )
    try:
        child = subprocess.run(
            [sys.executable, "-c", _SWAP_CHILD, str(task), str(profile), str(prompt)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the claim blocked in open() on a FIFO for 60 s")
    assert child.returncode == 0, child.stderr[-2000:]
    error = spool_dir / "rejected" / "swap.toml.error"
    claimed = list((tmp_path / "state" / "tasks").glob("*/prompt"))
    # opened before any stat: the regular file was read; or the swap happened: rejected
    assert claimed or "a FIFO" in error.read_text(), child.stdout


# ------------------------------------------------------------------ 4. future mtimes


def test_a_spool_file_from_the_future_is_claimed_after_the_settle_time(setup: Setup) -> None:
    """A task file whose mtime is an hour ahead (``rsync -t`` from a host whose clock is
    ahead, or clock skew) is claimed once it has stayed unchanged for the settle time since
    the engine first saw it, not an hour later: ``--exit-when-idle`` ends with it done."""
    setup.write_profile()
    path = setup.drop("future.toml", setup.task("future", "print: from the future\n"))
    ahead = time.time() + 3600
    os.utime(path, (ahead, ahead))
    done = setup.run(timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert setup.manifests()["future"]["status"] == "completed"


def test_settle_time_counts_from_the_first_look_for_a_future_mtime(tmp_path: Path) -> None:
    """``pending`` with its memory of first looks: a future mtime waits the settle time from
    the first look; a change to the file (its size or mtime) starts the wait again."""
    path = tmp_path / "f.toml"
    path.write_text("a")
    ahead = time.time() + 3600
    os.utime(path, (ahead, ahead))
    seen: dict[str, Any] = {}
    assert spool.pending(tmp_path, seen=seen) == []
    time.sleep(spool.SETTLE + 0.05)  # the settle time under test
    assert spool.pending(tmp_path, seen=seen) == [path]
    path.write_text("ab")
    os.utime(path, (ahead + 1, ahead + 1))
    assert spool.pending(tmp_path, seen=seen) == []
    time.sleep(spool.SETTLE + 0.05)  # the settle time under test
    assert spool.pending(tmp_path, seen=seen) == [path]
    path.unlink()
    assert spool.pending(tmp_path, seen=seen) == [] and seen == {}


# ------------------------------------------------------------------ found by the property test


@pytest.mark.parametrize(
    "table",
    [
        {"acceptance": {"command": ["true", "a\x00b"]}},
        {"acceptance": {"artifacts": ["\x00"]}},
    ],
)
def test_a_nul_in_an_argv_or_path_a_task_gives_is_rejected(tmp_path: Path, table: Any) -> None:
    """Found by ``test_hostile_intake``: an acceptance argv holding NUL was accepted, then
    ``subprocess`` refused it ("embedded null byte") at every check, and the task stayed
    ``verifying`` forever, logging a traceback each time. No argv or path can hold NUL."""
    profile = load_profile(_profile(tmp_path))
    task = tmp_path / "t.toml"
    data = {"name": "t", "prompt": "p", "project_dir": str(tmp_path), **table}
    task.write_text(tomli_w.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_task(task, profile)
    assert len(caught.value.problems) == 1, caught.value.problems
    assert "key 'acceptance." in caught.value.problems[0]
    assert "NUL" in caught.value.problems[0]


def test_an_artifact_path_the_filesystem_refuses_counts_as_missing(tmp_path: Path) -> None:
    """Found by ``test_hostile_intake``'s kin: ``artifacts = ["a" * 300]`` made
    ``Path.exists`` raise ``ENAMETOOLONG`` inside the acceptance check, which then "failed to
    run" at every check and the task stayed ``verifying``, spinning. Any path the
    filesystem refuses to look up is a missing artifact."""
    from supervisor.config import AcceptanceSpec
    from supervisor.engine import acceptance

    folder = tmp_path / "task"
    folder.mkdir()
    spec = AcceptanceSpec(artifacts=["a" * 300, "b/" * 3000, "ok"])
    (tmp_path / "ok").write_text("")
    result = acceptance.run(TaskDir(folder), tmp_path, spec)
    assert result["passed"] is False
    assert result["missing"] == ["a" * 300, "b/" * 3000]
