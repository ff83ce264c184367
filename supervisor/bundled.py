"""The files the package ships: profiles, JSON Schemas and the demo's task files.

In the checkout they live at the top level (``profiles/``, ``schemas/``,
``examples/demo/tasks/``: the design card and the README's first command use them there);
``supervisor/_bundled/`` holds symlinks to those folders, and the wheel holds copies of the
files (``[tool.setuptools.package-data]``). So one ``importlib.resources`` path serves a
checkout, an editable install and an installed wheel alike, and the checkout keeps one copy.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal

Kind = Literal["profiles", "schemas", "demo_tasks"]


def folder(kind: Kind) -> Traversable:
    """The shipped folder ``kind``: ``profiles`` (``demo.toml``, ``long.toml``), ``schemas``
    (``*.schema.json``) or ``demo_tasks`` (the demo's task files)."""
    return resources.files("supervisor") / "_bundled" / kind


def folder_path(kind: Kind) -> Path:
    """:func:`folder` as a filesystem path (the package is always installed unzipped: the
    engine runs ``supervisor/wrapper.py`` by path). In a checkout the path goes through the
    symlink, so writing there writes the top-level file.

    Raises:
        FileNotFoundError: the package was installed without its data (a broken wheel).
    """
    path = Path(str(folder(kind)))
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: missing from this installation of supervise")
    return path


def read_text(kind: Kind, name: str) -> str:
    """The text (UTF-8) of shipped file ``name`` in ``kind``, e.g. ``("schemas",
    "task.schema.json")``.

    Raises:
        FileNotFoundError: no such file.
    """
    return (folder(kind) / name).read_text(encoding="utf-8")
