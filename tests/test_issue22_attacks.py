"""Issue 22 after the merge: the leftovers its seven parts reported and what attacking the
new commands found (docs/conformance.md "Issue 22: found by attack after the merge"). Each
test failed on main before its fix."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import tomli_w

from supervisor import cli, cli_read
from supervisor.taskdir import atomic_write

#: Each command taking one id, with the arguments after the id, and its exit for a bad id.
ONE_ID = {
    "show": ((), 1),
    "tail": ((), 1),
    "attach": ((), 1),
    "events": ((), 1),
    "continue": (("go on",), 1),
    "diff": ((), 1),
    "merge": ((), 1),
    "discard": ((), 1),
}


def _profile(tmp_path: Path) -> Path:
    data = {
        "paths": {"spool_dir": "spool", "state_dir": "state"},
        "tmux": {"socket_name": "issue22-unused"},
        "agent": {"command": ["true"]},
    }
    path = tmp_path / "profile.toml"
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    (tmp_path / "state" / "tasks").mkdir(parents=True)
    (tmp_path / "spool").mkdir()
    return path


def _manifest(tmp_path: Path, task_id: str, status: str, **extra: object) -> Path:
    folder = tmp_path / "state" / "tasks" / task_id
    folder.mkdir(parents=True, exist_ok=True)
    data = {"task_id": task_id, "task_name": task_id, "status": status, **extra}
    atomic_write(folder / "manifest.json", json.dumps(data).encode())
    return folder


@pytest.mark.parametrize("length", [250, 300, 100_000])
def test_an_overlong_id_is_one_line_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], length: int
) -> None:
    """An id longer than a file name may be (ENAMETOOLONG from ``Path.exists()``, also for
    ``spool/<id>.toml`` at 251+ characters) is refused in one short line, no traceback."""
    conf = str(_profile(tmp_path))
    task_id = "a" * length
    commands = {**ONE_ID, "stop": ((), 1), "wait": (("--timeout", "1"), 2)}
    for command, (after, code) in commands.items():
        assert cli.main([command, "-c", conf, task_id, *after]) == code, command
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and len(err) < 800, (command, err[:500])
        assert "Traceback" not in err and "no task" in err, (command, err[:500])


def _bounded(call: Callable[[], object], fifos: list[Path]) -> object:
    """``call()`` on a thread; a call still blocked after 20 s fails the test (its FIFOs
    are then opened for writing and closed, so the blocked reader gets EOF and ends)."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(20)
        pytest.fail(f"{call} blocked on a FIFO")
    return result[0]


def test_a_fifo_in_a_task_folder_blocks_no_view(tmp_path: Path) -> None:
    """An agent can write into its task folder: a FIFO put in place of ``manifest.json``,
    ``events.jsonl``, ``spec.json`` or ``output.log`` must not hang ``status``, ``top``,
    the web page or ``tail`` (each reads non-blocking, regular files only); the folder
    shows as ``damaged`` and the good task beside it is listed."""
    from supervisor.taskdir import TaskDir
    from supervisor.views import model, webpage

    conf = _profile(tmp_path)
    _manifest(tmp_path, "good-1", "running")
    hostile = tmp_path / "state" / "tasks" / "fifo-1"
    hostile.mkdir()
    fifos = [hostile / name for name in ("manifest.json", "events.jsonl", "spec.json")]
    events = _manifest(tmp_path, "events-1", "running") / "events.jsonl"
    output = _manifest(tmp_path, "output-1", "running") / "output.log"
    fifos += [events, output]
    for fifo in fifos:
        os.mkfifo(fifo)
    profile = cli._profile(str(conf))
    snap = _bounded(lambda: model.snapshot(profile), fifos)
    rows = {task.task_id: task.status for task in snap.tasks}  # type: ignore[attr-defined]
    assert rows == {"good-1": "running", "events-1": "running", "output-1": "running",
                    "fifo-1": "damaged"}  # fmt: skip
    for folder in (hostile, events.parent, output.parent):
        page = _bounded(lambda folder=folder: webpage.task_view(folder), fifos)
        assert isinstance(page, dict)
    assert _bounded(lambda: TaskDir(output.parent).output_tail(), fifos) == ""


def test_a_manifest_nested_too_deep_is_damaged_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[[[[…`` 100,000 deep makes ``json.loads`` raise ``RecursionError`` (not a
    ``ValueError``): ``status``, ``stop``, ``wait`` and ``events`` must treat it as a
    damaged manifest, in one line."""
    conf = str(_profile(tmp_path))
    folder = _manifest(tmp_path, "deep-1", "running")
    atomic_write(folder / "manifest.json", b"[" * 100_000)
    (folder / "events.jsonl").write_text('{"event": "queued"}\n')
    assert cli.main(["status", "-c", conf, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["task_id"], r["status"]) for r in rows] == [("deep-1", "damaged")]
    assert cli.main(["stop", "-c", conf, "deep-1"]) == 1
    assert "nested too deep" in capsys.readouterr().err
    assert cli.main(["wait", "-c", conf, "deep-1", "--timeout", "0.5"]) == 124
    assert cli_read._ended(folder) is False  # events -f: not ended, no traceback
    capsys.readouterr()
