"""The engine's background pools: one per kind of slow work, so one kind cannot starve
another (issue 20: acceptance checks, notifiers and workspace preparation shared one pool
of 4, and four 40 s checks delayed two new tasks' preparation by 35 s with slots free).

Kinds (:data:`KINDS`):

- ``acceptance``: a task's ``[acceptance]`` check, with the finish of its worktree before it
  (minutes of a test suite);
- ``notify``: the notifier, bounded by ``notifier_timeout``;
- ``workspace``: making a worktree before the launch (``git worktree add``, ``setup``) and
  finishing one for an ending without acceptance;
- ``sweep``: ending the processes a task left behind (up to twice ``STOP_TIMEOUT``).

Each is a plain :class:`concurrent.futures.ThreadPoolExecutor` (threads start on demand),
not one-off APScheduler jobs: removing a finished one-off job races with shutdown
(``JobLookupError`` in its thread).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Literal

from supervisor import childledger

log = logging.getLogger("supervise.engine")

Kind = Literal["acceptance", "notify", "workspace", "sweep"]
#: Every kind of background work, each with its own pool.
KINDS: tuple[Kind, ...] = ("acceptance", "notify", "workspace", "sweep")
#: Threads per pool: work of one kind beyond this waits for its own kind only.
POOL_SIZE = 4

Submit = Callable[[Kind, Callable[[], None]], None]


class Pools:
    """One thread pool per :data:`KINDS` entry.

    Args:
        counters: the engine's counters (:func:`supervisor.engine.stats.new_counters`);
            a job that raised is logged and counted in ``jobs_failed``.
        state_dir: the engine's state dir: every child process a pool thread starts
            (:mod:`supervisor.children`) is recorded there while its group lives, so the
            next engine can end what a SIGKILLed one left (:mod:`supervisor.childledger`);
            ``None`` records nothing.
    """

    def __init__(self, counters: dict[str, int], state_dir: Path | None = None) -> None:
        self.counters = counters
        self._pools = {
            kind: futures.ThreadPoolExecutor(
                POOL_SIZE,
                thread_name_prefix=f"supervise-{kind}",
                initializer=childledger.bind,
                initargs=(None if state_dir is None else childledger.Ledger(state_dir, kind),),
            )
            for kind in KINDS
        }

    def submit(self, kind: Kind, body: Callable[[], None]) -> None:
        """Run ``body`` on the pool of ``kind``, never on the check worker.

        Raises:
            KeyError: ``kind`` is not one of :data:`KINDS`.
            RuntimeError: the pools were shut down.
        """
        self._pools[kind].submit(self._logged, body)

    def submitter(self, kind: Kind) -> Callable[[Callable[[], None]], None]:
        """:meth:`submit` bound to one kind (for a caller with one kind of work)."""
        return lambda body: self.submit(kind, body)

    def _logged(self, body: Callable[[], None]) -> None:
        try:
            body()
        except Exception:
            log.exception("background job %r failed", body)
            self.counters["jobs_failed"] += 1

    def shutdown(self) -> None:
        """Take no more jobs, then wait for every queued and running one (each is bounded by
        its own timeout); the pools drain side by side."""
        for pool in self._pools.values():
            pool.shutdown(wait=False)
        for pool in self._pools.values():
            pool.shutdown(wait=True)
