"""Several hosts: one engine per machine, PostgreSQL (through procrastinate) as the control
plane. Imported only for a profile with ``[cluster]`` (procrastinate and psycopg are the
``cluster`` extra); the single-host engine never loads it.

* :mod:`~supervisor.cluster.db`: connections (bounded by timeouts), the DSN;
* :mod:`~supervisor.cluster.schema`: our versioned tables and ``supervise cluster init``;
* :mod:`~supervisor.cluster.submit`: ``supervise submit`` into the database;
* :mod:`~supervisor.cluster.intake`: :class:`ClusterIntake`, the engine's second
  :class:`~supervisor.engine.intake.Intake` (procrastinate's worker in a thread of its own);
* :mod:`~supervisor.cluster.writer`: transitions and heartbeats written off the worker,
  with the outbox file while the database is down;
* :mod:`~supervisor.cluster.sweeper`: dead hosts and what becomes of their tasks
  (a periodic procrastinate task on a worker of its own);
* :mod:`~supervisor.cluster.ownership`: whether this host still owns its tasks (a copy
  whose row went to a newer generation ends ``superseded``);
* :mod:`~supervisor.cluster.fleet`: the rows ``supervise hosts`` and ``status --cluster``
  print;
* :mod:`~supervisor.cluster.control`: ``stop|resume|approve|deny``, ``show`` and ``wait``
  for a task on another host (``supervise_controls``, LISTEN/NOTIFY);
* :mod:`~supervisor.cluster.listener`: the engine's side of those requests;
* :mod:`~supervisor.cluster.retention`: ``supervise cluster prune`` and the sweeper's
  periodic prune (``[cluster] prune_after``);
* :mod:`~supervisor.cluster.roles`: the group roles, the rights ``cluster check`` checks,
  and the one line of a permission error.
"""

#: The environment variable that holds the DSN (a secret: better there than in a file).
#: Defined here, in a package whose ``__init__`` imports nothing, so the CLI can name it
#: without loading pydantic (``supervise status`` stays light) or psycopg.
DSN_ENV = "SUPERVISE_CLUSTER_DSN"
