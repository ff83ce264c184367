"""Is a live engine holding a state dir? The warning of the commands that need one.

The rule is the status model's (:func:`supervisor.views.model.engine_state`): ``running``
when the engine's lock on the ``state_dir`` folder (:mod:`supervisor.statelock`) is held and
the heartbeat ``engine-stats.json`` is at most 15 s old; ``stale`` when the lock is held
without a fresh heartbeat (a stuck engine) or a fresh heartbeat's writer does not hold the
lock; ``not running`` otherwise.
:func:`warning` turns the last two into the one stderr line that ``submit``, ``wait``,
``stop``, ``resume``, ``approve`` and ``deny`` print (issue 14: a request must not sit
silently in a queue nobody reads); ``status`` shows the same engine line itself.
"""

from __future__ import annotations

from pathlib import Path

from supervisor.views.model import Engine, engine_state


def engine(state_dir: Path) -> Engine:
    """The engine on ``state_dir`` (:func:`supervisor.views.model.engine_state`)."""
    return engine_state(state_dir)


def warning(state_dir: Path, profile_path: Path | str, what: str) -> str | None:
    """One stderr line when no live engine holds ``state_dir``, else ``None``.

    ``what`` says what waits for the engine, e.g. ``"the task waits in the spool"``.
    """
    found = engine(state_dir)
    if found.state == "running":
        return None
    if found.state == "stale":
        return f"warning: {found.line()}; it may be stuck: {what}"
    return (f"warning: no engine runs on {state_dir}; {what} until "
            f"'supervise run {profile_path}' starts")  # fmt: skip
