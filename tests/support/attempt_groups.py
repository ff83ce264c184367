"""What the attempts tests share: the acceptance check that fails ``model-a``'s work, the
group record and an attempt's manifest as read from the state dir, and an engine running a
group of two attempts where ``model-b`` wins over ``model-c``."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from conftest import Setup, wait_for

from support.repos import make_repo

#: The acceptance check of every attempt: it fails the work of ``model-a`` only.
ACCEPT = (
    "import json, sys; argv = json.load(open('received_argv.json')); "
    "sys.exit(1 if 'model-a' in argv else 0)"
)


def group(setup: Setup) -> dict[str, Any]:
    """The one group record of the state dir ({} before the claim, or while unreadable)."""
    found = list((setup.state / "plans").glob("*/group.json"))
    if len(found) != 1:
        return {}
    try:
        return dict(json.loads(found[0].read_text()))
    except ValueError:
        return {}


def claimed_group(setup: Setup, timeout: float = 120) -> dict[str, Any]:
    """The group record once the engine has claimed the attempts file (waits up to
    ``timeout`` seconds)."""
    return dict(wait_for(lambda: group(setup), timeout=timeout))


def manifest(setup: Setup, task_id: str) -> dict[str, Any]:
    """An attempt's manifest, read from its task folder."""
    return dict(json.loads((setup.state / "tasks" / task_id / "manifest.json").read_text()))


def status(setup: Setup, task_id: str) -> str | None:
    """An attempt's status, or ``None`` while its manifest is not written yet (the group
    record names the attempts before their folders are claimed)."""
    try:
        return str(manifest(setup, task_id)["status"])
    except FileNotFoundError:
        return None


def b_wins_over_c(setup: Setup, c_cue: str = "") -> subprocess.Popen[bytes]:
    """An engine running a group of two attempts in a git project: model-b passes its check
    after 3 s, model-c (with ``c_cue`` first) works on for 120 s."""
    make_repo(setup.project)
    setup.write_profile(max_concurrent=4)
    prompt = f"as_model: model-b sleep: 3\nas_model: model-c {c_cue}sleep: 120\nexit: 0"
    accept = {"command": [sys.executable, "-c", ACCEPT]}
    task = setup.task("k", prompt, attempts=2, models=["model-b", "model-c"], acceptance=accept)
    setup.drop("k.toml", task)
    return setup.start()
