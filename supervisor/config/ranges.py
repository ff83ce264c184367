"""The allowed range of a key, in words, read from its model's JSON Schema.

The bounds are declared once, as pydantic ``Field`` constraints (so ``schemas/`` and
``supervise validate`` show them); an error line about a value out of range quotes the
whole range from the same declaration (issue 20: "one line naming the file, the key and
the allowed range").
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel

#: pydantic error types about a number out of range.
RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})


@functools.cache
def _properties(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    return {"properties": schema.get("properties", {}), "defs": schema.get("$defs", {})}


def _number(value: float) -> str:
    """``100``, ``0.1``, ``31536000``: no exponent for whole numbers."""
    if float(value).is_integer() and abs(value) < 1e18:
        return str(int(value))
    return repr(float(value))


def _branch(schema: dict[str, Any]) -> dict[str, Any]:
    """The non-null branch of ``anyOf [X, null]``."""
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") != "null":
            return branch
    return schema


def describe(schema: dict[str, Any]) -> str | None:
    """``from 0 to 100``, ``more than 0, at most 1000000``, ...; ``None`` when the schema
    has no bound."""
    low = (
        f"from {_number(schema['minimum'])}"
        if "minimum" in schema
        else f"more than {_number(schema['exclusiveMinimum'])}"
        if "exclusiveMinimum" in schema
        else None
    )
    high = (
        f"to {_number(schema['maximum'])}"
        if "maximum" in schema
        else f"less than {_number(schema['exclusiveMaximum'])}"
        if "exclusiveMaximum" in schema
        else None
    )
    if low and high and low.startswith("from ") and high.startswith("to "):
        return f"{low} {high}"
    if high and high.startswith("to "):
        high = "at most " + high.removeprefix("to ")
    if low and low.startswith("from ") and not high:
        low = "at least " + low.removeprefix("from ")
    return ", ".join(part for part in (low, high) if part) or None


def allowed_range(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> str | None:
    """The allowed range of the number at ``loc`` (its last key, or an item of that key's
    list) in ``model``, in words; ``None`` when unknown or unbounded."""
    if model is None:
        return None
    keys = [part for part in loc if isinstance(part, str)]
    if not keys:
        return None
    found = _properties(model)
    schema = found["properties"].get(keys[-1])
    if schema is None:
        return None
    schema = _branch(schema)
    if isinstance(loc[-1], int) and "items" in schema:
        schema = _branch(schema["items"])
    return describe(schema)
