"""A third agent kind, made here and registered at test time (issue 23, item 3).

``toy`` has its own ``[agent]`` setting (``flavour``), its own manifest key (``toy``) and
its own view column (``flavour``); nothing in ``config/``, ``taskdir/``, ``views/`` or
``engine/`` knows it. A real engine runs a task with it and ``supervise status`` shows the
column. The engine and ``status`` run as processes of their own, started through this
module (``python tests/test_agent_kind_toy.py <supervise args>``), which registers the kind
first, as a plug-in's entry point would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from pydantic import BaseModel, ConfigDict, Field

from supervisor.agents import AgentAdapter, LaunchPart, kinds
from supervisor.taskdir.folder import Manifest

HERE = Path(__file__).resolve()


class ToySettings(BaseModel):
    """The toy's ``[agent]`` key: ``flavour``, a word its agent prints."""

    model_config = ConfigDict(extra="forbid")
    flavour: str = Field(default="plain", pattern=r"^[a-z]+$")


class ToyManifest(BaseModel):
    """The toy's manifest key: ``toy``, the flavour and the runs so far."""

    toy: dict[str, Any] | None = None


class ToyAdapter(AgentAdapter):
    """Runs ``python -c 'print(flavour)'``; reports the flavour and its runs."""

    kind = "toy"

    def restore(self, manifest: Manifest) -> None:
        record = getattr(manifest, "toy", None) or {}
        self.runs = int(record.get("runs", 0))

    def launch(self, resume: bool) -> LaunchPart:
        self.runs += 1
        flavour = self.context.agent.settings().flavour
        code = "import os; print('toy flavour', os.environ['TOY_FLAVOUR'])"
        return LaunchPart(argv=[sys.executable, "-c", code], env={"TOY_FLAVOUR": flavour})

    def report(self) -> dict[str, Any]:
        return {"toy": {"flavour": self.context.agent.settings().flavour, "runs": self.runs}}

    def result_text(self) -> str | None:
        return f"a {self.context.agent.settings().flavour} toy"


def _columns(manifest: Mapping[str, Any]) -> dict[str, Any]:
    record = manifest.get("toy")
    return {"flavour": record.get("flavour")} if isinstance(record, dict) else {}


TOY = kinds.Kind(
    name="toy",
    adapter=lambda: ToyAdapter,
    settings=lambda: ToySettings,
    manifest=lambda: ToyManifest,
    columns=_columns,
)


@pytest.fixture
def toy() -> Iterator[kinds.Kind]:
    kinds.register(TOY)
    yield TOY
    kinds.unregister(TOY.name)


def _supervise(*args: str) -> subprocess.CompletedProcess[str]:
    """``supervise ARGS`` in a process that registers the toy kind first."""
    return subprocess.run(
        [sys.executable, str(HERE), *args], capture_output=True, text=True, timeout=120
    )


def _profile(root: Path, socket_name: str, **agent: Any) -> Path:
    data = {
        "paths": {"spool_dir": "spool", "state_dir": "state"},
        "tmux": {"socket_name": socket_name},
        "agent": {"kind": "toy", **agent},
        "monitor": {"base_interval": 0.5, "max_interval": 2, "deadline": 120},
    }
    (root / "project").mkdir()
    (root / "spool").mkdir()
    profile = root / "profile.toml"
    profile.write_text(tomli_w.dumps(data), encoding="utf-8")
    return profile


def test_the_toy_kind_validates_its_own_setting(toy: kinds.Kind) -> None:
    from pydantic import ValidationError

    from supervisor.config import AgentSpec

    agent = AgentSpec.model_validate({"kind": "toy", "flavour": "mint"})
    assert agent.settings().flavour == "mint"
    assert AgentSpec.model_validate({"kind": "toy"}).settings().flavour == "plain"
    with pytest.raises(ValidationError) as bad:
        AgentSpec.model_validate({"kind": "toy", "flavour": "Mint!"})
    assert bad.value.errors()[0]["loc"] == ("flavour",)
    with pytest.raises(ValidationError) as unknown:
        AgentSpec.model_validate({"kind": "toy", "flavor": "mint"})
    assert unknown.value.errors()[0]["type"] == "extra_forbidden"


def test_an_unregistered_kind_is_refused_as_before() -> None:
    from pydantic import ValidationError

    from supervisor.config import AgentSpec

    with pytest.raises(ValidationError) as bad:
        AgentSpec.model_validate({"kind": "toy", "command": ["x"]})
    error = bad.value.errors()[0]
    assert (error["type"], error["msg"]) == (
        "literal_error",
        "Input should be 'generic' or 'claude'",
    )


def test_a_toy_task_runs_through_a_real_engine_and_status(
    tmp_path: Path, socket_name: str, toy: kinds.Kind
) -> None:
    profile = _profile(tmp_path, socket_name, flavour="mint")
    task = {"name": "t", "prompt": "play", "project_dir": str(tmp_path / "project")}
    (tmp_path / "spool" / "t.toml").write_text(tomli_w.dumps(task), encoding="utf-8")

    ran = _supervise("run", str(profile), "--exit-when-idle")
    assert ran.returncode == 0, ran.stderr

    [folder] = (tmp_path / "state" / "tasks").iterdir()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["toy"] == {"flavour": "mint", "runs": 1}
    assert ToyManifest.model_validate(manifest).toy == {"flavour": "mint", "runs": 1}
    assert "toy flavour mint" in (folder / "output.log").read_text()

    rows = _supervise("status", "-c", str(profile), "--json")
    assert rows.returncode == 0, rows.stderr
    [row] = json.loads(rows.stdout)
    assert row["columns"] == {"flavour": "mint"}
    table = _supervise("status", "-c", str(profile)).stdout.splitlines()
    [header] = [line for line in table if line.startswith("group")]
    [task_row] = [line for line in table if " t " in line]
    assert header.split()[-4:] == ["diff", "flavour", "last", "line"], table
    assert "mint" in task_row.split(), table


if __name__ == "__main__":  # the engine's and status's process: register, then supervise
    from supervisor.cli import main

    kinds.register(TOY)
    sys.exit(main(sys.argv[1:]))
