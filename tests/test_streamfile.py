"""Headless progress from ``stream.jsonl`` (:mod:`supervisor.agents.claude.streamfile`): which
lines are progress, the reader's whole lines and its skipping of a line longer than a read,
and the Claude adapter's staleness stamp in headless mode (the stream's progress, never
``output.log``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.agent_adapters import _adapter, _agent

from supervisor.agents.claude import hooks
from supervisor.agents.claude.adapter import argv
from supervisor.agents.claude.stream import CARRY
from supervisor.agents.claude.streamfile import READ_CHUNK, StreamReader, is_progress
from supervisor.streamcopy import FOLD, LAUNCH_MARK

HEADLESS = Path(__file__).parent / "fixtures" / "claude" / "headless"
T0 = 1_800_000_000.0
PING = {"type": "stream_event", "event": {"type": "ping"}, "session_id": "s"}
RESULT = {"type": "result", "subtype": "success", "is_error": False, "result": "FIN"}


def _line(obj: dict) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _append(path: Path, data: bytes, mtime: float) -> None:
    with open(path, "ab") as handle:
        handle.write(data)
    os.utime(path, (mtime, mtime))


@pytest.mark.parametrize("name", ["partial-slow-write", "partial-ping-stall", "success"])
def test_every_line_of_the_cli_is_progress_but_pings(name: str) -> None:
    for raw in (HEADLESS / f"{name}.jsonl").read_bytes().splitlines():
        obj = json.loads(raw)
        ping = obj["type"] == "stream_event" and obj["event"]["type"] == "ping"
        assert is_progress(obj) is not ping, raw[:100]


@pytest.mark.parametrize(
    ("obj", "progress"),
    [
        ({"type": LAUNCH_MARK, "at": T0}, False),
        ({"type": CARRY, "runs": 1}, False),
        ({"type": FOLD, "events": 3, "keepalives": 0, "at": T0}, True),
        ({"type": FOLD, "events": 0, "keepalives": 2, "at": T0}, True),  # the run's end
        ({"type": "system", "subtype": "api_retry"}, True),
        ({"type": "tool_progress"}, True),
        ({"type": "stream_event", "event": "odd"}, True),
        (None, True),  # a stray print of the agent
    ],
)
def test_own_lines_and_keepalives_are_no_progress(obj: dict | None, progress: bool) -> None:
    assert is_progress(obj) is progress


@given(st.dictionaries(st.text(max_size=8), st.none() | st.integers() | st.text(max_size=8)))
def test_is_progress_never_raises(obj: dict) -> None:
    assert is_progress(obj) in (True, False)


def test_the_reader_returns_whole_lines_and_waits_for_a_partial_one(tmp_path: Path) -> None:
    path = tmp_path / "stream.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":')
    reader = StreamReader()
    assert reader.read(path, path.stat().st_size) == [b'{"a":1}']
    assert reader.read(path, path.stat().st_size) == []
    _append(path, b"2}\n", T0)
    assert reader.read(path, path.stat().st_size) == [b'{"b":2}']
    assert reader.offset == path.stat().st_size


def test_a_line_longer_than_a_read_is_skipped_a_chunk_per_check(tmp_path: Path) -> None:
    path = tmp_path / "stream.jsonl"
    path.write_bytes(b'{"a":1}\n' + b"x" * 25 + b"\n" + b'{"b":2}\n')
    reader = StreamReader()
    seen = []
    for _ in range(6):
        seen += reader.read(path, path.stat().st_size, chunk=10)
    assert seen == [b'{"a":1}', b'{"b":2}']
    assert not reader.skipping and reader.offset == path.stat().st_size


def test_the_reader_reads_nothing_but_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "stream.jsonl"
    os.mkfifo(fifo)
    assert StreamReader().read(fifo, 10) == []  # never blocks on the FIFO


def _headless(tmp_path: Path):
    adapter = _adapter(tmp_path, _agent("claude"))
    adapter.launch(resume=False)
    return adapter, tmp_path / "task" / hooks.STREAM, tmp_path / "task" / "output.log"


def test_headless_staleness_is_the_streams_progress_not_output_log(tmp_path: Path) -> None:
    """A stall whose only lines are pings (or whose pane changes) keeps its stamp; a fold
    of content deltas moves it (issue 21: before, headless mode used output.log's mtime,
    which the pane's every line moved)."""
    adapter, stream, output = _headless(tmp_path)
    assert adapter.observe(T0, "running", None).output_mtime == 0.0  # nothing yet: launch
    _append(stream, _line({"type": LAUNCH_MARK, "at": T0}), T0)
    _append(stream, _line({"type": "system", "subtype": "init", "session_id": "s"}), T0 + 1)
    assert adapter.observe(T0 + 2, "running", None).output_mtime == T0 + 1
    _append(stream, _line(PING), T0 + 20)  # an older wrapper, or a ping it let through
    _append(output, b"a line on the pane\n", T0 + 25)
    assert adapter.observe(T0 + 30, "running", None).output_mtime == T0 + 1
    _append(stream, _line({"type": FOLD, "events": 40, "keepalives": 1, "at": T0 + 35}), T0 + 35)
    assert adapter.observe(T0 + 36, "running", None).output_mtime == T0 + 35


def test_interactive_staleness_is_unchanged(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, _agent("claude", mode="interactive"))
    adapter.launch(resume=False)
    assert adapter.observe(T0, "running", lambda: "screen").output_mtime == T0


def test_a_line_longer_than_a_read_does_not_stop_the_adapter(tmp_path: Path) -> None:
    """A 9 MiB ``assistant`` line (a Write of a big file) before the ``result``: the run's end
    is still read (before, no newline in the 8 MiB chunk meant the reader never moved)."""
    adapter, stream, _ = _headless(tmp_path)
    big = {"type": "assistant", "message": {"content": [{"type": "text", "text": "x" * (9 << 20)}]}}
    _append(stream, _line({"type": LAUNCH_MARK, "at": T0}) + _line(big) + _line(RESULT), T0 + 5)
    assert stream.stat().st_size > READ_CHUNK
    for check in range(4):
        adapter.observe(T0 + 10 + check, "running", None)
    assert adapter.stream.run_ended and adapter.result_text() == "FIN"
    assert adapter.observe(T0 + 20, "running", None).output_mtime == T0 + 5


def test_headless_argv_asks_for_partial_messages() -> None:
    headless = argv(_agent("claude"), False, None)
    assert "--include-partial-messages" in headless
    assert headless.index("--include-partial-messages") < headless.index("--")
    assert "--include-partial-messages" not in argv(
        _agent("claude", mode="interactive"), False, None
    )


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b)),
    chunk=st.integers(min_value=2, max_value=32),
)
def test_the_reader_returns_every_line_shorter_than_a_read_in_order(
    lines: list[bytes], chunk: int, tmp_path_factory
) -> None:
    """Whatever the lines and the read size: every line shorter than a read comes back once,
    in order; every longer one is skipped; the reader reaches the end."""
    path = tmp_path_factory.mktemp("reader") / "stream.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    reader, seen = StreamReader(), []
    size = path.stat().st_size
    for _ in range(size + 2):  # each read moves at least a byte, or the end is reached
        seen += reader.read(path, size, chunk=chunk)
    assert seen == [line for line in lines if len(line) < chunk]
    assert reader.offset == size and not reader.skipping
