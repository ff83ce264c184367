"""The engine: the imperative shell around :mod:`supervisor.policy`, one concern per module.

- :mod:`~supervisor.engine.scheduler`: the :class:`Engine` (lifecycle, APScheduler jobs,
  operator requests, adoption's results, the check that runs observe, decide, act), with
  its two parts :mod:`~supervisor.engine.kicks` (the watcher's events) and
  :mod:`~supervisor.engine.launches` (filling slots, recording launches);
- :mod:`~supervisor.engine.intake`: the :class:`Intake` protocol and :class:`SpoolIntake`;
- :mod:`~supervisor.engine.recovery`: adoption after a restart (returns what it found);
- :mod:`~supervisor.engine.launch`: argv values, :func:`expand_argv`, ``launch.json``
  (a :class:`LaunchSpec`), starting and respawning in tmux;
- :mod:`~supervisor.engine.observe`: every :class:`supervisor.policy.Signals` field;
- :mod:`~supervisor.engine.actions`: performs a :class:`supervisor.policy.Decision` and
  writes the manifest, whose content is :mod:`~supervisor.engine.projection`'s (the one
  TaskState -> Manifest projection, also a launch's);
- :mod:`~supervisor.engine.runtime` and :mod:`~supervisor.engine.panes`: the per-task state
  and the shared session list, kept by tmux's notifications (leaves).

Layering: the scheduler (with its parts) is the only module that imports ``intake``,
``recovery``, ``observe`` and ``actions``; ``actions`` uses ``launch`` to respawn an agent;
none imports the scheduler or calls back up (``followups`` is handed the :class:`Engine`
and names it for typing only; ``notifications`` names ``recovery.Unsent`` for typing only).
Each returns facts and the scheduler acts on them.

Importing the package imports nothing: ``supervisor.engine.notify`` or
``supervisor.engine.stopping`` loads only what it needs, never the scheduler. Start an
engine with ``from supervisor.engine.scheduler import Engine, run_profile``.
"""
