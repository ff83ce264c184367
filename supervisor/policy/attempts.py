"""Attempts (issue 26, part 2), decided purely: which attempt of a group wins, which are
discarded, and when the group is over. The engine (:mod:`supervisor.engine.attempts`) reads
each attempt's manifest and the group record (:mod:`supervisor.attempts`) and performs the
answer; no I/O and no clock here.

Rules:

- ``pick = "first-pass"`` (the default): the winner is the attempt that ended ``completed``
  with verdict ``PASS`` first among those the engine reads passed at one look (its
  ``finished_at``; the lower index on a tie, so two attempts passing in the same tick give
  one winner). A winner once recorded stays the
  winner, whatever is read later (a restart never picks another). Once there is a winner,
  every attempt that has not ended is discarded: it ends ``abandoned`` with reason
  ``discarded`` (:func:`discard`). An attempt that passed too but did not win keeps its
  ``completed`` end. When every attempt ended and none passed, the group failed: its
  outcome is ``none_passed``.
- ``pick = "all"``: nothing is discarded and there is no winner; the group has ``ended``
  once every attempt ended (a person or the Brain merges one).

A group is ``closed`` once its outcome is known and every attempt ended: the engine stops
looking at it.

State table rows (added to :mod:`supervisor.policy`'s)::

    queued/blocked  another attempt of the group won      abandoned  finish
                                                                     (reason discarded)
    live            another attempt of the group won      abandoned  stop, finish, clean up
                                                                     (reason discarded)
"""

from __future__ import annotations

__all__ = ["ALL", "FIRST_PASS", "Attempt", "Outcome", "decide", "discard", "stands_for"]

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from supervisor.config.attemptkeys import ALL, FIRST_PASS
from supervisor.policy.model import Action, Decision, TaskState
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import ENDED, AbandonReason, Status, Verdict

#: Group outcomes (the record's ``outcome``).
PASSED, FAILED, OVER = "passed", "none_passed", "ended"


@dataclass(frozen=True)
class Attempt:
    """What the engine read of one attempt: its task id, index (1..N), manifest ``status``
    and ``verdict`` (``None`` for both when its folder is gone; ``damaged`` for an unreadable
    manifest) and when it finished (epoch seconds, ``None`` when not ended or unknown)."""

    task_id: str
    index: int
    status: str | None
    verdict: str | None = None
    finished_at: float | None = None

    @property
    def ended(self) -> bool:
        """It ended: a terminal status, or no folder any more."""
        return self.status is None or self.status in ENDED

    def passed(self) -> bool:
        """It ended ``completed`` with verdict ``PASS``."""
        return self.status == Status.COMPLETED and self.verdict == Verdict.PASS


@dataclass(frozen=True)
class Outcome:
    """:func:`decide`'s answer: the ``winner`` (a task id or ``None``), the ``outcome``
    (``passed``, ``failed``, ``ended`` or ``None`` while undecided), the task ids to
    ``discard`` (in index order) and whether the group is ``closed``."""

    winner: str | None = None
    outcome: str | None = None
    discard: tuple[str, ...] = ()
    closed: bool = False


def decide(pick: str, recorded_winner: str | None, attempts: Sequence[Attempt]) -> Outcome:
    """The group's state from its attempts (see the module docstring). ``recorded_winner``:
    the record's ``winner``, kept as it is when it names an attempt of the group (one that
    names none, a hand edit, is no winner: it would make every attempt a loser)."""
    ordered = sorted(attempts, key=lambda a: a.index)
    all_ended = all(a.ended for a in ordered)
    if pick == ALL:
        return Outcome(outcome=OVER if all_ended else None, closed=all_ended)
    members = {a.task_id for a in ordered}
    winner = recorded_winner if recorded_winner in members else None
    if winner is None:
        passed = [a for a in ordered if a.passed()]
        if passed:
            first = min(passed, key=lambda a: (_when(a.finished_at), a.index))
            winner = first.task_id
    if winner is None:
        return Outcome(outcome=FAILED if all_ended else None, closed=all_ended)
    losers = tuple(a.task_id for a in ordered if not a.ended and a.task_id != winner)
    return Outcome(winner=winner, outcome=PASSED, discard=losers, closed=all_ended)


def _when(finished_at: float | None) -> float:
    return math.inf if finished_at is None or math.isnan(finished_at) else finished_at


def discard(state: TaskState) -> Decision:
    """Another attempt of the group won: end this one ``abandoned`` with reason
    ``discarded`` and verdict ``ABANDONED``. A live one is stopped (the bounded stop of an
    operator's ``stop``), finished and cleaned up (its worktree then follows the prune
    rules: commits and changes nobody saw are kept); a ``queued`` or ``blocked`` one never
    launched, so it only finishes. The notifier follows ``notify_on`` as for any
    ``abandoned`` end (:func:`supervisor.policy.decide`)."""
    new = dataclasses.replace(
        state,
        status=Status.ABANDONED,
        abandon_reason=AbandonReason.DISCARDED,
        verdict=Verdict.ABANDONED,
        resume_at=None,
        stale_since=None,
        gone_since=None,
        escalation=None,
        paused=False,
    )
    if state.status in (Status.QUEUED, Status.BLOCKED):
        actions: tuple[Action, ...] = (Action.FINISH,)
    else:
        actions = (Action.STOP_AGENT, Action.FINISH, Action.CLEANUP)
    why = "discarded: another attempt of its group passed first (pick = 'first-pass')"
    return Decision(state=new, actions=actions, events=(Event.ABANDONED,), reason=why)


def stands_for(task_id: str, pick: str, winner: str | None, outcome: str | None) -> str | None:
    """Which task's ending a successor's gate reads when its ``after`` names the attempt
    ``task_id`` (a name means the newest task of that name: any attempt of the group).

    - ``first-pass``: the group's ``winner`` once recorded (its verdict, summary, branch
      and commit are what the successor builds on); the attempt itself once the group is
      over with no winner (``none_passed``: its own ending fails a ``pass`` gate); ``None``
      while the group is undecided (the gate waits, even if this attempt already ended:
      a failed or discarded attempt says nothing of its group).
    - ``all``: the attempt itself (the choice among them is a person's).
    """
    if pick == ALL:
        return task_id
    if winner is not None:
        return winner
    return task_id if outcome is not None else None
