"""Evidence of work on Claude Code's interactive screen (:mod:`supervisor.agents.claude.evidence`)
and the adapter's screen staleness, on real CLI 2.1.328 captures (tests/fixtures/claude/screens/,
"Evidence of work" in its README): a running tool and a streaming answer are progress, an API
stall is not."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.agents import AgentView, adapter_for
from supervisor.agents.claude.evidence import (
    TOOL_SCREEN_LIMIT,
    Evidence,
    ScreenProgress,
    advanced,
    evidence_of,
    seconds_of,
)
from supervisor.agents.claude.screen import SPINNER_GLYPHS, screen_hash
from supervisor.config import AgentSpec, MonitorPolicy, ResolvedTask, TaskSpec
from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso

SCREENS = Path(__file__).resolve().parent / "fixtures" / "claude" / "screens"


def screen(name: str, ansi: bool = False) -> str:
    """The capture ``name`` (plain ``.txt``, or ``.ansi`` with escapes)."""
    return (SCREENS / f"{name}.{'ansi' if ansi else 'txt'}").read_text(encoding="utf-8")


# ------------------------------------------------------------------------------ real captures

EXPECTED = {
    # (a) Bash running 3 s apart: the tool's timer advances, the token counter stands
    "evidence_tool_running_a": Evidence(tokens=51, tools=(16.0, 16.0)),
    "evidence_tool_running_b": Evidence(tokens=51, tools=(19.0, 19.0)),
    # (b) API stall: the status line's timer advances, its token counter stands
    "evidence_stall_a": Evidence(tokens=6),
    "evidence_stall_b": Evidence(tokens=6),
    # (c) a long text answer streams (its text changes too) ...
    "evidence_text_streaming_a": Evidence(tokens=974),
    "evidence_text_streaming_b": Evidence(tokens=1100),
    # ... and a Write's input streams: only the token counter moves
    "evidence_tool_input_streaming_a": Evidence(tokens=3500),
    "evidence_tool_input_streaming_b": Evidence(tokens=3700),
    # older captures
    "working_tool_running_a": Evidence(tokens=32, tools=(11.0, 11.0)),
    "working_spinner_a": Evidence(),
    "working_stalled_retry_a": Evidence(),
    "idle_after_turn": Evidence(),
    "permission_bash": Evidence(),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_evidence_read_from_real_captures(name: str) -> None:
    assert evidence_of(screen(name)) == EXPECTED[name]
    assert evidence_of(screen(name, ansi=True)) == EXPECTED[name]


@pytest.mark.parametrize(
    ("a", "b", "work"),
    [
        ("evidence_tool_running_a", "evidence_tool_running_b", True),
        ("evidence_text_streaming_a", "evidence_text_streaming_b", True),
        ("evidence_tool_input_streaming_a", "evidence_tool_input_streaming_b", True),
        ("evidence_stall_a", "evidence_stall_b", False),
        ("working_spinner_a", "working_spinner_b", False),
        ("working_stalled_retry_a", "working_stalled_retry_b", False),
        ("api_retry_countdown_a", "api_retry_countdown_b", False),
    ],
)
def test_work_advances_and_a_stall_does_not(a: str, b: str, work: bool) -> None:
    assert advanced(evidence_of(screen(a)), evidence_of(screen(b))) is work


@pytest.mark.parametrize(
    "pair",
    [
        ("evidence_tool_running_a", "evidence_tool_running_b"),
        ("evidence_tool_input_streaming_a", "evidence_tool_input_streaming_b"),
        ("evidence_stall_a", "evidence_stall_b"),
    ],
)
def test_these_pairs_hash_alike(pair: tuple[str, str]) -> None:
    """Why the evidence is needed: normalized, a busy tool, a streaming tool input and a
    stall each look the same 3 s later."""
    assert screen_hash(screen(pair[0])) == screen_hash(screen(pair[1]))


# ------------------------------------------------------------------------------ the adapter


def _claude(tmp_path: Path, hooks: bool) -> object:
    folder = tmp_path / "task"
    folder.mkdir(exist_ok=True)
    spec = TaskSpec(name="t", prompt="p", project_dir=tmp_path)
    policy = MonitorPolicy(deadline=120.0, stale_threshold=15.0, grace_period=5.0)
    resolved = ResolvedTask(spec, "p", "claude-sonnet-4-5", policy)
    manifest = Manifest(
        task_id="t1",
        task_name="t",
        model="claude-sonnet-4-5",
        project_dir=str(tmp_path),
        session_name="t1",
        session_id="00000000-0000-4000-8000-000000000000",
        tmpdir=str(folder),
        created_at=utc_iso(),
    )
    agent = AgentSpec(kind="claude", mode="interactive", hooks=hooks)
    return adapter_for(agent, TaskDir(folder), resolved, manifest, "denied", lambda keys: None)


def _views(adapter: object, names: list[str], step: float = 10.0) -> list[AgentView]:
    views = []
    for i, name in enumerate(names):
        text = screen(name)
        views.append(adapter.observe(1000.0 + i * step, "running", lambda text=text: text))  # type: ignore[attr-defined]
    return views


@pytest.mark.parametrize("hooks", [True, False])
@pytest.mark.parametrize(
    "names",
    [
        ["evidence_tool_running_a", "evidence_tool_running_b"],
        ["evidence_tool_input_streaming_a", "evidence_tool_input_streaming_b"],
    ],
)
def test_adapter_counts_evidence_of_work_as_a_screen_change(
    tmp_path: Path, hooks: bool, names: list[str]
) -> None:
    """A Bash tool running and a Write's input streaming are progress: the screen's change
    time follows the second capture (it stayed at the first before the fix)."""
    views = _views(_claude(tmp_path, hooks), names)
    assert [v.output_mtime for v in views] == [1000.0, 1010.0]


@pytest.mark.parametrize("hooks", [True, False])
def test_adapter_keeps_an_api_stall_stale(tmp_path: Path, hooks: bool) -> None:
    views = _views(_claude(tmp_path, hooks), ["evidence_stall_a", "evidence_stall_b"] * 2)
    assert [v.output_mtime for v in views] == [1000.0] * 4


def test_a_new_run_starts_the_screen_afresh(tmp_path: Path) -> None:
    adapter = _claude(tmp_path, hooks=False)
    _views(adapter, ["evidence_stall_a"])
    adapter.new_run()  # type: ignore[attr-defined]
    views = _views(adapter, ["evidence_stall_a"], step=0)
    assert views[0].output_mtime == 1000.0


# ------------------------------------------------------------------------------ properties


def _status(glyph: str, elapsed: str, tokens: str | None) -> str:
    group = f"{elapsed} · ↓ {tokens} tokens" if tokens else elapsed
    return f"{glyph} Whirlpooling… ({group})"


_DURATIONS = st.one_of(
    st.integers(0, 59).map(lambda s: f"{s}s"),
    st.tuples(st.integers(1, 59), st.integers(0, 59)).map(lambda t: f"{t[0]}m {t[1]}s"),
    st.tuples(st.integers(1, 9), st.integers(0, 59), st.integers(0, 59)).map(
        lambda t: f"{t[0]}h {t[1]}m {t[2]}s"
    ),
)


@given(
    st.sampled_from(SPINNER_GLYPHS),
    st.sampled_from(SPINNER_GLYPHS),
    _DURATIONS,
    _DURATIONS,
    st.one_of(st.none(), st.integers(0, 999).map(str), st.just("1.2k")),
)
def test_a_turning_spinner_and_its_timer_are_never_evidence(
    g1: str, g2: str, d1: str, d2: str, tokens: str | None
) -> None:
    """An API stall: glyph and elapsed time change as they like, the counter stands."""
    base = screen("evidence_stall_a")
    old = "* Whirlpooling… (17s · ↓ 6 tokens)"
    before = evidence_of(base.replace(old, _status(g1, d1, tokens)))
    after = evidence_of(base.replace(old, _status(g2, d2, tokens)))
    assert not advanced(before, after)


@given(st.integers(0, 10**6), st.integers(1, 10**6))
def test_a_growing_token_counter_is_evidence(start: int, more: int) -> None:
    base = screen("evidence_stall_a")
    old = "* Whirlpooling… (17s · ↓ 6 tokens)"
    before = evidence_of(base.replace(old, _status("*", "17s", f"{start:,}")))
    after = evidence_of(base.replace(old, _status("✶", "20s", f"{start + more:,}")))
    assert (before.tokens, after.tokens) == (start, start + more)
    assert advanced(before, after)


@given(_DURATIONS, _DURATIONS)
def test_a_tool_timer_counts_while_it_advances_within_the_limit(d1: str, d2: str) -> None:
    base = screen("evidence_tool_running_a")
    before = evidence_of(base.replace("16s", d1))
    after = evidence_of(base.replace("16s", d2))
    t1, t2 = seconds_of(d1), seconds_of(d2)
    assert before.tools == (t1, t1) and after.tools == (t2, t2)
    assert advanced(before, after) is (t1 < t2 <= TOOL_SCREEN_LIMIT)


@given(st.text())
def test_evidence_of_never_raises(text: str) -> None:
    found = evidence_of(text)
    assert found.tokens is None or found.tokens >= 0
    progress = ScreenProgress()
    assert progress.feed(text, 5.0) == 5.0
    assert progress.feed(text, 9.0) == 5.0


def test_seconds_of() -> None:
    assert seconds_of("1h 2m 3s") == 3723.0
    assert seconds_of("250ms") == 0.25
    assert seconds_of("1m 5s") == 65.0
    with pytest.raises(ValueError, match="not a duration"):
        seconds_of("soon")


def test_hostile_captures_read_as_text() -> None:
    """Attack: escapes inside the counter, bidi and C1 controls, a 200 KB line and 100,000
    look-alike tool lines read without error; escapes hide no evidence and fake none."""
    stall = screen("evidence_stall_a")
    old = "* Whirlpooling… (17s · ↓ 6 tokens)"
    coloured = stall.replace(old, "* Whirlpooling… (17s · \x1b[2m↓ \x1b[1m1.5k\x1b[22m tokens)")
    assert evidence_of(coloured).tokens == 1500
    bidi = stall.replace(old, "* Whirl\u202epooling… (17s · ↓ 6 tokens)\x85")
    assert evidence_of(bidi).tokens == 6
    huge = "  " + "x · 1s " * 30_000 + "· 5s\n" + "  a · 1s\n" * 100_000
    found = evidence_of(huge)
    assert found.tokens is None and found.tools[0] == 5.0 and len(found.tools) == 100_001
    assert not advanced(found, found)
