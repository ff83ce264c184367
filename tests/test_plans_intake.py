"""Issue 26, part 1: plan keys at intake (validation, names, plan files all or nothing,
a claim cut short), without an engine: the spool's claim functions on a real folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import Setup

from supervisor import diskio, plans, spool
from supervisor.config import ConfigError, LoadedProfile, load_profile
from supervisor.config.loading import task_from_table
from supervisor.taskdir.folder import TaskDir

MAY = {"security": {"task_may_set": ["model", "acceptance", "workspace"]}}


def profile(setup: Setup, **extra: Any) -> LoadedProfile:
    loaded = load_profile(setup.write_profile(extra={**MAY, **extra}))
    for folder in (loaded.spool_dir, loaded.tasks_dir):
        folder.mkdir(parents=True, exist_ok=True)
    return loaded


def claim_one(setup: Setup, loaded: LoadedProfile, name: str, **keys: Any) -> spool.Claimed:
    path = setup.drop(f"{name}.toml", setup.task(name, "print: x", **keys))
    claimed = spool.claim(path, loaded)
    assert claimed is not None
    return claimed


def rejected_line(claimed: spool.Claimed) -> str:
    assert claimed.error is not None and claimed.task_dir is None
    assert claimed.rejected_to is not None and claimed.rejected_to.exists()
    error = claimed.rejected_to.with_name(claimed.rejected_to.name + ".error").read_text()
    assert error.strip() == claimed.error.strip()
    return claimed.error


HOSTILE = [
    ("a\nb", "control or format character"),
    ("a\x00b", "control or format character"),
    ("a\u202eb", "control or format character"),  # bidi override
    ("a\u200bb", "control or format character"),  # zero width space
    ("", "at least 1 character"),
    (" a", "white space"),
    ("x" * 201, "at most 200 characters"),
    (["a", "a"], "listed twice"),
    ([f"t{i}" for i in range(65)], "at most 64 items"),
    ("a", "valid list"),  # a string where a list belongs
    (7, "valid list"),
]


@pytest.mark.parametrize(("value", "why"), HOSTILE)
def test_a_hostile_after_is_rejected_in_one_line_naming_file_and_key(
    setup: Setup, value: Any, why: str
) -> None:
    loaded = profile(setup)
    after = value if isinstance(value, list | int) or why == "valid list" else [value]
    error = rejected_line(claim_one(setup, loaded, "b", after=after))
    assert "b.toml" in error and "after" in error and why in error, error
    assert not list(loaded.tasks_dir.iterdir())


@pytest.mark.parametrize("value", ["maybe", "", 1, ["pass"]])
def test_a_bad_requires_is_rejected(setup: Setup, value: Any) -> None:
    loaded = profile(setup)
    claim_one(setup, loaded, "a")
    error = rejected_line(claim_one(setup, loaded, "b", after=["a"], requires=value))
    assert "requires" in error and "'pass'" in error and "'end'" in error, error


def test_unknown_names_and_a_task_after_itself_are_rejected(setup: Setup) -> None:
    loaded = profile(setup)
    error = rejected_line(claim_one(setup, loaded, "b", after=["nobody"]))
    assert "b.toml: key 'after': no task named 'nobody'" in error and "submit it first" in error
    error = rejected_line(claim_one(setup, loaded, "me", after=["me"]))
    assert "key 'after'" in error and "cannot come after itself" in error


def test_a_base_or_placeholder_naming_a_task_not_in_after_is_rejected(setup: Setup) -> None:
    loaded = profile(setup)
    claim_one(setup, loaded, "a")
    error = rejected_line(claim_one(setup, loaded, "b", after=["a"], workspace={"base": "after:z"}))
    assert "key 'workspace.base'" in error and "'z'" in error
    path = setup.drop("c.toml", setup.task("c", "see {after.z.summary} {x}", after=["a"]))
    error = rejected_line(spool.claim(path, loaded))  # type: ignore[arg-type]
    assert "key 'prompt'" in error and "'z'" in error


def test_names_resolve_to_ids_and_the_newest_task_of_a_name(setup: Setup) -> None:
    loaded = profile(setup)
    old = claim_one(setup, loaded, "a")
    new = claim_one(setup, loaded, "a")
    assert old.task_dir and new.task_dir
    b = claim_one(setup, loaded, "b", after=["a", old.task_dir.task_id], requires="end")
    assert b.task_dir is not None
    manifest = b.task_dir.read_manifest()
    assert manifest.status == "blocked" and manifest.requires == "end"
    assert manifest.after == [new.task_dir.task_id, old.task_dir.task_id]
    assert [e["event"] for e in b.task_dir.events()] == ["queued", "blocked"]


def test_a_cluster_profile_refuses_after_in_one_line(setup: Setup) -> None:
    loaded = profile(setup, cluster={"dsn": "postgresql:///nowhere"})
    table = setup.task("b", "print: x", after=["a"])
    with pytest.raises(ConfigError) as caught:
        task_from_table(table, loaded, setup.root, Path("b.toml"))
    assert caught.value.problems == [
        "b.toml: key 'after': a [cluster] profile does not run plans yet; submit the task "
        "when its predecessors have ended, or run it under a spool profile"
    ]


def plan_file(setup: Setup, tasks: list[dict[str, Any]], name: str = "plan.toml") -> Path:
    return setup.drop(name, tomli_w.dumps({"tasks": tasks}))


def test_a_plan_is_claimed_as_several_tasks_in_order(setup: Setup) -> None:
    loaded = profile(setup)
    path = plan_file(
        setup,
        [
            setup.task("A", "print: a"),
            setup.task("B", "print: b", after=["A"]),
            setup.task("C", "print: c", after=["A", "B"], requires="end"),
        ],
    )
    assert plans.is_plan(path)
    claimed = plans.claim(path, loaded)
    assert claimed is not None and all(c.error is None for c in claimed)
    tasks = [c.task_dir for c in claimed]
    assert all(t is not None and t.path.parent == loaded.tasks_dir for t in tasks)
    a, b, c = (t.read_manifest() for t in tasks if t is not None)
    assert (a.status, b.status, c.status) == ("queued", "blocked", "blocked")
    assert b.after == [a.task_id] and c.after == [a.task_id, b.task_id]
    assert c.tmpdir == str(loaded.tasks_dir / c.task_id)
    assert not path.exists() and not list(loaded.spool_dir.glob(".claim.*"))
    record = loaded.state_dir / plans.PLANS
    (staged,) = list(record.iterdir())
    assert (staged / plans.RECORD).exists()
    assert json.loads((staged / plans.MEMBERS).read_text()) == [a.task_id, b.task_id, c.task_id]


@pytest.mark.parametrize(
    ("tasks", "why"),
    [
        ([{"name": "A", "prompt": "x", "project_dir": "."}, {"name": "B"}], "#2"),
        ([{"name": "A", "prompt": "x", "project_dir": "."}] * 2, "names two tasks"),
        (
            [
                {"name": "A", "prompt": "x", "project_dir": ".", "after": ["B"]},
                {"name": "B", "prompt": "x", "project_dir": ".", "after": ["A"]},
            ],
            "wait for each other (A -> B -> A)",
        ),
        ([{"name": "A", "prompt": "x", "project_dir": ".", "after": ["Z"]}], "no task named 'Z'"),
        (["not a table"], "not a table"),
        ([], "a plan holds 1 to 1000 [[tasks]] tables, not 0"),
        ([{"name": f"t{i}"} for i in range(1001)], "not 1001; split it"),
    ],
)
def test_a_plan_with_one_bad_task_is_rejected_whole(
    setup: Setup, tasks: list[Any], why: str
) -> None:
    loaded = profile(setup)
    path = plan_file(setup, tasks)
    claimed = plans.claim(path, loaded)
    assert claimed is not None and len(claimed) == 1
    error = rejected_line(claimed[0])
    assert "plan.toml" in error and why in error, error
    assert not list(loaded.tasks_dir.iterdir())
    assert not list((loaded.state_dir / plans.PLANS).iterdir())


def test_a_plan_with_other_top_level_keys_is_rejected(setup: Setup) -> None:
    loaded = profile(setup)
    text = 'model = "x"\n' + tomli_w.dumps({"tasks": [setup.task("A", "x")]})
    claimed = plans.claim(setup.drop("plan.toml", text), loaded)
    assert claimed is not None
    assert "key 'model': a plan file holds only [[tasks]]" in rejected_line(claimed[0])


def _cut_short(setup: Setup, loaded: LoadedProfile, commit: bool) -> Path:
    """A plan claim killed after staging its tasks (``commit``: after its commit too)."""
    path = plan_file(setup, [setup.task("A", "x"), setup.task("B", "y", after=["A"])])
    made = plans.members(
        loaded,
        json.loads(json.dumps([setup.task("A", "x"), setup.task("B", "y", after=["A"])])),
        path,
    )
    staging = loaded.state_dir / plans.PLANS / "plan-abcdef"
    staging.mkdir(parents=True)
    claimed = path.with_name(spool.claim_name("plan-abcdef", path.name))
    os.rename(path, claimed)
    plans._stage(staging, made, path, loaded)
    if commit:
        diskio.move_file(claimed, staging / plans.RECORD)
        os.rename(staging / made[0].task_id, loaded.tasks_dir / made[0].task_id)  # one moved
    return path


def test_a_plan_claim_cut_short_before_its_commit_is_undone(setup: Setup) -> None:
    loaded = profile(setup)
    path = _cut_short(setup, loaded, commit=False)
    lines = plans.recover(loaded)
    assert path.exists() and "put back" in lines[0]
    assert not list(loaded.tasks_dir.iterdir()) and not list(loaded.spool_dir.glob(".claim*"))
    assert not list((loaded.state_dir / plans.PLANS).iterdir())


def test_a_plan_claim_cut_short_after_its_commit_is_finished(setup: Setup) -> None:
    loaded = profile(setup)
    path = _cut_short(setup, loaded, commit=True)
    assert plans.recover(loaded)
    assert not path.exists()
    tasks = sorted(TaskDir(p).read_manifest().task_name for p in loaded.tasks_dir.iterdir())
    assert tasks == ["A", "B"]
    assert plans.recover(loaded) == []  # done once: nothing more to do


def test_submit_places_a_valid_plan_and_refuses_a_bad_one(setup: Setup) -> None:
    loaded = profile(setup)
    good = setup.root / "good.toml"
    good.write_text(
        tomli_w.dumps({"tasks": [setup.task("A", "x"), setup.task("B", "y", after=["A"])]})
    )
    done = setup.supervise("submit", "-c", str(setup.profile), str(good), "--json")
    assert done.returncode == 0, done.stderr
    placed = json.loads(done.stdout)
    assert placed["tasks"] == ["A", "B"] and Path(placed["plan_file"]).exists()
    claimed = plans.claim(Path(placed["plan_file"]), loaded)
    assert claimed is not None and [c.error for c in claimed] == [None, None]
    bad = setup.root / "bad.toml"
    bad.write_text(tomli_w.dumps({"tasks": [setup.task("A", "x", after=["A"])]}))
    done = setup.supervise("submit", "-c", str(setup.profile), str(bad))
    assert done.returncode != 0 and "cannot come after itself" in done.stderr
    assert "Traceback" not in done.stderr


def test_validate_checks_a_plan_file_as_a_plan(setup: Setup) -> None:
    """``supervise validate`` took a plan file (``[[tasks]]`` only) for a profile, since a
    profile may hold ``[[tasks]]`` too, and said "missing required key 'agent'" for a good
    plan: a plan is checked as ``submit`` checks it, with or without ``-c``."""
    profile(setup)
    good = setup.root / "good.toml"
    good.write_text(
        tomli_w.dumps({"tasks": [setup.task("A", "x"), setup.task("B", "y", after=["A"])]})
    )
    for config in (["-c", str(setup.profile)], []):
        done = setup.supervise("validate", *config, str(good))
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().endswith(f"ok: {good} (plan)"), done.stdout
    loop = setup.root / "loop.toml"
    loop.write_text(
        tomli_w.dumps(
            {"tasks": [setup.task("X", "x", after=["Y"]), setup.task("Y", "y", after=["X"])]}
        )
    )
    done = setup.supervise("validate", "--json", "-c", str(setup.profile), str(loop))
    assert done.returncode == 1
    [row] = json.loads(done.stdout)
    assert row["kind"] == "plan" and len(row["problems"]) == 1, row
    assert "wait for each other (X -> Y -> X)" in row["problems"][0]


def test_a_file_whose_predecessor_never_comes_is_rejected_after_the_wait(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from supervisor.engine import intake, statefs

    loaded = profile(setup)
    source = intake.SpoolIntake(loaded, statefs.StateDisk(loaded.state_dir, logging.getLogger()))
    path = setup.drop("b.toml", setup.task("B", "print: b", after=["A"]))
    os.utime(path, (1_000_000, 1_000_000))
    taken = source.take()
    assert (taken.claimed, taken.rejected) == (0, 0) and path.exists()  # waits in the spool
    assert not list(loaded.tasks_dir.iterdir())
    monkeypatch.setattr(intake, "AFTER_WAIT", 0.0)
    taken = source.take()
    assert (taken.claimed, taken.rejected) == (0, 1) and not path.exists()
    error = (loaded.spool_dir / "rejected" / "b.toml.error").read_text()
    assert "key 'after': no task named 'A'" in error
