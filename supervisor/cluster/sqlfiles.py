"""The fleet's SQL, read from the package's ``.sql`` files (issue 23; as procrastinate keeps
its own in ``procrastinate/sql/``).

* ``sql/queries.sql``: every statement the cluster modules send, each under a line
  ``-- name --``; :func:`query` returns one by name.
* ``migrations/NNNN_what.sql``: the schema, one numbered file per version, applied in order
  by :func:`supervisor.cluster.schema.init` and recorded in ``supervise_schema_version``;
  :func:`migrations` lists them.
* ``roles.sql``: the group roles (:mod:`supervisor.cluster.roles`).

Read with :mod:`importlib.resources`, so a checkout, an editable install and a wheel
(``pyproject.toml`` package-data) read the same files. Standard library only, but for
:func:`listen` (psycopg's identifier quoting).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from psycopg import sql

#: ``-- name --`` on a line of its own starts a named query.
_NAME = re.compile(r"^-- ([a-z0-9_]+) --$", re.MULTILINE)
#: A migration's file name: its version (four digits, from 1, no gap) and what it does.
_MIGRATION = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def _text(*parts: str) -> str:
    return resources.files("supervisor.cluster").joinpath(*parts).read_text("utf-8")


def parse_queries(text: str) -> dict[str, str]:
    """``name -> statement`` of a queries file: the text before the first name is the file's
    header; whole-line ``--`` comments are dropped (psycopg would read a ``%`` in them as a
    placeholder).

    Raises:
        ValueError: a name given twice.
    """
    parts = _NAME.split(text)[1:]
    queries: dict[str, str] = {}
    for name, body in zip(parts[::2], parts[1::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
        queries[name] = "\n".join(lines).strip()
    return queries


@cache
def queries() -> dict[str, str]:
    """Every named query of ``sql/queries.sql`` (read once)."""
    return parse_queries(_text("sql", "queries.sql"))


def query(name: str) -> str:
    """The statement named ``name`` in ``sql/queries.sql``.

    Raises:
        KeyError: no query of that name.
    """
    return queries()[name]


def listen(channel: str) -> sql.Composed:
    """The ``listen`` query for ``channel``, quoted as an identifier (``LISTEN`` takes no
    parameter; a channel's name is an identifier, the same as ``pg_notify``'s text)."""
    from psycopg import sql

    return sql.SQL(query("listen")).format(channel=sql.Identifier(channel))


@dataclass(frozen=True)
class Migration:
    """One schema version: ``version`` (1, 2, ...), ``name`` (the file name) and its
    ``sql`` (one or more statements, sent as one)."""

    version: int
    name: str
    sql: str


@cache
def migrations() -> tuple[Migration, ...]:
    """The files of ``migrations/``, by version (read once).

    Raises:
        ValueError: a file named otherwise, or versions that are not 1, 2, ... without a gap.
    """
    found = []
    for entry in resources.files("supervisor.cluster").joinpath("migrations").iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _MIGRATION.match(entry.name)
        if match is None:
            raise ValueError(f"migration {entry.name!r}: expected NNNN_name.sql")
        found.append(Migration(int(match[1]), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations must be numbered 1..N: {[m.name for m in found]}")
    return tuple(found)
