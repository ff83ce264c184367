"""The monitor's decision logic: pure functions from (state, facts, policy) to a decision.

No I/O happens here; :mod:`supervisor.engine` observes the signals and performs the actions.
Every state change goes through a function of this package: :func:`decide` for a check,
and the transitions outside a check, :func:`launched`, :func:`launch_failed`,
:func:`adopted`, :func:`recovered_ending` and :func:`continue_turn` (a follow-up).

Modules: :mod:`~supervisor.policy.model` (the dataclasses and timing rules),
:mod:`~supervisor.policy.steps` (:func:`decide` in named steps),
:mod:`~supervisor.policy.outcomes` (the outcomes the steps share),
:mod:`~supervisor.policy.tools` (a tool in flight is evidence of work) and
:mod:`~supervisor.policy.transitions` (launch, adoption, logged endings).

Every check runs the seed monitor's three layers in order (seed 000, "Pitfall 1": the
done-file is always first, so a finished task is never resumed):

1. **done-file**: the wrapper writes ``done`` only when the agent exited on its own; the
   exit code decides ``completed`` (0) or ``failed`` (anything else).
2. **liveness**: the agent's PID is gone (or a zombie), or it never wrote one and its tmux
   session is gone, and there is no done-file: a crash. When the wrapper recorded a signal
   death or a resume exit code, that is final at once; otherwise the crash is declared
   only after :data:`EXIT_SETTLE` seconds without a done-file, so a normal exit is never
   misread while the wrapper writes ``exit_code`` and then ``done``.
3. **output staleness**: ``output.log`` older than ``stale_threshold`` starts a grace
   period; the first stale check never acts. Still stale after ``grace_period``: a hang.
   Fresh output in between cancels the grace period.

The deadline (``deadline`` seconds after ``started_at``) is checked after layer 1.

State table (like supervisord's process states; "stop" = stop the agent's process group,
"end" = finish + cleanup + notify)::

    from          condition                                 to          actions
    ------------  ----------------------------------------  ----------  --------------------
    queued        launched: tmux session created            running     first check after
                                                                        first_check
    running       launch failed: tmux refused the session   failed      end (reason launch)
    queued        its worktree could not be made (base      failed      end (reason workspace)
                  missing, branch taken, setup failed, ENOSPC)
    queued        operator: supervise stop                  abandoned   finish
    blocked       every predecessor (after) ended as        queued      event unblocked
                  requires says (policy/plans.py)
    blocked       a required predecessor ended otherwise    abandoned   finish, notify
                                                                        (reason dependency)
    blocked       operator: supervise stop                  abandoned   finish
    running       done-file, exit code 0                    completed   end
    running       done-file, exit code != 0                 failed      end
    any live      deadline passed (no done-file)            abandoned   stop, end
    any live      operator: supervise stop                  abandoned   stop, end
    any live      operator: supervise resume                running     stop, resume (retries + 1)
    running       agent gone > EXIT_SETTLE s, no done-file  crashed     wait backoff
    running       output stale, grace_period elapsed        hung        stop, wait backoff
    crashed/hung  retry_count >= max_retries                abandoned   stop, end
                  (reason tmux_lost if the session was gone, else max_retries)
    crashed/hung  backoff elapsed                           running     resume (retries + 1)
    running       fresh output during the grace period      running     grace cancelled
    running       a tool in flight for < tool_budget s      running     healthy; grace
                  (PreToolUse without PostToolUse)                      cancelled (tools.py)
    running       done-file exit 0, [acceptance] declared   verifying   cleanup, accept
    verifying     acceptance result                         completed   end (verdict PASS/FAIL)
    running       usage/rate limit (429/529, limit text)    waiting     stop, wait resume_at
    running       done-file, run ended on a transient API   waiting     wait backoff
                  or network failure (5xx, refused, DNS)
    waiting       resume_at reached                         running     resume (retries unchanged)
    hung          done-file (the agent answered our stop)   (ignored)   the stop's intent wins
    running       permission requests wait (rules ruled)    running     rule: answer or log each
    running       permission escalated / circuit breaker    escalated   rule, notify (or pause)
    escalated     operator: supervise approve               running     answer allow / continue
    escalated     operator: supervise deny                  running     answer deny
                  (a paused breaker escalation: abandoned, reason denied)
    running       interactive turn ended (Stop hook)        running     end the TUI session (/exit)
    running       interactive turn failed (StopFailure), a  failed      stop, end (failure_reason)
                  permanent class (auth, billing, ...)
    running       interactive turn failed, transient        waiting     stop, wait backoff
    running       usage limit reported by a live TUI        waiting     wait resume_at (agent kept)
    waiting       the kept agent works again (a hook)       running     none (event continued)
    any live      state filesystem full (ENOSPC)            unchanged   none: held until it has room
    queued/       the fleet's database gives the task to    superseded  stop (if live), finish,
    blocked/live  a newer generation (cluster, issue 15)                cleanup (if live); never
                                                                        resumed
    (restart)     adopted: the manifest's status unless the see left    watched again
                  log's last word says more: queued with a
                  session -> running; a logged resume ->
                  running, no backoff; a logged intent
                  (crashed/hung/waiting) -> it, no backoff
    any live      (restart) terminal event logged, the      as logged   (stop if abandoned,) end;
                  manifest not written yet                              notify unless it ran
    terminal      operator: supervise continue (issue 22)   queued      a new turn: launched as
                  (escalated: stopped first, then this)                 any queued task, retries
                                                                        0, a new deadline
                                                                        (followups.py)

An escalated task is never judged stale (it waits for a human); a waiting task is neither
stale nor crashed (its agent was stopped on purpose). The deadline applies to both.

A stop that ``supervise`` causes is never the task's own ending: the intent (hung, crashed,
waiting, an operator's resume) is recorded in the state, and in ``events.jsonl``, before the
agent is signalled. Claude Code traps SIGTERM and exits 143 by itself, and exits 129 on
SIGHUP (measured, ``../shared/notes/real-world-facts.md``), so its wrapper then writes a
done-file: in those states the done-file is the answer to our stop, not a result.

A ``failed`` ending carries a ``failure_reason`` (:mod:`~supervisor.taskdir.states`): ``auth``,
``billing``, ``invalid_request``, ``agent_error``, ``exit_code`` when the agent said
nothing more than its exit code, or ``launch`` when tmux refused to create its session.
Every terminal state carries a ``verdict`` (seed 003): ``PASS`` (completed, acceptance
passed or none declared), ``FAIL`` (failed, or acceptance failed), ``ESCALATE`` (ended
while escalated), ``TIMEOUT`` (deadline) or ``ABANDONED``.

Backoff before resume number ``n + 1`` is ``min(base_interval * 2**n, max_interval)``
seconds where ``n`` is the ``retry_count`` so far (seed 000, Pattern 1). Retries count over
the task's whole life: fresh output never resets them (a bug in the seed's history).
"""

from supervisor.policy.followups import continue_turn
from supervisor.policy.model import (
    DISK_RECHECK,
    EXIT_SETTLE,
    MIN_CHECK,
    STALE_SLACK,
    START_TIMEOUT,
    TERMINAL,
    VERDICTS,
    Action,
    Decision,
    Signals,
    TaskState,
    backoff,
    first_check,
)
from supervisor.policy.steps import decide
from supervisor.policy.transitions import (
    INTENTS,
    adopted,
    escalation_state,
    last_word,
    launch_failed,
    launched,
    logged_ending,
    recovered_ending,
    resume_redone,
)

__all__ = [
    "DISK_RECHECK",
    "EXIT_SETTLE",
    "INTENTS",
    "MIN_CHECK",
    "STALE_SLACK",
    "START_TIMEOUT",
    "TERMINAL",
    "VERDICTS",
    "Action",
    "Decision",
    "Signals",
    "TaskState",
    "adopted",
    "backoff",
    "continue_turn",
    "decide",
    "escalation_state",
    "first_check",
    "last_word",
    "launch_failed",
    "launched",
    "logged_ending",
    "recovered_ending",
    "resume_redone",
]
