"""Events and manifests as the policy's transitions read them (moved from
tests/test_policy_transitions.py)."""

from __future__ import annotations

from supervisor.taskdir.folder import Manifest, utc_iso
from support.policy_states import T0

# ============================================================================ adoption


def manifest(**fields) -> Manifest:
    """A manifest as the engine writes it (times as ISO strings, epoch seconds in)."""
    base = {
        "task_id": "t-1",
        "task_name": "t",
        "model": "m",
        "project_dir": "/p",
        "session_name": "t-1",
        "session_id": "s",
        "tmpdir": "/tmp/t-1",
        "created_at": utc_iso(T0 - 10),
    }
    for key in ("started_at", "launched_at", "resume_at"):
        if fields.get(key) is not None:
            fields[key] = utc_iso(fields[key])
    return Manifest(**{**base, **fields})


def event(name: str, at: float, **fields) -> dict:
    return {"ts": utc_iso(at), "event": name, **fields}
