"""Issue 22, item 1: Claude Code's stream-json rendered readably (the pure renderer and the
bounded readers of a task folder), from the real CLI's captured lines
(tests/fixtures/claude/headless/, tests/fixtures/claude/tools/)."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.agents import readable
from supervisor.agents.claude import render
from supervisor.agents.readable import Follower, agent_kind, readable_tail, readable_text

FIXTURES = Path(__file__).parent / "fixtures" / "claude"
HEADLESS = FIXTURES / "headless"


def rendered(name: str) -> str:
    return readable_text("claude", (HEADLESS / name).read_text(encoding="utf-8"))


def raw_controls(text: str) -> list[str]:
    """Characters no view may print raw (newline and tab excepted)."""
    return [
        ch
        for ch in text
        if ch not in "\n\t" and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")
    ]


# ------------------------------------------------------------------ the renderer


def test_success_renders_text_tool_calls_results_and_the_summary() -> None:
    lines = rendered("success.jsonl").split("\n")
    assert lines == [
        "init: claude-sonnet-4-6 · session 249cfb55-c70e-422e-877a-e872bac29326",
        "I will write hello.txt.",
        "Write(hello.txt)",  # under the session's cwd: relative
        lines[3],
        "DONE: wrote hello.txt",  # the result repeats it: shown once
        "result: success · 2 turns · $0.0174 · 0.4 s",
    ]
    assert lines[3].startswith("  ⎿ File created successfully at: /tmp/") and len(lines[3]) < 140


def test_failed_and_denied_tool_calls_are_marked() -> None:
    failed = rendered("bash-failed.jsonl")
    assert "Bash(ls /nonexistent-dir-xyz > out.txt)" in failed
    assert "  ⎿ error: Exit code 2 … (2 lines)" in failed.split("\n")
    denied = rendered("bash-denied.jsonl").split("\n")
    assert "denied: Bash: Denied by supervisor: not allowed" in denied
    assert "  ⎿ error: Denied by supervisor: not allowed" in denied
    interrupted = rendered("bash-deny-interrupt.jsonl").split("\n")
    assert interrupted[-1] == "result: error_during_execution · 3 turns · $0.0088 · 0.3 s"


def test_retries_and_api_errors_are_one_line_each() -> None:
    lines = rendered("overloaded-529.jsonl").split("\n")
    assert lines[1:3] == [
        "api retry 1/2 in 0.6 s (529 overloaded)",
        "api retry 2/2 in 1.1 s (529 overloaded)",
    ]
    assert lines[3].startswith("error: API Error: 529 Overloaded.")
    assert lines[4] == "result: error · API 529 · 1 turn · $0.0000 · 2.0 s"
    assert len(lines) == 5  # the result's text repeats the synthetic message: not twice
    limited = rendered("ratelimit-429-gateway-weekly.jsonl")
    assert "rate limit: rejected (seven_day), resets 2026-11-25 14:22 UTC" in limited


def test_partial_messages_folds_pings_and_hooks_are_dropped() -> None:
    text = rendered("partial-slow-write.jsonl")
    assert "stream_event" not in text and "{" not in text
    assert text.split("\n")[-2:] == ["SLOW DONE", "result: success · 2 turns · $0.0195 · 3.1 s"]
    lines = [
        json.dumps({"type": "supervise_launch", "at": 1795000000.5}),
        json.dumps({"type": "supervise_fold", "events": 12, "keepalives": 1, "at": 1.0}),
        json.dumps({"type": "supervise_carry", "runs": 1}),
        json.dumps({"type": "stream_event", "event": {"type": "ping"}}),
        json.dumps({"type": "system", "subtype": "hook_started", "hook_name": "x"}),
        json.dumps(
            {
                "type": "system",
                "subtype": "hook_response",
                "hook_name": "Stop",
                "outcome": "error",
                "exit_code": 2,
            }
        ),
        json.dumps({"type": "brand_new_kind", "data": {"a": 1}}),
        "[supervise] agent exited with code 0",
        "",
    ]
    assert readable_text("claude", "\n".join(lines)).split("\n") == [
        "--- launch at 11:06:40 UTC ---",
        "hook Stop: error (exit 2)",
        "[brand_new_kind]",
        "[supervise] agent exited with code 0",
    ]


def test_a_long_running_tool_shows_its_heartbeats() -> None:
    text = readable_text("claude", (FIXTURES / "tools" / "bash-long.jsonl").read_text())
    assert "  … Bash running (30 s)\n  … Bash running (60 s)" in text


def test_no_fixture_renders_json_and_generic_output_is_shown_as_it_is() -> None:
    for path in sorted(FIXTURES.glob("*/*.jsonl")):
        text = readable_text("claude", path.read_text(encoding="utf-8"))
        assert '{"' not in text and '"type"' not in text, path.name
    raw = (HEADLESS / "success.jsonl").read_text(encoding="utf-8").rstrip("\n")
    assert readable_text("generic", "plain\n\tindented\n") == "plain\n\tindented\n"
    assert readable_text("generic", raw).split("\n")[2].startswith('{"type":"system"')


def test_tool_call_lines_per_tool() -> None:
    assert render.tool_call("Bash", {"command": "pytest -q\nmore"}) == "Bash(pytest -q …)"
    assert render.tool_call("Read", {"file_path": "/w/src/a.py"}, "/w") == "Read(src/a.py)"
    assert render.tool_call("Edit", {"file_path": "/x/a.py"}, "/w") == "Edit(/x/a.py)"
    assert render.tool_call("mcp__s__t", {"n": 3, "q": "find me"}) == "mcp__s__t(find me)"
    assert render.tool_call("TodoWrite", {"todos": []}) == "TodoWrite()"
    long = render.tool_call("Bash", {"command": "x" * 10_000})
    assert len(long) <= render.MAX_ARG + len("Bash()") and long.endswith("…)")


def test_hostile_text_is_escaped_and_cut() -> None:
    evil = "\x1b]52;c;cHduZWQ=\x07 \u009b31m \u202e bidi"
    lines = [
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {"type": "text", "text": evil + "\n" + "y" * 100_000},
                        {"type": "tool_use", "name": "Bash\x1b[2J", "input": {"command": evil}},
                    ]
                },
            }
        ),
        json.dumps(
            {
                "type": "user",
                "message": {
                    "content": [
                        {"type": "tool_result", "content": [{"type": "text", "text": evil}]}
                    ]
                },
            }
        ),
        "not json " + evil,
    ]
    text = readable_text("claude", "\n".join(lines))
    assert not raw_controls(text), text
    assert "\\x1b]52;c;cHduZWQ=\\x07 \\u009b31m \\u202e bidi" in text
    assert max(len(line) for line in text.split("\n")) <= render.MAX_LINE
    assert "Bash\\x1b[2J(" in text


#: Stream-json-shaped objects with hostile values: the types the renderer knows, any field.
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_OBJECTS = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "assistant",
                "user",
                "result",
                "system",
                "tool_progress",
                "rate_limit_event",
                "supervise_launch",
                "stream_event",
                "x",
            ]
        )
    },
    optional={
        "subtype": st.sampled_from(
            ["init", "api_retry", "permission_denied", "hook_response", "other"]
        )
        | _VALUES,
        "message": st.fixed_dictionaries(
            {
                "content": st.lists(
                    st.dictionaries(
                        st.sampled_from(["type", "text", "name", "input", "content", "is_error"]),
                        st.sampled_from(["text", "tool_use", "tool_result"]) | _VALUES,
                        max_size=5,
                    ),
                    max_size=3,
                )
                | _VALUES
            }
        ),
        **{
            k: _VALUES
            for k in (
                "result",
                "is_error",
                "num_turns",
                "total_cost_usd",
                "duration_ms",
                "attempt",
                "retry_delay_ms",
                "at",
                "rate_limit_info",
                "elapsed_time_seconds",
                "cwd",
            )
        },
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000), st.lists(_OBJECTS, max_size=6))
def test_any_input_renders_safely(data: bytes, objects: list[dict]) -> None:
    """Any bytes and any stream-shaped object: no exception, nothing raw, bounded lines."""
    noise = data.decode("utf-8", errors="surrogateescape")
    raw = noise + "\n" + "\n".join(json.dumps(o) for o in objects)
    for kind in ("claude", "generic"):
        text = readable_text(kind, raw)
        assert not raw_controls(text), text
        assert all(len(line) <= render.MAX_LINE for line in text.split("\n"))
        assert text.count("\n") <= raw.count("\n") * (render.MAX_TEXT_LINES + 1) + 1


# ------------------------------------------------------------------ task folders


def write_task(folder: Path, output: bytes, manifest: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "output.log").write_bytes(output)
    if manifest is not None:
        (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def test_the_kind_comes_from_the_manifest_or_the_folder(tmp_path: Path) -> None:
    assert agent_kind(write_task(tmp_path / "a", b"", {"claude": {"result": None}})) == "claude"
    assert agent_kind(write_task(tmp_path / "b", b"", {"agent": "generic"})) == "generic"
    assert agent_kind(write_task(tmp_path / "c", b"", {"agent": {"kind": "claude"}})) == "claude"
    (write_task(tmp_path / "d", b"") / "stream.jsonl").write_bytes(b"")
    assert agent_kind(tmp_path / "d") == "claude"
    assert agent_kind(write_task(tmp_path / "e", b"", {"claude": None, "agent": 3})) == "generic"
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "manifest.json").write_bytes(b"\xff{[not json")
    assert agent_kind(tmp_path / "f") == "generic"
    assert agent_kind(tmp_path / "missing") == "generic"


def test_tail_of_a_claude_task_is_rendered(tmp_path: Path) -> None:
    raw = (HEADLESS / "success.jsonl").read_bytes() + b"[supervise] agent exited with code 0\n"
    folder = write_task(tmp_path / "t", raw, {"claude": {}})
    assert readable_tail(folder, 3).split("\n") == [
        "DONE: wrote hello.txt",
        "result: success · 2 turns · $0.0174 · 0.4 s",
        "[supervise] agent exited with code 0",
    ]
    assert readable.last_line(folder) == "result: success · 2 turns · $0.0174 · 0.4 s"
    write_task(folder, b"x" * 5000 + b"\n[supervise] agent exited with code 0\n")
    assert readable.last_line(folder) == "x" * 299 + "…"
    assert readable_tail(folder, 0) == "" and readable_tail(tmp_path / "none", 5) == ""


def test_a_50_mb_log_is_read_by_its_end_only(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "big"
    folder.mkdir()
    with open(folder / "output.log", "wb") as handle:
        handle.truncate(50 * 1024 * 1024)  # sparse: 50 MB of NULs before the stream
        handle.seek(0, os.SEEK_END)
        handle.write(b"\n" + (HEADLESS / "success.jsonl").read_bytes())
    (folder / "stream.jsonl").write_bytes(b"")
    read: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: read.append(n) or real(fd, n, at))
    assert readable_tail(folder, 2).endswith("result: success · 2 turns · $0.0174 · 0.4 s")
    assert sum(read) <= readable.TAIL_MAX
    read.clear()
    # More lines than the stream has: the 50 MB line of NULs is cut by the window (not
    # shown), and the reads stay bounded.
    assert readable_tail(folder, 10_000).startswith("init: claude-sonnet-4-6")
    assert sum(read) <= 2 * readable.TAIL_MAX


def test_a_rotated_log_and_a_huge_line(tmp_path: Path) -> None:
    lines = (HEADLESS / "success.jsonl").read_bytes().splitlines(keepends=True)
    folder = write_task(tmp_path / "r", b"".join(lines[-2:]), {"claude": {}})
    (folder / "output.log.1").write_bytes(b"".join(lines[:-2]))
    assert readable_tail(folder, 6).split("\n")[:2] == [
        "init: claude-sonnet-4-6 · session 249cfb55-c70e-422e-877a-e872bac29326",
        "I will write hello.txt.",
    ]
    big = {
        "type": "assistant",
        "message": {
            "content": [
                {
                    "type": "tool_use",
                    "name": "Write",
                    "input": {"file_path": "big.txt", "content": "z" * 3_000_000},
                }
            ]
        },
    }
    (folder / "output.log").write_bytes(json.dumps(big).encode() + b"\ntail line\n")
    assert readable_tail(folder, 2) == "Write(big.txt)\ntail line"
    huge = b'{"type":"assistant","message":"' + b"q" * (render.MAX_PARSE + 10) + b'"}\n'
    (folder / "output.log").write_bytes(b"before\n" + huge + b"after\n")
    (folder / "output.log.1").unlink()
    out = readable_tail(folder, 3)
    assert out.split("\n")[-1] == "after" and '{"' not in out


def test_a_fifo_or_a_directory_in_place_of_the_log_blocks_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "fifo"
    folder.mkdir()
    os.mkfifo(folder / "output.log")
    assert readable_tail(folder, 5) == "" and readable.last_line(folder) is None
    assert Follower(folder, "claude", 0).read() == ""
    (tmp_path / "dir" / "output.log").mkdir(parents=True)
    assert readable_tail(tmp_path / "dir", 5) == ""


def test_the_follower_renders_whole_lines_and_follows_a_rotation(tmp_path: Path) -> None:
    lines = (HEADLESS / "success.jsonl").read_bytes().splitlines(keepends=True)
    folder = write_task(tmp_path / "f", b"", {"claude": {}})
    log = folder / "output.log"
    follower = Follower(folder, "claude")
    with open(log, "ab") as handle:
        handle.write(b"".join(lines[:3]) + lines[3][:50])  # hooks, init, half a line
    init = "init: claude-sonnet-4-6 · session 249cfb55-c70e-422e-877a-e872bac29326\n"
    assert follower.read() == init
    with open(log, "ab") as handle:
        handle.write(lines[3][50:])
    assert follower.read() == "I will write hello.txt.\n"
    with open(log, "ab") as handle:
        handle.write(lines[4][:10])  # the tool call, cut by a rotation below
    os.rename(log, folder / "output.log.1")
    with open(folder / "output.log.1", "ab") as handle:
        handle.write(lines[4][10:])
    log.write_bytes(b"".join(lines[5:]) + b"no newline yet")
    out = follower.read()
    assert out.startswith("Write(hello.txt)\n  \u23bf File created")
    assert out.endswith("DONE: wrote hello.txt\nresult: success · 2 turns · $0.0174 · 0.4 s\n")
    assert follower.read() == "" and follower.close() == "no newline yet\n"


@pytest.mark.parametrize("kind", ["claude", "generic"])
def test_the_follower_holds_a_huge_line_by_its_head(tmp_path: Path, kind: str) -> None:
    folder = write_task(tmp_path / kind, b"")
    follower = Follower(folder, kind, 0)
    with open(folder / "output.log", "ab") as handle:
        handle.write(b'{"type":"assistant"' + b"x" * (render.MAX_PARSE + 5))
    assert follower.read() == "" and len(follower.partial) <= readable.FOLLOW_CHUNK
    with open(folder / "output.log", "ab") as handle:
        handle.write(b"\nnext\n")
    first, second, _ = follower.read().split("\n")
    assert first.startswith("[a stream line of 8.4 MB") and second == "next"


def test_hostile_json_shapes_render_as_text_or_facts() -> None:
    deep = '{"type":"assistant","message":' + "[" * 100_000 + "]" * 100_000 + "}"
    huge_int = '{"type":"result","num_turns":' + "9" * 5000 + "}"
    odd = json.dumps(
        {
            "type": "result",
            "total_cost_usd": 1e308 * 10,
            "duration_ms": -1,
            "num_turns": True,
            "subtype": ["x"],
            "result": {"a": 1},
        }
    )
    lines = readable_text("claude", "\n".join([deep, huge_int, odd])).split("\n")
    assert lines[0].startswith('{"type":"assistant","message":[[[') and len(lines[0]) <= 2000
    assert lines[1].startswith('{"type":"result","num_turns":999')  # not a number Python takes
    assert lines[2] == "result: ended · -0.0 s"


def test_the_follower_starts_over_after_a_truncation(tmp_path: Path) -> None:
    folder = write_task(tmp_path / "t", b"one\ntwo\n")
    follower = Follower(folder, "generic", 0)
    assert follower.read() == "one\ntwo\n"
    (folder / "output.log").write_bytes(b"new\n")  # truncated in place, then written
    assert follower.read() == "new\n"


def test_the_last_line_reads_a_bounded_end(tmp_path: Path, monkeypatch) -> None:
    """A Claude task writing a 6 MB line (a big Write not finished yet): the one-line views
    read at most ``LAST_LINE_MAX`` bytes of it and show the line before it, or nothing."""
    folder = write_task(tmp_path / "w", b"earlier\n" + b'{"type":"assistant",' + b"x" * 6_000_000)
    (folder / "stream.jsonl").write_bytes(b"")
    read: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: read.append(n) or real(fd, n, at))
    assert readable.last_line(folder) is None
    assert sum(read) <= 2 * readable.LAST_LINE_MAX
    assert readable_tail(folder, 1) == "earlier"  # a tail reads further
