"""The engine's book of the accounts' usage limits (issue 26): what
:mod:`supervisor.policy.accounts` decides over, kept in memory and in
``state_dir/accounts.json`` (written atomically and fsynced, so a limit holds across an
engine restart).

A limit is written *before* the decision that met it is applied (write-ahead): an engine
killed between the two finds the account held at its next start, and the task's next check
decides its wait again. A start admitted after a reset is written before the task starts, so
a restart never lets a second start of the account skip the stagger.

Thread safety: checks (on the dispatcher's pool) note limits and admit resumes; the intake
job admits launches. One lock guards the book; no other lock is taken under it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from supervisor.accounts import believable, believable_entry, is_account, read_book
from supervisor.config.accounts import AccountsSpec
from supervisor.diskio import atomic_write
from supervisor.policy import accounts as rules
from supervisor.policy.accounts import AccountLimit, Hold
from supervisor.taskdir import layout
from supervisor.taskid import shown

log = logging.getLogger("supervise.engine")

#: Seconds a row read from the fleet's book is reused by the next admissions of its account
#: (an intake tick admits each held queued task once).
SEEN_FOR = 0.5


def load(path: Path, now: float | None = None) -> dict[str, AccountLimit]:
    """The book in ``path`` (:func:`supervisor.accounts.read_book`: a regular file of at
    most 1 MiB, no symlink, no FIFO); ``{}`` when it is missing. An entry that does not read
    as one (a hand edit, a torn disk), or whose times are not :func:`~supervisor.accounts.
    believable` at ``now`` (default: the time now; a reset over 8 days away would hold its
    account for ever), is skipped with a warning naming it: it holds nothing back."""
    now = time.time() if now is None else now
    try:
        data = read_book(path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("%s: unreadable (%s); no account is held by it", path, exc)
        return {}
    book: dict[str, AccountLimit] = {}
    for account, entry in data.items() if isinstance(data, dict) else ():
        limit = _entry(entry, now) if is_account(account) else None
        if limit is None:
            log.warning(
                "%s: entry %s is not a limit (a finite reset at most 8 days ahead); skipped",
                path,
                shown(str(account)),
            )
            continue
        book[account] = limit
    return book


def _entry(entry: object, now: float) -> AccountLimit | None:
    """One entry of the book, or None when it is not a believable limit."""
    if not believable_entry(entry, now):
        return None
    last = entry.get("last_start")
    return AccountLimit(
        until=float(entry["until"]),
        by=entry["by"],
        last_start=None if last is None else float(last),
    )


class SharedBook(Protocol):
    """The fleet's book (:class:`supervisor.cluster.accountstore.AccountStore`): each call
    returns ``None`` when the database did not answer."""

    def read(self, account: str) -> tuple[dict[str, Any] | None, float] | None:
        """``(entry or None, the database's time)``."""

    def note(self, account: str, until: float, by: str) -> bool:
        """Record a limit."""

    def start(self, account: str, stagger: float) -> bool | None:
        """Take the account's next staggered start for the fleet."""


class AccountBook:
    """The accounts' limits of one engine, under its own lock; with ``shared`` (a
    ``[cluster]`` profile: set by the engine from its intake) the fleet's book decides and
    this one mirrors it, and holds alone while the database does not answer.

    Args:
        state_dir: the profile's state dir (the book is ``accounts.json`` in it).
        spec: the profile's ``[accounts]`` (``stagger``, ``max_concurrent``).
    """

    def __init__(self, state_dir: Path, spec: AccountsSpec) -> None:
        self.path = state_dir / layout.ACCOUNTS
        self.spec = spec
        self._lock = threading.Lock()
        self._book = load(self.path)
        self.shared: SharedBook | None = None
        # account -> (monotonic s of the read, the row, the database's time then)
        self._seen: dict[str, tuple[float, object, float]] = {}

    def note(self, account: str | None, reset_at: float, by: str, now: float) -> None:
        """``account`` met a usage limit that resets at ``reset_at`` (epoch s) in task
        ``by``'s run (:func:`~supervisor.policy.accounts.noted`); written at once."""
        if account is None:
            return
        with self._lock:
            book = rules.noted(self._book, account, reset_at, by, now)
            if book != self._book:
                log.warning("account %s limited until %s (met by %s)", account, reset_at, by)
                self._write(book)
        if self.shared is not None and believable(reset_at, now) and reset_at > now:
            self.shared.note(account, reset_at, by)
            with self._lock:
                self._seen.pop(account, None)

    def admit(self, account: str | None, now: float, running: int = 0) -> Hold | None:
        """Whether a run of ``account`` may start at ``now`` (``running``: its live runs,
        0 for a resume: it holds its slot already); ``None`` admits it, and a start after a
        reset is recorded (:func:`~supervisor.policy.accounts.admit`)."""
        if account is None:
            return None
        if self.shared is not None:
            found = self._read_shared(account)
            if found is not None:
                return self._admit_shared(account, now, running, *found)
        with self._lock:
            book = rules.pruned(self._book, now, self.spec.stagger)
            answer = rules.admit(
                book, account, now, self.spec.stagger, running, self.spec.max_concurrent
            )
            if answer.book != self._book:
                self._write(dict(answer.book))
            return answer.hold

    def _read_shared(self, account: str) -> tuple[object, float] | None:
        """The fleet's row of ``account`` and the database's time, read at most once per
        :data:`SEEN_FOR` s (many held tasks of one account cost one statement per tick, not
        one each); a start or a limit noted here reads it again."""
        assert self.shared is not None
        tick = time.monotonic()
        with self._lock:
            seen = self._seen.get(account)
        if seen is not None and tick - seen[0] < SEEN_FOR:
            return seen[1], seen[2] + (tick - seen[0])
        found = self.shared.read(account)
        if found is not None:
            with self._lock:
                self._seen[account] = (tick, found[0], found[1])
        return found

    def _admit_shared(
        self, account: str, now: float, running: int, entry: object, db_now: float
    ) -> Hold | None:
        """:meth:`admit` by the fleet's row ``entry`` on the database's clock ``db_now``:
        the policy decides; a start after the reset is then taken for the whole fleet
        (:meth:`SharedBook.start`: another host may have taken it). The row is mirrored in
        the local book; a hold's time is given back on this host's clock (``now``)."""
        limit = _entry(entry, db_now)
        if limit is None:
            limit = self._unshared(account, db_now)
        book = {account: limit} if limit is not None else {}
        answer = rules.admit(
            book, account, db_now, self.spec.stagger, running, self.spec.max_concurrent
        )
        hold = answer.hold
        if hold is None and limit is not None:
            assert self.shared is not None
            with self._lock:
                self._seen.pop(account, None)
            if self.shared.start(account, self.spec.stagger) is False:
                hold = Hold("stagger", until=db_now + self.spec.stagger)
        with self._lock:
            if limit is not None and self._book.get(account) != limit:
                self._write({**self._book, account: limit})
        if hold is None or hold.until is None:
            return hold
        return dataclasses.replace(hold, until=hold.until - db_now + now)

    def _unshared(self, account: str, db_now: float) -> AccountLimit | None:
        """A limit this host noted while the database did not answer (the fleet has no
        row for the account, the local book holds it at ``db_now``): written to the fleet
        now and held by; else ``None``."""
        with self._lock:
            local = self._book.get(account)
        if local is None or local.until <= db_now:
            return None
        assert self.shared is not None
        self.shared.note(account, local.until, local.by)
        return dataclasses.replace(local, last_start=None)

    def snapshot(self) -> dict[str, AccountLimit]:
        """A copy of the book (for tests and the log)."""
        with self._lock:
            return dict(self._book)

    def _write(self, book: dict[str, AccountLimit]) -> None:
        """Keep ``book`` and write it; a failed write (a full disk) keeps it in memory and
        logs why: the holds go on in this engine, a restart would not see them."""
        self._book = book
        data = {
            account: {"until": e.until, "by": e.by, "last_start": e.last_start}
            for account, e in sorted(book.items())
        }
        try:
            atomic_write(self.path, json.dumps(data, indent=1).encode())
        except OSError as exc:
            log.error(
                "cannot write %s: %s; the accounts' limits are kept in memory", self.path, exc
            )
