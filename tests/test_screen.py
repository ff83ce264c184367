"""Tests for :mod:`supervisor.agents.claude.screen` against real Claude Code 2.1.328 screens.

The fixtures are in ``tests/fixtures/claude/screens/`` (see the README there for how each was
captured).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.agents.claude.screen import (
    SPINNER_GLYPHS,
    PermissionPrompt,
    find_permission_prompt,
    normalize,
    screen_hash,
    strip_ansi,
)

SCREENS = Path(__file__).resolve().parent / "fixtures" / "claude" / "screens"
ALL = sorted(p.stem for p in SCREENS.glob("*.txt"))


def screen(name: str, ansi: bool = False) -> str:
    """The capture ``name`` (plain ``.txt``, or ``.ansi`` with escapes)."""
    return (SCREENS / f"{name}.{'ansi' if ansi else 'txt'}").read_text(encoding="utf-8")


# ------------------------------------------------------------------------------ fixtures


def test_fixture_set_is_complete() -> None:
    expected = {
        "working_spinner_a",
        "working_spinner_b",
        "permission_bash",
        "permission_write_create",
        "idle_after_turn",
        "after_no_bash",
        "api_retry_countdown_a",
    }
    assert expected <= set(ALL)
    for name in ALL:
        assert (SCREENS / f"{name}.ansi").is_file(), name
        assert "\x1b[" in screen(name, ansi=True), name
        assert "\x1b" not in screen(name), name


@pytest.mark.parametrize("name", ALL)
def test_plain_and_ansi_captures_normalize_alike(name: str) -> None:
    assert normalize(screen(name)) == normalize(screen(name, ansi=True))
    assert "\x1b" not in normalize(screen(name, ansi=True))


def test_strip_ansi_removes_sgr_and_osc() -> None:
    assert strip_ansi("\x1b[38;5;246mgrey\x1b[39m \x1b]8;;http://x\x07link\x1b]8;;\x07") == (
        "grey link"
    )
    assert strip_ansi("a\x1b7b\x1b[?25lc\r\n") == "abc\n"


# ------------------------------------------------------------------------------ normalize


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("working_spinner_a", "working_spinner_b"),  # ✽ (18s) vs ✶ (20s)
        ("working_stalled_retry_a", "working_stalled_retry_b"),  # will retry in 4m 10s / 4m 8s
        ("api_retry_countdown_a", "api_retry_countdown_b"),  # retrying in 7s / 6s
        ("api_retry_429_message_a", "api_retry_429_message_b"),  # 429 ... retrying in 8s / 6s
        ("working_tool_running_a", "working_tool_running_b"),  # tool timer, blinking bullet
    ],
)
def test_stalled_captures_hash_equal(a: str, b: str) -> None:
    assert screen(a) != screen(b)  # the raw screens did change
    assert screen_hash(screen(a)) == screen_hash(screen(b))
    assert screen_hash(screen(a, ansi=True)) == screen_hash(screen(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("working_streaming_a", "working_streaming_b"),  # new text streamed in
        ("working_spinner_notice", "working_spinner_a"),  # a notice went away
        ("idle_after_turn", "working_spinner_a"),  # idle vs working
        ("working_spinner_b", "working_stalled_retry_a"),  # spinner -> "Waiting for API"
        ("api_retry_countdown_b", "api_retry_429_message_a"),  # attempt 1/2 -> 2/2
        ("permission_bash", "after_no_bash"),
        ("permission_write_create", "idle_after_approvals"),
    ],
)
def test_real_changes_hash_differently(a: str, b: str) -> None:
    assert screen_hash(screen(a)) != screen_hash(screen(b))


def test_normalize_details() -> None:
    text = screen("working_spinner_a")
    assert "✽ Wibbling… (18s)" in text
    normalized = normalize(text)
    assert "✻ Wibbling…" in normalized.split("\n")
    assert "18s" not in normalized
    assert normalized == normalize(normalized)
    assert not normalized.endswith("\n")
    assert all(line == line.rstrip() for line in normalized.split("\n"))
    streaming = normalize(screen("working_streaming_a"))
    assert "310 tokens" not in streaming and "✻ Newspapering…" in streaming
    stalled = normalize(screen("working_stalled_retry_a"))
    assert "will retry in <t> · check your network" in stalled
    tool = normalize(screen("working_tool_running_b"))
    assert "  Writing a file · <t>" in tool.split("\n")
    assert "echo done > slept.txt (<t>)" in tool


@pytest.mark.parametrize("glyph", list(SPINNER_GLYPHS))
def test_every_spinner_glyph_is_volatile(glyph: str) -> None:
    base = screen("working_spinner_a")
    assert screen_hash(base.replace("✽ Wibbling… (18s)", f"{glyph} Wibbling… (1m 40s)")) == (
        screen_hash(base)
    )


def test_thinking_and_token_counters_are_volatile() -> None:
    a = "✢ Pondering… (12s · ↓ 1.2k tokens · thinking)\n"
    b = "✳ Pondering… (1m 3s · ↓ 2.4k tokens · still thinking)\n"
    assert normalize(a) == normalize(b) == "✻ Pondering…"


def test_ordinary_text_changes_are_kept() -> None:
    base = screen("idle_after_turn")
    changed = base.replace("Finished the stall.", "Finished the stalls.")
    assert screen_hash(base) != screen_hash(changed)


# ------------------------------------------------------------------------------ prompts


def prompt(name: str, ansi: bool = False) -> PermissionPrompt:
    found = find_permission_prompt(screen(name, ansi=ansi))
    assert found is not None, name
    return found


@pytest.mark.parametrize("ansi", [False, True])
def test_bash_prompt(ansi: bool) -> None:
    p = prompt("permission_bash", ansi)
    assert (p.tool, p.title, p.detail) == ("Bash", "Bash command", "echo hi > out.txt")
    assert p.subtitle == "write a file"
    assert p.question == "Do you want to proceed?"
    assert [n for n, _ in p.choices] == [1, 2, 3, 4]
    assert p.choices[0] == (1, "Yes") and p.choices[3] == (4, "No")
    assert p.choices[1][1].startswith("Yes, and always allow access to ")
    assert p.approve_keys() == ["1"]
    assert p.deny_keys() == ["4"]
    assert not p.cropped


def test_bash_prompt_with_three_choices_denies_with_3() -> None:
    p = prompt("permission_bash_three_choices")
    assert p.tool == "Bash"
    assert p.detail == "for i in 1 2 3; do\\\n  echo line $i >> multi.txt\\\ndone"
    assert [label for _, label in p.choices][-1] == "No"
    assert p.deny_keys() == ["3"]
    assert p.approve_keys() == ["1"]


def test_long_bash_prompt_reads_title_above_the_window() -> None:
    p = prompt("permission_bash_long")
    assert p.tool == "Bash"
    assert p.detail.split("\n")[0] == "echo l1 > long.txt"
    assert p.detail.split("\n")[-1] == "echo l12 >> long.txt"
    assert len(p.detail.split("\n")) == 12


def test_cropped_prompt_in_small_pane() -> None:
    p = prompt("permission_bash_cropped_80x16")
    assert p.cropped and p.title is None and p.tool is None
    assert p.detail.split("\n")[-1] == "echo l12 >> long.txt"
    assert p.choices[1][1].endswith("and echo l5 commands in /tmp/helperB/small/proj")
    assert p.deny_keys() == ["4"]


@pytest.mark.parametrize(
    ("name", "title", "question"),
    [
        ("permission_write_create", "Create file", "Do you want to create hello.txt?"),
        ("permission_write_overwrite", "Overwrite file", "Do you want to overwrite hello.txt?"),
    ],
)
def test_write_prompts(name: str, title: str, question: str) -> None:
    p = prompt(name)
    assert (p.tool, p.title, p.detail, p.question) == ("Write", title, "hello.txt", question)
    assert p.choices == (
        (1, "Yes"),
        (
            2,
            "Yes, and switch to accept edits (auto-approve file edits and common file "
            "commands) for this session (shift+tab)",
        ),
        (3, "No"),
    )
    assert p.approve_keys() == ["1"]
    assert p.deny_keys() == ["3"]


def test_edit_prompt() -> None:
    p = prompt("permission_edit")
    assert (p.tool, p.title, p.detail) == ("Edit", "Edit file", "hello.txt")
    assert p.question == "Do you want to make this edit to hello.txt?"


@pytest.mark.parametrize(
    "name",
    [
        "idle_after_turn",
        "idle_after_approvals",
        "after_no_bash",
        "after_no_write",
        "after_esc_write",
        "working_spinner_a",
        "working_tool_running_a",
        "api_error_429_no_retry",
        "agent_text_fake_prompt",
    ],
)
def test_no_prompt_on_other_screens(name: str) -> None:
    assert find_permission_prompt(screen(name)) is None
    assert find_permission_prompt(screen(name, ansi=True)) is None


def test_agent_text_quoting_a_dialog_is_not_a_prompt() -> None:
    text = screen("agent_text_fake_prompt")
    assert "Do you want to proceed?" in text and "Esc to cancel · Tab to amend" in text
    assert find_permission_prompt(text) is None
    assert find_permission_prompt(text, last_lines=100) is None


def test_prompt_scrolled_above_last_lines_is_not_matched() -> None:
    text = screen("permission_bash")
    assert find_permission_prompt(text) is not None
    # More output under the dialog pushes it out of the window of the last lines.
    pushed = text.rstrip("\n") + "\n" + "\n".join(f"  line {i}" for i in range(20)) + "\n"
    assert find_permission_prompt(pushed) is None
    # Even a footer-like last line does not revive a dialog whose question is out of reach.
    revived = pushed + " Esc to cancel · Tab to amend\n"
    assert find_permission_prompt(revived) is None
    assert find_permission_prompt(text, last_lines=5) is None  # question is 6th from the end
    assert find_permission_prompt(text, last_lines=6) is not None


def test_plain_text_mentioning_the_question_mid_screen() -> None:
    text = screen("idle_after_turn").replace(
        "● Finished the stall.", "● Do you want to proceed? I can delete it.\n  1. Yes\n  2. No"
    )
    assert find_permission_prompt(text) is None


def test_keys_without_yes_or_no_labels() -> None:
    p = PermissionPrompt(
        tool=None, title="Tool use", detail="", question="Do you want to proceed?",
        choices=((1, "Allow"), (2, "Deny")),
    )  # fmt: skip
    assert p.approve_keys() == ["Enter"]
    assert p.deny_keys() == ["Escape"]


# ------------------------------------------------------------------------------ properties


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_normalize_idempotent_and_total(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once
    assert len(screen_hash(text)) == 64
    find_permission_prompt(text)


_screen_alphabet = st.sampled_from(
    [
        *"abc 01:()·✢✳✶✻✽*●⏺❯│╌─↓↑…\n\x1b[m;?",
        *["Esc to cancel", "Do you want to proceed?", " 1. Yes", " 2. No"],
        *["retrying in 5s", "(3s)", " · 4m", "↓ 3 tokens", "still thinking", "\xa0"],
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_screen_alphabet, max_size=80).map("".join))
def test_normalize_idempotent_on_screen_like_text(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once
    find_permission_prompt(text, last_lines=5)
