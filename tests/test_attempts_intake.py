"""Issue 26, part 2: attempts keys at intake (hostile values, one line each naming the file,
the key and the fix), ``supervise validate`` and ``submit`` of such a file, and the claim
all or nothing, killed halfway with SIGKILL (real processes, real folders, real git)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import Setup
from support.repos import make_repo

from supervisor import attempts, plans, spool
from supervisor.config import ConfigError, LoadedProfile, load_profile
from supervisor.config.loading import task_from_table

MAY = {"security": {"task_may_set": ["model", "acceptance", "workspace"]}}


def profile(setup: Setup, **extra: Any) -> LoadedProfile:
    make_repo(setup.project)
    loaded = load_profile(setup.write_profile(extra={**MAY, **extra}))
    for folder in (loaded.spool_dir, loaded.tasks_dir):
        folder.mkdir(parents=True, exist_ok=True)
    return loaded


def problems(setup: Setup, loaded: LoadedProfile, **keys: Any) -> list[str]:
    table = setup.task("t", "print: x", **keys)
    with pytest.raises(ConfigError) as caught:
        task_from_table(table, loaded, setup.root, Path("t.toml"))
    return caught.value.problems


HOSTILE: list[tuple[dict[str, Any], str, str]] = [
    ({"attempts": 1}, "attempts", "give 2 to 8"),
    ({"attempts": 9}, "attempts", "give 2 to 8"),
    ({"attempts": 10**30}, "attempts", ""),
    ({"attempts": -3}, "attempts", "give 2 to 8"),
    ({"attempts": True}, "attempts", "valid integer"),
    ({"attempts": 2.0}, "attempts", "valid integer"),
    ({"attempts": "3"}, "attempts", "valid integer"),
    ({"attempts": 3, "models": ["opus"]}, "models", "one model per attempt"),
    ({"attempts": 2, "models": ["opus", "nosuch"]}, "models", "unknown model alias"),
    ({"attempts": 2, "models": ["opus", "a\nb"]}, "models", "no space or control"),
    ({"attempts": 2, "models": ["opus", "a\x1b[31m"]}, "models", "no space or control"),
    ({"attempts": 2, "models": ["opus", ""]}, "models", "entry 2"),
    ({"attempts": 2, "models": ["opus", "x" * 5000]}, "models", "entry 2"),
    ({"attempts": 2, "models": ["opus", 7]}, "models", "entry 2 (7)"),
    ({"attempts": 2, "models": "opus"}, "models", "valid list"),
    ({"attempts": 2, "models": ["opus"] * 9}, "models", "at most 8"),
    ({"attempts": 2, "models": ["opus", "sonnet"], "model": "opus"}, "model", "both set"),
    ({"models": ["opus", "sonnet"]}, "models", "add 'attempts'"),
    ({"pick": "all"}, "pick", "add 'attempts'"),
    ({"attempts": 2, "pick": "best"}, "pick", "'first-pass' or 'all'"),
    ({"attempts": 2, "pick": 1}, "pick", "'first-pass' or 'all'"),
    ({"attempts": 2, "workspace": {"mode": "shared"}}, "attempts", 'mode = "worktree"'),
]


@pytest.mark.parametrize(("keys", "key", "why"), HOSTILE)
def test_a_hostile_attempts_value_is_one_line_naming_file_key_and_fix(
    setup: Setup, keys: dict[str, Any], key: str, why: str
) -> None:
    loaded = profile(setup)
    lines = problems(setup, loaded, **keys)
    assert len(lines) == 1, lines
    assert lines[0].startswith("t.toml") and f"key '{key}" in lines[0], lines
    assert why in lines[0], lines


def test_models_are_refused_where_task_files_may_not_set_model(setup: Setup) -> None:
    loaded = profile(setup, security={"task_may_set": []})
    lines = problems(setup, loaded, attempts=2, models=["opus", "sonnet"])
    assert len(lines) == 1 and "key 'models': this profile does not let" in lines[0], lines


def test_a_cluster_profile_refuses_attempts_in_one_line(setup: Setup) -> None:
    loaded = profile(setup)
    cluster = loaded.spec.model_copy(update={"cluster": object()})
    fake = LoadedProfile(path=loaded.path, spec=cluster)
    lines = problems(setup, fake, attempts=2)
    assert len(lines) == 1 and "[cluster] profile does not run attempts" in lines[0]


def test_no_worktree_no_attempts_and_a_plan_task_cannot_have_them(setup: Setup) -> None:
    loaded = profile(setup)
    bare = setup.root / "bare"
    bare.mkdir()
    path = setup.drop("x.toml", setup.task("x", "p", project=bare, attempts=2))
    (claimed,) = plans.claim(path, loaded) or []
    assert claimed.error and "attempts need a git worktree each" in claimed.error
    assert len(claimed.error.splitlines()) == 1 and claimed.rejected_to is not None
    plan = tomli_w.dumps({"tasks": [setup.task("A", "x", attempts=2)]})
    path = setup.drop("plan.toml", plan)
    (claimed,) = plans.claim(path, loaded) or []
    assert claimed.error and "a plan's task cannot have attempts yet" in claimed.error
    assert not list(loaded.tasks_dir.iterdir())
    assert not list((loaded.state_dir / plans.PLANS).iterdir())


def test_a_branch_template_without_the_task_id_cannot_have_attempts(setup: Setup) -> None:
    """Found by trying it: with ``[workspace] branch = "fixed"`` the second attempt failed
    at launch ("a branch named 'fixed' already exists"); it is refused at the claim."""
    loaded = profile(setup, workspace={"branch": "fixed"})
    path = setup.drop("x.toml", setup.task("x", "p", attempts=2))
    (claimed,) = plans.claim(path, loaded) or []
    assert claimed.error and len(claimed.error.splitlines()) == 1
    assert "branch = 'fixed' names the same branch for every attempt" in claimed.error
    assert "{task_id}" in claimed.error and claimed.rejected_to is not None
    assert not list(loaded.tasks_dir.iterdir())


def test_an_inline_profile_task_cannot_have_attempts(setup: Setup) -> None:
    make_repo(setup.project)
    setup.write_profile(extra={"tasks": [setup.task("t", "x", attempts=2)]})
    done = setup.supervise("validate", str(setup.profile))
    assert done.returncode == 1 and "key 'tasks.0.attempts'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_validate_and_submit_an_attempts_file(setup: Setup) -> None:
    loaded = profile(setup)
    good = setup.root / "good.toml"
    good.write_text(tomli_w.dumps(setup.task("t", "x", attempts=2, models=["opus", "sonnet"])))
    done = setup.supervise("validate", "-c", str(setup.profile), str(good))
    assert done.returncode == 0 and done.stdout.strip().endswith("(task)"), done.stderr
    bare = setup.root / "bare"
    bare.mkdir()
    bad = setup.root / "bad.toml"
    bad.write_text(tomli_w.dumps(setup.task("t", "x", project=bare, attempts=2)))
    done = setup.supervise("validate", "-c", str(setup.profile), str(bad))
    assert done.returncode == 1 and "attempts need a git worktree each" in done.stderr
    placed = setup.supervise("submit", "-c", str(setup.profile), str(good))
    assert placed.returncode == 0, placed.stderr
    group_id = placed.stdout.strip()
    made = plans.claim(loaded.spool_dir / f"{group_id}.toml", loaded) or []
    assert [c.error for c in made] == [None, None]
    record = attempts.read(loaded.state_dir, group_id)  # the id printed is the group's
    assert record is not None and record["pick"] == "first-pass"
    assert [r["model"] for r in record["attempts"]] == ["claude-opus-4-6", "claude-sonnet-4-6"]
    waited = setup.supervise("submit", "-c", str(setup.profile), str(good), "--wait")
    assert waited.returncode != 0 and "wait for each attempt" in waited.stderr


#: Claims the spool file argv[2] under the profile argv[1], SIGKILLing itself at argv[3]:
#: ``record`` right after the group record is written (before the commit), ``publish``
#: after the commit, when one attempt's folder was moved into tasks/.
CLAIMER = """
import os, signal, sys
from pathlib import Path
from supervisor import attempts, plans, spool
from supervisor.config import load_profile

where = sys.argv[3]
if where == "record":
    write = attempts.write
    def write_then_die(path, record):
        write(path, record)
        os.kill(os.getpid(), signal.SIGKILL)
    attempts.write = write_then_die
else:
    rename = os.rename
    def rename_then_die(src, dst):
        rename(src, dst)
        if Path(dst).parent.name == "tasks":
            os.kill(os.getpid(), signal.SIGKILL)
    os.rename = rename_then_die
plans.claim(Path(sys.argv[2]), load_profile(sys.argv[1]))
"""


@pytest.mark.parametrize("where", ["record", "publish"])
def test_a_claim_killed_halfway_is_all_or_nothing_on_restart(setup: Setup, where: str) -> None:
    loaded = profile(setup)
    path = setup.drop("t.toml", setup.task("t", "print: x\nexit: 0", attempts=3))
    done = subprocess.run(
        [sys.executable, "-c", CLAIMER, str(setup.profile), str(path), where], check=False
    )
    assert done.returncode == -signal.SIGKILL
    assert not path.exists()  # it was claimed when the claimer died
    lines = plans.recover(loaded)
    assert lines, "nothing to recover"
    if where == "record":  # before the commit: undone, the file back in the spool
        assert path.exists() and not list(loaded.tasks_dir.iterdir())
        assert not list((loaded.state_dir / plans.PLANS).iterdir())
        return
    tasks = sorted(p.name for p in loaded.tasks_dir.iterdir())
    (group_dir,) = (loaded.state_dir / plans.PLANS).iterdir()
    record = json.loads((group_dir / attempts.GROUP).read_text())
    assert sorted(r["task_id"] for r in record["attempts"]) == tasks and len(tasks) == 3
    assert not path.exists() and plans.recover(loaded) == []


def test_every_claimed_task_re_resolves_from_its_spec_json(setup: Setup) -> None:
    """Found by attack: ``pick``'s default was written into every task's ``spec.json``,
    and its re-validation ("only a task with 'attempts' takes 'pick'") left every queued
    task unlaunchable. A plain task and each attempt re-resolve as the engine does."""
    from supervisor.config.loading import resolve_task
    from supervisor.config.models import TaskSpec
    from supervisor.taskdir import layout

    loaded = profile(setup)
    plain = setup.drop("p.toml", setup.task("p", "x"))
    made = [spool.claim(plain, loaded)]
    group_file = setup.drop("g.toml", setup.task("g", "x", attempts=2, pick="all"))
    made += plans.claim(group_file, loaded) or []
    assert len(made) == 3
    for claimed in made:
        assert claimed is not None and claimed.task_dir is not None, claimed
        spec_json = claimed.task_dir.file(layout.SPEC)
        spec = TaskSpec.model_validate_json(spec_json.read_bytes())
        resolve_task(spec, loaded, claimed.task_dir.path, spec_json)
