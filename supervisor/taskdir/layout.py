"""Every file name of a task folder, of ``state_dir`` and of the spool, once (standard library
only: the views, the wrapper's checks and ``supervise status`` import it without pydantic).

Layout of ``state_dir/tasks/<task_id>/`` (names kept from the seed skill so existing
orchestrators keep working)::

    task.toml        the claimed spool file, moved here unchanged          TASK_TOML
    spec.json        the validated task table the engine launches from    SPEC
    prompt           the prompt text, byte for byte                       PROMPT
    prompt.template  a plan task's prompt before {after.*} was filled     PROMPT_TEMPLATE
    followup.prompt  a follow-up's prompt waiting for the engine          FOLLOWUP
    turn.prompt      the current turn's prompt (turn 2 and later)         TURN_PROMPT
    launch.json      argv, env and cwd for the in-pane wrapper            LAUNCH
    pid              the agent's own PID (written by the wrapper)         PID
    exit_code        the agent's exit code (written when it ends)         EXIT_CODE
    signal           the signal number, when a signal killed the agent    SIGNAL
    done             written last by the wrapper: the run is over         DONE
    launch_error     why the agent's program could not be executed       LAUNCH_ERROR
    output.log       all pane output (pipe-pane); output.log.N rotated     OUTPUT
    manifest.json    the machine-readable state (tmp + fsync + rename)   MANIFEST
    events.jsonl     one JSON object per transition, append-only         EVENTS
    acceptance.json  the acceptance check's result                       ACCEPTANCE
    cluster.json     a fleet task's claim record                         CLUSTER_CLAIM
    .manifest.lock   the manifest's read-modify-write lock               MANIFEST_LOCK
    .inflight.lock   held while the engine works in the folder           TASK_HOLD

An agent adapter's own files (Claude Code's settings, ``stream.jsonl``, hooks) are named by
its adapter (``supervisor/agents/``), not here: this package names no agent kind.

Layout of ``state_dir``: ``tasks/`` (:data:`TASKS`), ``control/`` (operator requests,
:data:`CONTROL`), ``archive/`` (:data:`ARCHIVE`), ``children/`` (:data:`CHILDREN`), the
heartbeat ``engine-stats.json``, ``engine.log`` and ``engine-log.json``, ``clock.json``,
``cluster-lease``, ``cluster-outbox.jsonl``, ``accounts.json``, ``serve.sock`` and
``.shutdown.lock``. The spool keeps refused files in ``rejected/`` with a ``.error`` beside
each.

The in-pane wrapper (``supervisor/wrapper.py``, run as ``python3 -I -S``) cannot import
this module; it keeps its own copy of the names it writes, and
``tests/test_taskdir_layout.py`` checks that the copy equals these.
"""

from __future__ import annotations

# -- a task folder ---------------------------------------------------------------------
TASK_TOML = "task.toml"
SPEC = "spec.json"
PROMPT = "prompt"
#: Issue 26: a blocked task's prompt as claimed, kept when its ``{after.NAME.summary}`` /
#: ``{after.NAME.branch}`` are filled into :data:`PROMPT` at unblock (filled again from
#: it after a crash, never twice into the same text).
PROMPT_TEMPLATE = "prompt.template"
#: ``supervise continue`` (issue 22): the prompt of a follow-up that waits for the engine.
#: Created with ``link(2)`` (never replaced), so of two follow-ups at once exactly one is
#: taken; the engine renames it to :data:`TURN_PROMPT` once the new turn is recorded.
FOLLOWUP = "followup.prompt"
#: The prompt of the task's current turn when it is a follow-up (turn 2 and later); the
#: first turn's prompt stays in :data:`PROMPT`.
TURN_PROMPT = "turn.prompt"
LAUNCH = "launch.json"
MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
OUTPUT = "output.log"
#: The newest rotated output (``output.log.N`` shift up at each rotation).
OUTPUT_ROTATED = OUTPUT + ".1"
ACCEPTANCE = "acceptance.json"
#: A fleet task's claim record, ``{"host_id", "generation"}``.
CLUSTER_CLAIM = "cluster.json"
MANIFEST_LOCK = ".manifest.lock"
#: The file the engine holds a shared ``flock`` on while work it started in the folder runs
#: (:func:`supervisor.statelock.hold_task`).
TASK_HOLD = ".inflight.lock"
#: Between the name of a manifest set aside as unreadable and its epoch seconds
#: (``manifest.json.damaged-<epoch s>``).
DAMAGED = ".damaged-"

# -- the wrapper's run files (it keeps a checked copy of these) -------------------------
PID = "pid"
EXIT_CODE = "exit_code"
SIGNAL = "signal"
DONE = "done"
#: Written (before :data:`EXIT_CODE`) when the agent's program could not be executed.
LAUNCH_ERROR = "launch_error"
#: What the wrapper records of one run, in the order it writes them (:data:`DONE` last).
RUN_FILES = (PID, EXIT_CODE, SIGNAL, DONE)

# -- state_dir --------------------------------------------------------------------------
TASKS = "tasks"
CONTROL = "control"
ARCHIVE = "archive"
CHILDREN = "children"
#: The engine's heartbeat and counters, rewritten every few seconds.
ENGINE_STATS = "engine-stats.json"
#: The engine's log when ``supervise run`` has no ``--log-file``.
ENGINE_LOG = "engine.log"
#: The record of the log file the last engine wrote: ``{"path": "/abs/file"}``.
ENGINE_LOG_POINTER = "engine-log.json"
#: The engine clock's mark: wall time, boottime and boot id.
CLOCK = "clock.json"
#: The daily cap's record (issue 26): the day it was reached and whether its notifier
#: ran (``{"day", "state": "notifying"|"notified", "spent_usd", "daily_usd", "until"}``).
DAILY_BUDGET = "daily-budget.json"
#: The cluster lease the wrappers of fleet tasks watch.
CLUSTER_LEASE = "cluster-lease"
#: Fleet updates not yet written to the database.
CLUSTER_OUTBOX = "cluster-outbox.jsonl"
#: The accounts' usage limits the engine holds launches for (issue 26,
#: :mod:`supervisor.engine.accountbook`): ``{ACCOUNT: {"until", "by", "last_start"}}``.
ACCOUNTS = "accounts.json"
#: ``supervise serve --socket``'s unix socket.
SERVE_SOCKET = "serve.sock"
#: Two ``supervise shutdown`` runs take turns on this lock.
SHUTDOWN_LOCK = ".shutdown.lock"

# -- the spool ----------------------------------------------------------------------------
REJECTED = "rejected"
#: Prefix of a claimed spool file (``.claim.<task id>.<original name>``): hidden, so no
#: listing of pending task files counts it.
CLAIM_PREFIX = ".claim."
#: Appended to a rejected file's name for the file that says why.
ERROR_SUFFIX = ".error"
