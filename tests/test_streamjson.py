"""Tests of the headless stream reader (:mod:`supervisor.agents.claude.stream`) on real captured
``--output-format stream-json --verbose`` output of Claude Code 2.1.328
(tests/fixtures/claude/headless/*.jsonl, recorded against tests/support/mock_anthropic.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.agents.claude.stream import KEEP_ERRORS, MAX_RESULT, StreamState

HEADLESS = Path(__file__).parent / "fixtures" / "claude" / "headless"
T0 = 1_700_000_000.0


def launch(state: StreamState, at: float = T0) -> None:
    """The marker the wrapper writes before each run."""
    assert state.feed_line(json.dumps({"type": "supervise_launch", "at": at})) is not None


def feed_file(state: StreamState, name: str) -> int:
    """Feed a fixture line by line, as bytes (as the engine reads it); returns the count."""
    lines = (HEADLESS / f"{name}.jsonl").read_bytes().splitlines()
    for line in lines:
        assert state.feed_line(line) is not None, line[:80]
    return len(lines)


def run_of(name: str) -> StreamState:
    state = StreamState()
    launch(state)
    feed_file(state, name)
    return state


def facts(state: StreamState) -> dict:
    return {
        "session_id": state.session_id,
        "runs": state.runs,
        "result": state.result,
        "is_error": state.is_error,
        "subtype": state.subtype,
        "num_turns": state.num_turns,
        "api_retries": state.api_retries,
        "api_error_status": state.api_error_status,
        "run_ended": state.run_ended,
        "limited": state.limited,
        "limit_resets_at": state.limit_resets_at,
        "limit_type": state.limit_type,
        "tool_failures": state.tool_failures,
    }


def ok_run(session_id: str, result: str, num_turns: int = 2, tool_failures: int = 0) -> dict:
    return {
        "session_id": session_id,
        "runs": 1,
        "result": result,
        "is_error": False,
        "subtype": "success",
        "num_turns": num_turns,
        "api_retries": 0,
        "api_error_status": None,
        "run_ended": True,
        "limited": False,
        "limit_resets_at": None,
        "limit_type": None,
        "tool_failures": tool_failures,
    }


def limited_run(session_id: str, result: str, status: int, **changes) -> dict:
    fields = {
        "session_id": session_id,
        "runs": 1,
        "result": result,
        "is_error": True,
        "subtype": "success",  # the CLI says success on an API error, with is_error
        "num_turns": 1,
        "api_retries": 0,
        "api_error_status": status,
        "run_ended": True,
        "limited": True,
        "limit_resets_at": None,
        "limit_type": None,
        "tool_failures": 0,
    }
    fields.update(changes)
    return fields


RESULT_429 = "API Error: Request rejected (429) · mock rate limit (1/1)"
RESULT_529 = (
    "API Error: 529 Overloaded. This is a server-side issue, usually temporary — try again "
    "in a moment. If it persists, check your inference gateway (127.0.0.1:43963)."
)
RESUMED = "c80f8511-b22f-4e98-b1c1-3ce345027511"

# name: (expected facts, total_cost_usd)
FIXTURES = {
    "success": (ok_run("249cfb55-c70e-422e-877a-e872bac29326", "DONE: wrote hello.txt"), 0.017409),
    "bash-approved": (ok_run("1dbd5faf-fcbf-4ea7-a09d-34419c338094", "BASH DONE"), 0.01746),
    "bash-approved-default-mode": (
        ok_run("85d32074-93ec-4cdc-9fe7-bd07698222f1", "BASH DONE"),
        0.017478,
    ),
    "bash-approved-hook-events": (
        ok_run("a473ede4-9706-4b71-b901-de9641b0044a", "BASH DONE"),
        0.017478,
    ),
    "bash-readonly": (ok_run("d88ce712-9fd1-433c-bdcc-93dc35b48e52", "LISTED"), 0.017127),
    "bash-denied": (
        ok_run("112a8575-53a8-447e-860f-20d60418f35f", "AFTER DENY", tool_failures=1),
        0.01746,
    ),
    "bash-unanswered": (
        ok_run("4a3b6c99-3807-4aaa-96dd-5ffb0b39c8b0", "AFTER AUTO DENY", tool_failures=1),
        0.017694,
    ),
    "bash-failed": (
        ok_run("b6fcdab7-d492-48b9-bada-c88bee47863a", "AFTER FAILURE", tool_failures=1),
        0.017517,
    ),
    "bash-deny-interrupt": (
        {
            **ok_run("699acb43-ae98-434b-9004-0f7155c6d4c8", None, 3, tool_failures=1),
            "is_error": True,
            "subtype": "error_during_execution",
        },
        0.008784,
    ),
    "ratelimit-429": (limited_run("e7f5432e-6848-4910-baa0-4d9cee716455", RESULT_429, 429), 0.0),
    "ratelimit-429-gateway": (
        limited_run(
            "8e2a71ab-e812-4e2c-aedd-cf47bdfc46b2",
            "You've hit your 5-hour limit · resets 5:02am (UTC)",
            429,
            limit_resets_at=1795323732.0,
            limit_type="five_hour",
        ),
        0.0,
    ),
    "ratelimit-429-gateway-weekly": (
        limited_run(
            "a6bc7951-06c3-4933-9f30-963b56960972",
            "You've hit your weekly limit · resets Nov 25, 2:22pm (UTC)",
            429,
            limit_resets_at=1795616534.0,
            limit_type="seven_day",
        ),
        0.0,
    ),
    "overloaded-529": (
        limited_run("bca25f66-fb95-44d2-804c-67facbf725de", RESULT_529, 529, api_retries=2),
        0.0,
    ),
    "overloaded-529-recovered": (
        {**ok_run("05c1fc92-dff6-4fac-83c9-1634181c0a6e", "RECOVERED"), "api_retries": 1},
        0.017529,
    ),
    "resume": (ok_run(RESUMED, "RESUMED FIN", 1), 0.00888),
    # --include-partial-messages: the stream_event lines change none of the facts
    "partial-slow-write": (ok_run("6998e647-cfd1-4ece-8061-f2d9a82adc11", "SLOW DONE"), 0.019455),
    "partial-ping-stall": (
        ok_run("1c44f82d-314c-4769-912d-58ae91bc81a4", "AFTER PINGS"),
        0.017484,
    ),
    "killed-stall": (
        {
            **ok_run(RESUMED, None, 0),
            "is_error": None,
            "subtype": None,
            "run_ended": False,
        },
        0.0,
    ),
}


def test_every_fixture_is_covered():
    assert {p.stem for p in HEADLESS.glob("*.jsonl")} == set(FIXTURES)


@pytest.mark.parametrize("name", list(FIXTURES))
def test_fixture(name):
    expected, cost = FIXTURES[name]
    state = run_of(name)
    assert facts(state) == expected
    assert state.total_cost_usd == pytest.approx(cost, abs=1e-9)
    report = state.report()
    assert report["session_id"] == expected["session_id"]
    assert report["result"] == expected["result"]
    assert report["total_cost_usd"] == round(cost, 6)
    assert json.loads(json.dumps(report)) == report


class TestApiErrors:
    def test_overloaded_keeps_retries_and_the_final_error(self):
        state = run_of("overloaded-529")
        assert state.api_errors == [
            {"status": 529, "attempt": 1, "retry_delay_ms": 586},
            {"status": 529, "attempt": 2, "retry_delay_ms": 1130},
            {"status": 529, "text": RESULT_529[:300]},
        ]
        assert state.report()["api_errors"] == state.api_errors
        assert state.report()["api_retries"] == 2

    def test_recovered_overload_is_not_limited(self):
        state = run_of("overloaded-529-recovered")
        assert state.api_errors == [{"status": 529, "attempt": 1, "retry_delay_ms": 574}]
        assert not state.limited

    def test_ratelimit_keeps_its_text(self):
        assert run_of("ratelimit-429").api_errors == [{"status": 429, "text": RESULT_429}]

    def test_only_the_latest_errors_are_kept(self):
        state = StreamState()
        launch(state)
        for attempt in range(1, KEEP_ERRORS + 4):
            state.feed({"type": "system", "subtype": "api_retry", "attempt": attempt,
                        "retry_delay_ms": 10 * attempt, "error_status": 529})  # fmt: skip
        assert state.api_retries == KEEP_ERRORS + 3
        assert [e["attempt"] for e in state.api_errors] == list(range(4, KEEP_ERRORS + 4))

    def test_retry_fields_of_the_wrong_type_are_none(self):
        state = StreamState()
        state.feed({"type": "system", "subtype": "api_retry", "attempt": "1",
                    "retry_delay_ms": 1.5, "error_status": True})  # fmt: skip
        assert state.api_errors == [{"status": None, "attempt": None, "retry_delay_ms": None}]


class TestLimits:
    def test_rejected_event_alone_is_not_limited_until_the_run_ends(self):
        state = StreamState()
        launch(state)
        lines = (HEADLESS / "ratelimit-429-gateway.jsonl").read_bytes().splitlines()
        for line in lines[:-1]:  # everything but the result line
            state.feed_line(line)
        assert state.limit_resets_at == 1795323732.0
        assert state.limit_type == "five_hour"
        assert not state.run_ended
        assert not state.limited
        state.feed_line(lines[-1])
        assert state.limited

    def test_rejected_event_without_api_error_is_limited(self):
        state = StreamState()
        info = {"status": "rejected", "resetsAt": 1795323732.5}
        state.feed({"type": "rate_limit_event", "rate_limit_info": info})
        state.feed({"type": "result", "subtype": "success", "is_error": True, "result": "x"})
        assert state.limited
        assert state.limit_resets_at == 1795323732.5
        assert state.limit_type == "unknown"

    @pytest.mark.parametrize("resets", [None, "1795323732", True, [1], {"at": 1}])
    def test_reset_time_of_the_wrong_type_is_none(self, resets):
        state = StreamState()
        state.feed({"type": "rate_limit_event",
                    "rate_limit_info": {"status": "rejected", "resetsAt": resets,
                                        "rateLimitType": "five_hour"}})  # fmt: skip
        assert state.limit_resets_at is None
        assert state.limit_type == "five_hour"

    @pytest.mark.parametrize("status", ["allowed", "allowed_warning", None])
    def test_events_that_are_not_rejections_change_nothing(self, status):
        state = StreamState()
        state.feed({"type": "rate_limit_event",
                    "rate_limit_info": {"status": status, "resetsAt": 1795323732,
                                        "rateLimitType": "five_hour"}})  # fmt: skip
        state.feed({"type": "result", "is_error": False, "result": "ok"})
        assert state.limit_type is None and state.limit_resets_at is None
        assert not state.limited

    @pytest.mark.parametrize("status", [400, 401, 500, 503])
    def test_other_api_errors_are_not_limits(self, status):
        state = StreamState()
        state.feed({"type": "result", "is_error": True, "result": "x", "api_error_status": status})
        assert state.api_error_status == status
        assert not state.limited


class TestRuns:
    def test_killed_run_then_resume(self):
        state = StreamState()
        launch(state, T0)
        feed_file(state, "killed-stall")
        assert not state.run_ended
        assert state.result is None
        launch(state, T0 + 60)
        feed_file(state, "resume")
        assert facts(state) == {**ok_run(RESUMED, "RESUMED FIN", 1), "runs": 2}
        assert state.total_cost_usd == pytest.approx(0.00888)

    def test_limit_does_not_leak_into_the_next_run(self):
        state = StreamState()
        launch(state, T0)
        feed_file(state, "ratelimit-429-gateway")
        assert state.limited
        launch(state, T0 + 3600)
        assert state.runs == 2
        assert (state.result, state.is_error, state.subtype) == (None, None, None)
        assert state.api_error_status is None
        assert state.limit_resets_at is None and state.limit_type is None
        assert not state.run_ended and not state.limited
        feed_file(state, "success")
        assert state.result == "DONE: wrote hello.txt"
        assert state.is_error is False
        assert not state.limited
        assert state.session_id == "249cfb55-c70e-422e-877a-e872bac29326"

    def test_totals_and_error_history_sum_over_runs(self):
        state = StreamState()
        for at, name in enumerate(["overloaded-529", "ratelimit-429", "success"]):
            launch(state, T0 + at)
            feed_file(state, name)
        assert state.runs == 3
        assert state.num_turns == 1 + 1 + 2
        assert state.total_cost_usd == pytest.approx(0.017409)
        assert state.api_retries == 2
        assert [e["status"] for e in state.api_errors] == [529, 529, 529, 429]
        assert state.api_error_status is None
        assert not state.limited
        report = state.report()
        assert report["num_turns"] == 4
        assert report["api_retries"] == 2

    def test_costs_add_up(self):
        state = StreamState()
        for at, name in enumerate(["success", "bash-approved", "bash-failed"]):
            launch(state, T0 + at)
            feed_file(state, name)
        assert state.report()["total_cost_usd"] == round(0.017409 + 0.01746 + 0.017517, 6)
        assert state.num_turns == 6

    def test_without_a_marker_per_run_fields_are_overwritten_by_the_next_result(self):
        state = StreamState()
        feed_file(state, "ratelimit-429")
        feed_file(state, "resume")
        assert state.runs == 0
        assert state.api_error_status is None
        assert state.result == "RESUMED FIN"

    def test_tool_failures_count_since_the_last_success(self):
        state = StreamState()
        fail = {"type": "user", "message": {"content": [
            {"type": "tool_result", "is_error": True, "content": "x"}]}}  # fmt: skip
        ok = {"type": "user", "message": {"content": [
            {"type": "tool_result", "content": "fine"}]}}  # fmt: skip
        for _ in range(3):
            state.feed(fail)
        assert state.tool_failures == 3
        state.feed(ok)
        assert state.tool_failures == 0
        state.feed({"type": "user", "message": {"content": "plain text"}})
        state.feed({"type": "user", "message": {"content": [{"type": "text", "text": "hi"}]}})
        assert state.tool_failures == 0


class TestResultLine:
    def test_type_need_not_be_first(self):
        line = (HEADLESS / "success.jsonl").read_bytes().splitlines()[-1]
        assert not line.startswith(b'{"type"')
        state = StreamState()
        obj = state.feed_line(line)
        assert obj is not None and obj["type"] == "result"
        assert state.run_ended

    def test_long_result_is_clipped(self):
        state = StreamState()
        state.feed({"type": "result", "result": "x" * (MAX_RESULT * 3)})
        assert state.result == "x" * MAX_RESULT

    @pytest.mark.parametrize("cost", ["0.5", True, None, [1]])
    def test_cost_of_the_wrong_type_is_ignored(self, cost):
        state = StreamState()
        state.feed({"type": "result", "total_cost_usd": cost, "num_turns": "3"})
        assert state.total_cost_usd == 0.0
        assert state.num_turns == 0

    def test_str_line_works_like_bytes(self):
        line = (HEADLESS / "success.jsonl").read_text().splitlines()[-1]
        state = StreamState()
        assert state.feed_line(line) is not None
        assert state.result == "DONE: wrote hello.txt"


# ============================================================================ garbage

GARBAGE = [
    b"",
    b"   ",
    b"not json at all",
    b"Error: something printed to stdout",
    b"[1, 2, 3]",
    b"42",
    b"null",
    b'"a string"',
    b"true",
    b'{"type": "result"',  # truncated
    b"\xff\xfe\x00garbage",
    b'{"type": "result"}{"type": "result"}',
    "caf\u00e9 \u2014 not json".encode(),
]


@pytest.mark.parametrize("line", GARBAGE)
def test_garbage_line_is_ignored(line):
    state = StreamState()
    assert state.feed_line(line) is None
    assert state == StreamState()


def test_garbage_between_real_lines_changes_nothing():
    clean, dirty = StreamState(), StreamState()
    lines = (HEADLESS / "overloaded-529.jsonl").read_bytes().splitlines()
    launch(clean)
    launch(dirty)
    for index, line in enumerate(lines):
        clean.feed_line(line)
        dirty.feed_line(GARBAGE[index % len(GARBAGE)])
        dirty.feed_line(line)
    assert dirty == clean


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"type": None},
        {"type": 5},
        {"type": "unknown_future_event", "session_id": "x"},
        {"type": "assistant"},
        {"type": "user", "message": None},
        {"type": "user", "message": {"content": None}},
        {"type": "system"},
        {"type": "system", "session_id": 5},
        {"type": "rate_limit_event"},
        {"type": "rate_limit_event", "rate_limit_info": "rejected"},
    ],
)
def test_odd_objects_change_nothing_that_matters(obj):
    state = StreamState()
    state.feed(obj)
    assert state == StreamState()


@pytest.mark.parametrize(
    "line",
    [
        b'{"type": "result", "result": 1, "api_error_status": 429}',
        b'{"type": "result", "result": {"text": "x"}, "api_error_status": 529}',
        b'{"type": "rate_limit_event", "rate_limit_info": {"status": "rejected", "resetsAt": '
        + b"9" * 400
        + b"}}",
        b"[" * 100_000,
    ],
    ids=["int-result", "dict-result", "huge-resetsAt", "deep-nesting"],
)
def test_odd_json_never_raises(line):
    StreamState().feed_line(line)


@given(st.binary(max_size=300))
@settings(max_examples=1000, deadline=None)
def test_feed_line_never_raises_on_arbitrary_bytes(line):
    state = StreamState()
    obj = state.feed_line(line)
    assert obj is None or isinstance(obj, dict)


@given(st.text(max_size=300))
@settings(max_examples=500, deadline=None)
def test_feed_line_never_raises_on_arbitrary_text(line):
    obj = StreamState().feed_line(line)
    assert obj is None or isinstance(obj, dict)


# Well-formed events with random values: the accounting invariants hold.
events = st.one_of(
    st.fixed_dictionaries({"type": st.just("supervise_launch"), "at": st.floats(0, 2e9)}),
    st.fixed_dictionaries(
        {"type": st.just("system"), "subtype": st.sampled_from(["init", "api_retry", "other"])},
        optional={
            "session_id": st.text(max_size=8),
            "attempt": st.integers(0, 10),
            "error_status": st.sampled_from([429, 500, 529]),
            "retry_delay_ms": st.integers(0, 10_000),
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("rate_limit_event")},
        optional={
            "rate_limit_info": st.fixed_dictionaries(
                {"status": st.sampled_from(["rejected", "allowed"])},
                optional={
                    "resetsAt": st.integers(0, 2**40) | st.floats(0, 2e9),
                    "rateLimitType": st.sampled_from(["five_hour", "seven_day"]),
                },
            )
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("user")},
        optional={
            "message": st.fixed_dictionaries(
                {
                    "content": st.lists(
                        st.fixed_dictionaries(
                            {"type": st.sampled_from(["tool_result", "text"])},
                            optional={"is_error": st.booleans()},
                        ),
                        max_size=3,
                    )
                }
            )
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("result")},
        optional={
            "result": st.none() | st.text(max_size=20),
            "is_error": st.booleans(),
            "subtype": st.sampled_from(["success", "error_during_execution"]),
            "num_turns": st.integers(0, 50),
            "total_cost_usd": st.floats(0, 10),
            "session_id": st.text(max_size=8),
            "api_error_status": st.none() | st.sampled_from([400, 429, 500, 529]),
        },
    ),
)


@given(st.lists(events, max_size=40))
@settings(max_examples=500, deadline=None)
def test_accounting_invariants(stream):
    state = StreamState()
    launches = retries = 0
    for obj in stream:
        before_turns, before_cost = state.num_turns, state.total_cost_usd
        line = json.dumps(obj)
        assert state.feed_line(line) == obj
        launches += obj["type"] == "supervise_launch"
        retries += obj["type"] == "system" and obj.get("subtype") == "api_retry"
        assert state.num_turns >= before_turns
        assert state.total_cost_usd >= before_cost
        assert len(state.api_errors) <= KEEP_ERRORS
        assert state.runs == launches
        assert state.api_retries == retries
        if state.limited:
            assert state.run_ended
        if obj["type"] == "supervise_launch":
            assert state.result is None and state.api_error_status is None
            assert not state.run_ended and not state.limited
    report = state.report()
    assert json.loads(json.dumps(report)) == report
