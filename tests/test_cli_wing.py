"""Issue 23, the CLI wing: one exception root, no import circle through the CLI, and an engine
that never imports the fleet (``supervisor/cluster/``). Read from the source (AST) and from
the imported classes; nothing runs."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Setup

from supervisor.errors import SuperviseError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "supervisor"


def _modules() -> dict[str, Path]:
    """Every module of ``supervisor/`` by its dotted name (a package by its folder's)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of nodes under ``if TYPE_CHECKING:`` (imports that never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for child in ast.walk(node))
    return skipped


def _imports(path: Path) -> Iterator[str]:
    """The ``supervisor`` modules ``path`` imports at run time, at module level or inside a
    function (a lazy import closes a circle as surely). ``from supervisor.x import y`` names
    ``supervisor.x.y`` when y is a module, else ``supervisor.x``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{a.name}" for a in node.names]
            known = [name for name in subs if name in MODULES]
            yield from known
            if len(known) < len(subs):
                yield node.module


def _graph() -> dict[str, set[str]]:
    return {
        name: {target for target in _imports(path) if target in MODULES and target != name}
        for name, path in MODULES.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _exception_classes() -> Iterator[tuple[str, type[BaseException]]]:
    """Every exception class defined at the top level of a ``supervisor`` module."""
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
        if not classes or name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for class_name in classes:
            value = getattr(module, class_name)
            if isinstance(value, type) and issubclass(value, BaseException):
                yield f"{name}.{class_name}", value


def test_every_exception_in_supervisor_derives_from_supervise_error() -> None:
    """One root (issue 23): ``except SuperviseError`` catches every error supervise raises
    on purpose; the built-in bases (OSError, RuntimeError...) stay where code catches them."""
    found = dict(_exception_classes())
    assert len(found) >= 20  # the walk saw them: ConfigError, TmuxError, EngineBusy...
    strays = sorted(name for name, cls in found.items() if not issubclass(cls, SuperviseError))
    assert strays == []
    from supervisor.diskio import NotRegularFile
    from supervisor.tmux import TmuxError

    assert issubclass(NotRegularFile, OSError) and issubclass(TmuxError, RuntimeError)


def test_no_import_circle_runs_through_the_cli() -> None:
    """No ``supervisor.cli`` module is in an import circle, lazy imports included (issue 23:
    the 10-file circle through ``cli._profile``): the verbs import :mod:`supervisor.cli.common`,
    never the parser's :mod:`supervisor.cli.app`, which hands ``build_parser`` to the two verbs
    that need the whole parser."""
    circles = [
        sorted(c) for c in _circles(_graph()) if any(m.startswith("supervisor.cli") for m in c)
    ]
    assert circles == []
    verbs = [name for name in MODULES if name.startswith("supervisor.cli.")]
    assert len(verbs) >= 14
    back = sorted(n for n in verbs if "supervisor.cli.app" in set(_imports(MODULES[n])))
    assert back == []


def test_the_engine_never_imports_the_fleet() -> None:
    """No module of ``supervisor/engine/`` imports ``supervisor.cluster`` (issue 23): whoever
    starts the engine (``supervise run``: ``cli/ops.intake_for``) hands it the intake, the
    spool's or the fleet's, so ``engine/intake`` ↔ ``cluster/intake`` is no circle."""
    found = {
        (name, target)
        for name, path in MODULES.items()
        if name.startswith("supervisor.engine")
        for target in _imports(path)
        if target == "supervisor.cluster" or target.startswith("supervisor.cluster.")
    }
    assert found == set()
    engine_circles = [c for c in _circles(_graph()) if any("cluster" in m for m in c)]
    assert [sorted(c) for c in engine_circles if any("engine" in m for m in c)] == []


def test_one_error_line_and_each_exit_code_defined_once() -> None:
    """``supervisor.cli.common.err`` is the one error-line printer (issue 23: ``_err`` was
    defined 7 times, ``EXIT_USAGE`` 3 times); each ``EXIT_*`` status is assigned once in
    ``supervisor/`` (:mod:`supervisor.cli.common` re-exports the library's)."""
    printers = []
    exits: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        printers += [
            f"{name}.{node.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name in ("_err", "err")
        ]
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id.startswith("EXIT_"):
                    exits.setdefault(target.id, []).append(name)
    assert printers == ["supervisor.cli.common.err"]
    assert {code: where for code, where in exits.items() if len(where) > 1} == {}
    from supervisor.cli import common

    assert (common.EXIT_USAGE, common.EXIT_QUEUED, common.EXIT_NOT_APPLIED) == (2, 3, 4)
    assert (common.EXIT_NEEDS_YOU, common.EXIT_TIMEOUT) == (10, 124)


def test_an_engine_of_a_cluster_profile_needs_the_fleets_intake(setup: Setup) -> None:
    """The engine no longer picks its intake (the CLI hands it over): built for a
    ``[cluster]`` profile without one, it refuses at once rather than run on the spool and
    never claim a fleet task (found by the review of issue 23)."""
    from supervisor.config import load_profile
    from supervisor.engine.scheduler import Engine

    cluster = {"host_id": "h1", "heartbeat": 0.5, "dsn": "postgresql://127.0.0.1:1/none"}
    profile = load_profile(setup.write_profile(extra={"cluster": cluster}))
    with pytest.raises(ValueError, match="needs the fleet's intake"):
        Engine(profile)
