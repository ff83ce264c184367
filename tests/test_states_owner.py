"""One owner for statuses, verdicts and event names (issue 23, item 1).

``supervisor/taskdir/states.py`` owns the statuses, verdicts, failure and abandon reasons;
``supervisor/taskdir/events.py`` owns the event names and the one reader of the log's last
word. The guard below reads the source of ``supervisor/`` (outside ``taskdir/``) and fails
on a bare string equal to a status, a verdict or an event name, except the few listed in
:data:`ALLOWED` (another vocabulary that happens to share the word, with its reason).
Docstrings, comments and the literal parts of f-strings (prose) are not code and are skipped.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import get_args

import pytest

from supervisor.taskdir import events as ev
from supervisor.taskdir.events import Event
from supervisor.taskdir.states import TERMINAL, Status, Verdict

ROOT = Path(__file__).resolve().parents[1] / "supervisor"
WORDS = frozenset({*Status, *Verdict, *Event})

_GROUPS = "a view group's name (views/model.GROUPS), not a status"
_ENGINE = "the engine's own state (views/sources.Engine.state: running, stale, stopped)"
_RESULT = "a request's result (requests.RESULTS: applied, queued, not_applied, refused)"
_FLEET = "a fleet state (supervise_tasks.state): part sql's FleetState replaces it"
_COUNTER = "an engine-stats.json counter name (engine/stats.COUNTERS)"
_KEY = "a config or manifest key of the same name, not a status"
_PROSE = "words of a message, not a status"
#: ``(path under supervisor/, string) -> (at most this many, why it is not a status)``.
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    ("views/model.py", "waiting"): (2, _GROUPS),
    ("views/model.py", "running"): (3, _GROUPS),
    ("views/model.py", "failed"): (8, _GROUPS),
    ("views/model.py", "queued"): (3, _GROUPS),
    ("views/tui_columns.py", "failed"): (2, _GROUPS),
    ("views/tui_columns.py", "waiting"): (2, _GROUPS),
    ("views/tui_columns.py", "running"): (1, _GROUPS),
    ("views/tui_columns.py", "queued"): (1, _GROUPS),
    ("views/fleet_status.py", "failed"): (1, _GROUPS),
    ("views/sources.py", "running"): (2, _ENGINE),
    ("views/sources.py", "stale"): (3, _ENGINE),
    ("views/tui.py", "running"): (3, _ENGINE),
    ("views/webpage.py", "running"): (1, _ENGINE),
    ("engine_probe.py", "running"): (1, _ENGINE),
    ("engine_probe.py", "stale"): (1, _ENGINE),
    ("requests.py", "running"): (1, _ENGINE),
    ("requests.py", "queued"): (2, _RESULT),
    ("followup.py", "queued"): (1, _RESULT),
    ("cli/followup.py", "queued"): (2, _RESULT),
    ("cli/cluster.py", "running"): (1, "a host's column: its running task count"),
    ("views/fleet.py", "running"): (1, "a host's column: its running task count"),
    ("views/fleet.py", "completed"): (1, _FLEET),
    ("views/fleet.py", "failed"): (1, _FLEET),
    ("views/fleet.py", "abandoned"): (1, _FLEET),
    ("views/fleet.py", "superseded"): (1, _FLEET),
    ("cluster/control.py", "completed"): (1, _FLEET),
    ("cluster/control.py", "failed"): (1, _FLEET),
    ("cluster/control.py", "abandoned"): (1, _FLEET),
    ("cluster/control.py", "superseded"): (1, _FLEET),
    ("cluster/control.py", "queued"): (2, _FLEET),
    ("cluster/sweeper.py", "queued"): (3, _FLEET),
    ("cluster/ownership.py", "superseded"): (1, _FLEET),
    ("cluster/writer.py", "superseded"): (1, _FLEET),
    ("engine/stats.py", "launched"): (1, _COUNTER),
    ("engine/stats.py", "resumed"): (1, _COUNTER),
    ("engine/stats.py", "queued"): (1, _COUNTER),
    ("engine/launches.py", "launched"): (1, _COUNTER),
    ("engine/checks.py", "resumed"): (1, _COUNTER),
    ("engine/pools.py", "acceptance"): (2, "a worker pool's name (engine/pools.Kind)"),
    ("engine/actions.py", "acceptance"): (1, "a worker pool's name (engine/pools.Kind)"),
    ("config/models.py", "acceptance"): (2, _KEY),
    ("config/loading.py", "acceptance"): (1, _KEY),
    ("turnlog.py", "acceptance"): (1, _KEY),
    ("agents/claude/tools.py", "waiting"): (2, _KEY),
    ("waiting.py", "permission"): (1, "a needs.kind value (waiting.PERMISSION)"),
    ("waiting.py", "hook"): (1, "a permission request's source (screen or hook)"),
    ("audit.py", "superseded"): (1, "an audit By member (who ruled)"),
    ("audit.py", "permission"): (1, "the audit record's own schema (pattern ^permission$)"),
    ("engine/acceptance.py", "failed"): (1, _PROSE),
    ("workspace/checkout.py", "failed"): (1, _PROSE),
    ("cli/workspace.py", "merged"): (1, _PROSE),
    # pydantic needs a static Literal for the schema; test_notify_events_are_events holds it
    **{("config/monitor.py", w): (1, "NotifyEvent") for w in ("crashed", "hung", "resumed")},
    **{("config/monitor.py", w): (1, "NotifyEvent") for w in ("stale", "waiting")},
    **{
        ("config/monitor.py", w): (2, "NotifyEvent and DEFAULT_NOTIFY_ON")
        for w in ("escalated", "failed", "abandoned", "completed")
    },
}


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, kinds) and body and isinstance(body[0], ast.Expr):
            found.add(id(body[0].value))
    return found


def _skipped(tree: ast.AST) -> set[int]:
    """Constants that are no code: docstrings, f-string parts, ``__all__``'s names."""
    skipped = _docstrings(tree)
    for node in ast.walk(tree):
        names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Assign) and "__all__" in names):
            skipped.update(id(n) for n in ast.walk(node))
    return skipped


def bare_words(root: Path = ROOT) -> Counter[tuple[str, str]]:
    """``(path under root, word) -> count`` of bare status/verdict/event strings outside
    ``taskdir/`` (the owner)."""
    found: Counter[tuple[str, str]] = Counter()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("taskdir/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _skipped(tree)
        for node in ast.walk(tree):
            is_str = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if is_str and id(node) not in skipped and node.value in WORDS:
                found[(rel, node.value)] += 1
    return found


def test_no_bare_status_verdict_or_event_string_outside_taskdir() -> None:
    over = {
        key: count
        for key, count in bare_words(ROOT).items()
        if count > ALLOWED.get(key, (0, ""))[0]
    }
    assert not over, (
        "name these by supervisor.taskdir.states (Status, Verdict) or "
        f"supervisor.taskdir.events (Event); (path, word): count = {over}"
    )


def test_every_append_event_names_an_event_member() -> None:
    """No ``append_event("...")`` or ``append_event(f"...")``: the first argument is a name."""
    bare = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if call and node.func.attr == "append_event" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant | ast.JoinedStr):
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bare, bare


def test_notify_events_are_events() -> None:
    from supervisor.config.monitor import DEFAULT_NOTIFY_ON, NotifyEvent

    assert set(get_args(NotifyEvent)) <= set(Event)
    assert set(DEFAULT_NOTIFY_ON) <= set(get_args(NotifyEvent))


def test_every_status_is_an_event_and_requests_are_named() -> None:
    assert {str(s) for s in Status} <= {str(e) for e in Event}
    for verb in ("stop", "resume", "approve", "deny", "supersede", "continue"):
        assert Event.requested(verb) == f"{verb}_requested"
    with pytest.raises(ValueError):
        Event.requested("reboot")


def _log(*names: str) -> list[dict[str, str]]:
    return [{"ts": f"t{i}", "event": name} for i, name in enumerate(names)]


def test_last_terminal_is_the_last_ending_in_the_log() -> None:
    log = _log("queued", "launched", "crashed", "resumed", "failed", "notified")
    assert ev.last_terminal(log) == {"ts": "t4", "event": "failed"}
    assert ev.last_terminal(_log("queued", "launched", "resumed")) is None
    assert {str(s) for s in TERMINAL} == {"completed", "failed", "abandoned", "superseded"}


@pytest.mark.parametrize(
    ("names", "word"),
    [
        (("queued", "launched", "hung", "adopted"), "hung"),
        (("launched", "waiting", "continued", "hook"), "continued"),
        (("launched", "crashed", "resumed", "stale", "fresh"), "resumed"),
        (("launched", "resumed", "completed", "notifying"), "completed"),
        (("queued", "launched", "stale", "fresh"), None),
    ],
)
def test_last_word_is_the_last_decision_the_manifest_may_miss(
    names: tuple[str, ...], word: str | None
) -> None:
    last = ev.last_word(_log(*names))
    assert (last or {}).get("event") == word


def test_the_views_refuse_as_the_cli_does(tmp_path: Path) -> None:
    """``views.actions.ask`` answers with :func:`control.refusal`'s line (no copy of it)."""
    import json

    from supervisor.taskdir import control
    from supervisor.views import actions

    folder = tmp_path / "tasks" / "t1"
    folder.mkdir(parents=True)
    for status, verb in (("completed", "stop"), ("running", "approve")):
        (folder / "manifest.json").write_text(json.dumps({"status": status}))
        out = actions.ask(tmp_path, "t1", verb, engine_running=True)
        assert not out.ok
        assert out.message == control.refusal("t1", status, verb)
    assert not (tmp_path / "control").exists()


def test_every_status_is_an_event_and_a_fleet_state() -> None:
    """``Event`` and ``FleetState`` spell each :class:`Status` again (an enum cannot extend
    one with members); each status recorded in a log or the fleet's table must be one of
    theirs, with the same name and value."""
    from supervisor.taskdir.events import Event
    from supervisor.taskdir.states import SPOOL_ONLY, FleetState, Status

    for status in Status:
        assert Event[status.name] == status.value
        if status in SPOOL_ONLY:  # a [cluster] profile refuses 'after' (issue 26)
            assert status.name not in FleetState.__members__
            continue
        assert FleetState[status.name] == status.value
