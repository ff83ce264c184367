"""Attacks on plan claims (issue 26, part 1; /work/shared/notes/attack-classes.md): a
claim SIGKILLed at the step a crash can cut in two (the commit's copy across filesystems),
in a real process, then what the next start does with what it left."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from conftest import Setup
from support.small_fs import small_fs  # noqa: F401  (a fixture)

from supervisor import plans, spool
from supervisor.config import load_profile
from supervisor.engine import intake, statefs
from supervisor.taskdir.folder import TaskDir

#: Claims the plan file argv[2] with the profile argv[1], SIGKILLed by itself as it unlinks
#: the claimed file: after the commit's copy into ``plans/<id>/plan.toml`` (EXDEV), before
#: the spool's copy is gone.
KILLED_CLAIM = """import os, signal, sys
from pathlib import Path
from supervisor import plans, spool
from supervisor.config import load_profile
real = os.unlink
def unlink(path, *args, **kwargs):
    if os.path.basename(os.fspath(path)).startswith(".claim."):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path, *args, **kwargs)
os.unlink = unlink
plans.claim(Path(sys.argv[2]), load_profile(Path(sys.argv[1])))
"""


def test_a_claim_killed_in_its_commit_across_filesystems_leaves_no_claim_behind(
    setup: Setup,
    small_fs: Path,  # noqa: F811
) -> None:
    """The spool on a tmpfs, the state dir elsewhere (the commit is a copy, then an
    unlink): SIGKILL between the two. The next start's recovery publishes each task once
    and removes the spool's ``.claim.`` copy (before the fix it stayed for ever: the MCP
    ``plan`` tool said "being claimed" for good, and nothing removed it)."""
    profile_path = setup.write_profile(
        extra={"paths": {"spool_dir": str(small_fs), "state_dir": str(setup.state)}}
    )
    loaded = load_profile(profile_path)
    loaded.tasks_dir.mkdir(parents=True)
    tasks = [setup.task("A", "exit: 0"), setup.task("B", "exit: 0", after=["A"])]
    dropped = small_fs / "plan.toml"
    dropped.write_text(tomli_w.dumps({"tasks": tasks}))
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_CLAIM, str(profile_path), str(dropped)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    left = sorted(p.name for p in small_fs.iterdir())
    assert len(left) == 1 and left[0].startswith(".claim."), left  # the kill's leftover
    staged = list((loaded.state_dir / plans.PLANS).iterdir())
    assert len(staged) == 1 and (staged[0] / plans.RECORD).is_file()  # committed

    lines = plans.recover(loaded)
    assert lines, "the cut-short claim is reported"
    assert sorted(p.name for p in small_fs.iterdir()) == []  # no claim left, nothing back
    names = sorted(TaskDir(p).read_manifest().task_name for p in loaded.tasks_dir.iterdir())
    assert names == ["A", "B"]
    assert plans.recover(loaded) == []  # done once
    assert sorted(os.listdir(staged[0])) == sorted([plans.RECORD, plans.MEMBERS, plans.SOURCE])


def test_a_plan_task_whose_random_id_is_taken_gets_another(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan member's id is drawn at random (6 hex digits: among 10,000 tasks named A,
    a few draws collide). One drawn equal to an existing task's id: the plan's task gets
    another id, and the claim never hands back the existing task as one of the plan's
    (before the fix the member was left staged for ever and the old, completed task was
    queued again as the plan's A). The draw is forced; everything else is real."""
    loaded = load_profile(setup.write_profile())
    old = spool.claim(setup.drop("a.toml", setup.task("A", "exit: 0")), loaded)
    assert old is not None and old.task_dir is not None
    taken = old.task_dir.task_id
    draw = spool.new_task_id
    forced = {"A": iter([taken]), "B": iter(["b-123456"])}  # a task's, a submitted file's
    setup.drop("b-123456.toml", setup.task("other", "exit: 0"))  # its id printed by submit

    def collide(name: str) -> str:
        return next(forced.get(name, iter([])), None) or draw(name)

    monkeypatch.setattr(spool, "new_task_id", collide)
    tasks = [setup.task("A", "exit: 0"), setup.task("B", "exit: 0", after=["A"])]
    path = setup.drop("plan.toml", tomli_w.dumps({"tasks": tasks}))
    made = plans.claim(path, loaded)
    assert made is not None and [c.error for c in made] == [None, None]
    ids = [c.task_dir.task_id for c in made if c.task_dir is not None]
    assert taken not in ids and "b-123456" not in ids and len(set(ids)) == 2
    assert sorted(p.name for p in loaded.tasks_dir.iterdir()) == sorted([taken, *ids])
    plan_a, plan_b = (TaskDir(loaded.tasks_dir / i).read_manifest() for i in ids)
    assert plan_b.after == [ids[0]] and plan_a.task_name == "A"
    staged = next((loaded.state_dir / plans.PLANS).iterdir())
    assert [p for p in staged.iterdir() if p.is_dir()] == []


def test_the_profile_s_inline_tasks_never_take_an_existing_task_s_id(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The profile's ``[[tasks]]`` (made once per state dir) with an id drawn equal to a
    task folder's: another id, not ``FileExistsError`` out of the engine's start."""
    loaded = load_profile(setup.write_profile(extra={"tasks": [setup.task("A", "exit: 0")]}))
    loaded.tasks_dir.mkdir(parents=True)
    (loaded.tasks_dir / "a-000000").mkdir()
    draw = spool.new_task_id
    forced = iter(["a-000000"])
    monkeypatch.setattr(spool, "new_task_id", lambda name: next(forced, None) or draw(name))
    disk = statefs.StateDisk(loaded.state_dir, logging.getLogger())
    made = intake.SpoolIntake(loaded, disk).submit_initial()
    assert [t.task_id for t, _ in made] != ["a-000000"] and len(made) == 1
    assert sorted(p.name for p in loaded.tasks_dir.iterdir())[0] == "a-000000"


def test_publish_never_hands_back_another_task_s_folder(setup: Setup) -> None:
    """A staged member whose id a task folder holds (what the draw above now avoids) is
    left staged with one line, and not handed back as the plan's task (the engine would
    queue that other task again)."""
    loaded = load_profile(setup.write_profile())
    loaded.tasks_dir.mkdir(parents=True)
    tasks = [setup.task("A", "exit: 0"), setup.task("B", "exit: 0")]
    made = plans.members(loaded, tasks, setup.root / "plan.toml")
    staging = loaded.state_dir / plans.PLANS / "plan-abcdef"
    staging.mkdir(parents=True)
    plans._stage(staging, made, setup.root / "plan.toml", loaded)
    other = loaded.tasks_dir / made[0].task_id
    other.mkdir()
    (other / "manifest.json").write_text("{}")  # another task's
    published = plans.publish(staging, loaded)
    assert [t.task_id for t in published] == [made[1].task_id]
    assert (staging / made[0].task_id).is_dir() and (other / "manifest.json").read_text() == "{}"


# ---------------------------------------------------------------- a real engine, killed

#: Loaded by every Python process of the engine (``PYTHONPATH``): the process SIGKILLs
#: itself just before its ``PLAN_KILL_AT``-th change on disk (``mkdir``, ``rename``,
#: ``replace``, ``unlink``, ``fsync``, ``fdatasync``: every step that makes something
#: durable or visible) made inside the function ``PLAN_KILL_IN`` (``FILE:FUNCTION``):
#: :func:`supervisor.plans.claim` (the staging folder, the claim's rename, every file
#: written, the commit, each publish) or the engine's release of a blocked task.
KILL_SHIM = """import os, signal, sys
_at = int(os.environ.get("PLAN_KILL_AT", "0"))
_file, _, _function = os.environ.get("PLAN_KILL_IN", ":").partition(":")
_seen = [0]
def _inside():
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == _function and code.co_filename.endswith(_file):
            return True
        frame = frame.f_back
    return False
def _wrap(real):
    def call(*args, **kwargs):
        if _at and _inside():
            _seen[0] += 1
            if _seen[0] == _at:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
for _name in ("mkdir", "rename", "replace", "unlink", "fsync", "fdatasync"):
    setattr(os, _name, _wrap(getattr(os, _name)))
"""
#: Where :data:`KILL_SHIM` kills: the plan file's claim; the release of B and C.
IN_CLAIM, IN_RELEASE = "supervisor/plans.py:claim", "supervisor/engine/plans.py:_look_at"


def test_a_claim_undone_while_a_new_file_has_its_name_keeps_both(
    setup: Setup, tmp_path: Path
) -> None:
    """A claim killed before its commit (a real process, SIGKILLed by :data:`KILL_SHIM`
    once the file is renamed to its claim name) while the writer drops a new plan under
    the same name: the next start puts the claimed file back under a stamped name beside
    the new one; both plans are then claimed. (Before the fix the claimed file stayed a
    hidden ``.claim.`` file for ever, never claimed, while the log said "put back".)"""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(KILL_SHIM)
    loaded = load_profile(setup.write_profile())
    loaded.tasks_dir.mkdir(parents=True)
    (loaded.state_dir / plans.PLANS).mkdir()  # step 1: the staging folder, 2: the rename
    first = setup.drop("plan.toml", _plan(setup, True))
    env = {**os.environ, "PYTHONPATH": str(shim), "PLAN_KILL_AT": "3", "PLAN_KILL_IN": IN_CLAIM}
    script = "import sys; from pathlib import Path; from supervisor import plans; "
    script += "from supervisor.config import load_profile; "
    script += "plans.claim(Path(sys.argv[2]), load_profile(Path(sys.argv[1])))"
    killed = subprocess.run(
        [sys.executable, "-c", script, str(setup.profile), str(first)],
        env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    (left,) = (p.name for p in setup.spool.iterdir())
    assert left.startswith(".claim."), left
    setup.drop("plan.toml", _plan(setup, False))  # the writer's next plan, same name

    lines = plans.recover(loaded)
    assert len(lines) == 1 and "put back" in lines[0]
    back = sorted(p.name for p in setup.spool.iterdir())
    assert len(back) == 2 and "plan.toml" in back and not any(n.startswith(".") for n in back)
    for name in back:
        made = plans.claim(setup.spool / name, loaded)
        assert made is not None and [c.error for c in made] == [None, None, None]
    assert len(list(loaded.tasks_dir.iterdir())) == 6


def test_a_claim_that_fails_while_a_new_file_has_its_name_keeps_both(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Staging fails (a full disk, here an OSError) after the writer dropped a new plan
    under the claimed file's name: the claimed file goes back under a stamped name, never
    over the new one (before the fix its rename back replaced the writer's plan)."""
    loaded = load_profile(setup.write_profile())
    loaded.tasks_dir.mkdir(parents=True)
    first = setup.drop("plan.toml", _plan(setup, True))

    def full(*_args: object) -> None:
        setup.drop("plan.toml", _plan(setup, False))  # the writer's next plan, same name
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plans, "_stage", full)
    with pytest.raises(OSError):
        plans.claim(first, loaded)
    texts = {p.name: p.read_text() for p in setup.spool.iterdir()}
    assert len(texts) == 2 and texts["plan.toml"] == _plan(setup, False), sorted(texts)
    assert not any(name.startswith(".") for name in texts)


def test_a_deferred_file_never_goes_back_over_a_new_one(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task whose ``after`` names no task yet goes back to the spool to wait; when the
    writer dropped a new file under its name meanwhile, it is rejected with its reason
    instead, and the new file stays (before, the move back replaced it)."""
    loaded = load_profile(setup.write_profile())
    loaded.tasks_dir.mkdir(parents=True)
    path = setup.drop("b.toml", tomli_w.dumps(setup.task("B", "exit: 0", after=["later"])))
    real = spool.move_file

    def move_while_the_writer_drops(source: Path, target: Path) -> None:
        if target == path:  # the move back, after any look at the name
            setup.drop("b.toml", tomli_w.dumps(setup.task("B2", "exit: 0")))
        real(source, target)

    monkeypatch.setattr(spool, "move_file", move_while_the_writer_drops)
    claimed = spool.claim(path, loaded, defer=True)
    assert claimed is not None and not claimed.deferred and claimed.rejected_to is not None
    assert "later" in (claimed.error or "")
    assert 'name = "B2"' in path.read_text()
    assert "after" in claimed.rejected_to.read_text()


def _plan(setup: Setup, a_passes: bool) -> str:
    accept = {"command": ["true" if a_passes else "false"]}
    tasks = [
        setup.task("A", "print: a\nexit: 0", acceptance=accept),
        setup.task("B", "print: b\nexit: 0", after=["A"]),
        setup.task("C", "print: c\nexit: 0", after=["A"]),
    ]
    return tomli_w.dumps({"tasks": tasks})


def _check_plan_ran_once(setup: Setup, a_passes: bool, where: str) -> None:
    """Every task of the plan once, each launched at most once, B and C only after A's
    verdict (or abandoned ``dependency`` unlaunched), nothing blocked or left behind."""
    found: dict[str, list[dict]] = {}
    for path in sorted((setup.state / "tasks").glob("*/manifest.json")):
        data = json.loads(path.read_text())
        found.setdefault(data["task_name"], []).append(data)
    assert sorted(found) == ["A", "B", "C"] and all(len(v) == 1 for v in found.values()), where
    m = {name: found[name][0] for name in found}
    events = {name: setup.events(m[name]["task_id"]) for name in m}
    launched = {name: [e["ts"] for e in events[name] if e["event"] == "launched"] for name in m}
    assert len(launched["A"]) == 1, (where, events["A"])
    a_ended = next(e["ts"] for e in events["A"] if e["event"] == "completed")
    assert m["A"]["verdict"] == ("PASS" if a_passes else "FAIL"), where
    for name in ("B", "C"):
        task = m[name]
        if a_passes:
            assert (task["status"], task["verdict"]) == ("completed", "PASS"), (where, task)
            assert len(launched[name]) == 1 and launched[name][0] >= a_ended, where
        else:
            assert (task["status"], task["abandon_reason"]) == ("abandoned", "dependency")
            assert launched[name] == [], where
    assert sorted(p.name for p in setup.spool.iterdir() if p.name != "rejected") == [], where
    staged = list((setup.state / plans.PLANS).iterdir())
    assert len(staged) == 1 and (staged[0] / plans.RECORD).is_file(), where
    assert [p for p in staged[0].iterdir() if p.is_dir()] == [], where


def _kill_at_each_step(setup: Setup, tmp_path: Path, where: str, a_fails_every: int) -> int:
    """Run the plan with an engine killed before its 1st, 2nd, ... change inside ``where``
    (:data:`KILL_SHIM`), a clean engine after each kill, and check each outcome; A fails on
    every ``a_fails_every``-th step. Returns the number of steps killed (the first engine
    that saw fewer changes ran to idle: the end)."""
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(KILL_SHIM)
    setup.write_profile(max_concurrent=4, extra={"security": {"task_may_set": ["acceptance"]}})
    argv = [sys.executable, "-m", "supervisor.cli", "run", str(setup.profile), "--exit-when-idle"]
    for step in range(1, 200):
        for leftover in (setup.state, setup.spool):
            shutil.rmtree(leftover, ignore_errors=True)
        a_passes = step % a_fails_every != 0
        setup.drop("plan.toml", _plan(setup, a_passes))
        env = {**os.environ, "PYTHONPATH": str(shim), "PLAN_KILL_AT": str(step)}
        env["PLAN_KILL_IN"] = where
        first = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        if first.returncode == 0:
            _check_plan_ran_once(setup, a_passes, f"no kill (step {step})")
            return step - 1
        assert first.returncode == -9, first.stderr[-2000:]
        done = setup.run(timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        _check_plan_ran_once(setup, a_passes, f"killed before step {step} in {where}")
    raise AssertionError(f"{where} never ended")


@pytest.mark.slow
def test_an_engine_killed_at_each_step_of_a_plan_claim_runs_the_plan_once(
    setup: Setup, tmp_path: Path
) -> None:
    """A real ``supervise run`` SIGKILLed just before each change on disk of its claim of
    a plan A -> B, A -> C (44 steps), then a clean engine runs to idle: each task exists
    once, is launched at most once, B and C launch only after A's verdict (A fails on every
    third step: they end ``dependency`` unlaunched), nothing stays blocked, staged or
    claimed."""
    steps = _kill_at_each_step(setup, tmp_path, IN_CLAIM, 3)
    print(f"killed at each of {steps} steps of the claim")
    assert steps > 20


@pytest.mark.slow
@pytest.mark.parametrize("a_passes", [True, False])
def test_an_engine_killed_at_each_step_of_a_release_runs_the_plan_once(
    setup: Setup, tmp_path: Path, a_passes: bool
) -> None:
    """The same, killed at each change the engine makes while it releases B and C after
    A's verdict (their ``unblocked`` event and manifest) or ends them ``dependency``: after
    the restart none is launched twice or before A's verdict, and none stays blocked."""
    steps = _kill_at_each_step(setup, tmp_path, IN_RELEASE, 10**6 if a_passes else 1)
    print(f"killed at each of {steps} steps of the release (A passes: {a_passes})")
    assert steps >= 2
