"""Tests of the policy's transitions outside a check (:mod:`supervisor.policy.transitions`):
a launch, a launch that tmux refused, adoption after a restart, and an ending the event log
already holds. Pure calls with an explicit ``now``, like tests/test_policy.py, whose shared
invariants (:func:`tests.test_policy.check_common`) every transition must keep.

The rows come from the state table in the docstring of :mod:`supervisor.policy`.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.policy_events import event, manifest
from support.policy_states import LIVE, STATUSES, T0, P, check_common, policies, task_states

from supervisor.policy import (
    INTENTS,
    MIN_CHECK,
    START_TIMEOUT,
    TERMINAL,
    VERDICTS,
    Action,
    Signals,
    TaskState,
    adopted,
    decide,
    first_check,
    last_word,
    launch_failed,
    launched,
    logged_ending,
    recovered_ending,
    resume_redone,
)

A = Action
queued_states = task_states(("queued",)).map(
    lambda s: dataclasses.replace(s, started_at=None, launched_at=None)
)
nows = st.floats(-1e5, 1e5, allow_nan=False).map(lambda x: T0 + x)


# ============================================================================ launched


@given(state=queued_states, now=nows, policy=policies())
@settings(max_examples=500, deadline=None)
def test_launched_starts_the_run_and_its_deadline(state, now, policy):
    decision = launched(state, now, policy)
    check_common(state, policy, decision, noop=False)
    new = decision.state
    assert new == TaskState("running", started_at=now, launched_at=now)
    assert decision.events == ("launched",)
    assert decision.actions == ()
    expected = max(MIN_CHECK, min(first_check(policy), policy.deadline))
    assert decision.next_check == pytest.approx(expected, rel=1e-9, abs=1e-6)  # epoch rounding
    # The first check never mistakes the agent that has not written its pid yet for gone.
    first = Signals(now=now + decision.next_check, agent_alive=None, session_alive=True,
                    output_mtime=None)  # fmt: skip
    if decision.next_check < START_TIMEOUT:
        assert decide(new, first, policy).state.status != "crashed"


@pytest.mark.parametrize("status", [s for s in STATUSES if s != "queued"])
def test_only_a_queued_task_is_launched(status):
    with pytest.raises(ValueError, match=f"not a {status} one"):
        launched(TaskState(status, started_at=T0, launched_at=T0), T0 + 1, P)


# ============================================================================ launch failed


@given(state=queued_states, now=nows, policy=policies(), why=st.text(max_size=80))
@settings(max_examples=500, deadline=None)
def test_a_refused_launch_fails_with_reason_launch(state, now, policy, why):
    started = launched(state, now, policy).state
    decision = launch_failed(started, now, why, policy)
    check_common(started, policy, decision, noop=False)
    new = decision.state
    assert (new.status, new.failure_reason, new.verdict) == ("failed", "launch", "FAIL")
    assert new.started_at == now and new.launched_at is None and new.exit_code is None
    assert new.retry_count == 0
    body = (A.FINISH, A.CLEANUP)
    assert decision.actions == body + ((A.NOTIFY,) if "failed" in policy.notify_on else ())
    assert "tmux could not start the session" in decision.reason
    # An ended task never changes again.
    later = decide(new, Signals(now=now + 1, done=True, exit_code=0), policy)
    assert later.state == new and later.actions == ()


def test_a_refused_launch_of_a_queued_state_counts_from_now():
    decision = launch_failed(TaskState("queued"), T0, "duplicate session: x\nmore", P)
    assert decision.state.started_at == T0
    assert decision.reason == "tmux could not start the session: duplicate session: x more"


# ============================================================================ recovered ending

terminal_events = st.fixed_dictionaries(
    {"event": st.sampled_from(sorted(TERMINAL)), "ts": st.just("2026-01-01T00:00:00Z")},
    optional={
        "exit_code": st.none() | st.integers(-255, 255),
        "abandon_reason": st.sampled_from(["deadline", "stopped", "max_retries", "tmux_lost"]),
        "verdict": st.sampled_from(VERDICTS),
        "reason": st.text(st.characters(blacklist_characters="\n\r"), min_size=1, max_size=40),
        "failure_reason": st.sampled_from(["auth", "exit_code", "launch"]),
    },
)


@given(
    state=task_states(LIVE),
    last=terminal_events,
    notified=st.booleans(),
    policy=policies(),
)
@settings(max_examples=800, deadline=None)
def test_a_logged_ending_is_completed_as_logged(state, last, notified, policy):
    events = [{"event": "launched"}, last]
    if notified:
        events.append({"event": "notified", "notified_event": last["event"]})
    decision = recovered_ending(state, last, events, policy)
    new = decision.state
    assert decision.next_check > 0 and decision.reason and "\n" not in decision.reason
    assert new.status == last["event"]
    assert new.exit_code == last.get("exit_code")
    assert new.abandon_reason == last.get("abandon_reason")
    assert new.resume_at is None
    assert new.retry_count == state.retry_count
    if "verdict" in last:
        assert new.verdict == last["verdict"]
    if "reason" in last:
        assert decision.reason == last["reason"]
    # The engine applies logged_ending to every terminal decision: nothing moves again.
    assert logged_ending(new, events) == new
    body = (A.STOP_AGENT,) if new.status in ("abandoned", "superseded") else ()
    body += (A.FINISH, A.CLEANUP)
    notify = not notified and new.status in policy.notify_on
    assert decision.actions == body + ((A.NOTIFY,) if notify else ())
    assert decision.events == (new.status,)


@given(
    status=st.sampled_from(["queued", "blocked"]),
    last=terminal_events,
    notified=st.booleans(),
    policy=policies(),
)
@settings(max_examples=300, deadline=None)
def test_a_never_launched_task_s_logged_ending_only_finishes(status, last, notified, policy):
    """Found by CI (stop 36): a queued or blocked task killed between its terminal line and
    its manifest. It ends as logged; no agent is stopped and nothing cleaned up (it never
    had either), as the stop it completes (``policy.plans.stopped``)."""
    events = [last] + ([{"event": "notified", "notified_event": last["event"]}] if notified else [])
    decision = recovered_ending(TaskState(status), last, events, policy)
    assert decision.state.status == last["event"] and decision.events == (last["event"],)
    notify = not notified and last["event"] in policy.notify_on
    assert decision.actions == (A.FINISH,) + ((A.NOTIFY,) if notify else ())


@pytest.mark.parametrize("event", ["resumed", "crashed", "launched", "stale"])
def test_a_recovered_ending_needs_a_terminal_event(event):
    with pytest.raises(ValueError, match="not a terminal event"):
        recovered_ending(TaskState("running"), {"event": event}, [], P)


def test_a_running_task_is_adopted_as_its_manifest_says():
    m = manifest(status="running", started_at=T0, launched_at=T0 + 50, retry_count=1,
                 limit_waits=2, transient_waits=3)  # fmt: skip
    log = [event("launched", T0), event("crashed", T0 + 40), event("resumed", T0 + 50),
           event("stale", T0 + 60)]  # fmt: skip
    state = adopted(m, log)
    assert state == TaskState("running", started_at=T0, launched_at=T0 + 50, retry_count=1,
                              limit_waits=2, transient_waits=3)  # fmt: skip


def test_a_queued_task_with_a_session_runs_since_its_launched_event():
    state = adopted(manifest(status="queued"), [event("launched", T0 + 5)], T0 + 99)
    assert (state.status, state.started_at, state.launched_at) == ("running", T0 + 5, T0 + 5)


def test_a_queued_task_with_no_launched_event_runs_since_its_launch_file():
    state = adopted(manifest(status="queued"), [event("queued", T0)], T0 + 7)
    assert (state.status, state.started_at, state.launched_at) == ("running", T0 + 7, T0 + 7)


def test_a_logged_resume_wins_over_the_manifest():
    """We died after the ``resumed`` event, before the manifest said so."""
    m = manifest(status="crashed", started_at=T0, launched_at=T0, resume_at=T0 + 30)
    log = [event("launched", T0), event("crashed", T0 + 20), event("resumed", T0 + 30)]
    state = adopted(m, log)
    assert state.status == "running"
    assert state.launched_at == T0 + 30 and state.resume_at is None
    assert state.retry_count == 1  # counted from the events when the manifest lags


def test_a_redone_resume_runs_since_the_redo():
    """A resume redone after a crash (``resume_redone``) is the run's start: adopted again
    after a second crash, its output age counts from the redo, not from the decision."""
    m = manifest(status="crashed", started_at=T0, launched_at=T0, resume_at=T0 + 30)
    log = [event("launched", T0), event("crashed", T0 + 20), event("resumed", T0 + 30),
           event("adopted", T0 + 90), event("resume_redone", T0 + 91)]  # fmt: skip
    state = adopted(m, log)
    assert (state.status, state.launched_at, state.retry_count) == ("running", T0 + 91, 1)


@given(task_states(), st.floats(min_value=T0, max_value=T0 + 1e6))
def test_resume_redone_starts_the_run_now_and_counts_no_retry(state, now):
    new = resume_redone(state, now)
    assert new.launched_at == now and new.retry_count == state.retry_count
    assert new.stale_since is None and new.gone_since is None and new.active_since is None
    assert new.status == state.status


@pytest.mark.parametrize("intent", sorted(INTENTS))
def test_a_logged_intent_wins_without_more_backoff(intent):
    m = manifest(status="running", started_at=T0, launched_at=T0, resume_at=T0 + 500)
    state = adopted(m, [event("launched", T0), event(intent, T0 + 20)])
    assert state.status == intent and state.resume_at is None


def test_an_intent_the_manifest_already_shows_keeps_its_backoff():
    m = manifest(status="hung", started_at=T0, launched_at=T0, resume_at=T0 + 500)
    state = adopted(m, [event("launched", T0), event("hung", T0 + 20)])
    assert state.status == "hung" and state.resume_at == T0 + 500


def test_an_escalation_is_adopted_with_its_reason_and_pause():
    m = manifest(status="escalated", started_at=T0, launched_at=T0,
                 escalation={"reason": "Bash: rm -rf", "paused": True})  # fmt: skip
    state = adopted(m, [event("launched", T0), event("escalated", T0 + 3)])
    assert (state.status, state.escalation, state.paused) == ("escalated", "Bash: rm -rf", True)
    # A stale escalation record on a task that is no longer escalated is ignored.
    m = manifest(status="running", started_at=T0, escalation={"reason": "x", "paused": True})
    state = adopted(m, [event("launched", T0)])
    assert (state.escalation, state.paused) == (None, False)


names = st.sampled_from(["launched", "resumed", "stale", "fresh", "crashed", "hung", "waiting"])


@given(
    status=st.sampled_from(["queued", "running", "crashed", "hung", "waiting", "escalated"]),
    retries=st.integers(0, 5),
    log=st.lists(st.tuples(names, st.floats(0, 1e4)), max_size=12),
)
@settings(max_examples=500, deadline=None)
def test_adoption_never_loses_a_retry_or_ends_a_task(status, retries, log):
    m = manifest(status=status, started_at=T0, launched_at=T0, retry_count=retries)
    events = [event(name, T0 + at) for name, at in sorted(log, key=lambda e: e[1])]
    state = adopted(m, events, T0)
    resumes = sum(1 for e in events if e["event"] == "resumed")
    assert state.retry_count == max(retries, resumes)
    assert state.status not in TERMINAL and state.status != "queued"
    last = last_word(events)
    if last is not None and last["event"] == "resumed":
        assert state.status == "running" and state.resume_at is None
    assert state.started_at is not None and state.launched_at is not None
    # The adopted state is one the checks accept: a live decision, never a no-op.
    decision = decide(state, Signals(now=T0 + 1e4, agent_alive=True, output_mtime=T0), P)
    assert decision.reason != "nothing to do"
