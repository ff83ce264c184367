"""The wrapper's copy of a headless agent's stdout (:mod:`supervisor.streamcopy`), fed the real
``--include-partial-messages`` output of Claude Code 2.1.328
(tests/fixtures/claude/headless/partial-*.jsonl): partial-message lines never reach the pane,
content deltas are folded in the stream file, pings are dropped and counted; and the wrapper
run by path (``python3 -I -S wrapper.py``) does the same."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor import streamcopy
from supervisor.streamcopy import FOLD, LINE_LIMIT, StreamCopy, stream_kind

HEADLESS = Path(__file__).parent / "fixtures" / "claude" / "headless"
WRAPPER = Path(__file__).resolve().parent.parent / "supervisor" / "wrapper.py"
SLOW = (HEADLESS / "partial-slow-write.jsonl").read_bytes()
PINGS = (HEADLESS / "partial-ping-stall.jsonl").read_bytes()


def _kind(line: bytes) -> str:
    obj = json.loads(line)
    if obj["type"] != "stream_event":
        return "line"
    return {"content_block_delta": "delta", "ping": "keepalive"}.get(obj["event"]["type"], "event")


def _copy(chunks: Iterator[bytes] | list[bytes], tmp_path: Path) -> tuple[list[bytes], bytes]:
    """Feed ``chunks`` through a :class:`StreamCopy`; returns (stream file lines, pane)."""
    sink = io.BytesIO()
    pane_path = tmp_path / "pane"
    pane = os.open(pane_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        copy = StreamCopy(sink, pane)
        for chunk in chunks:
            copy.feed(chunk)
        copy.close()
    finally:
        os.close(pane)
    return sink.getvalue().splitlines(keepends=True), pane_path.read_bytes()


def _folds(lines: list[bytes]) -> list[dict]:
    return [json.loads(line) for line in lines if json.loads(line).get("type") == FOLD]


@pytest.mark.parametrize("fixture", [SLOW, PINGS], ids=["slow-write", "ping-stall"])
def test_every_fixture_line_is_classified_as_the_cli_meant_it(fixture: bytes) -> None:
    for line in fixture.splitlines(keepends=True):
        assert stream_kind(line) == _kind(line), line[:120]


@pytest.mark.parametrize("fixture", [SLOW, PINGS], ids=["slow-write", "ping-stall"])
def test_the_pane_gets_the_lines_of_before_and_the_file_folds_the_deltas(
    fixture: bytes, tmp_path: Path
) -> None:
    lines = fixture.splitlines(keepends=True)
    written, pane = _copy([fixture], tmp_path)
    # The pane: exactly the lines without --include-partial-messages, in order.
    assert pane == b"".join(line for line in lines if _kind(line) == "line")
    assert b"stream_event" not in pane
    # The file: every line but the deltas (folded) and the pings (dropped), in order.
    kept = [line for line in lines if _kind(line) in ("line", "event")]
    assert [line for line in written if json.loads(line).get("type") != FOLD] == kept
    folds = _folds(written)
    assert sum(f["events"] for f in folds) == sum(_kind(x) == "delta" for x in lines)
    assert sum(f["keepalives"] for f in folds) == sum(_kind(x) == "keepalive" for x in lines)
    assert all(isinstance(f["at"], float) for f in folds)


def test_a_fold_comes_before_the_line_that_follows_its_deltas(tmp_path: Path) -> None:
    """The ``assistant`` line of a block comes after the fold of its deltas, so the file
    keeps the order in which the agent printed."""
    written, _ = _copy([SLOW], tmp_path)
    types = [json.loads(line)["type"] for line in written]
    first_fold = types.index(FOLD)
    assert "assistant" in types[first_fold:]
    assert types[-1] == "result"


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(SLOW)), max_size=60))
def test_any_cutting_of_the_pipe_gives_the_same_copy(cuts: list[int], tmp_path_factory) -> None:
    """The pipe hands over bytes in any sizes: lines are put back together first."""
    tmp_path = tmp_path_factory.mktemp("cut")
    bounds = [0, *sorted(cuts), len(SLOW)]
    chunks = [SLOW[a:b] for a, b in itertools.pairwise(bounds)]
    written, pane = _copy(chunks, tmp_path)
    whole, whole_pane = _copy([SLOW], tmp_path)
    assert pane == whole_pane
    no_folds = [line for line in written if json.loads(line).get("type") != FOLD]
    assert no_folds == [line for line in whole if json.loads(line).get("type") != FOLD]
    assert sum(f["events"] for f in _folds(written)) == sum(f["events"] for f in _folds(whole))


def test_deltas_fold_at_most_once_per_fold_every(monkeypatch, tmp_path: Path) -> None:
    """100 deltas over 10 s (fake clock) give about 10 fold lines, not 100."""
    delta = next(line for line in SLOW.splitlines(keepends=True) if _kind(line) == "delta")
    clock = iter(k * 0.1 for k in range(1000))
    monkeypatch.setattr(streamcopy.time, "monotonic", lambda: next(clock))
    written, pane = _copy([delta] * 100, tmp_path)
    folds = _folds(written)
    assert pane == b""
    assert sum(f["events"] for f in folds) == 100
    assert 9 <= len(folds) <= 12, [f["events"] for f in folds]


def test_a_quiet_pipe_writes_the_pending_deltas(monkeypatch, tmp_path: Path) -> None:
    """:meth:`StreamCopy.idle` (the pipe was quiet for 0.2 s) writes the deltas held back
    once a fold's time has come, so a stall's last progress is on disk at most
    :data:`FOLD_EVERY` late; deltas slower than the pipe's quiet time still fold."""
    delta = next(line for line in SLOW.splitlines(keepends=True) if _kind(line) == "delta")
    now = [100.0]
    monkeypatch.setattr(streamcopy.time, "monotonic", lambda: now[0])
    sink = io.BytesIO()
    copy = StreamCopy(sink, os.open(os.devnull, os.O_WRONLY))

    def written() -> int:
        return sum(f["events"] for f in _folds(sink.getvalue().splitlines()))

    copy.feed(delta)  # after a quiet spell: at once
    for _ in range(3):  # a delta every 0.25 s, the pipe quiet for 0.2 s between them
        now[0] += 0.2
        copy.idle()
        now[0] += 0.05
        copy.feed(delta)
    assert written() == 1
    now[0] += 0.25
    copy.idle()
    assert written() == 4
    os.close(copy.pane)


@pytest.mark.parametrize("event", [False, True], ids=["line", "stream_event"])
def test_a_line_past_the_limit_passes_as_it_comes(event: bool, tmp_path: Path) -> None:
    """Nothing is held without bound: a line past :data:`LINE_LIMIT` goes on before its
    newline (a partial-message one to the file only)."""
    head = b'{"type":"stream_event","event":{"x":"' if event else b'{"type":"assistant","x":"'
    body = head + b"a" * (LINE_LIMIT + 10)
    sink = io.BytesIO()
    pane_path = tmp_path / "pane"
    pane = os.open(pane_path, os.O_WRONLY | os.O_CREAT, 0o600)
    copy = StreamCopy(sink, pane)
    copy.feed(body[: LINE_LIMIT // 2])
    assert sink.getvalue() == b""  # still a line in the making
    copy.feed(body[LINE_LIMIT // 2 :])
    assert sink.getvalue() == body
    copy.feed(b'"}}\n{"type":"result"}\n')
    copy.close()
    os.close(pane)
    assert sink.getvalue() == body + b'"}}\n{"type":"result"}\n'
    shown = pane_path.read_bytes()
    assert shown == (b'{"type":"result"}\n' if event else sink.getvalue())


def test_a_failing_file_never_stops_the_pane(tmp_path: Path) -> None:
    class Full(io.RawIOBase):
        def write(self, data: object) -> int:
            raise OSError(28, "No space left on device")

    pane_path = tmp_path / "pane"
    pane = os.open(pane_path, os.O_WRONLY | os.O_CREAT, 0o600)
    copy = StreamCopy(Full(), pane)  # type: ignore[arg-type]
    copy.feed(SLOW)
    copy.close()
    os.close(pane)
    assert pane_path.read_bytes().count(b"\n") == sum(_kind(x) == "line" for x in SLOW.splitlines())


def test_a_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    written, pane = _copy([b'{"type":"result","result":"x"}'], tmp_path)
    assert written == [b'{"type":"result","result":"x"}'] and pane == written[0]


@pytest.mark.parametrize(
    "line",
    [b"not json stream_event\n", b'["stream_event"]\n', b'{"type":"stream_event","event":3}\n'],
)
def test_odd_lines_mentioning_stream_event(line: bytes) -> None:
    assert stream_kind(line) in ("line", "event")


def test_the_wrapper_run_by_path_folds_the_stream(tmp_path: Path) -> None:
    """``python3 -I -S wrapper.py`` (as tmux runs it, without the package on sys.path)
    loads the copy from its own folder: the agent's partial messages reach the stream file
    folded and the pane (its stdout) not at all."""
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    done = _run_wrapper(task_dir, HEADLESS / "partial-slow-write.jsonl")
    assert done.returncode == 0, done.stderr
    assert b"stream_event" not in done.stdout and b'"type":"result"' in done.stdout
    lines = (task_dir / "stream.jsonl").read_bytes().splitlines()
    assert json.loads(lines[0])["type"] == streamcopy.LAUNCH_MARK
    folds = _folds(lines)
    assert sum(f["events"] for f in folds) == sum(_kind(x) == "delta" for x in SLOW.splitlines())
    assert (task_dir / "done").exists()


def _run_wrapper(task_dir: Path, fixture: Path) -> subprocess.CompletedProcess[bytes]:
    """The wrapper run by path over an agent that prints ``fixture``."""
    agent = "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read())"
    spec = {"argv": [sys.executable, "-c", agent, str(fixture)], "env": {},
            "cwd": str(task_dir), "resume_exit_codes": [], "stream": "stream.jsonl"}  # fmt: skip
    (task_dir / "launch.json").write_text(json.dumps(spec))
    return subprocess.run(
        [sys.executable, "-I", "-S", str(WRAPPER), str(task_dir)],
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_a_run_after_one_killed_mid_line_starts_on_a_line_of_its_own(tmp_path: Path) -> None:
    """Attack (SIGKILL halfway): the previous wrapper died while passing a long line on, so
    the file ends inside a line. The next run's launch marker still starts a line, and the
    reader sees the new run (before, the marker was glued to the broken line and lost)."""
    from supervisor.agents.claude.stream import StreamState

    task_dir = tmp_path / "task"
    task_dir.mkdir()
    (task_dir / "stream.jsonl").write_bytes(b'{"type":"assistant","message":{"content":"cut sh')
    assert _run_wrapper(task_dir, HEADLESS / "success.jsonl").returncode == 0
    state = StreamState()
    for line in (task_dir / "stream.jsonl").read_bytes().splitlines():
        state.feed_line(line)
    assert state.runs == 1 and state.run_ended and state.result == "DONE: wrote hello.txt"
