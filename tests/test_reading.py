"""Reading what the engine and a task wrote (issue 22, item 5): ``supervise logs``,
``supervise events``, and ``show``/``tail``/``attach``/``events`` of a task that is
archived, waiting in the spool or rejected."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import Setup, wait_for


def _ids(setup: Setup) -> list[str]:
    return sorted(p.name for p in (setup.state / "tasks").iterdir())


@contextmanager
def _reader(*args: str) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """``supervise ARGS`` in the background; its stdout lines collected as they come. Ended
    by its PID when the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    assert process.stdout is not None
    stdout = process.stdout
    thread = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")), daemon=True)
    thread.start()
    try:
        yield process, lines
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=15)
        thread.join(timeout=15)


# ---------------------------------------------------------------- logs


def test_logs_before_any_engine_says_where_the_log_will_be(setup: Setup) -> None:
    setup.write_profile()
    result = setup.supervise("logs", "-c", str(setup.profile))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert "no engine log yet" in lines[0] and str(setup.state / "engine.log") in lines[0]


def test_logs_shows_the_engine_log_of_a_run_without_log_file(setup: Setup) -> None:
    setup.write_profile()
    setup.drop("t.toml", setup.task("t", "print: hello\nexit: 0"))
    run = setup.run()
    assert run.returncode == 0, run.stderr
    assert " started: profile " in run.stderr  # stderr keeps the log as before
    result = setup.supervise("logs", "-c", str(setup.profile), "-n", "100")
    assert result.returncode == 0, result.stderr
    assert " started: profile " in result.stdout
    assert "engine stopped" in result.stdout.splitlines()[-1]
    one = setup.supervise("logs", "-c", str(setup.profile), "-n", "1")
    assert one.stdout.splitlines() == result.stdout.splitlines()[-1:]


def test_logs_finds_a_log_file_given_to_run(setup: Setup, tmp_path: Path) -> None:
    setup.write_profile()
    log = tmp_path / "elsewhere" / "engine.log"
    run = setup.supervise("run", str(setup.profile), "--exit-when-idle", "--log-file", str(log))
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    assert not (setup.state / "engine.log").exists()
    result = setup.supervise("logs", "-c", str(setup.profile))
    assert result.returncode == 0, result.stderr
    assert f"state dir {setup.state}" in result.stdout


def test_logs_escapes_controls_and_follows_across_a_rotation(setup: Setup) -> None:
    setup.write_profile()
    setup.state.mkdir()
    log = setup.state / "engine.log"
    log.write_text("old line\nwith \x1b]52;c;evil\x07 escape\n")
    shown = setup.supervise("logs", "-c", str(setup.profile))
    assert "\x1b" not in shown.stdout and "\\x1b]52" in shown.stdout
    with _reader("logs", "-c", str(setup.profile), "-n", "1", "-f") as (process, lines):
        wait_for(lambda: any("escape" in line for line in lines))
        with open(log, "a") as handle:
            handle.write("before the rotation\n")
        wait_for(lambda: any("before the rotation" in line for line in lines))
        os.rename(log, log.with_name("engine.log.1"))  # RotatingFileHandler's rename...
        log.write_text("after the rotation \x9b31m\n")  # ...and the fresh file
        wait_for(lambda: any("after the rotation" in line for line in lines))
        assert process.poll() is None  # follows until interrupted
    text = "".join(lines)
    assert "old line" not in text  # -n 1: only the last line before following
    assert "\x9b" not in text and "\\u009b31m" in text


# ---------------------------------------------------------------- events


def _ran(setup: Setup, prompt: str = "print: hello\nexit: 0") -> str:
    setup.write_profile()
    setup.drop("t.toml", setup.task("t", prompt))
    run = setup.run()
    assert run.returncode == 0, run.stderr
    (task_id,) = _ids(setup)
    return task_id


def test_events_are_readable_with_status_changes_and_fields(setup: Setup) -> None:
    task_id = _ran(setup, "print: hello\nexit: 3")
    result = setup.supervise("events", "-c", str(setup.profile), task_id)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    names = [line.split("  ")[1] for line in lines]
    assert names[:2] == ["queued", "launched"], lines
    assert "failed" in names
    assert "→queued" in lines[0] and "queued→running" in lines[1]
    failed = next(line for line in lines if line.split("  ")[1] == "failed")
    assert "running→failed" in failed and "exit_code=3" in failed and "verdict=FAIL" in failed
    assert not any(line.lstrip().startswith("{") for line in lines)  # no raw JSON
    stored = (setup.state / "tasks" / task_id / "events.jsonl").read_text().splitlines()
    assert len(lines) == len(stored)
    last = setup.supervise("events", "-c", str(setup.profile), task_id, "-n", "1")
    assert last.stdout.splitlines() == lines[-1:]
    ages = setup.supervise("events", "-c", str(setup.profile), task_id, "--relative")
    assert all(" ago  " in line.split("  ", 1)[0] + "  " for line in ages.stdout.splitlines())


def test_events_json_is_as_stored_and_damaged_lines_are_reported(setup: Setup) -> None:
    task_id = _ran(setup)
    path = setup.state / "tasks" / task_id / "events.jsonl"
    stored = path.read_text().splitlines()
    with open(path, "a") as handle:
        handle.write('{"ts": "x", "torn\n[1, 2]\n{"event": "note", "text": "\\u001b[2J"}\n')
    result = setup.supervise("events", "-c", str(setup.profile), task_id, "--json")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[: len(stored)] == stored
    assert json.loads(out[-1])["event"] == "note"
    problems = result.stderr.splitlines()
    assert len(problems) == 2, problems
    assert f"events.jsonl:{len(stored) + 1}: damaged" in problems[0]
    assert f"events.jsonl:{len(stored) + 2}: damaged" in problems[1]
    readable = setup.supervise("events", "-c", str(setup.profile), task_id)
    assert readable.returncode == 0
    assert "\x1b" not in readable.stdout and "\\x1b[2J" in readable.stdout


def test_events_follow_returns_when_the_task_ends(setup: Setup) -> None:
    setup.write_profile()
    setup.drop("t.toml", setup.task("t", "print: hello\nsleep: 2\nexit: 0"))
    engine = setup.start()
    try:
        wait_for(lambda: (setup.state / "tasks").is_dir() and _ids(setup), timeout=30)
        (task_id,) = _ids(setup)
        wait_for(lambda: (setup.state / "tasks" / task_id / "events.jsonl").exists())
        with _reader("events", "-c", str(setup.profile), task_id, "-f") as (process, lines):
            assert process.wait(timeout=60) == 0
        names = [line.split("  ")[1] for line in lines]
        assert names[0] == "queued" and "completed" in names, names
    finally:
        engine.terminate()
        engine.wait(timeout=30)


# ---------------------------------------------------------------- where a task is


def test_an_archived_task_says_where_and_its_events_read_from_the_tarball(setup: Setup) -> None:
    task_id = _ran(setup)
    archived = setup.supervise("archive", "-c", str(setup.profile), "--older-than", "0s")
    assert archived.returncode == 0, archived.stderr
    (tarball,) = (setup.state / "archive").glob("*.tar.gz")
    for verb in ("show", "tail", "attach"):
        result = setup.supervise(verb, "-c", str(setup.profile), task_id)
        assert result.returncode == 1, (verb, result)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and f"archived in {tarball}" in lines[0], (verb, lines)
    events = setup.supervise("events", "-c", str(setup.profile), task_id)
    assert events.returncode == 0, events.stderr
    assert "running→completed" in events.stdout


def test_a_spooled_a_rejected_and_an_unknown_task_each_say_so(setup: Setup) -> None:
    setup.write_profile()
    setup.drop("bad.toml", 'name = "bad"\nprompt = 3\n')
    run = setup.run()
    assert run.returncode == 0, run.stderr
    submit_file = setup.root / "later.toml"
    submit_file.write_text(f'name = "later"\nprompt = "x"\nproject_dir = "{setup.project}"\n')
    spooled = setup.supervise("submit", "-c", str(setup.profile), str(submit_file)).stdout.strip()
    for verb in ("show", "tail", "attach", "events"):
        said = setup.supervise(verb, "-c", str(setup.profile), spooled)
        assert said.returncode == 1 and "waits in the spool" in said.stderr, (verb, said)
        rejected = setup.supervise(verb, "-c", str(setup.profile), "bad")
        assert rejected.returncode == 1 and "was rejected" in rejected.stderr, (verb, rejected)
        assert "prompt" in rejected.stderr
        unknown = setup.supervise(verb, "-c", str(setup.profile), "nope-123")
        assert unknown.returncode == 1 and "no task 'nope-123'" in unknown.stderr


# ---------------------------------------------------------------- attacks


def test_a_fifo_in_place_of_a_log_or_the_events_never_hangs(setup: Setup) -> None:
    task_id = _ran(setup)
    events = setup.state / "tasks" / task_id / "events.jsonl"
    events.unlink()
    os.mkfifo(events)
    said = setup.supervise("events", "-c", str(setup.profile), task_id, timeout=30)
    assert said.returncode == 1 and "not a regular file" in said.stderr
    log = setup.state / "engine.log"
    log.unlink()
    os.mkfifo(log)
    said = setup.supervise("logs", "-c", str(setup.profile), timeout=30)
    assert said.returncode == 1 and "no engine log yet" in said.stderr
    (setup.state / "engine-log.json").write_text('{"path": 7}')  # a damaged record
    assert "engine.log" in setup.supervise("logs", "-c", str(setup.profile)).stderr


def test_an_endless_event_line_is_reported_not_held(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from supervisor.cli import eventview

    monkeypatch.setattr(eventview, "MAX_LINE", 100)
    splitter = eventview.Splitter()
    good = b'{"ts": "2026-01-01T00:00:00Z", "event": "queued", "status": "queued"}\n'
    out = splitter.feed(good[:10]) + splitter.feed(good[10:] + b"x" * 150)
    out += splitter.feed(b"y" * 10_000) + splitter.feed(b"z\n" + good)
    assert [(p.number, p.event is not None) for p in out] == [(1, True), (2, False), (3, True)]
    assert "longer than 100 bytes" in (out[1].problem or "")
    assert len(splitter.pending) == 0


def test_logs_follow_after_a_truncation_starts_over(setup: Setup) -> None:
    setup.write_profile()
    setup.state.mkdir()
    log = setup.state / "engine.log"
    log.write_text("first\n" * 50 + "last\n")
    with _reader("logs", "-c", str(setup.profile), "-n", "1", "-f") as (process, lines):
        wait_for(lambda: lines)  # it follows from here on
        log.write_text("")  # copytruncate, as logrotate does
        with open(log, "a") as handle:
            handle.write("after truncation\n")
        wait_for(lambda: any("after truncation" in line for line in lines))
    assert process.returncode is not None and lines[0] == "last\n"
    assert not any("first" in line for line in lines)


def test_an_engine_log_that_cannot_be_written_costs_one_warning(setup: Setup) -> None:
    setup.write_profile()
    (setup.state / "engine.log").mkdir(parents=True)  # not a file: cannot be opened
    run = setup.run()
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if "cannot write the engine log" in line]
    assert len(warnings) == 1 and "Traceback" not in run.stderr


def test_a_record_the_file_log_cannot_write_prints_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging

    from supervisor.cli.enginelog import QuietFileHandler

    handler = QuietFileHandler(tmp_path / "engine.log", maxBytes=1000, backupCount=1)
    handler.stream.close()

    class Full(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    handler.stream = Full()  # as a full filesystem fails a write
    handler.emit(logging.LogRecord("x", logging.INFO, __file__, 1, "lost", None, None))
    handler.stream = None  # type: ignore[assignment]
    handler.close()
    assert capsys.readouterr().err == ""


def test_hostile_event_stamps_show_as_they_are() -> None:
    from supervisor.cli.eventview import Renderer

    for relative in (False, True):
        renderer = Renderer(relative=relative)
        for ts in ("0001-01-01T00:00:00Z", "2026-13-45T00:00:00Z", "\x1b[2J", 1e300, None):
            line = renderer.line({"ts": ts, "event": "x", "n": float("inf")})
            assert "\x1b" not in line and "  x  n=Infinity" in line, line


def test_show_of_a_manifest_swapped_for_a_fifo_says_so_and_never_hangs(setup: Setup) -> None:
    task_id = _ran(setup)
    manifest = setup.state / "tasks" / task_id / "manifest.json"
    manifest.unlink()
    os.mkfifo(manifest)
    said = setup.supervise("show", "-c", str(setup.profile), task_id, timeout=30)
    assert said.returncode == 1 and said.stderr.count("\n") == 1, said
    assert "manifest.json" in said.stderr and "FIFO" in said.stderr
