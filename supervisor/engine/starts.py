"""Launches off the check pool: ``launch.json``, the run files and ``tmux new-session``
of a queued task run on launch threads of their own; the intake job records the result.

Under load a launch was the largest share of the old serial worker's time (``tmux
new-session`` and its client process: 39 % of its wall time during a 1,000-file burst beside
200 live agents, ``benchmarks/README.md``), so the other tasks' done-files waited behind it.
Launches of different tasks run side by side (:data:`LAUNCH_WORKERS`, taken in queue order),
except while no launch has succeeded yet: the first one runs alone, so that only one
``tmux`` client starts the server (in its systemd scope; tmux itself serialises racing
starts with a lock file beside the socket, but only one should pay for ``systemd-run``).
While its launch runs a task holds its ``max_concurrent`` slot and its checks are skipped
(``Runtime.launching``): one task's launch and checks never interleave.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent import futures

from supervisor.config import LoadedProfile
from supervisor.engine import launch
from supervisor.engine.panes import Sessions
from supervisor.engine.runtime import Runtime
from supervisor.tmux import Tmux

log = logging.getLogger("supervise.engine")

#: Launch threads once the server runs: each waits mostly on tmux and on its file writes.
LAUNCH_WORKERS = 4

#: What a launch gave: :class:`launch.Started`, or the exception it raised (an ``OSError``
#: writing ``launch.json``: nothing was started).
Result = launch.Started | Exception


class Starts:
    """Runs :func:`launch.start` for queued tasks on launch threads of its own.

    Args:
        profile, tmux, sessions: as for :func:`launch.start`.
        watch: called with the runtime before its agent starts (so no file event is missed).
        kick: asks for an intake run now (it collects :meth:`take`).
    """

    def __init__(
        self,
        profile: LoadedProfile,
        tmux: Tmux,
        sessions: Sessions,
        watch: Callable[[Runtime], None],
        kick: Callable[[], None],
    ) -> None:
        self.profile, self.tmux, self.sessions = profile, tmux, sessions
        self.watch, self.kick = watch, kick
        self._pool = futures.ThreadPoolExecutor(
            LAUNCH_WORKERS, thread_name_prefix="supervise-launch"
        )
        self._first = threading.Lock()  # held by launches until one has succeeded
        self._started_one = False
        # (runtime, result) of finished launches; appended on the launch thread, taken on the
        # worker (deque appends and pops are atomic)
        self._done: deque[tuple[Runtime, Result]] = deque()

    def start(self, runtime: Runtime) -> None:
        """Start launching ``runtime`` (``launching`` is set until the engine records it)."""
        runtime.launching = True
        self._pool.submit(self._launch, runtime)

    def _launch(self, runtime: Runtime) -> None:
        result: Result
        if self._started_one:
            result = self._start(runtime)
        else:
            with self._first:
                result = self._start(runtime)
                if isinstance(result, launch.Started) and result.error is None:
                    self._started_one = True
        self._done.append((runtime, result))
        self.kick()

    def _start(self, runtime: Runtime) -> Result:
        try:
            return launch.start(self.profile, self.tmux, self.sessions, runtime, self.watch)
        except Exception as exc:  # handed to the intake job, which keeps or ends the task
            return exc

    def take(self) -> list[tuple[Runtime, Result]]:
        """The launches finished since the last call, oldest first (``launching`` stays set:
        the engine clears it once the launch is recorded, ``Launches._launched``)."""
        done = []
        while self._done:
            done.append(self._done.popleft())
        return done

    def shutdown(self) -> None:
        """Wait for the launch in progress. One that finishes after the engine stopped left
        a session for a ``queued`` task, which the next start adopts as running."""
        self._pool.shutdown(wait=True)
