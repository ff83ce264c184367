"""Issue 26, part 3: the account's limits. The fingerprint (:mod:`supervisor.accounts`), the
pure decisions (:mod:`supervisor.policy.accounts`, hypothesis-tested), ``[accounts]``'s
hostile values, and the engine holding queued tasks of a limited account (a real engine,
tmux and the fake agent; the e2e with the real Claude Code CLI is in
``tests/test_accounts_e2e.py``)."""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

import pytest
from conftest import Setup
from hypothesis import given
from hypothesis import strategies as st

from supervisor import accounts
from supervisor.config import ConfigError, load_profile
from supervisor.config.accounts import AccountsSpec
from supervisor.diskio import parse_iso
from supervisor.engine.accountbook import AccountBook, load
from supervisor.policy import Decision, Signals, TaskState
from supervisor.policy import accounts as rules
from supervisor.policy.accounts import AccountLimit
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import Status

ACCOUNT = "acct-0123456789ab"
OTHER = "acct-ba9876543210"

# ------------------------------------------------------------------ the fingerprint

env_values = st.one_of(st.none(), st.text(max_size=40))


@given(
    st.fixed_dictionaries({k: env_values for k in accounts.KEYS}), st.sampled_from(accounts.KEYS)
)
def test_the_fingerprint_names_the_credentials_never_the_secret(values, changed) -> None:
    env = {k: v for k, v in values.items() if v is not None}
    name = accounts.fingerprint(env)
    assert accounts.is_account(name) and name == accounts.fingerprint(dict(env))
    for secret in env.values():
        if len(secret) >= 6:
            assert secret not in name
    other = dict(env)
    other[changed] = (env.get(changed) or "") + "x"
    assert accounts.fingerprint(other) != name  # any of the four keys makes another account
    assert accounts.fingerprint({**env, "PATH": "/elsewhere"}) == name  # others do not


def test_the_task_env_goes_over_the_profile_over_the_engine() -> None:
    engine = {"HOME": "/home/a", "ANTHROPIC_API_KEY": "sk-engine"}
    mine = accounts.of_task({"ANTHROPIC_API_KEY": "sk-profile"}, {}, engine)
    assert mine == accounts.fingerprint({"HOME": "/home/a", "ANTHROPIC_API_KEY": "sk-profile"})
    theirs = accounts.of_task({"ANTHROPIC_API_KEY": "sk-profile"}, {"HOME": "/h/b"}, engine)
    assert theirs != mine
    assert accounts.of_task({}, {}, engine) == accounts.fingerprint(engine)


# ------------------------------------------------------------------ the pure decisions

times = st.floats(min_value=1e9, max_value=2e9, allow_nan=False)
gaps = st.floats(min_value=0, max_value=30, allow_nan=False)


@given(
    times, st.floats(min_value=0.01, max_value=30), gaps, st.lists(gaps, min_size=1, max_size=12)
)
def test_no_start_before_the_reset_and_starts_after_it_are_staggered(
    now, wait, stagger, steps
) -> None:
    """Whatever the times a start is asked for, none is admitted before the reset and two
    admitted starts of the account are at least ``stagger`` s apart."""
    book: rules.Book = rules.noted({}, ACCOUNT, now + wait, "t1", now)
    until = now + wait
    started: list[float] = []
    moment = now
    for step in steps:
        moment += step
        book = rules.pruned(book, moment, stagger)
        answer = rules.admit(book, ACCOUNT, moment, stagger)
        book = answer.book
        if answer.hold is None:
            started.append(moment)
        else:
            assert answer.hold.kind in ("limited", "stagger")
            assert answer.hold.until is not None and answer.hold.until > moment
        other = rules.admit(book, OTHER, moment, stagger)  # another account is never held
        assert other.hold is None and other.book == book
    assert all(s >= until for s in started)
    assert all(b - a >= stagger - 1e-6 for a, b in itertools.pairwise(started))  # float sums


@given(times, st.integers(min_value=0, max_value=5), st.integers(min_value=1, max_value=5))
def test_the_cap_holds_a_start_when_the_account_runs_that_many(now, running, cap) -> None:
    answer = rules.admit({}, ACCOUNT, now, 5.0, running=running, cap=cap)
    assert (answer.hold is not None) == (running >= cap)
    if answer.hold is not None:
        assert answer.hold.kind == "cap" and "cap of" in rules.hold_reason(answer.hold)
    assert rules.admit({}, None, now, 5.0, running=99, cap=1).hold is None  # no account


@given(times, gaps, gaps)
def test_the_later_reset_wins_and_a_past_one_changes_nothing(now, first, second) -> None:
    book = rules.noted({}, ACCOUNT, now + first + 1, "a", now)
    book = rules.noted(book, ACCOUNT, now + second + 1, "b", now)
    assert book[ACCOUNT].until == now + max(first, second) + 1
    assert rules.noted(book, OTHER, now - 1, "c", now) == book


def test_a_limit_wait_with_a_reset_time_is_the_one_that_holds_the_account() -> None:
    before = TaskState(status=Status.RUNNING)
    waiting = TaskState(status=Status.WAITING, limit_waits=1, resume_at=120.0)
    decision = Decision(state=waiting, events=(Event.WAITING,))
    limit = Signals(now=100.0, limit=True, limit_resume_at=120.0)
    assert rules.limit_reset(before, decision, limit) == 120.0
    assert rules.limit_reset(before, decision, Signals(now=100.0, limit=True)) is None  # backoff
    transient = Decision(state=TaskState(status=Status.WAITING, transient_waits=1))
    assert rules.limit_reset(before, transient, limit) is None
    stale = Signals(now=130.0, limit=True, limit_resume_at=120.0)
    assert rules.limit_reset(before, decision, stale) is None


def test_a_held_resume_keeps_the_wait_and_looks_again_when_the_hold_ends() -> None:
    before = TaskState(status=Status.WAITING, resume_at=100.0, limit_waits=1)
    resumed = Decision(state=TaskState(status=Status.RUNNING), events=(Event.RESUMED,))
    assert rules.resumes_from_wait(before, resumed, Signals(now=101.0))
    assert not rules.resumes_from_wait(before, resumed, Signals(now=101.0, resume_requested=True))
    hold = rules.Hold("stagger", until=104.0)
    held = rules.held_resume(before, hold, 101.0, rules.hold_reason(hold))
    assert held.state == before and held.events == () and held.actions == ()
    assert held.next_check == pytest.approx(3.0) and "staggered" in held.reason
    limited = rules.hold_reason(rules.Hold("limited", until=time.time() + 60))
    assert limited.startswith("account limited until ") and limited[-3] == ":"


# ------------------------------------------------------------------ the book on disk


def test_the_book_survives_a_restart_and_skips_what_is_not_a_limit(tmp_path: Path) -> None:
    spec = AccountsSpec(stagger=2)
    book = AccountBook(tmp_path, spec)
    now = time.time()
    book.note(ACCOUNT, now + 30, "t1", now)
    again = AccountBook(tmp_path, spec)  # a new engine on the same state dir
    assert again.snapshot() == {ACCOUNT: AccountLimit(until=now + 30, by="t1")}
    assert again.admit(ACCOUNT, now + 1) is not None and again.admit(OTHER, now) is None
    data = json.loads((tmp_path / "accounts.json").read_text())
    data["not-an-account"] = {"until": 1, "by": "x"}
    data["acct-000000000000"] = {"until": "soon", "by": "x"}
    data["acct-111111111111"] = {"until": float("nan"), "by": "x"}
    (tmp_path / "accounts.json").write_text(json.dumps(data))
    assert set(load(tmp_path / "accounts.json")) == {ACCOUNT}
    (tmp_path / "accounts.json").write_text("{torn")
    assert load(tmp_path / "accounts.json") == {}
    assert accounts.read_limits(tmp_path) == {}


# ------------------------------------------------------------------ [accounts] keys


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("stagger = -1", "stagger"),
        ("stagger = 3601", "stagger"),
        ('stagger = "5"', "stagger"),
        ("stagger = nan", "stagger"),
        ("stagger = inf", "stagger"),
        ("max_concurrent = 0", "max_concurrent"),
        ("max_concurrent = 1.5", "max_concurrent"),
        ("max_concurrent = true", "max_concurrent"),
        ('max_concurrent = "2"', "max_concurrent"),
        ("max_concurrent = -3", "max_concurrent"),
        ("cap = 2", "cap"),
    ],
)
def test_hostile_accounts_values_are_refused_in_one_line(tmp_path: Path, line, key) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text(f'[agent]\ncommand = ["true"]\n\n[accounts]\n{line}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_profile(profile)
    problems = caught.value.problems
    assert len(problems) == 1 and "\n" not in problems[0], problems
    assert str(profile) in problems[0] and f"accounts.{key}" in problems[0], problems


def test_accounts_defaults_and_an_integer_stagger(tmp_path: Path) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text('[agent]\ncommand = ["true"]\n', encoding="utf-8")
    spec = load_profile(profile).spec.accounts
    assert (spec.stagger, spec.max_concurrent) == (5.0, None)
    profile.write_text(
        '[agent]\ncommand = ["true"]\n[accounts]\nstagger = 0\nmax_concurrent = 2\n',
        encoding="utf-8",
    )
    spec = load_profile(profile).spec.accounts
    assert (spec.stagger, spec.max_concurrent) == (0.0, 2)


# ------------------------------------------------------------------ the engine


def _launched_at(setup: Setup, task_id: str) -> float:
    launched = [e for e in setup.events(task_id) if e["event"] == "launched"]
    assert len(launched) == 1, setup.events(task_id)
    value = parse_iso(launched[0]["ts"])
    assert value is not None
    return value


def test_queued_tasks_of_a_limited_account_wait_for_the_reset_staggered(setup: Setup) -> None:
    """The book (as an engine before a restart left it) says the account is limited for a
    few seconds: its three queued tasks launch only after the reset, at least ``stagger``
    s apart, while a task of another account (its own HOME) queued behind them runs and
    ends meanwhile; the manifests name each task's account."""
    from conftest import stop_engine, wait_for

    key = {"ANTHROPIC_API_KEY": "sk-test-shared-0123456789"}
    data = _profile_with_env(setup, key, stagger=1.5)
    account = accounts.of_task(key, {}, os.environ)
    until = time.time() + 10
    setup.state.mkdir(parents=True, exist_ok=True)
    (setup.state / "accounts.json").write_text(
        json.dumps({account: {"until": until, "by": "earlier", "last_start": None}})
    )
    for name in ("one", "two", "three"):
        setup.drop(f"{name}.toml", setup.task(name, "print: hi"))
    other = setup.task("other", "print: other", env={"HOME": str(setup.root / "other-home")})
    setup.drop("other.toml", other)
    engine = setup.start()
    try:
        wait_for(lambda: setup.manifests().get("other", {}).get("status") == "completed", 60)
        seen = {name: m["status"] for name, m in setup.manifests().items()}
        seen_before_reset = time.time() < until  # (a machine slower than that: no check)
        wait_for(lambda: _all_completed(setup), timeout=120)
    finally:
        stop_engine(engine)
    if seen_before_reset:  # the other account's task ended while this one was held
        assert [seen[n] for n in ("one", "two", "three")] == ["queued"] * 3, seen
    manifests = setup.manifests()
    ids = {name: m["task_id"] for name, m in manifests.items()}
    assert manifests["other"]["account"] != account, data
    assert {manifests[n]["account"] for n in ("one", "two", "three")} == {account}
    assert key["ANTHROPIC_API_KEY"] not in json.dumps(manifests)
    starts = sorted(_launched_at(setup, ids[n]) for n in ("one", "two", "three"))
    assert until <= starts[0], (starts, until)
    # Starts are taken 1.5 s apart; each launched event comes a launch (tmux, a pane) later,
    # and two launches' latencies differ by up to a few tenths on a loaded machine.
    assert all(b - a >= 1.5 - 0.5 for a, b in itertools.pairwise(starts)), starts
    assert starts[-1] - starts[0] >= 2 * 1.5 - 0.5, starts


def _all_completed(setup: Setup) -> bool:
    return {m["status"] for m in setup.manifests().values()} == {"completed"}


def _profile_with_env(setup: Setup, env: dict[str, str], **accounts_keys: object) -> str:
    may_set = {"task_may_set": ["model", "env"]}
    extra = {"accounts": accounts_keys, "security": may_set}
    path = setup.write_profile(max_concurrent=6, extra=extra)
    text = path.read_text(encoding="utf-8")
    lines = "".join(f'{k} = "{v}"\n' for k, v in env.items())
    path.write_text(text + "\n[agent.env]\n" + lines, encoding="utf-8")
    return text


def test_the_cap_per_account_keeps_one_run_at_a_time(setup: Setup) -> None:
    """``[accounts] max_concurrent = 1``: of two tasks of one account the second launches
    only after the first ended, though the profile has slots for both."""
    _profile_with_env(setup, {"ANTHROPIC_API_KEY": "sk-test-cap"}, max_concurrent=1)
    setup.drop("first.toml", setup.task("first", "print: first\nsleep: 1"))
    setup.drop("second.toml", setup.task("second", "print: second"))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    manifests = setup.manifests()
    assert {m["status"] for m in manifests.values()} == {"completed"}, manifests
    ids = [manifests[n]["task_id"] for n in ("first", "second")]
    spans = []
    for task_id in ids:
        ended = [e for e in setup.events(task_id) if e["event"] == "completed"]
        spans.append((_launched_at(setup, task_id), parse_iso(ended[-1]["ts"])))
    (_a_start, a_end), (b_start, _b_end) = sorted(spans)
    assert a_end is not None and b_start >= a_end, spans


# ------------------------------------------------------------------ the views


def _held_views(root: Path, until: float) -> dict[str, str]:
    """``status``, ``status --json``, the ``top`` column, the web board and the MCP ``status``
    tool of a state dir
    with one queued task whose account the book limits until ``until``."""
    import contextlib
    import io

    from supervisor import mcp_tools
    from supervisor.cli import app as cli
    from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso
    from supervisor.views import model, tui_columns, webpage
    from supervisor.views.webauth import Access

    profile = root / "profile.toml"
    profile.write_text(
        f'[paths]\nspool_dir = "{root / "spool"}"\nstate_dir = "{root / "state"}"\n'
        '[tmux]\nsocket_name = "sv-accounts-views"\n[agent]\ncommand = ["true"]\n'
    )
    folder = root / "state" / "tasks" / "held-1a2b3c"
    folder.mkdir(parents=True)
    (root / "spool").mkdir()
    fields = {
        "task_id": "held-1a2b3c",
        "task_name": "held",
        "status": "queued",
        "model": "m",
        "project_dir": "/tmp/p",
        "session_name": "x",
        "session_id": "s",
        "tmpdir": str(folder),
        "created_at": utc_iso(),
        "account": ACCOUNT,
    }
    TaskDir(folder).write_manifest(Manifest.model_validate(fields))
    book = {ACCOUNT: {"until": until, "by": "other-000000", "last_start": None}}
    (root / "state" / "accounts.json").write_text(json.dumps(book))
    out: dict[str, str] = {}
    for verb in (["status"], ["status", "--json"]):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            cli.main([verb[0], "-c", str(profile), *verb[1:]])
        out[" ".join(verb)] = buffer.getvalue()
    snap = model.Reader(root / "state", root / "spool").snapshot()
    out["top"] = tui_columns.outcome(snap.tasks[0])
    access = Access(token=None, allow_actions=False, loopback=True)
    out["web board"] = webpage.Pages(load_profile(profile), access).board()
    out["mcp status"] = json.dumps(mcp_tools.status(load_profile(profile))["tasks"])
    return out


def test_status_top_and_serve_show_why_a_queued_task_waits(tmp_path: Path) -> None:
    until = time.time() + 600
    line = accounts.limited_text(until)
    assert line == f"account limited until {time.strftime('%H:%M', time.localtime(until))}"
    views = _held_views(tmp_path, until)
    for name, text in views.items():
        assert line in text, (name, text)
    row = json.loads(views["status --json"])[0]
    assert (row["held"], row["account"], row["status"]) == (line, ACCOUNT, "queued")


def test_a_past_reset_shows_no_hold(tmp_path: Path) -> None:
    views = _held_views(tmp_path, time.time() - 1)
    assert all("account limited" not in text for text in views.values()), views
    assert json.loads(views["status --json"])[0]["held"] is None


# ------------------------------------------------------------------ attacks


def test_the_same_start_asked_at_once_from_many_threads_is_admitted_once(tmp_path: Path) -> None:
    """Checks (the dispatcher's pool) and the intake admit starts side by side: of eight
    asked in the same instant after the reset, one starts; the book on disk says when."""
    import threading

    book = AccountBook(tmp_path, AccountsSpec(stagger=10))
    now = time.time()
    book.note(ACCOUNT, now + 1, "t1", now)
    barrier = threading.Barrier(8)
    answers: list[object] = []

    def ask() -> None:
        barrier.wait()
        answers.append(book.admit(ACCOUNT, now + 2))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(answer is None for answer in answers) == 1, answers
    assert load(tmp_path / "accounts.json")[ACCOUNT].last_start == now + 2


def test_held_tasks_survive_a_sigkill_of_the_engine_and_launch_once(setup: Setup) -> None:
    """An engine SIGKILLed while it holds two queued tasks of a limited account: the next
    engine holds them on until the reset (the book on disk), then launches each once."""
    from conftest import wait_for

    key = {"ANTHROPIC_API_KEY": "sk-test-kill"}
    _profile_with_env(setup, key, stagger=0.5)
    account = accounts.of_task(key, {}, os.environ)
    until = time.time() + 8
    setup.state.mkdir(parents=True, exist_ok=True)
    book = {account: {"until": until, "by": "earlier", "last_start": None}}
    (setup.state / "accounts.json").write_text(json.dumps(book))
    for name in ("a", "b"):
        setup.drop(f"{name}.toml", setup.task(name, "print: hi"))
    engine = setup.start()
    try:
        wait_for(lambda: len(setup.manifests()) == 2, timeout=60)
    finally:
        engine.kill()  # SIGKILL, by its PID
        engine.wait(timeout=30)
    assert {m["status"] for m in setup.manifests().values()} == {"queued"}
    assert accounts.read_limits(setup.state)[account]["until"] == until
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    manifests = setup.manifests()
    assert {m["status"] for m in manifests.values()} == {"completed"}, manifests
    for m in manifests.values():
        assert _launched_at(setup, m["task_id"]) >= until  # exactly one launch each


def test_the_check_notes_a_limit_first_and_staggers_the_resumes_after_it(tmp_path: Path) -> None:
    """The engine's gate on a check (``Accounts._account_gate``): a limit wait with a reset
    time puts the account in the book before the decision is applied; after the reset the
    first waiting task's resume goes through, the second's (same instant) is held as a
    ``waiting`` task looked at again ``stagger`` s later, and an operator's resume is not."""
    from types import SimpleNamespace

    from supervisor.engine.accounts import Accounts

    gate = Accounts()
    gate.book = AccountBook(tmp_path, AccountsSpec(stagger=4))
    gate.live, gate.task_accounts, gate.held_kinds = {}, {}, {}

    def runtime(task_id: str, state: TaskState) -> object:
        manifest = SimpleNamespace(account=ACCOUNT)
        return SimpleNamespace(
            manifest=manifest, state=state, task=SimpleNamespace(task_id=task_id)
        )

    running = TaskState(status=Status.RUNNING)
    waiting = TaskState(status=Status.WAITING, limit_waits=1, resume_at=120.0)
    limit = Signals(now=100.0, limit=True, limit_resume_at=120.0)
    wait = Decision(state=waiting, events=(Event.WAITING,))
    assert gate._account_gate(runtime("t1", running), limit, wait) is wait  # type: ignore[arg-type]
    assert load(tmp_path / "accounts.json")[ACCOUNT].until == 120.0  # written ahead
    resume = Decision(state=TaskState(status=Status.RUNNING), events=(Event.RESUMED,))
    at_reset = Signals(now=121.0)
    assert gate._account_gate(runtime("t1", waiting), at_reset, resume) is resume  # type: ignore[arg-type]
    held = gate._account_gate(runtime("t2", waiting), at_reset, resume)  # type: ignore[arg-type]
    assert held.state == waiting and held.events == () and held.next_check == pytest.approx(4.0)
    asked = Signals(now=121.0, resume_requested=True)
    assert gate._account_gate(runtime("t3", waiting), asked, resume) is resume  # type: ignore[arg-type]
    later = Signals(now=125.0)
    assert gate._account_gate(runtime("t2", waiting), later, resume) is resume  # type: ignore[arg-type]
