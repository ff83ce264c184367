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
    """``value`` if it is an integer (a bool is not), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(value: Any) -> float | None:
    """``value`` as a float if it is a number (a bool is not), else ``None``."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
