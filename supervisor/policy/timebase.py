"""Clock steps, in pure arithmetic: detecting a step of the wall clock and moving the
policy's remembered times with it (issue 20, Time).

The engine measures every interval on its own clock (:mod:`supervisor.engine.clock`): the
wall clock at a known moment plus CLOCK_BOOTTIME since then, which no one can set. A step of
the wall clock (NTP's first sync on a machine without a real-time clock, a VM snapshot
restored) shows as a change of ``wall - boottime``; this module says how large it is and
re-bases what the policy remembers, so no interval grows or shrinks by the step.

No I/O and no clock: every time is an argument, in seconds.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from supervisor.policy.model import TaskState

#: The :class:`TaskState` fields that hold a moment (epoch s on the engine's clock).
TIME_FIELDS = (
    "started_at",
    "launched_at",
    "stale_since",
    "gone_since",
    "resume_at",
    "active_since",
)


@dataclass(frozen=True)
class Mark:
    """One reading of both clocks: ``wall`` (epoch s, CLOCK_REALTIME), ``boot`` (s of
    CLOCK_BOOTTIME, which counts suspend and is never stepped) and ``boot_id`` (the
    kernel's ``/proc/sys/kernel/random/boot_id``: CLOCK_BOOTTIME restarts at each boot)."""

    wall: float
    boot: float
    boot_id: str


def drift(before: Mark, after: Mark) -> float | None:
    """Seconds the wall clock was stepped between two marks: how much more (or less, when
    negative) it advanced than CLOCK_BOOTTIME. ``None``: unknown, the marks come from
    different boots, ``before`` is not before ``after`` on CLOCK_BOOTTIME (which never goes
    back within a boot: a damaged or foreign mark), or a number is not finite."""
    if before.boot_id != after.boot_id or not 0.0 <= before.boot <= after.boot:
        return None
    value = (after.wall - before.wall) - (after.boot - before.boot)
    return value if math.isfinite(value) else None


def is_step(value: float | None, tolerance: float) -> bool:
    """A drift of more than ``tolerance`` seconds either way is a step (NTP's slewing
    moves the clock by at most 0.5 ms a second, far below any tolerance used)."""
    return value is not None and abs(value) > tolerance


def shifted(state: TaskState, delta: float) -> TaskState:
    """``state`` with every moment it remembers moved by ``delta`` seconds (the clock it
    was measured on was stepped by ``delta``): every interval between them and ``now`` on
    the new scale stays what it was."""
    if delta == 0:
        return state
    changes = {
        name: getattr(state, name) + delta
        for name in TIME_FIELDS
        if getattr(state, name) is not None
    }
    return dataclasses.replace(state, **changes) if changes else state


def clamped(state: TaskState, now: float, ahead: float) -> TaskState:
    """``state`` with no past moment later than ``now`` and no ``resume_at`` more than
    ``ahead`` seconds after it: after a step of unknown size (a reboot in between, no
    earlier mark) nothing recorded may lie in the future, so a deadline or a stale timer
    starts again rather than waiting out the step."""
    changes: dict[str, float] = {}
    for name in TIME_FIELDS:
        value = getattr(state, name)
        limit = now + ahead if name == "resume_at" else now
        if value is not None and value > limit:
            changes[name] = limit
    return dataclasses.replace(state, **changes) if changes else state


@dataclass(frozen=True)
class Seen:
    """When the engine saw a file's stamp (an mtime, on the wall clock) change.

    Attributes:
        stamp: the stamp as read (epoch s on the wall clock when it was written).
        at: the engine-clock moment taken as the change (never after ``checked``).
        checked: the engine-clock moment of the check that read ``stamp``.
    """

    stamp: float
    at: float
    checked: float


def seen_change(previous: Seen | None, stamp: float, now: float, wall_to_engine: float) -> Seen:
    """Place a file's ``stamp`` on the engine's clock at a check at ``now``.

    A stamp converted with ``wall_to_engine`` (seconds to add) is trusted only within what
    the engine saw: the first sighting is never after ``now``; a changed stamp lies between
    the previous check and ``now``; an unchanged stamp keeps its earlier moment. So a step
    of the wall clock cannot make output look fresher or staler than the engine saw it.
    """
    converted = stamp + wall_to_engine
    if previous is None:
        return Seen(stamp, min(converted, now), now)
    if stamp == previous.stamp:
        return Seen(stamp, previous.at, now)
    return Seen(stamp, min(max(converted, previous.checked), now), now)


def shifted_seen(seen: Seen | None, delta: float) -> Seen | None:
    """``seen`` with its engine-clock moments moved by ``delta`` seconds (see :func:`shifted`)."""
    if seen is None or delta == 0:
        return seen
    return dataclasses.replace(seen, at=seen.at + delta, checked=seen.checked + delta)
