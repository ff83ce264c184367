"""Issue 26, part 3, the fleet: the accounts' limits shared through PostgreSQL
(``supervise_accounts``, :mod:`supervisor.cluster.accountstore`), two hosts' books on one
real throwaway server. Admission decides on the database's clock; the stagger after a reset
is taken atomically for the fleet; a hostile row holds nothing; the database down: each
host holds by its own book, one line per outage."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cluster_support import fresh_database, postgres_executor

psycopg = pytest.importorskip("psycopg")

ACCT = "acct-0123456789ab"


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, object]]:
    with postgres_executor() as found:
        yield found


@pytest.fixture
def dsn(server: tuple[str, object]) -> Iterator[str]:
    from supervisor.cluster import schema

    with fresh_database(server[0]) as url:
        schema.init(url)
        yield url


def _pool(dsn: str):
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    pool.wait(timeout=10)
    return pool


def _host(dsn: str, tmp: Path, host: str, stagger: float = 30.0):
    from supervisor.cluster.accountstore import AccountStore
    from supervisor.config.accounts import AccountsSpec
    from supervisor.engine.accountbook import AccountBook

    (tmp / host).mkdir()
    book = AccountBook(tmp / host, AccountsSpec(stagger=stagger))
    pool = _pool(dsn)
    book.shared = AccountStore(pool, host)
    return book, pool


def _db_now(dsn: str) -> float:
    with psycopg.connect(dsn) as conn:
        return float(conn.execute("SELECT extract(epoch FROM now())").fetchone()[0])


def _row(dsn: str) -> tuple | None:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT until, noted_by, noted_host, last_start FROM supervise_accounts"
        ).fetchone()


def test_one_hosts_limit_holds_the_other_and_the_fleet_starts_one_per_stagger(
    dsn: str, tmp_path: Path
) -> None:
    a, pa = _host(dsn, tmp_path, "h0")
    b, pb = _host(dsn, tmp_path, "h1")
    try:
        now = time.time()
        a.note(ACCT, now + 3600, "t-first", now)
        assert _row(dsn)[1:3] == ("t-first", "h0")
        hold = b.admit(ACCT, time.time())
        assert hold is not None and hold.kind == "limited"
        # the reset passes (written by the database's owner, as time would)
        with psycopg.connect(dsn) as conn:
            conn.execute("UPDATE supervise_accounts SET until = extract(epoch FROM now()) - 1")
        for h in (a, b):  # forget the row each read under 0.5 s ago (SEEN_FOR)
            h._seen.clear()
        first = [h.admit(ACCT, time.time()) for h in (a, b, a, b)]
        assert [x is None for x in first].count(True) == 1, first
        assert {x.kind for x in first if x is not None} == {"stagger"}
    finally:
        pa.close()
        pb.close()


def test_a_host_clock_an_hour_ahead_is_held_by_the_database_clock(dsn: str, tmp_path: Path) -> None:
    a, pa = _host(dsn, tmp_path, "h0")
    try:
        now = time.time()
        a.note(ACCT, now + 600, "t1", now)
        hold = a.admit(ACCT, now + 3600)  # this host's clock: an hour ahead
        assert hold is not None and hold.kind == "limited"
        assert hold.until is not None and hold.until > now + 3600  # on the host's clock
    finally:
        pa.close()


@pytest.mark.parametrize(
    "until", [float("nan"), float("inf"), 10 * 365 * 86400.0], ids=["nan", "inf", "10y"]
)
def test_a_hostile_row_holds_nothing_and_a_real_limit_replaces_it(
    dsn: str, tmp_path: Path, until: float
) -> None:
    a, pa = _host(dsn, tmp_path, "h0")
    try:
        ahead = until if not math.isfinite(until) else _db_now(dsn) + until
        with psycopg.connect(dsn) as conn:
            conn.execute(
                "INSERT INTO supervise_accounts VALUES (%s, %s, %s, 'other', %s)",
                (ACCT, ahead, "\x1b[31mevil" * 100, ahead),
            )
        assert a.admit(ACCT, time.time()) is None
        now = time.time()
        a.note(ACCT, now + 60, "t-real", now)
        assert _row(dsn)[0] == pytest.approx(now + 60, abs=0.01)
        hold = a.admit(ACCT, time.time())
        assert hold is not None and hold.kind == "limited"
    finally:
        pa.close()


def test_two_hosts_noting_at_once_keep_the_later_reset(dsn: str, tmp_path: Path) -> None:
    books = [_host(dsn, tmp_path, f"h{i}") for i in range(2)]
    try:
        now = time.time()
        for _ in range(5):
            barrier = threading.Barrier(2)

            def note(i: int, barrier: threading.Barrier = barrier) -> None:
                barrier.wait()
                books[i][0].note(ACCT, now + 100 + i * 50, f"t{i}", now)

            threads = [threading.Thread(target=note, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert _row(dsn)[:3] == (pytest.approx(now + 150, abs=0.01), "t1", "h1")
    finally:
        for _, pool in books:
            pool.close()


def test_the_database_restarting_during_a_hold_falls_back_to_the_local_book(
    server: tuple[str, object], dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from support.cluster_support import wait_ready

    a, pa = _host(dsn, tmp_path, "h0")
    try:
        now = time.time()
        a.note(ACCT, now + 600, "t1", now)
        assert a.admit(ACCT, time.time()).kind == "limited"
        executor = server[1]
        caplog.set_level(logging.WARNING, "supervise.cluster")
        executor.stop()
        try:
            for _ in range(3):
                hold = a.admit(ACCT, time.time())
                assert hold is not None and hold.kind == "limited"  # the local book
                a.shared._retry_at = 0.0  # try the database each time
                a._seen.clear()
        finally:
            executor.start()
            wait_ready(dsn)
        down = [r for r in caplog.messages if "database unreachable" in r]
        assert len(down) == 1 and "holds by its own" in down[0], caplog.messages
        for _ in range(20):  # the pool's dead connections are found and replaced
            a.shared._retry_at = 0.0
            a._seen.clear()
            a.admit(ACCT, time.time())
            if any("answering again" in m for m in caplog.messages):
                break
        assert any("answering again" in m for m in caplog.messages), caplog.messages
        assert a.admit(ACCT, time.time()).kind == "limited"
    finally:
        pa.close()


def test_hosts_shows_the_fleets_limited_accounts_escaped(dsn: str) -> None:
    from supervisor.cluster.accountstore import limited

    ahead = _db_now(dsn) + 600
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO supervise_accounts VALUES (%s, %s, %s, 'h0', NULL), "
            "('acct-ffffffffffff', 'NaN', 'x', 'h1', NULL), "
            "('not-an-account', %s, 'x', 'h1', NULL)",
            (ACCT, ahead, "t\x1b[2J1", ahead),
        )
    [line] = limited(dsn)
    assert line.startswith(f"{ACCT}: account limited until ")
    assert "\x1b" not in line and line.endswith("on h0)")


def test_a_limit_noted_while_the_database_was_down_is_shared_when_it_answers(
    server: tuple[str, object], dsn: str, tmp_path: Path
) -> None:
    from support.cluster_support import wait_ready

    a, pa = _host(dsn, tmp_path, "h0")
    b, pb = _host(dsn, tmp_path, "h1")
    try:
        executor = server[1]
        executor.stop()
        try:
            now = time.time()
            a.note(ACCT, now + 600, "t-offline", now)  # the local book only
        finally:
            executor.start()
            wait_ready(dsn)
        assert _row(dsn) is None
        for _ in range(20):  # h0's pool replaces its dead connections
            a.shared._retry_at = 0.0
            a._seen.clear()
            hold = a.admit(ACCT, time.time())
            if _row(dsn) is not None:
                break
        assert hold is not None and hold.kind == "limited"
        assert _row(dsn)[1:3] == ("t-offline", "h0")
        hold = b.admit(ACCT, time.time())
        assert hold is not None and hold.kind == "limited"
    finally:
        pa.close()
        pb.close()


def test_many_held_tasks_of_one_account_do_not_cost_a_statement_each(
    dsn: str, tmp_path: Path
) -> None:
    a, pa = _host(dsn, tmp_path, "h0")
    try:
        now = time.time()
        a.note(ACCT, now + 600, "t1", now)
        reads = []
        read = a.shared.read
        a.shared.read = lambda account: reads.append(account) or read(account)
        holds = [a.admit(ACCT, time.time()) for _ in range(50)]
        assert {h.kind for h in holds} == {"limited"}
        assert 1 <= len(reads) < 50, len(reads)  # one per SEEN_FOR s, not one per task
    finally:
        pa.close()
