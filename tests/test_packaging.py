"""The built wheel is what users install (issue 14, item 1): build it, install it with its
dependencies into a fresh venv, and from an empty folder run
``supervise init demo && supervise run demo/profile.toml --exit-when-idle`` to the end.

Slow-ish (a wheel build and a venv with its dependencies: ~25 s here); pip uses the machine's
own index configuration (``pip.conf``, ``PIP_*``), as a user's install would.
"""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import _tmux_socket_path

import supervisor
from supervisor.config import default_socket_name

REPO = Path(__file__).resolve().parent.parent
PIP_TIMEOUT = 300  # seconds: resolving and installing the dependencies from the index


def _run(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout (``pip wheel``: an isolated PEP 517 build)."""
    out = tmp_path_factory.mktemp("wheel")
    done = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                 str(REPO)], cwd=out, timeout=PIP_TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (path,) = out.glob("*.whl")
    return path


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv (no access to this checkout) with the wheel and its dependencies."""
    root = tmp_path_factory.mktemp("venv")
    done = _run([sys.executable, "-m", "venv", str(root)], cwd=root)
    assert done.returncode == 0, done.stderr
    done = _run([str(root / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
                cwd=root, timeout=PIP_TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_the_wheel_holds_the_profiles_schemas_demo_and_license(wheel: Path) -> None:
    assert wheel.name.startswith("supervise_agents-")  # "supervise" on PyPI is another project
    names = set(zipfile.ZipFile(wheel).namelist())
    bundled = {n.split("supervisor/_bundled/", 1)[1] for n in names if "/_bundled/" in n}
    expected = {f"schemas/{p.name}" for p in (REPO / "schemas").glob("*.json")}
    expected |= {f"profiles/{p.name}" for p in (REPO / "profiles").glob("*.toml")}
    expected |= {f"demo_tasks/{p.name}" for p in (REPO / "examples/demo/tasks").glob("*.toml")}
    assert {"schemas/task.schema.json", "profiles/demo.toml", "demo_tasks/hello.toml"} <= expected
    assert bundled == expected
    assert {"supervisor/cluster/roles.sql", "supervisor/views/templates/fleet.html",
            "supervisor/views/templates/fleet_tasks.html"} <= names  # fmt: skip
    # the fleet's SQL: roles, named queries, numbered migrations (issue 23)
    sql = {str(p.relative_to(REPO)) for p in (REPO / "supervisor/cluster").rglob("*.sql")}
    assert "supervisor/cluster/migrations/0001_tasks_events_hosts.sql" in sql
    assert sql <= names, sql - names
    dist_info = next(n.split("/")[0] for n in names if ".dist-info/" in n)
    assert f"{dist_info}/licenses/LICENSE" in names
    meta = email.message_from_bytes(zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA"))
    assert meta["Name"] == "supervise-agents"
    assert meta["Version"] == supervisor.__version__
    assert meta["License-Expression"] == "MIT"
    requires = meta.get_all("Requires-Dist")
    assert any(r.startswith("shtab") for r in requires)
    # the extras name this distribution, not the unrelated "supervise"
    assert not [r for r in requires if r.startswith("supervise[")], requires
    assert any(r.startswith("supervise-agents[tui") for r in requires), requires
    assert "Homepage" not in str(meta.get_all("Project-URL"))  # no placeholder URL


def test_installed_wheel_runs_the_demo_from_an_empty_folder(venv: Path, tmp_path: Path) -> None:
    supervise = str(venv / "bin" / "supervise")
    done = _run([supervise, "--version"], cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"supervise {supervisor.__version__}\n")

    state = (tmp_path / "demo" / "state").resolve()
    socket = default_socket_name(state)  # init leaves socket_name out: one server per folder
    try:
        done = _run([supervise, "init", "demo"], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        done = _run([supervise, "run", "demo/profile.toml", "--exit-when-idle"], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)
        _tmux_socket_path(socket).unlink(missing_ok=True)
    outcomes = {}
    for path in (state / "tasks").glob("*/manifest.json"):
        data = json.loads(path.read_text())
        outcomes[data["task_name"]] = (data["status"], data["exit_code"])
    assert outcomes == {"demo hello": ("completed", 0), "demo fails": ("failed", 3)}
    assert (tmp_path / "demo" / "spool" / "rejected" / "typo.toml").exists()
    # the demo agent ran in the installed package, not in this checkout
    assert str(REPO) not in (tmp_path / "demo" / "profile.toml").read_text()


def test_installed_schema_check_uses_the_package_copies(venv: Path, tmp_path: Path) -> None:
    """``python -m supervisor.schemas --check`` in site-packages checks the shipped files
    (on main it looked for a top-level ``schemas/`` that no install has)."""
    python = str(venv / "bin" / "python")
    done = _run([python, "-m", "supervisor.schemas", "--check"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "site-packages/supervisor/_bundled/schemas match the models" in done.stdout
    done = _run([str(venv / "bin" / "supervise"), "schema", "manifest"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (REPO / "schemas" / "manifest.schema.json").read_text()
