"""Issue 23, item 1: :mod:`supervisor.taskdir.layout` is the one owner of the file names of a
task folder, of ``state_dir`` and of the spool. The in-pane wrapper keeps a copy (it runs
with ``python3 -I -S`` and cannot import the package); these tests hold the copy equal to
``layout`` and keep the names from being spelled as literals anywhere else in
``supervisor/``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from supervisor import wrapper
from supervisor.taskdir import layout

ROOT = Path(__file__).resolve().parent.parent / "supervisor"
#: The owner and the checked copy.
OWNERS = {ROOT / "taskdir" / "layout.py", ROOT / "wrapper.py"}
#: Names that are also words (a dict key, a field, a status): spelled freely, never as a file.
WORDS = {
    layout.PROMPT,
    layout.PID,
    layout.EXIT_CODE,
    layout.SIGNAL,
    layout.DONE,
    layout.LAUNCH_ERROR,
    layout.TASKS,
    layout.CONTROL,
    layout.ARCHIVE,
    layout.CHILDREN,
    layout.REJECTED,
}
#: ``(module, name)`` pairs that join a word above for another folder's file.
ELSEWHERE = {
    # the profile folder's example task files (``supervise init``), not state_dir/tasks
    ("cli/starter_claude.py", layout.TASKS),
    ("cli/setup.py", layout.TASKS),
}


def _names() -> dict[str, str]:
    """Every ``UPPER = "value"`` string constant of ``layout``."""
    return {k: v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str) and v != ""}


def _sources() -> list[tuple[str, str]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        if path in OWNERS or "_bundled" in path.parts:
            continue
        out.append((path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")))
    return out


def test_the_wrappers_copy_equals_layout() -> None:
    """The wrapper's own names for the files it reads and writes are ``layout``'s."""
    copy = {
        "LAUNCH": wrapper.LAUNCH,
        "PID": wrapper.PID,
        "EXIT_CODE": wrapper.EXIT_CODE,
        "SIGNAL": wrapper.SIGNAL,
        "DONE": wrapper.DONE,
        "LAUNCH_ERROR": wrapper.LAUNCH_ERROR,
    }
    assert copy == {name: getattr(layout, name) for name in copy}
    # and the wrapper spells none of them a second time
    text = (ROOT / "wrapper.py").read_text(encoding="utf-8")
    for value in copy.values():
        literals = re.findall(rf"[\"']{re.escape(value)}[\"']", text)
        assert len(literals) == 1, f"wrapper.py spells {value!r} {len(literals)} times"


def test_layout_is_standard_library_only() -> None:
    """Nothing but ``__future__`` is imported: the views and the wrapper's check read it."""
    tree = ast.parse((ROOT / "taskdir" / "layout.py").read_text(encoding="utf-8"))
    imported = [
        n.module if isinstance(n, ast.ImportFrom) else n.names[0].name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
    ]
    assert imported == ["__future__"]


def test_no_file_name_is_spelled_outside_layout() -> None:
    """A name with a dot or dash (``manifest.json``, ``engine-stats.json`` …) appears quoted
    only in ``layout.py`` and the wrapper's copy."""
    found = []
    for name, value in _names().items():
        if value in WORDS:
            continue
        pattern = re.compile(rf"[\"']{re.escape(value)}(\.\d+)?[\"']")
        for module, text in _sources():
            for number, line in enumerate(text.splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{module}:{number}: {name} {line.strip()}")
    assert not found, "\n".join(found)


def test_no_word_name_is_joined_into_a_path() -> None:
    """The names that are also words (``pid``, ``done``, ``tasks`` …) never make a path from
    a literal: not ``task.file("…")``, ``read_int("…")``, ``folder / "…"``,
    ``os.path.join(…, "…")``, ``name == "…"``, a tuple of run files, nor a module constant of
    its own (``FOLDER = "children"``)."""
    words = "|".join(re.escape(w) for w in sorted(WORDS))
    run = "|".join(re.escape(w) for w in (*layout.RUN_FILES, layout.LAUNCH_ERROR))
    patterns = [
        re.compile(r"\.file\(\s*f?[\"']"),
        re.compile(r"read_int\(\s*f?[\"']"),
        re.compile(rf"/\s*[\"']({words})[\"']"),
        re.compile(rf"os\.path\.join\([^)]*[\"']({words})[\"']"),
        re.compile(rf"\bname\s*[!=]=\s*[\"']({run})[\"']"),
        re.compile(rf"^[A-Z][A-Z_]*\s*(?::[^=]+)?=\s*[\"']({words})[\"']\s*$"),
    ]
    pair = re.compile(rf"[\"']({run})[\"']\s*,\s*[\"']({run})[\"']")
    found = []
    for module, text in _sources():
        for number, line in enumerate(text.splitlines(), 1):
            hits = [m for p in patterns for m in [p.search(line)] if m]
            if any((module, (m.groups() or ("",))[0]) in ELSEWHERE for m in hits):
                continue
            if hits or pair.search(line):
                found.append(f"{module}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
