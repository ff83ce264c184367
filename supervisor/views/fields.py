"""A manifest's values as the views take them: read with plain ``json`` (no pydantic, for
speed over thousands of folders), so a hand-edited or damaged manifest may hold any JSON
type where a field should be; each function keeps a value of the right type and gives
``None`` (or ``[]``) for anything else, never raising."""

from __future__ import annotations

from typing import Any


def text(value: Any) -> str | None:
    """``value`` if it is a string, else ``None``."""
    return value if isinstance(value, str) else None


def items(value: Any) -> list[Any]:
    """``value`` if it is a list, else ``[]``."""
    return value if isinstance(value, list) else []


def count(value: Any) -> int | None:
    """``value`` if it is an integer (a bool is not) that fits 64 bits, else ``None`` (a
    hand-edited ``10**400`` would widen a table's column to 400 digits)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return value if -(2**63) <= value < 2**63 else None
