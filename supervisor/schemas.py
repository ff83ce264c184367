"""JSON Schemas generated from the pydantic models, kept in ``schemas/`` at the repo root and
shipped in the package (:mod:`supervisor.bundled`: the checkout's ``supervisor/_bundled/schemas``
is a symlink to ``schemas/``; an installed wheel holds copies).

* ``profile.schema.json``: a profile file (:class:`supervisor.config.Profile`),
* ``task.schema.json``: a task file (:class:`supervisor.config.TaskSpec`),
* ``manifest.schema.json``: a task's ``manifest.json``
  (:class:`supervisor.taskdir.folder.Manifest`),
* ``status.schema.json``: ``supervise status --snapshot`` (:class:`supervisor.views.model.Snapshot`,
  a plain dataclass); each row of ``supervise status --json`` is its ``$defs/Task``.
* ``permission-event.schema.json``: one ``permission`` line of ``events.jsonl``
  (:class:`supervisor.audit.PermissionEvent`; ``by`` lists who may rule).

The models are the source of truth; the files are generated. Usage::

    python -m supervisor.schemas            # (re)write schemas/*.json
    python -m supervisor.schemas --check    # exit 1, naming the files, if they have drifted

Both default to the package's own copies, so ``--check`` means the same thing in a checkout
(the top-level ``schemas/``) and in an installed wheel (``site-packages/supervisor/_bundled``).

Output is stable (``indent=2``, sorted keys, trailing newline) so a diff shows real changes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from supervisor import bundled
from supervisor.audit import PermissionEvent
from supervisor.config import Profile, TaskSpec
from supervisor.taskdir.folder import Manifest
from supervisor.views.model import Snapshot

#: JSON Schema dialect of every generated file.
DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: Where the schema files live: the package's own copies (in a checkout, through the
#: ``supervisor/_bundled/schemas`` symlink, the top-level ``schemas/``).
DEFAULT_FOLDER = Path(str(bundled.folder("schemas"))).resolve()

#: File name → (model, title). The ``$id`` is ``urn:supervise:schemas:<file name>``.
MODELS: dict[str, tuple[type[Any], str]] = {
    "profile.schema.json": (Profile, "supervise profile"),
    "task.schema.json": (TaskSpec, "supervise task"),
    "manifest.schema.json": (Manifest, "supervise task manifest"),
    "status.schema.json": (Snapshot, "supervise status snapshot"),
    "permission-event.schema.json": (PermissionEvent, "supervise permission audit event"),
}


def schemas() -> dict[str, dict[str, Any]]:
    """Generate every schema from its model.

    Returns:
        File name (``profile.schema.json``, ``task.schema.json``, ``manifest.schema.json``,
        ``status.schema.json``) → JSON Schema dict (draft 2020-12, with ``$schema``, ``$id``
        and ``title``).
    """
    out: dict[str, dict[str, Any]] = {}
    for name, (model, title) in MODELS.items():
        if issubclass(model, BaseModel):
            schema = model.model_json_schema()
        else:  # a dataclass (the status model stays free of pydantic at run time)
            schema = TypeAdapter(model).json_schema()
        schema["$schema"] = DIALECT
        schema["$id"] = f"urn:supervise:schemas:{name}"
        schema["title"] = title
        out[name] = schema
    return out


def render(schema: dict[str, Any]) -> str:
    """The exact text written for ``schema``: ``indent=2``, sorted keys, trailing newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write(folder: Path) -> list[Path]:
    """Write every schema into ``folder`` (created if missing).

    Returns:
        The paths written, in the order of :data:`MODELS`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in schemas().items():
        path = folder / name
        path.write_text(render(schema), encoding="utf-8")
        written.append(path)
    return written


def drifted(folder: Path) -> list[str]:
    """Names of the schema files in ``folder`` that are missing or differ from the models."""
    out = []
    for name, schema in schemas().items():
        try:
            on_disk = (folder / name).read_text(encoding="utf-8")
        except OSError:
            on_disk = None
        if on_disk != render(schema):
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m supervisor.schemas [--check] [FOLDER]``; returns the exit status.

    Without ``--check`` the schemas are (re)written and 0 is returned. With ``--check``
    nothing is written; 1 is returned, and the drifted files named on stderr, when the files
    differ from what the models generate.
    """
    parser = argparse.ArgumentParser(
        prog="python -m supervisor.schemas",
        description="Generate the JSON Schemas of profiles, tasks, manifests and status.",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if the files differ from what the models generate",
    )
    parser.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=DEFAULT_FOLDER,
        help=f"where the schema files live (default: {DEFAULT_FOLDER})",
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = drifted(args.folder)
        if stale:
            for name in stale:
                print(f"{args.folder / name}: out of date with the models", file=sys.stderr)
            where = "" if args.folder == DEFAULT_FOLDER else f" {args.folder}"
            print(f"run: python -m supervisor.schemas{where}", file=sys.stderr)
            return 1
        print(f"ok: {len(MODELS)} schemas in {args.folder} match the models")
        return 0
    for path in write(args.folder):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
