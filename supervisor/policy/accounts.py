"""The account's limits (issue 26), decided purely: no I/O, no clock (``now`` is a parameter).

An account (:mod:`supervisor.accounts`) is the set of tasks that share credentials. When a
run of an account meets a usage limit that names its reset time, every other run of that
account would meet it too, so the engine keeps a *book*: account → :class:`AccountLimit`.

* :func:`limit_reset`: a decision is a usage-limit wait with a reset time (the one that
  puts an account in the book, through :func:`noted`);
* :func:`admit`: may a run of an account start now (a queued task's launch, or a waiting
  task's resume at the end of its wait)? Held before the reset ("account limited until
  HH:MM"); after it, the starts of that account are spaced ``stagger`` seconds apart (no
  thundering herd: agent-deck saw a burst of simultaneous restarts cause a 401 cascade);
  and never more live runs than the ``[accounts] max_concurrent`` cap. An admitted start is
  recorded in the book it returns;
* :func:`held_resume`: the decision that replaces a resume the account does not admit yet
  (same state, looked at again when the hold ends);
* :func:`pruned`: the book without the accounts whose limit and stagger are long over.

Rows of the state table (:mod:`supervisor.policy`): a queued task whose account is held
stays ``queued`` (no event); a waiting task whose resume is held stays ``waiting``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from supervisor.accounts import believable, limited_text
from supervisor.policy.model import MIN_CHECK, Decision, Signals, TaskState
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import Status

#: Seconds an account stays in the book after its reset and last staggered start, so a
#: start that comes a little late (a loaded engine) is still spaced from the one before.
LINGER = 60.0

HoldKind = Literal["limited", "stagger", "cap"]


@dataclass(frozen=True)
class AccountLimit:
    """One account in the book.

    Attributes:
        until: when the limit resets (epoch seconds, the time the API announced).
        by: the task id whose run met the limit.
        last_start: the latest start admitted after the reset (epoch seconds), ``None``
            before the first.
    """

    until: float
    by: str
    last_start: float | None = None


Book = Mapping[str, AccountLimit]


@dataclass(frozen=True)
class Hold:
    """Why a start of an account may not happen now.

    Attributes:
        kind: ``limited`` (before the reset), ``stagger`` (after it, too soon after the
            account's last start) or ``cap`` (the account's live runs are at its cap).
        until: when to ask again (epoch seconds); ``None`` for ``cap`` (when a run ends).
        cap: the cap, for ``cap``.
    """

    kind: HoldKind
    until: float | None = None
    cap: int | None = None


@dataclass(frozen=True)
class Admission:
    """:func:`admit`'s answer: ``hold`` is ``None`` when the start may happen; ``book`` is
    the book after it (an admitted start after a reset recorded as ``last_start``)."""

    hold: Hold | None
    book: Book


def limit_reset(before: TaskState, decision: Decision, signals: Signals) -> float | None:
    """The reset time (epoch s) when ``decision`` moves a run into a usage-limit wait whose
    reset the agent reported (:func:`supervisor.policy.outcomes.wait_limit` at the reset
    time), else ``None``: a backoff without a reset time, a transient wait or any other
    decision holds no account."""
    if Event.WAITING not in decision.events or decision.state.status != Status.WAITING:
        return None
    if not signals.limit or signals.limit_resume_at is None:
        return None
    if signals.limit_resume_at <= signals.now:
        return None
    if decision.state.limit_waits <= before.limit_waits:
        return None  # not a limit wait (a transient one)
    return signals.limit_resume_at


def noted(
    book: Book, account: str, reset_at: float, by: str, now: float
) -> dict[str, AccountLimit]:
    """``book`` with ``account`` limited until ``reset_at`` (met by task ``by``): the later
    of two resets wins; a reset already past at ``now``, or not
    :func:`~supervisor.accounts.believable` (not finite, over 8 days ahead: it would hold the
    account for ever), changes nothing."""
    new = dict(book)
    old = book.get(account)
    if not believable(reset_at, now) or reset_at <= now:
        return new
    if old is not None and old.until >= reset_at:
        return new
    last = old.last_start if old is not None else None
    new[account] = AccountLimit(until=reset_at, by=by, last_start=last)
    return new


def admit(
    book: Book,
    account: str | None,
    now: float,
    stagger: float,
    running: int = 0,
    cap: int | None = None,
) -> Admission:
    """May a run of ``account`` start at ``now``? ``running``: the live runs of that
    account now (the engine's slots: ``waiting`` tasks hold one too); ``cap``: ``[accounts]
    max_concurrent`` (``None``: no cap); ``stagger``: seconds between two starts of the
    account after its reset, counted from the last start or from ``now`` when that start
    lies ahead of ``now`` (the wall clock stepped back: attack-classes.md, Time). A task
    with no account (``None``) is never held."""
    if account is None:
        return Admission(None, book)
    if cap is not None and running >= cap:
        return Admission(Hold("cap", cap=cap), book)
    entry = book.get(account)
    if entry is None:
        return Admission(None, book)
    if now < entry.until:
        return Admission(Hold("limited", until=entry.until), book)
    if entry.last_start is not None and entry.last_start > now:
        # A start "in the future" is the wall clock stepped back: count the stagger from
        # now, never from the start (an hour back would hold the account an hour).
        entry = dataclasses.replace(entry, last_start=now)
        book = {**book, account: entry}
    if entry.last_start is not None and now < entry.last_start + stagger:
        return Admission(Hold("stagger", until=entry.last_start + stagger), book)
    started = dataclasses.replace(entry, last_start=now)
    return Admission(None, {**book, account: started})


def pruned(book: Book, now: float, stagger: float) -> dict[str, AccountLimit]:
    """``book`` without the accounts whose reset and last start are more than ``stagger``
    + :data:`LINGER` seconds past at ``now``."""
    keep = {}
    for account, entry in book.items():
        last = max(entry.until, entry.last_start if entry.last_start is not None else entry.until)
        if now < last + stagger + LINGER:
            keep[account] = entry
    return keep


#: The states a resume starts a new run from: a wait, or a failed run's backoff.
_RESTING = frozenset({Status.WAITING, Status.CRASHED, Status.HUNG})


def resumes_from_wait(before: TaskState, decision: Decision, signals: Signals) -> bool:
    """``decision`` starts a new run of a ``waiting``, ``crashed`` or ``hung`` task at the
    end of its wait or backoff (not an operator's ``supervise resume``, never held)."""
    return (
        before.status in _RESTING
        and Event.RESUMED in decision.events
        and not signals.resume_requested
    )


def held_resume(before: TaskState, hold: Hold, now: float, why: str) -> Decision:
    """The decision that replaces a resume ``hold`` does not admit yet: the task stays as it
    was (``waiting``), looked at again when the hold ends (a cap: ``MIN_CHECK`` s later at
    the earliest, when a run of the account may have ended); ``why``: the reason's words."""
    delay = (hold.until - now) if hold.until is not None else 1.0
    return Decision(state=before, next_check=max(MIN_CHECK, delay), reason=why)


def hold_reason(hold: Hold) -> str:
    """The words of ``hold``: ``account limited until HH:MM`` (the machine's local time:
    :func:`supervisor.accounts.limited_text`), ``account resuming: staggered starts``, or
    ``account at its cap of N live runs``."""
    if hold.kind == "limited" and hold.until is not None:
        return limited_text(hold.until)
    if hold.kind == "stagger":
        return "account resuming: staggered starts"
    return f"account at its cap of {hold.cap} live runs"
