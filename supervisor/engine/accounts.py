"""The engine's side of the account's limits (issue 26; :class:`Accounts`, a part of
:class:`supervisor.engine.scheduler.Engine`, like :class:`supervisor.engine.launches.Launches`).

Two calls, each deciding through :mod:`supervisor.policy.accounts` over the engine's
:class:`~supervisor.engine.accountbook.AccountBook`:

* :meth:`Accounts._account_holds` (from ``Launches._fill_slots``): a queued task whose
  account is limited, staggered or at its cap is skipped and stays ``queued`` (the tasks
  behind it still start);
* :meth:`Accounts._account_gate` (from ``Checks._decide_and_apply``, before the decision is
  applied): a decision that meets a usage limit with a reset time puts its account in the
  book first (write-ahead); a resume that the account does not admit yet is replaced by
  the policy's :func:`~supervisor.policy.accounts.held_resume`.
"""

from __future__ import annotations

import logging

from supervisor import policy
from supervisor.engine import clock
from supervisor.engine.accountbook import AccountBook
from supervisor.engine.runtime import Runtime
from supervisor.policy import accounts as rules
from supervisor.taskdir.folder import TaskDir

log = logging.getLogger("supervise.engine")


class Accounts:
    """Account holds of the engine; the attributes are the engine's own."""

    book: AccountBook
    live: dict[str, Runtime]
    task_accounts: dict[str, str | None]  # a queued task's account, read once from disk
    held_kinds: dict[str, str]  # a held queued task's kind of hold, as last logged

    def _account_of(self, task: TaskDir) -> str | None:
        """The account in a queued task's manifest (``None``: none recorded, or unreadable;
        such a task is never held)."""
        task_id = task.task_id
        if task_id not in self.task_accounts:
            try:
                self.task_accounts[task_id] = task.read_manifest().account
            except (OSError, ValueError):
                self.task_accounts[task_id] = None
        return self.task_accounts[task_id]

    def _account_holds(self, task: TaskDir) -> bool:
        """A queued task may not launch now: its account is limited until its reset, its
        starts are staggered after it, or its live runs are at ``[accounts]
        max_concurrent``. An admitted task's start is recorded in the book."""
        account = self._account_of(task)
        if account is None:
            return False
        running = sum(1 for r in list(self.live.values()) if r.manifest.account == account)
        hold = self.book.admit(account, clock.now(), running)
        if hold is None:
            self.task_accounts.pop(task.task_id, None)
            self.held_kinds.pop(task.task_id, None)
            return False
        if self.held_kinds.get(task.task_id) != hold.kind:  # logged once per kind of hold
            self.held_kinds[task.task_id] = hold.kind
            log.info("%s stays queued: %s", task.task_id, rules.hold_reason(hold))
        return True

    def _account_gate(
        self, runtime: Runtime, signals: policy.Signals, decision: policy.Decision
    ) -> policy.Decision:
        """``decision`` as the account allows it: a usage limit with a reset time is noted
        (before the decision is applied); a resume at the end of a wait is held while the
        account is limited or its starts are staggered."""
        account = runtime.manifest.account
        if account is None:
            return decision
        reset = rules.limit_reset(runtime.state, decision, signals)
        if reset is not None:
            self.book.note(account, reset, runtime.task.task_id, signals.now)
        if not rules.resumes_from_wait(runtime.state, decision, signals):
            return decision
        hold = self.book.admit(account, signals.now)
        if hold is None:
            return decision
        why = rules.hold_reason(hold)
        return rules.held_resume(runtime.state, hold, signals.now, why)
