"""The one definition of a task's statuses, verdicts, failure and abandon reasons.

Every module that names a status or a verdict imports it from here: the policy, the task
directory, the manifest model (so ``schemas/manifest.schema.json`` lists exactly these
values), the CLI and ``supervise repair``. The members are :class:`enum.StrEnum`, so a
member equals its string (``Status.RUNNING == "running"``), hashes like it and is written
to JSON as it; code that compares with plain strings keeps working.

The vocabulary is the seed skill's (``queued`` ... ``abandoned``; seed 003's verdicts),
extended by the issues that added ``waiting``, ``escalated`` and ``verifying``.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """A task's status, as ``manifest.json`` reports it.

    ``queued``: claimed, not launched yet. ``blocked``: claimed, waits for its
    predecessors (``after``, issue 26) to end; holds no ``max_concurrent`` slot and becomes
    ``queued`` when they ended as ``requires`` says (:mod:`supervisor.policy.plans`).
    ``running``: the agent runs. ``crashed`` /
    ``hung``: the agent ended without a result or stopped producing output, a resume is
    due. ``waiting``: a usage limit or a transient API failure, resumes at ``resume_at``.
    ``escalated``: waits for a human (a permission request, the circuit breaker).
    ``verifying``: the acceptance check runs. ``completed`` / ``failed`` / ``abandoned``:
    the end (:data:`TERMINAL`). ``superseded``: the end of this host's copy of a cluster
    task whose row in the fleet's database went to a newer generation (issue 15: "a host
    that finds a newer generation stops its copy and reports superseded; it never resumes
    it"); verdict ``ABANDONED``.
    """

    QUEUED = "queued"
    BLOCKED = "blocked"
    RUNNING = "running"
    CRASHED = "crashed"
    HUNG = "hung"
    WAITING = "waiting"
    ESCALATED = "escalated"
    VERIFYING = "verifying"
    COMPLETED = "completed"
    FAILED = "failed"
    ABANDONED = "abandoned"
    SUPERSEDED = "superseded"


#: Statuses after which nothing more happens to a task (seed vocabulary, and
#: ``superseded`` from issue 15).
TERMINAL: frozenset[Status] = frozenset(
    {Status.COMPLETED, Status.FAILED, Status.ABANDONED, Status.SUPERSEDED}
)
#: Statuses of a task that has been launched and has not ended: it holds one of the
#: profile's ``max_concurrent`` slots (supervisord's RUNNING/BACKOFF/STOPPING, together).
LIVE: frozenset[Status] = frozenset(Status) - TERMINAL - {Status.QUEUED, Status.BLOCKED}
#: Status shown by ``supervise status`` for a folder whose manifest is missing or unreadable
#: (:mod:`supervisor.taskdir.repair`); no manifest holds it, so it is not a :class:`Status`.
DAMAGED = "damaged"
#: Statuses the views show for a task nothing more happens to: :data:`TERMINAL` and a
#: ``damaged`` folder (never run again: :func:`supervisor.taskdir.repair.damage`).
ENDED: frozenset[str] = frozenset({*TERMINAL, DAMAGED})
#: A fleet-only state (issue 15): the task's host stopped beating for its ``host_timeout``
#: while the task ran (:mod:`supervisor.cluster.sweeper`). Only the fleet's database holds
#: it (``supervise_tasks.state``); a host never writes it to a manifest, so it is not a
#: :class:`Status` and the manifest's schema does not list it.
HOST_LOST = "host_lost"


class Verdict(StrEnum):
    """The verdict every terminal state carries (seed 003).

    ``PASS``: completed, acceptance passed or none declared. ``FAIL``: failed, or the
    acceptance check failed. ``ESCALATE``: ended while escalated. ``TIMEOUT``: the deadline
    passed. ``ABANDONED``: given up otherwise (retries spent, stopped, denied, superseded: this
    host gave its copy up to the fleet's newer generation; the task's own outcome is that
    generation's).
    """

    PASS = "PASS"
    FAIL = "FAIL"
    ESCALATE = "ESCALATE"
    TIMEOUT = "TIMEOUT"
    ABANDONED = "ABANDONED"


class AbandonReason(StrEnum):
    """Why an ``abandoned`` task was given up (``abandon_reason``; set by the policy).

    ``deadline``: the task's ``deadline`` passed (verdict ``TIMEOUT``). ``max_retries``:
    the agent crashed or hung once more after ``max_retries`` resumes. ``tmux_lost``: the
    same, when the last failure was a lost tmux session (the server died or the session
    was killed). ``stopped``: ``supervise stop``. ``denied``: ``supervise deny`` of a task
    the circuit breaker paused. ``budget``: ``max_cost_usd`` was spent, so no more resumes.
    ``dependency``: a predecessor named in ``after`` ended otherwise than ``requires`` asks
    (issue 26); the task never launched, and the event's ``reason`` names the predecessor.
    ``discarded``: another attempt of its group passed first (``attempts`` with ``pick =
    "first-pass"``, issue 26); it was stopped, or never launched.
    """

    DEADLINE = "deadline"
    MAX_RETRIES = "max_retries"
    TMUX_LOST = "tmux_lost"
    STOPPED = "stopped"
    DENIED = "denied"
    BUDGET = "budget"
    DEPENDENCY = "dependency"
    DISCARDED = "discarded"


class FailureReason(StrEnum):
    """Why a ``failed`` task failed (``failure_reason``; the failure classes: :data:`TRANSIENT`).

    ``auth``, ``billing``, ``invalid_request``, ``agent_error``: what the agent itself
    reported (Claude Code's ``result`` line or ``StopFailure`` hook). ``exit_code``: a
    non-zero exit and nothing more said. ``launch``: tmux could not start the session.
    ``workspace``: the task's worktree could not be made (base missing, branch taken,
    ``setup`` failed, disk full).
    """

    AUTH = "auth"
    BILLING = "billing"
    INVALID_REQUEST = "invalid_request"
    AGENT_ERROR = "agent_error"
    EXIT_CODE = "exit_code"
    LAUNCH = "launch"
    WORKSPACE = "workspace"


# The fleet's states


#: Statuses no fleet task has: ``blocked`` waits on ``after``, which a ``[cluster]``
#: profile refuses (issue 26), so :class:`FleetState` and the database's CHECK omit them.
SPOOL_ONLY: frozenset[Status] = frozenset({Status.BLOCKED})


class FleetState(StrEnum):
    """A fleet task's ``state`` (``supervise_tasks.state``; issue 15): every manifest
    :class:`Status` but :data:`SPOOL_ONLY`, which the host that owns the task reports, plus
    the fleet's own.

    ``queued`` (also a :class:`Status`): waits for a host's claim. ``claimed``: a host took
    it and has not reported yet. ``rejected``: the claiming host cannot run it (its
    ``project_dir`` missing there, a key its ``task_may_set`` refuses). ``host_lost``
    (:data:`HOST_LOST`): its host stopped beating while it ran. The database holds this
    list as a CHECK (``supervisor/cluster/migrations/0004_task_state_check.sql``); a test
    checks the two agree.
    """

    QUEUED = Status.QUEUED.value
    CLAIMED = "claimed"
    RUNNING = Status.RUNNING.value
    CRASHED = Status.CRASHED.value
    HUNG = Status.HUNG.value
    WAITING = Status.WAITING.value
    ESCALATED = Status.ESCALATED.value
    VERIFYING = Status.VERIFYING.value
    COMPLETED = Status.COMPLETED.value
    FAILED = Status.FAILED.value
    ABANDONED = Status.ABANDONED.value
    SUPERSEDED = Status.SUPERSEDED.value
    REJECTED = "rejected"
    HOST_LOST = HOST_LOST


#: States after which a fleet task changes no more: the manifest's ended states plus the
#: fleet's own (a lost host's task, a task no host could run, a superseded copy).
FINAL: frozenset[FleetState] = frozenset(
    {FleetState(s) for s in TERMINAL} | {FleetState.HOST_LOST, FleetState.REJECTED}
)
#: States of a task no host runs yet: ``queued`` in the fleet's queue, or claimed and not
#: launched (``claimed``, then the manifest's ``queued`` until the launch). The sweeper
#: requeues such a task of a dead host.
UNCLAIMED: frozenset[FleetState] = frozenset({FleetState.QUEUED, FleetState.CLAIMED})
#: The failure class of an agent run that ended in an error that passes (the policy's own
#: vocabulary, pure): an agent adapter classifies the facts of the run that just ended
#: (Claude Code's classifier: :mod:`supervisor.agents.claude.failures`) as ``transient`` or a
#: permanent :class:`FailureReason`, and the policy turns the class into a transition:
#:
#: * ``transient``: the API or the network failed in a way that passes (HTTP 5xx and 529, a
#:   request timeout, connection refused or reset, a DNS failure). The run goes to ``waiting``
#:   with a backoff and resumes the same session by id; it never counts against
#:   ``max_retries`` and is bounded by the deadline.
#: * a permanent class ends the task ``failed`` with that ``failure_reason``: ``auth`` (no
#:   login, invalid key, 401/403), ``billing`` (credit balance, billing errors),
#:   ``invalid_request`` (a 400/404/413/422 the request itself caused), ``agent_error`` (the
#:   agent reported an error of another kind).
#:
#: ``exit_code`` (the run exited non-zero and said nothing more) is the fallback reason the
#: policy uses when no class is known. (Was ``supervisor.failures``, merged here: issue 23.)
TRANSIENT = "transient"
