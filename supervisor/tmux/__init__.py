"""The engine's tmux: one private server per profile (``tmux -L NAME``).

- :mod:`~supervisor.tmux.client`: :class:`Tmux`, every call the engine and the CLI make;
- :mod:`~supervisor.tmux.control`, :mod:`~supervisor.tmux.link`: the persistent
  control-mode client the engine's calls go through (``Tmux(..., control=True)``);
- :mod:`~supervisor.tmux.protocol`: control mode's wire format (pure);
- :mod:`~supervisor.tmux.basics`: the executable's one lookup, errors, timeout.

Every name callers imported from the former ``supervisor/tmux.py`` is re-exported here.
"""

from __future__ import annotations

from supervisor.tmux.basics import (
    TMUX_ENV,
    TMUX_TIMEOUT,
    TmuxError,
    TmuxResult,
    TmuxTimeout,
    missing_tmux,
    require_tmux,
    tmux_binary,
)
from supervisor.tmux.client import (
    OWNER_OPTION,
    PANE_HEIGHT,
    PANE_WIDTH,
    RECORDED_FILES,
    PaneInfo,
    Tmux,
    gate_channel,
    wrapper_command,
)
from supervisor.tmux.control import CONTROL_ENV, CONTROL_OPTION, ControlEvent

__all__ = [
    "CONTROL_ENV",
    "CONTROL_OPTION",
    "OWNER_OPTION",
    "PANE_HEIGHT",
    "PANE_WIDTH",
    "RECORDED_FILES",
    "TMUX_ENV",
    "TMUX_TIMEOUT",
    "ControlEvent",
    "PaneInfo",
    "Tmux",
    "TmuxError",
    "TmuxResult",
    "TmuxTimeout",
    "gate_channel",
    "missing_tmux",
    "require_tmux",
    "tmux_binary",
    "wrapper_command",
]
