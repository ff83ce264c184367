"""Issue 26, part 1: a blocked task and what it waits for in ``status`` (table and
``--json``), ``top``'s outcome column and ``serve``'s board; the plan's edges."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import tomli_w
from conftest import Setup
from hypothesis import given
from hypothesis import strategies as st

from supervisor import plans
from supervisor.config import load_profile
from supervisor.taskdir.folder import TaskDir
from supervisor.views import model, plangraph, tui_columns, webpage
from supervisor.views.webauth import Access


def claimed_plan(setup: Setup) -> tuple[Any, dict[str, TaskDir]]:
    loaded = load_profile(setup.write_profile())
    for folder in (loaded.spool_dir, loaded.tasks_dir):
        folder.mkdir(parents=True, exist_ok=True)
    tasks = [
        setup.task("A", "x"),
        setup.task("B", "y", after=["A"]),
        setup.task("C\u202e", "z", after=["A", "B"], requires="end"),  # shown escaped
    ]
    made = plans.claim(setup.drop("plan.toml", tomli_w.dumps({"tasks": tasks})), loaded)
    assert made is not None
    found = {c.resolved.spec.name[0]: c.task_dir for c in made if c.resolved and c.task_dir}
    return loaded, found


def status(setup: Setup, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "status", "-c", str(setup.profile), *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def test_status_top_and_serve_show_what_a_blocked_task_waits_for(setup: Setup) -> None:
    loaded, t = claimed_plan(setup)
    a, b, c = (t[k].task_id for k in "ABC")
    rows = {row["task_id"]: row for row in json.loads(status(setup, "--json"))}
    assert rows[b]["status"] == "blocked" and rows[b]["blocked_on"] == [a]
    assert rows[c]["after"] == [a, b] and rows[c]["blocked_on"] == [a, b]
    assert rows[b]["reason"] == f"blocked on A ({a})"
    text = status(setup)
    assert f"blocked on A ({a})" in text and "\u202e" not in text
    assert f"A ({a}) → B ({b}) [blocked]" in text, text
    assert f"B ({b}) → C\\u202e ({c}) [blocked]" in text
    snap = model.Reader(loaded.state_dir, loaded.spool_dir).snapshot()
    task_b = snap.task(b)
    assert task_b is not None and task_b.group == "queued"
    assert f"blocked on A ({a})" in tui_columns.outcome(task_b)
    board = webpage.Pages(loaded, Access(token=None, allow_actions=False, loopback=True)).board()
    assert f"blocked on A ({a})" in board
    # A ended: B's and C's reason says they start at the next intake
    t["A"].update_manifest(lambda m: setattr(m, "status", "completed"))
    rows = {row["task_id"]: row for row in json.loads(status(setup, "--json"))}
    assert rows[b]["blocked_on"] == [] and "predecessors ended" in rows[b]["reason"]
    assert rows[c]["blocked_on"] == [b]


def test_status_plans_gives_the_graph_as_text_and_json(setup: Setup) -> None:
    _, t = claimed_plan(setup)
    a, b, c = (t[k].task_id for k in "ABC")
    text = status(setup, "--plans")
    assert text.startswith("plan 1: 3 tasks, in progress"), text
    assert f"A ({a}) [queued] → B ({b}) [blocked]" in text
    assert f"C\\u202e ({c}) waits: blocked on A ({a}), B ({b})" in text
    graph = json.loads(status(setup, "--plans", "--json"))
    assert graph["edges_left_out"] == 0 and len(graph["plans"]) == 1
    edges = graph["plans"][0]["edges"]
    assert edges == [{"from": a, "to": b}, {"from": a, "to": c}, {"from": b, "to": c}]
    nodes = {n["task_id"]: n for n in graph["plans"][0]["tasks"]}
    assert nodes[c]["name"] == "C\u202e" and nodes[c]["blocked_on"] == [a, b]


@given(
    st.dictionaries(
        st.sampled_from([f"t{i}" for i in range(12)]),
        st.lists(st.sampled_from([f"t{i}" for i in range(14)]), max_size=4, unique=True),
        max_size=12,
    ),
    st.integers(min_value=0, max_value=30),
)
def test_the_graph_keeps_every_edge_once_in_its_part(after: dict[str, list[str]], cap: int) -> None:
    """plangraph.graph (hypothesis): each edge is listed once or counted as left out; the
    plans are the connected parts (no edge joins two plans); gone predecessors (t12, t13)
    are nodes with status ``gone``; cycles and self-loops are no trouble."""
    tasks = [model.Task(task_id=i, name=None, status="blocked", after=a) for i, a in after.items()]
    found = plangraph.graph(tasks, max_edges=cap)
    total = sum(len(a) for a in after.values())
    listed = [edge for plan in found.plans for edge in plan.edges]
    assert len(listed) + found.edges_left_out == total
    assert len(listed) == min(cap, total) and len(set(listed)) == len(listed)
    home = {i: n for n, plan in enumerate(found.plans) for i in plan.nodes}
    for before, task_id in listed:
        assert before in after[task_id] and home[before] == home[task_id]
    for plan in found.plans:
        for node in plan.nodes.values():
            assert (node.status == plangraph.GONE) == (node.task_id not in after)
