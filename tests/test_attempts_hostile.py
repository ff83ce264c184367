"""Issue 26, part 2: a hostile or damaged group record (``group.json``) is no group, and
whatever it holds is shown escaped; the engine's scan of open groups skips it, unless the
plan's own files (``plan.toml``, ``members.json``) are sound enough to rebuild it from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import Setup

from supervisor import attempts
from supervisor.cli.attempts import lines
from supervisor.config import LoadedProfile, load_profile
from supervisor.engine.attempts import open_groups


def _profile(setup: Setup) -> LoadedProfile:
    loaded = load_profile(setup.write_profile())
    loaded.tasks_dir.mkdir(parents=True)
    return loaded


def _record_at(setup: Setup, group_id: str) -> Path:
    folder = setup.state / "plans" / group_id
    folder.mkdir(parents=True)
    return folder / attempts.GROUP


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b'{"attempts": 3}',
        b"not json",
        b"\xff\xfe",
        b'{"attempts": []' + b" " * (70 * 1024) + b"}",  # over MAX_RECORD_BYTES
        b"[" * 100_000,  # nesting
    ],
)
def test_a_damaged_record_is_no_group(setup: Setup, body: bytes) -> None:
    loaded = _profile(setup)
    _record_at(setup, "attempts-abcdef").write_bytes(body)
    assert attempts.read(loaded.state_dir, "attempts-abcdef") is None
    assert open_groups(loaded.state_dir) == set()
    with pytest.raises(attempts.NotFound):
        attempts.listing(loaded, "attempts-abcdef")


def test_a_symlinked_or_fifo_record_is_not_read(setup: Setup) -> None:
    loaded = _profile(setup)
    outside = setup.root / "outside.json"
    outside.write_text(json.dumps({"attempts": []}))
    _record_at(setup, "attempts-111111").symlink_to(outside)
    os.mkfifo(_record_at(setup, "attempts-222222"))
    for group_id in ("attempts-111111", "attempts-222222"):
        assert attempts.read(loaded.state_dir, group_id) is None  # never blocks on the FIFO
    assert attempts.read(loaded.state_dir, "../outside") is None


def test_hostile_values_in_a_record_are_dropped_or_shown_escaped(setup: Setup) -> None:
    loaded = _profile(setup)
    record = attempts.new_record(
        "attempts-333333", "n\x1b[31m", "all", ["t-aaaaaa"], ["m\x1b]0;x\x07"]
    )
    record["attempts"] += [
        {"index": 2, "task_id": "../../etc"},
        {"index": "3", "task_id": "t-bbbbbb"},
        "not a row",
    ]
    _record_at(setup, "attempts-333333").write_text(json.dumps(record))
    found = attempts.listing(loaded, "attempts-333333")
    assert [r["task_id"] for r in found["attempts"]] == ["t-aaaaaa"]
    assert found["attempts"][0]["status"] == "gone"
    text = "\n".join(lines(found))
    assert "\x1b" not in text and "\x07" not in text and "t-aaaaaa" in text


def test_an_attempt_whose_manifest_is_gone_under_the_engine_is_not_ended(setup: Setup) -> None:
    """Found by attack: the manifest of a running attempt deleted (or replaced by a folder)
    under the engine, which writes it again at its next check, counted as ``damaged``,
    i.e. ended: with the other attempt failed, the group closed ``none_passed`` while this
    one ran on (and could pass). The engine's own status of a live or queued attempt is
    taken instead; a folder the engine does not run stays ``damaged`` (ended)."""
    from supervisor.engine.attempts import read_attempts
    from supervisor.policy.attempts import FIRST_PASS, decide

    loaded = _profile(setup)
    failed, running = "k-aaaaaa", "k-bbbbbb"
    (loaded.tasks_dir / failed).mkdir()
    (loaded.tasks_dir / failed / "manifest.json").write_text(
        json.dumps({"status": "completed", "verdict": "FAIL"})
    )
    (loaded.tasks_dir / running).mkdir()
    (loaded.tasks_dir / running / "manifest.json").mkdir()  # not a manifest any more
    rows = [{"index": 1, "task_id": failed}, {"index": 2, "task_id": running}]
    found, _ = read_attempts(loaded.tasks_dir, rows, {running: "running"})
    assert [a.status for a in found] == ["completed", "running"]
    assert decide(FIRST_PASS, None, found).closed is False
    gone, _ = read_attempts(loaded.tasks_dir, rows, {})
    assert decide(FIRST_PASS, None, gone).outcome == "none_passed"  # nothing runs it


@pytest.mark.parametrize(
    ("plan", "members", "rebuilt"),
    [
        ('name = "k"\npick = "all"\nattempts = 2\n', '["k-aaaaaa", "k-bbbbbb"]', True),
        ('name = "k"\npick = "nonsense"\n', '["k-aaaaaa"]', True),  # pick: the default
        ('name = "k"\n', '["../../etc"]', False),
        ('name = "k"\n', '{"a": 1}', False),
        ('name = "k"\n', "[]", False),
        ("not toml [", '["k-aaaaaa"]', False),
        (None, '["k-aaaaaa"]', False),
    ],
)
def test_a_damaged_record_is_rebuilt_only_from_sound_plan_files(
    setup: Setup, plan: str | None, members: str, rebuilt: bool
) -> None:
    """:func:`attempts.rebuild`: the members' ids must be task ids, the plan TOML; a record
    that cannot be rebuilt is left as it is (and stays no group)."""
    loaded = _profile(setup)
    path = _record_at(setup, "attempts-abcdef")
    path.write_bytes(b'{"group": "attempts-ab')
    if plan is not None:
        (path.parent / "plan.toml").write_text(plan)
    (path.parent / "members.json").write_text(members)
    record = attempts.rebuild(loaded.state_dir, "attempts-abcdef")
    kept = sorted(p.name for p in path.parent.glob("group.json.damaged-*"))
    if not rebuilt:
        assert record is None and not kept and path.read_bytes() == b'{"group": "attempts-ab'
        assert open_groups(loaded.state_dir) == set()
        return
    assert record is not None and len(kept) == 1
    assert attempts.read(loaded.state_dir, "attempts-abcdef") == record
    assert record["pick"] in ("all", "first-pass") and record["winner"] is None
    assert [r["task_id"] for r in record["attempts"]] == json.loads(members)
    assert [r["model"] for r in record["attempts"]] == [""] * len(record["attempts"])


def test_a_sound_record_is_never_rebuilt(setup: Setup) -> None:
    loaded = _profile(setup)
    path = _record_at(setup, "attempts-abcdef")
    path.write_text(json.dumps({"attempts": [], "winner": "x"}))
    (path.parent / "plan.toml").write_text('name = "k"\n')
    (path.parent / "members.json").write_text('["k-aaaaaa"]')
    assert attempts.rebuild(loaded.state_dir, "attempts-abcdef") is None
    assert json.loads(path.read_text())["winner"] == "x"


@pytest.mark.parametrize(
    "members",
    [
        "[123]",  # not a string: a path join raised TypeError in the engine
        "[" * 60_000,  # nested deeper than the parser: RecursionError in the engine
        '["k-aaaaaa", 7]',
    ],
    ids=["int", "deep", "mixed"],
)
def test_hostile_members_never_raise_from_a_rebuild(setup: Setup, members: str) -> None:
    """Found by attack: these escaped :func:`attempts.rebuild` (only ``OSError`` is caught
    by the engine's scan), so every look at open groups raised."""
    loaded = _profile(setup)
    path = _record_at(setup, "attempts-abcdef")
    path.write_bytes(b"{")
    (path.parent / "plan.toml").write_text('name = "k"\n')
    (path.parent / "members.json").write_text(members)
    assert attempts.rebuild(loaded.state_dir, "attempts-abcdef") is None
    assert open_groups(loaded.state_dir) == set()
    assert path.read_bytes() == b"{"


def _manifest(loaded: LoadedProfile, task_id: str, attempt: dict | None) -> None:
    (loaded.tasks_dir / task_id).mkdir()
    body = {"status": "running", "model": "m-" + task_id, "attempt": attempt}
    (loaded.tasks_dir / task_id / "manifest.json").write_text(json.dumps(body))


def test_a_rebuild_takes_no_task_of_another_group_or_of_none(setup: Setup) -> None:
    """Found by attack: ``members.json`` naming another group's running attempt (or a plain
    task) rebuilt a record holding it, and the decision of this group then discarded it
    as a loser. Only this group's attempts (and ids with no readable manifest) are kept,
    each once."""
    loaded = _profile(setup)
    _manifest(loaded, "k-aaaaaa", {"group": "attempts-abcdef", "index": 1, "of": 2})
    _manifest(loaded, "o-bbbbbb", {"group": "attempts-999999", "index": 1, "of": 2})
    _manifest(loaded, "p-cccccc", None)
    path = _record_at(setup, "attempts-abcdef")
    path.write_bytes(b"{")
    (path.parent / "plan.toml").write_text('name = "k"\n')
    ids = ["k-aaaaaa", "o-bbbbbb", "p-cccccc", "k-aaaaaa", "k-dddddd"]
    (path.parent / "members.json").write_text(json.dumps(ids))
    record = attempts.rebuild(loaded.state_dir, "attempts-abcdef")
    assert record is not None
    rows = [(r["task_id"], r["model"]) for r in record["attempts"]]
    assert rows == [("k-aaaaaa", "m-k-aaaaaa"), ("k-dddddd", "")]
    (path.parent / "members.json").write_text('["o-bbbbbb", "p-cccccc"]')
    path.write_bytes(b"{")
    assert attempts.rebuild(loaded.state_dir, "attempts-abcdef") is None  # nothing of its own


def test_a_second_damaging_in_the_same_second_keeps_the_first_copy(setup: Setup) -> None:
    """Found by attack: the damaged record was renamed to ``group.json.damaged-<second>``
    with a plain rename, which replaced a copy kept under that name (two damagings in one
    second). Every stamped name of the next two minutes is taken first, so the rename
    must pick another, and every copy keeps its bytes."""
    import time

    loaded = _profile(setup)
    path = _record_at(setup, "attempts-abcdef")
    (path.parent / "plan.toml").write_text('name = "k"\n')
    (path.parent / "members.json").write_text('["k-aaaaaa"]')
    now = int(time.time())
    taken = {path.with_name(f"group.json.damaged-{t}") for t in range(now - 1, now + 120)}
    for kept in taken:
        kept.write_bytes(b"first")
    path.write_bytes(b"second")
    assert attempts.rebuild(loaded.state_dir, "attempts-abcdef") is not None
    copies = {p: p.read_bytes() for p in path.parent.glob("group.json.damaged-*")}
    assert all(copies[p] == b"first" for p in taken)
    assert sorted(b for p, b in copies.items() if p not in taken) == [b"second"]
