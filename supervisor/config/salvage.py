"""What is left of a profile or task file once its bad values are set aside, so one bad
value does not hide the problems found after the model's checks.

Loading is staged: pydantic validates the file's values, then the loader checks what needs
the validated model (a ``project_dir`` that exists, a readable ``prompt_file``, a known model
alias, the merged policy). A ``ValidationError`` used to end loading there, so a bad
``deadline`` hid a missing ``project_dir`` (issue 22 item 8). The loaders now validate the
file again without the values pydantic refused and run the later checks on that, adding
their lines to the model's: ``validate`` and the spool's rejection then name every problem.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

#: Validations tried before giving up: setting a value aside can reveal a rule across keys
#: (a table left without a key it needs), which the next round sets aside in turn.
MAX_ROUNDS = 4

_GONE = object()


def without_bad_values(model: type[M], data: dict[str, Any], error: ValidationError) -> M | None:
    """``model`` validated from ``data`` less every value an error of ``error`` is about.

    Each error's location is followed into ``data`` as far as it goes (a union's member
    names are not keys); the value found there is set aside, or for a missing key the table
    that lacks it. ``data`` itself is not changed.

    Returns:
        The model of what is left, or ``None`` when an error is about the whole file (a
        required top-level key that is missing or bad, a rule across top-level keys), or
        nothing validates within :data:`MAX_ROUNDS` rounds.
    """
    data = copy.deepcopy(data)
    for _ in range(MAX_ROUNDS):
        for item in error.errors():
            loc = tuple(item["loc"])
            if item["type"] == "missing":
                loc = loc[:-1]
            if not _set_aside(data, loc):
                return None
        data = _compact(data)
        try:
            return model.model_validate(data)
        except ValidationError as again:
            error = again
    return None


def _set_aside(data: dict[str, Any], loc: tuple[Any, ...]) -> bool:
    """Mark the deepest value of ``data`` along ``loc`` as gone; ``False`` at the top."""
    parent: Any = None
    key: Any = None
    node: Any = data
    for part in loc:
        if not _holds(node, part):
            break
        parent, key, node = node, part, node[part]
    if parent is None:
        return False
    parent[key] = _GONE
    return True


def _holds(node: Any, part: Any) -> bool:
    """Whether ``node[part]`` is a value of the file: a key of a table, an index of a list."""
    if isinstance(node, dict):
        return isinstance(part, str) and part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _compact(value: Any) -> Any:
    """``value`` without the entries marked gone, at every depth."""
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v is not _GONE}
    if isinstance(value, list):
        return [_compact(v) for v in value if v is not _GONE]
    return value
