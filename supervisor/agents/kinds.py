"""The registry of agent kinds: what each ``[agent] kind`` adds outside the engine.

The core packages (``config``, ``taskdir``, ``views``, ``engine``) never name an agent
kind; they ask this registry. An adapter fills it with one :class:`Kind`:

* its **settings model**: a pydantic model whose fields ``[agent]`` accepts for the kind
  (:class:`supervisor.config.AgentSpec` takes the built-in kinds' fields as its own, so the
  profile schema lists them; a kind registered later has its fields validated by its own
  model, read back with ``AgentSpec.settings()``), and its rules on the whole ``[agent]``
  table (:attr:`Kind.check`);
* its **manifest extension**: a pydantic model whose fields ``manifest.json`` carries for
  the kind (the built-in kinds' become fields of :class:`~supervisor.taskdir.folder.Manifest`;
  a later kind's are kept as the manifest's extra keys, the manifest allowing extra keys);
* its **columns**: the values a task's manifest gives the views (``cost_usd`` and
  ``tokens`` fill the status model's own fields; any other key is a column of the kind's
  own, shown by ``supervise status``).

The built-in kinds are the modules of :data:`BUILTIN`, each registering its :class:`Kind`
when imported (on the first look-up). Another kind calls :func:`register` before the
profile is loaded (a test's toy kind does: ``tests/test_agent_kind_toy.py``).

Standard library only, and nothing pydantic is imported until a settings or manifest
model is asked for (the views read columns without pydantic).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The modules of the built-in kinds, in the order the profile schema lists them; each
#: calls :func:`register` when imported.
BUILTIN: tuple[str, ...] = ("supervisor.agents.generic", "supervisor.agents.claude.kind")


def _no_check(agent: Any) -> None:
    return None


def _no_columns(manifest: Mapping[str, Any]) -> dict[str, Any]:
    return {}


def lazy(module: str, name: str) -> Callable[[], Any]:
    """A loader of ``module.name``, imported on the first call (a :class:`Kind`'s models
    and adapter are loaded only by whoever needs them)."""

    def load() -> Any:
        return getattr(importlib.import_module(module), name)

    return load


@dataclass(frozen=True)
class Kind:
    """One agent kind (``[agent] kind = name``).

    Attributes:
        name: the kind's name in ``[agent] kind``.
        adapter: returns the :class:`supervisor.agents.AgentAdapter` subclass serving it.
        settings: returns the pydantic model of the ``[agent]`` keys the kind adds
            (``extra="forbid"``), or ``None``.
        manifest: returns the pydantic model of the ``manifest.json`` keys the kind adds,
            or ``None``.
        check: its rules on a validated ``[agent]`` table (an ``AgentSpec``); raises
            ``ValueError`` with the message the profile's reader shows.
        columns: a task's manifest (a dict as read) → the kind's view values; ``{}`` when
            the manifest holds none of the kind's keys. Never raises.
        permissions: whether its agent asks permissions, so ``[approval]`` is in force.
        models: model alias → model id the kind knows (every profile's built-in aliases,
            ``config.DEFAULT_MODELS``, are the built-in kinds' together).
        heartbeat: seconds between the lines its headless agent prints while a tool runs
            (its adapter's ``heartbeat``, here too so ``validate`` need not import the
            adapter), or ``None``.
    """

    name: str
    adapter: Callable[[], type[Any]]
    settings: Callable[[], type[Any]] | None = None
    manifest: Callable[[], type[Any]] | None = None
    check: Callable[[Any], None] = _no_check
    columns: Callable[[Mapping[str, Any]], dict[str, Any]] = _no_columns
    permissions: bool = False
    models: Mapping[str, str] = field(default_factory=dict)
    heartbeat: float | None = None


_KINDS: dict[str, Kind] = {}
_BUILTIN_NAMES: list[str] = []
_LOCK = threading.RLock()
_LOADED = False
_LOADING = False


def _load_builtin() -> None:
    global _LOADED, _LOADING
    with _LOCK:
        if not _LOADED:
            _LOADED = _LOADING = True
            try:
                for module in BUILTIN:
                    importlib.import_module(module)
            finally:
                _LOADING = False


def register(kind: Kind) -> Kind:
    """Add (or replace) ``kind``; returns it. A kind registered after the profile models
    were built is validated through its own models (see the module docstring). Raises
    ``ValueError`` for the name of a built-in kind."""
    with _LOCK:
        if _LOADING:
            _BUILTIN_NAMES.append(kind.name)
        else:
            _load_builtin()
            if kind.name in _BUILTIN_NAMES:
                raise ValueError(f"{kind.name!r} is a built-in agent kind")
        _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove the kind ``name`` (a test's toy kind, when the test ends); a built-in kind
    cannot be removed. Raises ``ValueError`` for a built-in one."""
    _load_builtin()
    if name in _BUILTIN_NAMES:
        raise ValueError(f"{name!r} is a built-in agent kind")
    with _LOCK:
        _KINDS.pop(name, None)


def get(name: str) -> Kind:
    """The kind ``name``. Raises ``KeyError`` when no kind of that name is registered."""
    _load_builtin()
    return _KINDS[name]


def names() -> tuple[str, ...]:
    """Every registered kind's name, the built-in ones first."""
    _load_builtin()
    with _LOCK:
        return tuple(_KINDS)


def builtin_names() -> tuple[str, ...]:
    """The built-in kinds' names (:data:`BUILTIN`), in their order."""
    _load_builtin()
    return tuple(_BUILTIN_NAMES)


def builtin() -> tuple[Kind, ...]:
    """The built-in kinds, in :data:`BUILTIN` order."""
    return tuple(get(name) for name in builtin_names())


def columns(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Every kind's view values of one task's manifest dict (a kind whose keys the
    manifest lacks gives none). Never raises."""
    out: dict[str, Any] = {}
    for name in names():
        out.update(get(name).columns(manifest))
    return out


def settings_models() -> tuple[type[Any], ...]:
    """The built-in kinds' settings models (``config.AgentSpec`` takes their fields)."""
    return tuple(k.settings() for k in builtin() if k.settings is not None)


def manifest_models() -> tuple[type[Any], ...]:
    """The built-in kinds' manifest extensions (``Manifest`` takes their fields)."""
    return tuple(k.manifest() for k in builtin() if k.manifest is not None)
