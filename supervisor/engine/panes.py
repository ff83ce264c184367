"""The engine's list of live tmux sessions: one ``list-panes -a`` snapshot shared by the
checks, refreshed only when it may be wrong.

With a live control client (``Tmux(..., control=True)``) tmux says when sessions appear or
go (``%sessions-changed``, ``%window-close``, ``%unlinked-window-close``, ``%exit``,
tmux(1) CONTROL MODE), so the snapshot stays valid until such a notification, a change of
the connection, or one of the engine's own mutations (:meth:`Sessions.forget`). Without
one it expires after :data:`SESSIONS_MAX_AGE` seconds, as before.

Which sessions exist is all the snapshot promises: a pane that died (``remain-on-exit``)
or pane options a full disk wrote raise no notification; a check that needs those asks
tmux about that one session (:meth:`supervisor.tmux.Tmux.pane`).
"""

from __future__ import annotations

import threading
import time

from supervisor.tmux import ControlEvent, PaneInfo, Tmux

#: Seconds a ``list-panes`` snapshot is reused when no control client is connected.
SESSIONS_MAX_AGE = 0.25


class Sessions:
    """Live tmux sessions by name (ours only: the owner mark).

    Args:
        tmux: the profile's tmux server; :class:`Sessions` subscribes to its notifications.
    """

    def __init__(self, tmux: Tmux) -> None:
        self.tmux = tmux
        self._lock = threading.Lock()
        self._generation = 0  # bumped by every notification, connection change and forget()
        self._cache: tuple[float, int, dict[str, PaneInfo]] | None = None
        tmux.subscribe(self._changed)

    def _changed(self, event: ControlEvent) -> None:
        """A tmux notification or connection change: the snapshot may be wrong."""
        self.forget()

    def get(self, max_age: float = SESSIONS_MAX_AGE) -> dict[str, PaneInfo]:
        """The sessions: the snapshot while the control client vouches for it (connected
        and silent since it was taken), else one at most ``max_age`` seconds old.

        Raises:
            TmuxError: tmux did not answer (:class:`supervisor.tmux.TmuxTimeout`).
        """
        with self._lock:
            cached, generation = self._cache, self._generation
        if cached is not None:
            taken, seen, panes = cached
            if seen == generation and self.tmux.control_live:
                return panes
            if time.monotonic() - taken <= max_age:
                return panes
        taken = time.monotonic()
        panes = self.tmux.panes()
        with self._lock:
            if self._generation == generation:  # else it may predate a change: not kept
                self._cache = (taken, generation, panes)
        return panes

    def forget(self) -> None:
        """Drop the snapshot: a session was created, respawned or closed."""
        with self._lock:
            self._generation += 1
            self._cache = None
