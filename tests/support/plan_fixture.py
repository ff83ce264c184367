"""Plans claimed through the engine's intake code (:func:`supervisor.plans.claim`), for the
views' tests (tests/test_plans_graphviews.py, tests/test_tui_plans.py)."""

from __future__ import annotations

from typing import Any

import tomli_w
from conftest import Setup

from supervisor import plans
from supervisor.config import load_profile
from support.web_serve import EVIL

#: A task name Textual would take as markup, and one holding a bidi override.
MARKUP = "[red]x[/red]"


def claim(setup: Setup, tasks: list[dict[str, Any]]) -> list[str]:
    """Claim a plan file through the engine's intake code; the task ids in file order."""
    loaded = load_profile(setup.profile)
    for folder in (loaded.spool_dir, loaded.tasks_dir):
        folder.mkdir(parents=True, exist_ok=True)
    made = plans.claim(setup.drop("plan.toml", tomli_w.dumps({"tasks": tasks})), loaded)
    assert made is not None and all(c.task_dir for c in made), made[0].error
    return [c.task_dir.task_id for c in made if c.task_dir]


def blocked_plan(setup: Setup) -> list[str]:
    """A → B, A → C with hostile names, claimed, nothing run: B and C blocked on A."""
    setup.write_profile()
    return claim(
        setup,
        [
            setup.task("A", "x"),
            setup.task(MARKUP, "y", after=["A"]),
            setup.task(EVIL.replace("<", "").replace("/", ""), "z", after=["A"]),
        ],
    )


def big_plan(setup: Setup) -> list[str]:
    """A plan of 1,000 tasks claimed: t0, t1 after t0, then each after the one before, t0
    and t1 (2,994 edges); the ids in file order."""
    setup.write_profile()
    chain = [setup.task("t0", "x"), setup.task("t1", "x", after=["t0"])]
    for i in range(2, 1000):
        chain.append(setup.task(f"t{i}", "x", after=sorted({f"t{i - 1}", "t0", "t1"})))
    return claim(setup, chain)
