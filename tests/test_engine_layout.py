"""The engine package's structure (issue 23): importing one module loads only what it needs,
every module and function fits the size guide by structure, and the TaskState -> Manifest
projection has one owner (:mod:`supervisor.engine.projection`)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import supervisor

ENGINE = Path(supervisor.__file__).parent / "engine"
#: The manifest fields :func:`supervisor.engine.projection.state_fields` and
#: :func:`~supervisor.engine.projection.decided` write from a decision's state.
PROJECTED = frozenset(
    {
        "status",
        "started_at",
        "launched_at",
        "last_checked_at",
        "retry_count",
        "resume_at",
        "limit_waits",
        "transient_waits",
        "abandoned_at",
        "abandon_reason",
        "verdict",
        "failure_reason",
        "finished_at",
        "exit_code",
    }
)


def _modules() -> list[Path]:
    return sorted(ENGINE.glob("*.py"))


@pytest.mark.parametrize("module", ["notify", "stopping", "signals", "watch", "acceptance"])
def test_importing_one_engine_module_loads_no_scheduler(module: str) -> None:
    """``supervisor/engine/__init__.py`` imports nothing, so a leaf such as ``notify`` comes
    without the scheduler, APScheduler or the intake."""
    probe = (
        "import sys\n"
        f"import supervisor.engine.{module}\n"
        "heavy = ('supervisor.engine.scheduler', 'supervisor.engine.intake', 'apscheduler')\n"
        "print(sorted(name for name in heavy if name in sys.modules))\n"
    )
    root = Path(supervisor.__file__).parent.parent
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_engine_modules_and_functions_fit_the_size_guide() -> None:
    """No engine module over 500 lines and no function over 80, as formatted."""
    too_long = []
    for path in _modules():
        text = path.read_text()
        if len(text.splitlines()) > 500:
            too_long.append(f"{path.name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > 80:
                    too_long.append(f"{path.name}:{node.name}: {length} lines")
    assert too_long == []


def test_the_manifest_projection_has_one_owner() -> None:
    """Only ``engine/projection.py`` writes a decision's state into a manifest: no other
    engine module assigns one of :data:`PROJECTED`."""
    found = []
    for path in _modules():
        if path.name == "projection.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in PROJECTED:
                    found.append(f"{path.name}:{node.lineno}: .{target.attr}")
    assert found == []


def test_the_architecture_map_names_every_engine_module() -> None:
    """``docs/architecture.md``'s ``engine/`` table names each module of the package, and
    no module that is not there."""
    doc = (ENGINE.parent.parent / "docs" / "architecture.md").read_text()
    section = doc.split("### `engine/`", 1)[1].split("\n### ", 1)[0]
    named = {name for cell in section.split("|")[1::3] for name in cell.replace("`", " ").split()}
    modules = {path.name for path in _modules()} - {"__init__.py"}
    assert sorted(modules - named) == []
    assert sorted(n for n in named if n.endswith(".py") and n not in modules) == []
