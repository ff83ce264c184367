"""A task's turns (issue 22): the record of an ended turn kept in the manifest's ``turns``
(:class:`supervisor.taskdir.folder.TurnRecord`) and the manifest of the next turn, opened by a
follow-up (:mod:`supervisor.engine.followups`). No engine import.
"""

from __future__ import annotations

import hashlib

from supervisor.agents.claude.stream import PER_TURN
from supervisor.config import MAX_PROMPT_BYTES
from supervisor.diskio import read_regular
from supervisor.taskdir import layout
from supervisor.taskdir.folder import TURN_PROMPT, Manifest, TaskDir, TurnRecord
from supervisor.taskdir.states import Status

#: The manifest fields of an ended turn's outcome, cleared when the next turn opens.
CLEARED = (
    "finished_at",
    "exit_code",
    "signal",
    "abandoned_at",
    "abandon_reason",
    "resume_at",
    "verdict",
    "summary",
    "escalation",
    "failure_reason",
    "acceptance",
    "pid",
    "launched_at",
    "started_at",
)
#: Characters of a turn's prompt kept in ``turns[].prompt`` and the event (its first line).
PROMPT_HEAD = 200


def digest(prompt: bytes) -> str:
    """The SHA-256 (hex) of a prompt: how a turn's event names its prompt."""
    return hashlib.sha256(prompt).hexdigest()


def head(prompt: str) -> str:
    """The first line of ``prompt``, at most :data:`PROMPT_HEAD` characters."""
    lines = prompt.strip().splitlines()
    return lines[0][:PROMPT_HEAD] if lines else ""


def open_turn(manifest: Manifest, turn: int, task: TaskDir) -> None:
    """In place: the ended turn into ``turns``, then turn ``turn`` ``queued`` with no
    outcome yet: :data:`CLEARED`, the counters (``denials`` included) and the ``claude``
    keys of one turn (:data:`supervisor.agents.claude.stream.PER_TURN`: its ``result``,
    errors, retries) are reset; the session id and the task's totals stay. The prompt
    recorded is the ended turn's own."""
    name = TURN_PROMPT if manifest.turn > 1 else layout.PROMPT
    try:
        raw = read_regular(task.file(name), MAX_PROMPT_BYTES, follow=False)
    except (OSError, ValueError):
        raw = b""
    cost = (manifest.claude or {}).get("total_cost_usd")
    manifest.turns.append(
        TurnRecord(
            turn=manifest.turn,
            prompt=head(raw.decode("utf-8", errors="replace")),
            prompt_sha256=digest(raw),
            status=manifest.status,
            verdict=manifest.verdict,
            failure_reason=manifest.failure_reason,
            abandon_reason=manifest.abandon_reason,
            started_at=manifest.started_at,
            finished_at=manifest.finished_at,
            retry_count=manifest.retry_count,
            cost_usd=cost if isinstance(cost, int | float) else None,
            summary=manifest.summary,
        )
    )
    manifest.turn = turn
    manifest.status = Status.QUEUED
    for name in CLEARED:
        setattr(manifest, name, None)
    manifest.retry_count = manifest.limit_waits = manifest.transient_waits = 0
    manifest.denials = 0  # the circuit breaker counts per turn
    if manifest.claude is not None:  # the session and its totals go on; the answer does not
        manifest.claude = {k: v for k, v in manifest.claude.items() if k not in PER_TURN}
