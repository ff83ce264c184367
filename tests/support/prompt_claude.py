"""A Claude-like fake agent command for the prompt delivery tests (moved from
tests/test_prompt_delivery.py)."""

from __future__ import annotations

from pathlib import Path

from supervisor.agents import adapter_for
from supervisor.config import AgentSpec, MonitorPolicy, ResolvedTask, TaskSpec
from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso


def _claude(tmp_path: Path, prompt: str, **agent: object):
    folder = tmp_path / "task"
    folder.mkdir(exist_ok=True)
    (folder / "prompt").write_text(prompt, encoding="utf-8")
    spec = TaskSpec(name="t", prompt=prompt, project_dir=tmp_path)
    resolved = ResolvedTask(spec, prompt, "claude-sonnet-4-6", MonitorPolicy(deadline=120.0))
    manifest = Manifest(
        task_id="t1", task_name="t", model="m", project_dir=str(tmp_path), session_name="t1",
        session_id="00000000-0000-4000-8000-000000000000", tmpdir=str(folder),
        created_at=utc_iso(),
    )  # fmt: skip
    spec_agent = AgentSpec(kind="claude", **agent)  # type: ignore[arg-type]
    return adapter_for(spec_agent, TaskDir(folder), resolved, manifest, "denied", lambda k: None)
