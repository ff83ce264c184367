"""One ``list-panes -a`` snapshot shared by the checks of one scheduler tick."""

from __future__ import annotations

import time

from supervisor.tmux import PaneInfo, Tmux

#: Seconds a ``list-panes`` snapshot is reused across the checks of one tick.
SESSIONS_MAX_AGE = 0.25


class Sessions:
    """Live tmux sessions by name, cached for :data:`SESSIONS_MAX_AGE` seconds.

    Args:
        tmux: the profile's tmux server.
    """

    def __init__(self, tmux: Tmux) -> None:
        self.tmux = tmux
        self._cache: tuple[float, dict[str, PaneInfo]] | None = None

    def get(self, max_age: float = SESSIONS_MAX_AGE) -> dict[str, PaneInfo]:
        """The sessions, from a snapshot at most ``max_age`` seconds old.

        Raises:
            TmuxError: tmux did not answer (:class:`supervisor.tmux.TmuxTimeout`).
        """
        cached = self._cache
        if cached is None or time.monotonic() - cached[0] > max_age:
            cached = (time.monotonic(), self.tmux.panes())
            self._cache = cached
        return cached[1]

    def forget(self) -> None:
        """Drop the snapshot: a session was created, respawned or closed."""
        self._cache = None
