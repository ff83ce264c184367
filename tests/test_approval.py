"""Tests of the permission policy (:mod:`supervisor.policy.approval`): ordered rules, first match
wins, ``re.search`` semantics, default deny, the circuit breaker, request subjects and
the ``PermissionRequest`` hook's answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.config import ApprovalRule
from supervisor.policy.approval import (
    MAX_SUBJECT,
    Ruling,
    decide,
    hook_answer,
    rule_matches,
    subject,
)

HEADLESS = Path(__file__).parent / "fixtures" / "claude" / "headless"
DEFAULT = "supervise: not allowed by the task's approval rules"
ACTIONS = ("approve", "deny", "escalate")


def rule(tool: str, match: str | None = None, action: str = "approve", message=None):
    return ApprovalRule(tool=tool, match=match, action=action, message=message)


def ask(rules, tool: str, tool_input, denials: int = 0, max_denials: int = 3) -> Ruling:
    return decide(rules, tool, tool_input, denials, max_denials, DEFAULT)


def bash(command: str) -> dict:
    return {"command": command, "description": "run it"}


# ============================================================================ ordering


class TestFirstMatchWins:
    def test_earlier_rule_decides(self):
        rules = [rule("Bash", "^git ", "approve"), rule("Bash", "git push", "deny", "no push")]
        ruling = ask(rules, "Bash", bash("git push origin main"))
        assert ruling == Ruling("approve", 1, "rule 1 (Bash ~ /^git /)", None)

    def test_reversed_order_reverses_the_answer(self):
        rules = [rule("Bash", "git push", "deny", "no push"), rule("Bash", "^git ", "approve")]
        ruling = ask(rules, "Bash", bash("git push origin main"))
        assert ruling == Ruling("deny", 1, "rule 1 (Bash ~ /git push/)", "no push")
        assert ask(rules, "Bash", bash("git status")) == Ruling(
            "approve", 2, "rule 2 (Bash ~ /^git /)", None
        )

    def test_index_counts_the_combined_list_from_one(self):
        rules = [rule("Write", "\\.py$"), rule("Edit"), rule("Bash", "^ls$", "escalate")]
        ruling = ask(rules, "Bash", bash("ls"))
        assert ruling == Ruling("escalate", 3, "rule 3 (Bash ~ /^ls$/)", None)

    def test_rule_without_match_covers_every_request_of_its_tool(self):
        rules = [rule("Edit", action="deny", message="read only")]
        ruling = ask(rules, "Edit", {"file_path": "/anything", "old_string": "a"})
        assert ruling == Ruling("deny", 1, "rule 1 (Edit)", "read only")

    def test_non_matching_rules_are_skipped(self):
        rules = [rule("Write"), rule("Bash", "^rm ", "deny"), rule("Bash", "^ls")]
        assert ask(rules, "Bash", bash("ls -la")).rule == 3


class TestToolNames:
    def test_star_matches_any_tool(self):
        rules = [rule("*", "secret", "deny", "no secrets"), rule("*")]
        assert ask(rules, "Write", {"file_path": "/p/secret.txt"}).rule == 1
        assert ask(rules, "WebFetch", {"url": "https://secret.example"}).rule == 1
        assert ask(rules, "Read", {"file_path": "/p/README"}) == Ruling(
            "approve", 2, "rule 2 (*)", None
        )
        assert ask(rules, "SomeFutureTool", {"x": 1}).action == "approve"
        assert ask(rules, "", None).action == "approve"

    @pytest.mark.parametrize("tool", ["bash", "BASH", "Bash ", "Bas", "mcp__x__Bash"])
    def test_tool_names_match_exactly(self, tool):
        assert ask([rule("Bash")], tool, bash("ls")).by == "default"

    def test_star_in_a_regex_is_a_regex(self):
        # Only the ``tool`` field treats "*" specially.
        assert rule_matches(rule("Bash", ".*"), "Bash", "")
        assert not rule_matches(rule("Bash", ".*"), "Write", "")


class TestRegexSemantics:
    @pytest.mark.parametrize(
        ("pattern", "command", "matches"),
        [
            ("rm", "sudo rm -rf /tmp/x", True),  # search, not match: anywhere
            ("^rm", "sudo rm -rf /tmp/x", False),
            ("^rm", "rm -rf /tmp/x", True),
            ("^ls$", "ls", True),
            ("^ls$", "ls -la", False),
            ("^ls( -[a-z]+)?$", "ls -la", True),
            ("-rf$", "rm -rf", True),
            ("RM", "rm -rf", False),  # case-sensitive
            ("(?i)RM", "rm -rf", True),
            (r"\bpytest\b", "python -m pytest -q", True),
            (r"\bpytest\b", "pytester", False),
        ],
    )
    def test_search(self, pattern, command, matches):
        assert rule_matches(rule("Bash", pattern), "Bash", command) is matches
        expected = "approve" if matches else "deny"
        assert ask([rule("Bash", pattern)], "Bash", bash(command)).action == expected

    def test_match_is_searched_in_the_subject_not_the_whole_input(self):
        # Write's subject is the file path; its content does not count.
        rules = [rule("Write", "secret", "deny", "no")]
        ruling = ask(rules, "Write", {"file_path": "/p/a.txt", "content": "secret"})
        assert ruling.by == "default"

    def test_invalid_regex_is_refused_by_the_config(self):
        with pytest.raises(ValueError, match="regular expression"):
            rule("Bash", "(unclosed")


# ============================================================================ default, messages


class TestDefaultAndMessages:
    def test_no_rules_denies_with_the_default_message(self):
        assert ask([], "Bash", bash("ls")) == Ruling("deny", None, "default", DEFAULT)

    def test_no_matching_rule_denies_with_the_default_message(self):
        rules = [rule("Write"), rule("Bash", "^git ")]
        assert ask(rules, "Bash", bash("make")) == Ruling("deny", None, "default", DEFAULT)

    def test_deny_rule_message_is_told(self):
        rules = [rule("Bash", "^rm ", "deny", "do not delete files")]
        assert ask(rules, "Bash", bash("rm x")).message == "do not delete files"

    @pytest.mark.parametrize("message", [None, ""])
    def test_deny_rule_without_message_uses_the_default(self, message):
        rules = [rule("Bash", "^rm ", "deny", message)]
        assert ask(rules, "Bash", bash("rm x")) == Ruling(
            "deny", 1, "rule 1 (Bash ~ /^rm /)", DEFAULT
        )

    @pytest.mark.parametrize("action", ["approve", "escalate"])
    def test_no_message_unless_denied(self, action):
        rules = [rule("Bash", "^ls", action, "never shown")]
        assert ask(rules, "Bash", bash("ls")).message is None


# ============================================================================ compound Bash


class TestCompoundBash:
    @pytest.mark.parametrize(
        "command",
        [
            "ls; rm -rf ~",
            "ls && rm -rf ~",
            "ls || rm -rf ~",
            "ls | sh",
            "ls & rm -rf ~",
            "ls `rm -rf ~`",
            "ls $(rm -rf ~)",
            "ls\nrm -rf ~",
        ],
    )
    def test_compound_command_is_never_approved_by_a_rule(self, command):
        rules = [rule("Bash", r"^ls\b"), rule("*")]
        assert ask(rules, "Bash", bash(command)) == Ruling("deny", None, "default", DEFAULT)

    def test_compound_command_still_meets_deny_and_escalate_rules(self):
        rules = [rule("Bash", "^ls"), rule("Bash", "rm -rf", "deny", "no"), rule("Bash")]
        assert ask(rules, "Bash", bash("ls; rm -rf ~")) == Ruling(
            "deny", 2, "rule 2 (Bash ~ /rm -rf/)", "no"
        )
        rules = [rule("Bash", "^ls"), rule("Bash", action="escalate")]
        assert ask(rules, "Bash", bash("ls | wc -l")).action == "escalate"

    def test_simple_command_is_approved(self):
        assert ask([rule("Bash", r"^ls\b")], "Bash", bash("ls -la > out.txt")).action == "approve"

    def test_only_bash_is_checked_for_compound_syntax(self):
        ruling = ask([rule("Write")], "Write", {"file_path": "/p/a;b|c&d"})
        assert ruling.action == "approve"

    def test_compound_syntax_past_the_subject_limit_is_still_seen(self):
        command = "ls " + "a" * MAX_SUBJECT + "; rm -rf ~"
        assert ask([rule("Bash", r"^ls\b")], "Bash", bash(command)).action != "approve"

    @pytest.mark.parametrize("command", ["ls >(rm -rf ~)", "ls <(rm -rf ~)"])
    def test_process_substitution_is_compound(self, command):
        assert ask([rule("Bash", r"^ls\b")], "Bash", bash(command)).action != "approve"


# ============================================================================ circuit breaker


class TestCircuitBreaker:
    @pytest.mark.parametrize(("denials", "max_denials"), [(3, 3), (4, 3), (1, 1), (100, 5)])
    def test_at_the_threshold_everything_escalates(self, denials, max_denials):
        rules = [rule("Bash", "^ls"), rule("Bash", "^rm", "deny", "no")]
        for command, rule_index in (("ls", 1), ("rm x", 2), ("make", None)):
            ruling = ask(rules, "Bash", bash(command), denials, max_denials)
            assert ruling.action == "escalate"
            assert ruling.by.startswith("circuit breaker")
            assert f"{denials} consecutive" in ruling.by
            assert ruling.rule == rule_index
            assert ruling.message is None

    @pytest.mark.parametrize(("denials", "max_denials"), [(0, 3), (2, 3), (0, 1), (4, 5)])
    def test_below_the_threshold_rules_decide(self, denials, max_denials):
        rules = [rule("Bash", "^ls")]
        assert ask(rules, "Bash", bash("ls"), denials, max_denials).action == "approve"
        assert ask(rules, "Bash", bash("rm"), denials, max_denials).by == "default"

    def test_breaker_says_what_the_rules_said(self):
        ruling = ask([rule("Bash", "^ls")], "Bash", bash("ls"), 3, 3)
        assert ruling.by == (
            "circuit breaker (3 consecutive denials or failures; "
            "rule 1 (Bash ~ /^ls/) said approve)"
        )
        ruling = ask([], "Bash", bash("ls"), 3, 3)
        assert ruling.by.endswith("default said deny)")

    def test_an_escalate_rule_keeps_its_own_name(self):
        ruling = ask([rule("Bash", action="escalate")], "Bash", bash("ls"), 9, 3)
        assert ruling == Ruling("escalate", 1, "rule 1 (Bash)", None)


# ============================================================================ subject


class TestSubject:
    @pytest.mark.parametrize(
        ("tool", "tool_input", "expected"),
        [
            ("Bash", {"command": "ls -la", "description": "list"}, "ls -la"),
            ("Write", {"file_path": "/p/a.txt", "content": "x"}, "/p/a.txt"),
            ("Edit", {"file_path": "/p/b.py", "old_string": "a", "new_string": "b"}, "/p/b.py"),
            ("MultiEdit", {"file_path": "/p/c.py", "edits": []}, "/p/c.py"),
            ("Read", {"file_path": "/etc/passwd"}, "/etc/passwd"),
            ("NotebookEdit", {"notebook_path": "/p/n.ipynb"}, "/p/n.ipynb"),
            ("WebFetch", {"url": "https://example.com/x", "prompt": "p"}, "https://example.com/x"),
            ("WebSearch", {"query": "supervisord exitcodes"}, "supervisord exitcodes"),
            ("Glob", {"pattern": "**/*.py"}, "**/*.py"),
            ("Grep", {"pattern": "TODO", "path": "/p"}, "TODO"),
        ],
    )
    def test_known_tools(self, tool, tool_input, expected):
        assert subject(tool, tool_input) == expected

    def test_unknown_tool_is_its_input_as_sorted_json(self):
        tool_input = {"b": 1, "a": ["x", None, True], "ü": "é"}
        text = subject("mcp__github__create_issue", tool_input)
        assert text == json.dumps(tool_input, sort_keys=True, ensure_ascii=False)
        assert text == '{"a": ["x", null, true], "b": 1, "ü": "é"}'

    @pytest.mark.parametrize(
        ("tool_input", "expected"),
        [
            (None, "null"),
            ("ls -la", '"ls -la"'),
            (["ls"], '["ls"]'),
            (42, "42"),
            (1.5, "1.5"),
            (True, "true"),
        ],
    )
    def test_non_dict_input(self, tool_input, expected):
        assert subject("Bash", tool_input) == expected
        assert subject("Unknown", tool_input) == expected

    @pytest.mark.parametrize("value", [None, 5, ["ls"], {"cmd": "ls"}])
    def test_known_tool_without_a_string_subject_falls_back_to_json(self, value):
        tool_input = {"command": value}
        assert subject("Bash", tool_input) == json.dumps(tool_input, sort_keys=True)
        assert subject("Bash", {"cmd": "ls"}) == '{"cmd": "ls"}'

    def test_subject_key_of_another_tool_is_not_used(self):
        assert subject("Write", {"command": "ls"}) == '{"command": "ls"}'

    def test_not_json_serializable_falls_back_to_str(self):
        class Thing:
            def __repr__(self) -> str:
                return "<thing>"

        assert subject("Unknown", {"x": Thing()}) == "{'x': <thing>}"
        assert subject("Unknown", {1: "a", "b": 2}) == "{1: 'a', 'b': 2}"  # unsortable keys

    @pytest.mark.parametrize("tool", ["Bash", "Unknown"])
    def test_clipped_to_max_subject(self, tool):
        text = subject(tool, {"command": "x" * (3 * MAX_SUBJECT)})
        assert len(text) == MAX_SUBJECT

    def test_real_permission_requests(self):
        for name, expected in (
            ("hook-PermissionRequest.json", "echo hi-from-bash > bash_out.txt"),
            (
                "hook-PermissionRequest-Write.json",
                "/tmp/claude-headless-capture/success/project/hello.txt",
            ),
        ):
            data = json.loads((HEADLESS / name).read_text())
            assert subject(data["tool_name"], data["tool_input"]) == expected

    def test_real_permission_request_ruled(self):
        data = json.loads((HEADLESS / "hook-PermissionRequest.json").read_text())
        rules = [rule("Bash", r"^echo [\w-]+ > [\w.]+$")]
        ruling = ask(rules, data["tool_name"], data["tool_input"])
        assert ruling.action == "approve"
        assert ask([], data["tool_name"], data["tool_input"]).action == "deny"


# ============================================================================ hook answer


class TestHookAnswer:
    def test_approve(self):
        assert hook_answer("approve") == {
            "hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": {"behavior": "allow"},
            }
        }

    def test_approve_ignores_a_message(self):
        assert hook_answer("approve", "whatever") == hook_answer("approve")

    def test_deny_with_message(self):
        assert hook_answer("deny", "do it another way") == {
            "hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": {"behavior": "deny", "message": "do it another way"},
            }
        }

    @pytest.mark.parametrize("message", [None, ""])
    def test_deny_without_message_says_who(self, message):
        decision = hook_answer("deny", message)["hookSpecificOutput"]["decision"]
        assert decision == {"behavior": "deny", "message": "denied by supervise"}

    @pytest.mark.parametrize("action", ["escalate", "", "APPROVE", "allow"])
    def test_anything_but_approve_denies(self, action):
        decision = hook_answer(action, "m")["hookSpecificOutput"]["decision"]
        assert decision == {"behavior": "deny", "message": "m"}

    def test_ruling_to_answer_round_trips_through_json(self):
        ruling = ask([rule("Bash", "^rm", "deny", "nope")], "Bash", bash("rm x"))
        answer = hook_answer(ruling.action, ruling.message)
        assert json.loads(json.dumps(answer)) == answer
        assert answer["hookSpecificOutput"]["decision"]["message"] == "nope"


# ============================================================================ properties

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
tool_names = st.sampled_from(
    ["Bash", "Write", "Edit", "MultiEdit", "Read", "NotebookEdit", "WebFetch", "WebSearch",
     "Glob", "Grep", "*", ""]
) | st.text(max_size=20)  # fmt: skip
tool_inputs = (
    json_values
    | st.fixed_dictionaries({"command": st.text()}, optional={"description": json_values})
    | st.fixed_dictionaries({"file_path": st.text() | json_values, "content": json_values})
    | st.dictionaries(
        st.sampled_from(["command", "file_path", "url", "query", "pattern", "notebook_path"]),
        json_values,
    )
)
SAMPLE_RULES = (
    rule("Bash", r"^ls\b"),
    rule("Bash", "rm -rf", "deny", "no"),
    rule("Bash", action="escalate"),
    rule("Write", r"\.py$"),
    rule("*", "secret", "deny"),
    rule("*", None, "approve"),
    rule("WebFetch", "^https://docs\\.", "approve"),
    rule("Edit", None, "deny"),
)


@given(
    rules=st.lists(st.sampled_from(SAMPLE_RULES), max_size=6),
    tool=tool_names,
    tool_input=tool_inputs,
    denials=st.integers(0, 10),
    max_denials=st.integers(1, 10),
)
@settings(max_examples=700, deadline=None)
def test_decide_never_raises_and_answers_one_of_three(
    rules, tool, tool_input, denials, max_denials
):
    ruling = decide(rules, tool, tool_input, denials, max_denials, DEFAULT)
    assert ruling.action in ACTIONS
    assert isinstance(ruling.by, str) and ruling.by
    assert (ruling.message is not None) == (ruling.action == "deny")
    if ruling.rule is not None:
        assert 1 <= ruling.rule <= len(rules)
        if not ruling.by.startswith("circuit breaker"):
            assert ruling.action == rules[ruling.rule - 1].action
    else:
        assert ruling.by in ("default",) or ruling.by.startswith("circuit breaker")
    if denials >= max_denials:
        assert ruling.action == "escalate"
    text = subject(tool, tool_input)
    assert isinstance(text, str) and len(text) <= MAX_SUBJECT
    # First match wins: no earlier rule fits (approve rules skipped for compound Bash).
    if ruling.rule is not None:
        for earlier in rules[: ruling.rule - 1]:
            assert not rule_matches(earlier, tool, text) or earlier.action == "approve"
    answer = hook_answer(ruling.action, ruling.message)
    assert answer["hookSpecificOutput"]["decision"]["behavior"] in ("allow", "deny")
    json.dumps(answer)
