"""An agent adapter and agent for the adapter tests (moved from tests/test_agents.py)."""

from __future__ import annotations

from pathlib import Path

from supervisor.agents import AgentAdapter, Keys, adapter_for
from supervisor.config import AgentSpec, MonitorPolicy, ResolvedTask, TaskSpec
from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso


def _adapter(tmp_path: Path, agent: AgentSpec, sent: list[Keys] | None = None) -> AgentAdapter:
    folder = tmp_path / "task"
    folder.mkdir(exist_ok=True)
    spec = TaskSpec(name="t", prompt="p", project_dir=tmp_path)
    resolved = ResolvedTask(spec, "p", "claude-sonnet-4-5", MonitorPolicy(deadline=120.0))
    manifest = Manifest(
        task_id="t1",
        task_name="t",
        model="claude-sonnet-4-5",
        project_dir=str(tmp_path),
        session_name="t1",
        session_id="00000000-0000-4000-8000-000000000000",
        tmpdir=str(folder),
        created_at=utc_iso(),
    )
    keys = sent if sent is not None else []
    return adapter_for(agent, TaskDir(folder), resolved, manifest, "denied", keys.append)


def _agent(kind: str, **extra: object) -> AgentSpec:
    if kind == "generic":
        extra.setdefault("command", ["agent", "{prompt}"])
    return AgentSpec(kind=kind, **extra)  # type: ignore[arg-type]
