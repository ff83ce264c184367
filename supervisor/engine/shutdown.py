"""Stopping the engine: SIGINT/SIGTERM ask for a stop, and a stop is bounded in time.

A stop lets the work in progress finish (the check on the worker, the claim batch, the
launches, acceptance checks and notifiers on the background pool, the stops of agents
under way), so nothing is cut off that need not be. Any of these can be stuck: a claim on
a hung filesystem, an acceptance check that sleeps for hours, a child that ignores its
timeout. So the stop has a bound (:data:`STOP_BOUND`): past it the engine says what is
still busy in one line and exits at once, as if it had been killed. That is safe by
construction: claims are recovered at the next start (:func:`supervisor.spool.recover_claims`),
a rotation cut short is completed (:func:`supervisor.logrotate.finish`), every decision's
events are written ahead of its actions (:mod:`supervisor.engine.recovery`), and the agents
live on in tmux until the next start adopts them.

A second SIGINT/SIGTERM during a stop exits at once (an operator's second Ctrl-C).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from types import FrameType

log = logging.getLogger("supervise.engine")

#: Seconds a stop may take before the engine exits anyway. Longer than a normal stop (the
#: agents being stopped take up to ``2 x supervisor.engine.stopping.STOP_TIMEOUT`` = 10 s) and
#: shorter than systemd's default ``TimeoutStopSec`` (90 s), after which systemd would
#: SIGKILL the engine without a word.
STOP_BOUND = 30.0
#: Environment variable that sets another bound in seconds (the tests use a short one).
STOP_BOUND_ENV = "SUPERVISE_STOP_BOUND"
#: The signals that ask for a stop.
SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: Exit status of a stop cut short that no signal asked for (``--exit-when-idle``).
FORCED_EXIT = 1


def stop_bound() -> float:
    """:data:`STOP_BOUND`, or the finite positive seconds in ``$SUPERVISE_STOP_BOUND``
    (a value that is not one is ignored with a warning)."""
    text = os.environ.get(STOP_BOUND_ENV)
    if not text:
        return STOP_BOUND
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        log.warning(
            "%s=%r is not a positive number of seconds; using %g s",
            STOP_BOUND_ENV,
            text,
            STOP_BOUND,
        )
        return STOP_BOUND
    return value


class StopGuard:
    """The engine's stop: the signal handlers and the bound.

    ``install()`` (on the main thread) makes SIGINT/SIGTERM set ``stopping``; ``arm()``,
    when the stop begins, starts the bound; ``done()``, when it ended in time, cancels the
    bound and restores the handlers there were.

    Args:
        stopping: the engine's stop flag.
        bound: seconds a stop may take (default :func:`stop_bound`).
    """

    def __init__(self, stopping: threading.Event, bound: float | None = None) -> None:
        self.stopping = stopping
        self.bound = stop_bound() if bound is None else bound
        self.signum: int | None = None
        self._previous: dict[int, object] = {}
        self._ended = threading.Event()
        self._timer: threading.Thread | None = None

    def install(self) -> StopGuard:
        """Handle SIGINT/SIGTERM (main thread only; ``ValueError`` elsewhere)."""
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in SIGNALS}
        return self

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            self._exit_now(f"second signal ({signal.Signals(signum).name}) while stopping")
        self.signum = signum
        self.stopping.set()

    def arm(self) -> None:
        """The stop begins: set ``stopping`` and start the bound (once)."""
        self.stopping.set()
        if self._timer is None:
            self._timer = threading.Thread(target=self._watch, name="supervise-stop", daemon=True)
            self._timer.start()

    def done(self) -> None:
        """The stop ended in time: cancel the bound, restore the signal handlers."""
        self._ended.set()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _watch(self) -> None:
        if self._ended.wait(self.bound):
            return
        self._exit_now(f"the engine did not stop within {self.bound:g} s")

    def _exit_now(self, why: str) -> None:
        """One line naming what is still busy, then exit without waiting for it."""
        busy = sorted(
            t.name
            for t in threading.enumerate()
            if t.is_alive() and not t.daemon and t is not threading.main_thread()
        )
        log.error(
            "%s; still busy: %s; exiting now (its tasks live on in tmux, and the next "
            "start adopts them and recovers what was cut short)",
            why,
            ", ".join(busy) or "the main thread",
        )
        for handler in logging.getLogger("supervise").handlers + logging.getLogger().handlers:
            handler.flush()
        os._exit(128 + self.signum if self.signum is not None else FORCED_EXIT)
