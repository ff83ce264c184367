"""The agent boundary (issue 23, item 3): the core packages never name an agent kind.

``config``, ``taskdir``, ``views`` and ``engine`` ask :mod:`supervisor.agents.kinds`
for what a kind adds (its settings, manifest extension and view columns); the word
``claude`` appears in them only in comments and docstrings (prose about Claude Code),
never in code or in a string the program uses.
"""

from __future__ import annotations

import ast
import io
import json
import os
import tokenize
from pathlib import Path

import pytest

import supervisor

#: The packages that never name an agent kind.
CORE = ("config", "taskdir", "views", "engine")


def _docstring_lines(source: str) -> set[int]:
    """The line numbers of every docstring (a string that is a statement of its own)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        value = node.value if isinstance(node, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def naming(root: Path, word: str = "claude") -> list[str]:
    """``file:line`` of each code token (name, string, number) under ``root`` holding
    ``word`` (case-insensitive), comments and docstrings left out."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        prose = _docstring_lines(source)
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT or token.start[0] in prose:
                continue
            if word in token.string.lower():
                found.append(f"{os.path.relpath(path, root.parent)}:{token.start[0]}")
    return found


@pytest.mark.parametrize("package", CORE)
def test_the_engine_names_no_agent_kind(package: str) -> None:
    root = Path(supervisor.__file__).parent / package
    assert any(root.rglob("*.py"))
    assert naming(root) == []


def test_the_guard_sees_code_and_skips_prose(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        '"""Claude Code in a docstring."""\n'
        "# claude in a comment\n"
        "KIND = 'claude'\n"
        "def f():\n"
        '    """Claude again."""\n'
        "    return claude_thing\n"
    )
    assert naming(tmp_path) == [f"{tmp_path.name}/m.py:3", f"{tmp_path.name}/m.py:6"]


def test_manifest_keys_keep_their_order_with_the_kinds_fields(tmp_path: Path) -> None:
    """The kinds own their manifest fields now; ``manifest.json`` still lists the core
    fields up to ``summary`` first, then ``claude``, then the rest, as before issue 23
    (a person or a script reading ``wait --json`` sees ``task_id`` and ``status`` first;
    found by the review of issue 23: ``claude`` had become the first key)."""
    from supervisor.taskdir.folder import TaskDir
    from supervisor.taskdir.manifest import Manifest

    fields = {"task_id": "t1", "task_name": "t", "model": "m", "project_dir": str(tmp_path)}
    fields |= {"session_name": "t1", "session_id": "s", "tmpdir": str(tmp_path)}
    manifest = Manifest(**fields, created_at="2026-11-26T00:00:00Z", claude={"result": "x"})
    TaskDir(tmp_path).write_manifest(manifest)
    keys = list(json.loads((tmp_path / "manifest.json").read_text()))
    assert keys[:3] == ["task_id", "task_name", "status"]
    assert keys.index("summary") + 1 == keys.index("claude") == keys.index("escalation") - 1
