"""The engine: the imperative shell around :mod:`supervisor.policy`, one concern per module.

- :mod:`~supervisor.engine.scheduler`: the :class:`Engine` (lifecycle, APScheduler jobs,
  kicks, watcher callbacks, stats, the check that runs observe, decide, act);
- :mod:`~supervisor.engine.intake`: the :class:`Intake` protocol and :class:`SpoolIntake`;
- :mod:`~supervisor.engine.recovery`: adoption after a restart (returns what it found);
- :mod:`~supervisor.engine.launch`: argv values, :func:`expand_argv`, ``launch.json``
  (a :class:`LaunchSpec`), starting and respawning in tmux;
- :mod:`~supervisor.engine.observe`: every :class:`supervisor.policy.Signals` field;
- :mod:`~supervisor.engine.actions`: performs a :class:`supervisor.policy.Decision`, the
  manifest projection and the notifier payload;
- :mod:`~supervisor.engine.runtime` and :mod:`~supervisor.engine.panes`: the per-task state
  and the shared ``list-panes`` snapshot (leaves).

Layering: the scheduler is the only module that imports ``intake``, ``recovery``,
``observe`` and ``actions``; ``actions`` uses ``launch`` to respawn an agent; none imports
the scheduler or calls back up. Each returns facts and the scheduler acts on them.
"""

from supervisor.engine.intake import Intake, SpoolIntake, UnsafeSpool, check_spool_permissions
from supervisor.engine.launch import LaunchSpec, expand_argv
from supervisor.engine.scheduler import Engine, run_profile
from supervisor.statelock import EngineBusy

__all__ = [
    "Engine",
    "EngineBusy",
    "Intake",
    "LaunchSpec",
    "SpoolIntake",
    "UnsafeSpool",
    "check_spool_permissions",
    "expand_argv",
    "run_profile",
]
