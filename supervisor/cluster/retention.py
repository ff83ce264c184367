"""Retention (issue 25): ``supervise cluster prune --older-than D`` and the sweeper's
periodic prune (``[cluster] prune_after``).

What goes: tasks in a final state (:data:`~supervisor.taskdir.states.FINAL`) whose row has
not changed for ``older_than`` seconds (``updated_at``: the ending, or a later write), their
``supervise_events`` and ``supervise_controls`` rows and their ended procrastinate jobs
(``succeeded``, ``failed``, ``cancelled``, ``aborted``; a job's ``args`` name its task), and
retired hosts: not ``alive``, no heartbeat for ``older_than`` seconds, and no task left that
names them (as owner or pin).

How: migration 0007's ``supervise_prune(older_than, batch)``, a ``SECURITY DEFINER``
function that removes one batch in the caller's transaction: at most ``batch`` tasks (and
what belongs to them) and ``batch`` hosts, so a transaction holds its row locks for
milliseconds and writers of live rows never wait on it (the rows it takes are ended ones,
which no host writes). Rows another prune holds are skipped (``FOR UPDATE SKIP LOCKED``,
PostgreSQL docs, SELECT "The Locking Clause"), so two prunes at once split the work and
each row is counted once, by the prune that removed it. A live task is never removed: the
function itself checks the state of each row it locks, whoever calls it, and no role of
the fleet has DELETE on the tables (roles.sql grants only EXECUTE, to ``supervise_engine``).

:func:`prune_some` is the one batch (what the sweeper calls through :class:`Schedule`),
:func:`prune` repeats it until a batch comes back short, :func:`plan` counts without
removing (``--dry-run``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, fields

import psycopg

from supervisor.cluster.db import ClusterError, connect, one_line
from supervisor.cluster.sqlfiles import query
from supervisor.taskdir.states import FINAL

log = logging.getLogger("supervise.cluster")

#: Rows of each kind one transaction removes at most (a task's events and jobs go with it).
BATCH = 500
#: Largest batch ``--batch`` takes: a bigger one would hold its locks for long.
MAX_BATCH = 10_000
#: Seconds between two periodic prunes of one sweeper (one batch each; a full batch makes
#: the next one due at the next sweep, so a backlog drains a batch per second).
PRUNE_EVERY = 60.0
#: Largest ``older_than`` in seconds (100 years): PostgreSQL's interval arithmetic
#: overflows far beyond, and no fleet keeps rows longer.
MAX_AGE = 100 * 365 * 86400.0


@dataclass(frozen=True)
class Pruned:
    """Rows removed (or, for :func:`plan`, that would be): tasks, their events, their
    control requests, their ended procrastinate jobs, and retired hosts."""

    tasks: int = 0
    events: int = 0
    controls: int = 0
    jobs: int = 0
    hosts: int = 0

    def __add__(self, other: Pruned) -> Pruned:
        return Pruned(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def as_dict(self) -> dict[str, int]:
        """The counts by name."""
        return asdict(self)


def checked(older_than: float, batch: int) -> None:
    """Check the two arguments of a prune.

    Raises:
        ValueError: ``older_than`` outside 0 to :data:`MAX_AGE` seconds, or ``batch``
            outside 1 to :data:`MAX_BATCH` (one line).
    """
    if not 0 <= older_than <= MAX_AGE:
        raise ValueError(f"--older-than: give at most 100 years (36500d), not {older_than:g} s")
    if not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"--batch: give 1 to {MAX_BATCH} rows per transaction, not {batch}")


def prune_some(conn: psycopg.Connection, older_than: float, batch: int = BATCH) -> Pruned:
    """One batch, in a transaction of its own on ``conn`` (committed when this returns; a
    connection in autocommit mode or idle outside a transaction).

    Args:
        older_than: seconds a final task's row has been unchanged (and a retired host
            silent) before it goes; 0 to :data:`MAX_AGE`.
        batch: at most this many tasks and this many hosts (1 to :data:`MAX_BATCH`).

    Raises:
        ValueError: ``older_than`` or ``batch`` out of range.
        psycopg.Error: the database refused (``InsufficientPrivilege``: the login lacks
            ``supervise_engine``'s EXECUTE on ``supervise_prune``) or went away; nothing of
            this batch is removed.
    """
    checked(older_than, batch)
    with conn.transaction():
        row = conn.execute(query("prune_batch"), (older_than, batch)).fetchone()
    return Pruned(*(int(n) for n in row)) if row else Pruned()


def prune(dsn: str, older_than: float, batch: int = BATCH) -> Pruned:
    """Batches of :func:`prune_some` until one removes fewer than ``batch`` tasks and hosts;
    the sum of what they removed.

    Raises:
        ValueError: as :func:`prune_some`.
        ClusterError: the database cannot be reached or refused (the batches committed
            before it stay removed; run it again).
    """
    checked(older_than, batch)
    total = Pruned()
    with connect(dsn) as conn:
        while True:
            try:
                done = prune_some(conn, older_than, batch)
            except psycopg.errors.UndefinedFunction as exc:
                raise ClusterError(
                    "the cluster database has no supervise_prune (schema older than 7); "
                    "run 'supervise cluster init'"
                ) from exc
            except psycopg.Error as exc:
                raise ClusterError(f"cluster prune failed: {one_line(exc)}") from exc
            total += done
            if done.tasks < batch and done.hosts < batch:
                return total


def plan(dsn: str, older_than: float) -> Pruned:
    """What :func:`prune` would remove now, counted in one read-only statement.

    Raises:
        ValueError: ``older_than`` out of range.
        ClusterError: the database cannot be reached or refused.
    """
    checked(older_than, 1)
    states = sorted(str(s) for s in FINAL)
    with connect(dsn) as conn:
        try:
            row = conn.execute(query("prune_plan"), (states, older_than, older_than)).fetchone()
        except psycopg.Error as exc:
            raise ClusterError(f"cluster prune failed: {one_line(exc)}") from exc
    return Pruned(*(int(n) for n in row)) if row else Pruned()


class Schedule:
    """The sweeper's periodic prune: :meth:`run` prunes one batch when one is due (every
    :data:`PRUNE_EVERY` seconds of the monotonic clock; at once again after a full batch),
    else does nothing. ``older_than`` None (``prune_after`` unset): never.

    A failure (the login lacks the right, the database went away) is logged, one line,
    and tried again :data:`PRUNE_EVERY` seconds later; it never fails the sweep."""

    def __init__(self, older_than: float | None, every: float = PRUNE_EVERY) -> None:
        self.older_than, self.every = older_than, every
        self.due = time.monotonic()

    def run(self, conn: psycopg.Connection, batch: int = BATCH) -> Pruned | None:
        """One batch on ``conn`` (outside a transaction) if due; what it removed, or None."""
        now = time.monotonic()
        if self.older_than is None or now < self.due:
            return None
        self.due = now + self.every
        try:
            done = prune_some(conn, self.older_than, batch)
        except psycopg.Error as exc:
            log.warning(
                "cluster: periodic prune failed: %s; next try in %g s", one_line(exc), self.every
            )
            return None
        if done.tasks >= batch or done.hosts >= batch:
            self.due = now
        if any(done.as_dict().values()):
            log.info("cluster: pruned %s", describe(done))
        return done


def describe(done: Pruned) -> str:
    """``3 tasks, 12 events, 0 control requests, 1 job, 0 hosts`` (one line)."""
    names = {"controls": "control request"}
    parts = []
    for name, count in done.as_dict().items():
        word = names.get(name, name.rstrip("s"))
        parts.append(f"{count} {word}{'' if count == 1 else 's'}")
    return ", ".join(parts)
