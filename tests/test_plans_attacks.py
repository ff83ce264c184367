"""Attacks on plan claims (issue 26, part 1; /work/shared/notes/attack-classes.md): a
claim SIGKILLed at the step a crash can cut in two (the commit's copy across filesystems),
in a real process, then what the next start does with what it left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tomli_w
from conftest import Setup
from support.small_fs import small_fs  # noqa: F401  (a fixture)

from supervisor import plans
from supervisor.config import load_profile
from supervisor.taskdir.folder import TaskDir

#: Claims the plan file argv[2] with the profile argv[1], SIGKILLed by itself as it unlinks
#: the claimed file: after the commit's copy into ``plans/<id>/plan.toml`` (EXDEV), before
#: the spool's copy is gone.
KILLED_CLAIM = """import os, signal, sys
from pathlib import Path
from supervisor import plans
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
