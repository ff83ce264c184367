"""The accounts' usage limits shared by the fleet (issue 26, part 3): the table
``supervise_accounts`` (schema v8), read and written on the engine's pool (no connection of
its own), every call bounded (a pooled connection waited for at most :data:`WAIT` s, each
statement by the server's ``statement_timeout``).

* :meth:`AccountStore.read`: one account's row and the database's time, at admission (one
  statement); the engine's :class:`~supervisor.engine.accountbook.AccountBook` decides over
  it with :mod:`supervisor.policy.accounts`, on the database's clock (a host whose clock is
  an hour ahead does not end a hold early);
* :meth:`AccountStore.note`: a run met a limit with a believable reset; the later of two
  resets wins, atomically (two hosts noting at once);
* :meth:`AccountStore.start`: take the account's next staggered start after the reset for
  the whole fleet (one ``UPDATE ... RETURNING``): the fleet resumes one run per stagger,
  not one per host.

The database not answering: each call returns ``None`` (the caller holds by its own book
meanwhile), the failure goes to the engine's one account of outages
(:class:`~supervisor.cluster.connections.Outage`: one line when an outage starts, one when
it ends, whichever part of the engine saw it first), and for :data:`RETRY` s after a failure
no call is tried (an admission does not wait on a dead server again and again).
``[accounts] max_concurrent`` stays per host (the fleet's rows carry no account).
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import psycopg_pool
from psycopg_pool import ConnectionPool

from supervisor.cluster.connections import Outage
from supervisor.cluster.db import one_line
from supervisor.cluster.sqlfiles import query

#: Seconds an admission waits for a pooled connection.
WAIT = 2.0
#: Seconds after a failure before the database is tried again.
RETRY = 5.0


class AccountStore:
    """``supervise_accounts`` through the engine's pool (any thread).

    Args:
        pool: the engine's pool (:class:`~supervisor.cluster.connections.EnginePool`).
        host_id: this host (written as ``noted_host``).
        outage: the engine's account of outages (default: one of its own).
    """

    #: How an outage's line names this part of the engine.
    WHAT = "the accounts' book (this host holds by its own until the database answers)"

    def __init__(self, pool: ConnectionPool, host_id: str, outage: Outage | None = None) -> None:
        self.pool = pool
        self.host_id = host_id
        self.outage = outage if outage is not None else Outage()
        self._retry_at = 0.0  # monotonic s

    def read(self, account: str) -> tuple[dict[str, Any] | None, float] | None:
        """``(entry, db_now)``: the account's row as a book entry (``{"until", "by",
        "last_start"}``, unchecked: the caller applies ``believable_entry``) or ``None``
        when it has none, and the database's time (epoch s); ``None`` when the database
        did not answer."""
        row = self._run(query("account_read"), (account,), fetch=True)
        if row is None:
            return None
        until, by, last, db_now = row
        if until is None:
            return None, float(db_now)
        return {"until": until, "by": by, "last_start": last}, float(db_now)

    def note(self, account: str, until: float, by: str) -> bool:
        """Record that ``account`` is limited until ``until`` (epoch s, met by task
        ``by``); False when the database did not answer (the local book has it)."""
        return self._run(query("account_note"), (account, until, by, self.host_id)) is not None

    def start(self, account: str, stagger: float) -> bool | None:
        """Take the account's next start after its reset: True when this host got it (its
        ``last_start`` is now, database time), False when the reset is not past or another
        start was less than ``stagger`` s ago, ``None`` when the database did not answer."""
        row = self._run(query("account_start"), (account, stagger), fetch=True)
        if row is None:
            return None
        return row != ()

    def _run(self, sql: str, params: tuple[Any, ...], fetch: bool = False) -> Any:
        """One statement; its first row (``()`` for none) when ``fetch``, else True;
        ``None`` when the database did not answer (logged once per outage). A pooled
        connection the server ended (a restart) fails once and is discarded: the statement
        is tried once more on another, so the first admission after a restart is not
        decided by the local book alone."""
        began = time.monotonic()
        if began < self._retry_at:
            return None
        for attempt in range(2):
            try:
                found = self._once(sql, params, fetch)
            except psycopg.OperationalError as exc:
                if attempt == 0 and not isinstance(exc, psycopg_pool.PoolTimeout):
                    continue
                return self._failed(exc, began)
            except psycopg.Error as exc:
                return self._failed(exc, began)
            self.outage.ok()
            return found
        return None

    def _once(self, sql: str, params: tuple[Any, ...], fetch: bool) -> Any:
        """:meth:`_run`'s statement on one pooled connection (given back, and discarded by
        the pool when it broke)."""
        conn = self.pool.getconn(timeout=WAIT)
        try:
            cur = conn.execute(sql, params)
            return (cur.fetchone() or ()) if fetch else True
        finally:
            self.pool.putconn(conn)

    def _failed(self, exc: BaseException, began: float) -> None:
        self._retry_at = time.monotonic() + RETRY
        self.outage.failed(exc, self.WHAT, began)


def limited(dsn: str) -> list[str]:
    """``supervise hosts``: one line per account of the fleet limited now, ``acct-…:
    account limited until HH:MM (noted by TASK on HOST)``, its words escaped; a row that holds
    nothing (:func:`~supervisor.accounts.believable_entry` on the database's clock) is
    left out; ``[]`` on a database without the table (schema before v8).

    Raises:
        ClusterError: the database cannot be reached or refused.
    """
    from supervisor.accounts import believable_entry, is_account, limited_text
    from supervisor.cluster.db import ClusterError, connect
    from supervisor.taskid import shown

    with connect(dsn) as conn:
        try:
            found = conn.execute(query("accounts_limited")).fetchall()
        except psycopg.errors.UndefinedTable:
            return []
        except psycopg.Error as exc:
            raise ClusterError(f"cannot read the accounts: {one_line(exc)}") from exc
    lines = []
    for account, until, by, host, db_now in found:
        entry = {"until": until, "by": by, "last_start": None}
        if is_account(account) and believable_entry(entry, db_now):
            lines.append(
                f"{account}: {limited_text(until)} "
                f"(noted by {shown(str(by))} on {shown(str(host))})"
            )
    return lines
