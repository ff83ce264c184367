"""``manifest.json``: the model the orchestrator reads (:class:`Manifest`), with each earlier
turn's record (:class:`TurnRecord`); its JSON Schema is ``schemas/manifest.schema.json``
(``python -m supervisor.schemas``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from supervisor.agents import kinds
from supervisor.taskdir.states import FailureReason, Status, Verdict
from supervisor.workspace.model import WorkspaceReport


def _inline_enum(values: type[StrEnum]) -> WithJsonSchema:
    """The JSON Schema of a :mod:`supervisor.taskdir.states` enum written inline (``enum`` and
    ``type`` on the property itself, no ``$defs``), so ``schemas/manifest.schema.json`` keeps
    its plain shape while its values come from the one definition."""
    return WithJsonSchema({"enum": [member.value for member in values], "type": "string"})


class TurnRecord(BaseModel):
    """One earlier turn of a task, kept in the manifest's ``turns`` when ``supervise
    continue`` opens the next one (issue 22): its prompt (first line, at most 200
    characters, and the SHA-256 of the whole prompt), outcome and times (ISO-8601 UTC),
    ``cost_usd`` (Claude Code's ``total_cost_usd`` as reported at the turn's end: the
    session's running total) and ``summary``."""

    model_config = ConfigDict(extra="allow")

    turn: int
    prompt: str
    prompt_sha256: str
    status: Annotated[Status, _inline_enum(Status)]
    verdict: Annotated[Verdict, _inline_enum(Verdict)] | None = None
    failure_reason: str | None = None
    abandon_reason: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    retry_count: int = 0
    cost_usd: float | None = None
    summary: str | None = None


class _ManifestHead(BaseModel):
    """The manifest's core fields up to ``summary``, in the order ``manifest.json`` lists
    them (:class:`Manifest`)."""

    task_id: str
    task_name: str
    status: Annotated[Status, _inline_enum(Status)] = Field(Status.QUEUED, title="Status")
    model: str
    project_dir: str
    session_name: str
    session_id: str
    tmpdir: str
    pid: int | None = None
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    output_tail: str | None = None
    retry_count: int = 0
    last_checked_at: str | None = None
    abandoned_at: str | None = None
    abandon_reason: str | None = None
    launched_at: str | None = None
    resume_at: str | None = None
    verdict: Annotated[Verdict, _inline_enum(Verdict)] | None = Field(None, title="Verdict")
    summary: str | None = None


class _ManifestTail(BaseModel):
    """The manifest's core fields after the agent kinds' own (:class:`Manifest`)."""

    escalation: dict[str, Any] | None = None
    denials: int = 0
    limit_waits: int = 0
    transient_waits: int = 0
    failure_reason: Annotated[FailureReason, _inline_enum(FailureReason)] | None = Field(
        None, title="Failure Reason"
    )
    acceptance: dict[str, Any] | None = None
    workspace: WorkspaceReport | None = None
    turn: int = 1
    turns: list[TurnRecord] = Field(default_factory=list)
    account: str | None = Field(None, pattern=r"^acct-[0-9a-f]{12}$", title="Account")
    after: list[str] = Field(default_factory=list)
    requires: str | None = None
    budget_hold: dict[str, Any] | None = None
    #: Issue 26: an attempt's place in its group, ``{"group", "index", "of"}``
    #: (:mod:`supervisor.attempts`).
    attempt: dict[str, Any] | None = None


# The keys of manifest.json keep their order: pydantic lists a base's fields before a
# subclass's, so the core fields up to ``summary`` come first, then each agent kind's
# (``claude``), then the rest, as they stood before the kinds owned their fields.
class Manifest(_ManifestTail, *kinds.manifest_models(), _ManifestHead):  # type: ignore[misc]
    """``manifest.json``: what the orchestrator reads.

    Seed fields: ``task_name``, ``model`` (the resolved id), ``project_dir``,
    ``session_name``, ``pid``, ``tmpdir`` (the task directory), ``started_at``, ``status``,
    ``finished_at``, ``exit_code``, ``output_tail`` (last 100 lines of ``output.log``),
    ``retry_count``, ``last_checked_at``, ``abandoned_at``. New: ``task_id``, ``session_id``
    (the UUID passed as ``{session_id}``), ``abandon_reason``, ``created_at``, ``signal``
    (set when the agent was killed by a signal), ``launched_at`` (latest launch or resume),
    ``resume_at`` (when a crashed, hung or waiting task is due to resume), ``verdict`` and
    ``summary`` (set at the end: seed 003's verdict and one paragraph on the outcome),
    ``failure_reason`` (with status ``failed``: ``auth``, ``billing``, ``invalid_request``,
    ``agent_error``, ``exit_code`` or ``launch``; see :mod:`supervisor.taskdir.states`) and
    ``transient_waits`` (waits after transient API or network failures, never retries).
    Claude Code tasks also carry ``claude`` (session id, final result text, is_error,
    num_turns, total_cost_usd, api_retries, api_errors, transcript_path), ``denials``
    (the circuit breaker's count), ``escalation`` (what waits for a human) and
    ``limit_waits``; an acceptance check adds ``acceptance``; ``workspace``
    (:class:`~supervisor.workspace.model.WorkspaceReport`) says where the task worked.
    ``turn`` is 1 for the first run of the task's prompt and counts each ``supervise
    continue``; ``turns`` keeps each earlier turn's outcome (:class:`TurnRecord`).
    ``account`` (issue 26) names the credentials the task runs with: ``acct-`` and 12 hex
    digits (:func:`supervisor.accounts.fingerprint`, never the secret itself), set when the
    task is claimed and again when a launch or an adoption finds other credentials
    (:func:`supervisor.engine.launch.record_account`).
    ``budget_hold`` (issue 26): on a queued task the profile's daily cap holds back
    (``[budget] daily_usd``): ``{"day", "reason", "spent_usd", "daily_usd", "until"}``
    (``reason``: ``daily budget reached: $X of $Y``; ``until``: ISO 8601 UTC, the next local
    midnight); it holds only while ``status`` is ``queued`` and ``day`` is today.
    All timestamps are ISO-8601 UTC strings.
    """

    # validate_assignment: the engine assigns statuses as plain strings (the policy's);
    # they become the enum members the schema declares, and a wrong one raises at once.
    model_config = ConfigDict(extra="allow", validate_assignment=True)
