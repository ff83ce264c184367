"""The profile's daily cap (issue 26): ``[budget] daily_usd``.

Once a profile's spend of the local day (:mod:`supervisor.costs`: every task's spend split
over days; the engine keeps the running total, :mod:`supervisor.engine.dailyspend`) has
reached ``daily_usd``, no queued task of the profile is launched: it stays ``queued`` with
the reason (:func:`daily_hold`), running tasks go on (their resumes are not launches), and
launches resume at the next local midnight. The notifier is called once per day the cap is
reached (:func:`notify_due`, from the engine's record of the day it notified).

Pure, like the rest of :mod:`supervisor.policy`: the time (``now``, epoch s), the local time
zone's offset from UTC at ``now`` (seconds east) and the day's total are parameters.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: Seconds in a day.
DAY = 86400.0


@dataclass(frozen=True)
class Hold:
    """New launches are held for the rest of the day.

    Attributes:
        day: the local day (``YYYY-MM-DD``).
        spent_usd: what the profile spent that day so far.
        daily_usd: the cap.
        until: epoch s of the next local midnight, when launches resume.
        reason: ``daily budget reached: $X of $Y`` (what the views print for a held task).
    """

    day: str
    spent_usd: float
    daily_usd: float
    until: float
    reason: str


def usd(amount: float) -> str:
    """``$12.40``; below a cent, enough digits to see it (``$0.0042``)."""
    if amount == 0 or abs(amount) >= 0.01:
        return f"${amount:,.2f}"
    return f"${amount:.6f}".rstrip("0")


def local_day(now: float, offset: float) -> str:
    """``YYYY-MM-DD`` of ``now`` (epoch s) in a zone ``offset`` seconds east of UTC."""
    return (datetime.fromtimestamp(now, UTC) + timedelta(seconds=offset)).strftime("%Y-%m-%d")


def next_day(now: float, offset: float) -> float:
    """Epoch s of the first local midnight after ``now`` (at the offset of ``now``)."""
    local = now + offset
    return (local // DAY + 1) * DAY - offset


def daily_hold(
    now: float, offset: float, spent_today: float, daily_usd: float | None
) -> Hold | None:
    """The hold on new launches at ``now``, or ``None`` (no cap, or the day's spend is
    below it). ``spent_today``: USD the profile spent in the local day of ``now``."""
    if daily_usd is None or spent_today < daily_usd:
        return None
    reason = f"daily budget reached: {usd(spent_today)} of {usd(daily_usd)}"
    return Hold(local_day(now, offset), spent_today, daily_usd, next_day(now, offset), reason)


#: Days the engine's record remembers as notified (:func:`notify_due`): enough that a wall
#: clock stepped back over a midnight, or forward by days and back, never notifies a day twice.
NOTIFIED_DAYS = 8


def notify_due(
    hold: Hold | None, record_day: str | None, settled: bool, notified: Collection[str] = ()
) -> bool:
    """Whether the notifier is to be called now: the cap holds today, and the engine's
    durable record names this day but is not ``settled`` (its call neither ended nor runs
    now: a killed engine's call, cut short, is made again; one that ended is never made
    twice), or names another day (``record_day``; ``None``: none) and this day is not one
    of the days already ``notified`` (the record's last :data:`NOTIFIED_DAYS`: a wall clock
    stepped back over midnight comes back to a day told already; issue 26's "notified
    once")."""
    if hold is None:
        return False
    if hold.day == record_day:
        return not settled
    return hold.day not in notified


def told(notified: object) -> list[str]:
    """The record's ``days`` as read (anything: a hand edit): its strings, else none."""
    return [d for d in notified if isinstance(d, str)] if isinstance(notified, list) else []


def remember(notified: object, day: str) -> list[str]:
    """The record's ``days`` after ``day`` was notified: the last :data:`NOTIFIED_DAYS`
    days, oldest first (``notified``: the record's value as read, see :func:`told`)."""
    return [*(d for d in told(notified) if d != day), day][-NOTIFIED_DAYS:]
