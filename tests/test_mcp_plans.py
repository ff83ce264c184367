"""Issue 26, part 5: the Brain submits a plan over MCP (``submit_plan``: one TOML of
``[[tasks]]`` or a list of task tables) and follows it (``plan``: each task's status and
why it waits), through the official SDK's stdio client against a live engine running the
fake agent. Bad input is one line: a cycle, an unknown name, a relative project, a
``[cluster]`` profile; the same plan submitted twice at once makes two plans, each waiting
on its own tasks."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
import tomli_w
from conftest import Setup
from support.ops_engine import engine

pytest.importorskip("mcp")

from mcp import ClientSession
from support.mcp_client import _ok, _refused, _session

from supervisor import mcp_plans, mcp_tools, plans
from supervisor.config import load_profile


def _plan(setup: Setup, hold: str = "exit: 0") -> list[dict[str, Any]]:
    """A → B, A → C; A's prompt ends with ``hold`` (``sleep: 60`` keeps B and C blocked)."""
    return [
        setup.task("A", f"print: a\n{hold}"),
        setup.task("B", "print: b\nexit: 0", after=["A"]),
        setup.task("C", "print: c\nexit: 0", after=["A"], requires="end"),
    ]


async def _until(s: ClientSession, plan: str, done: Any) -> dict[str, Any]:
    """Call ``plan`` until ``done(answer)``."""
    with anyio.fail_after(90):
        while True:
            answer = await _ok(s, "plan", plan=plan)
            if done(answer):
                return answer
            await anyio.sleep(0.2)


def test_the_brain_submits_a_plan_and_sees_why_each_task_waits(setup: Setup) -> None:
    profile = setup.write_profile()

    async def body(s: ClientSession) -> None:
        placed = await _ok(s, "submit_plan", tasks=_plan(setup, "sleep: 60"))
        assert placed["tasks"] == ["A", "B", "C"] and "warning" not in placed
        name = placed["plan"]
        seen = await _until(
            s, name, lambda a: a["state"] == "claimed" and a["counts"].get("running") == 1
        )
        tasks = {t["name"]: t for t in seen["tasks"]}
        a = tasks["A"]["task_id"]
        assert tasks["B"]["status"] == "blocked" and tasks["B"]["blocked_on"] == [a]
        assert tasks["B"]["reason"] == f"blocked on A ({a})" and not seen["done"]
        by_task = await _ok(s, "plan", plan=tasks["C"]["task_id"])  # any task id of it
        assert {t["task_id"] for t in by_task["tasks"]} == {t["task_id"] for t in seen["tasks"]}
        paged = await _ok(s, "plan", plan=name, offset=1, limit=1)  # the SDK takes the page
        assert len(paged["tasks"]) == 1 and (paged["total"], paged["next_offset"]) == (3, 2)
        listed = await _ok(s, "status", limit=2)
        assert len(listed["tasks"]) == 2 and listed["total"] == 3
        stopped = await _ok(s, "stop", task_id=a, wait_s=30)
        assert stopped["status"] == "abandoned"
        ended = await _until(s, name, lambda a: a["done"])
        tasks = {t["name"]: t for t in ended["tasks"]}
        assert tasks["B"]["status"] == "abandoned" and "dependency" in tasks["B"]["reason"]
        assert tasks["C"]["status"] == "completed"  # requires = "end": A's stop will do

    with engine(setup):
        _session(profile, body)


def test_a_plan_as_toml_runs_in_order(setup: Setup) -> None:
    profile = setup.write_profile()

    async def body(s: ClientSession) -> None:
        text = tomli_w.dumps({"tasks": _plan(setup)})
        name = (await _ok(s, "submit_plan", plan_toml=text))["plan"]
        ended = await _until(s, name, lambda a: a.get("done"))
        assert ended["counts"] == {"completed": 3}
        assert all(t["verdict"] == "PASS" for t in ended["tasks"])

    with engine(setup):
        _session(profile, body)


def test_bad_plans_are_one_line_each(setup: Setup) -> None:
    profile = setup.write_profile()
    cycle = [setup.task("A", "x", after=["B"]), setup.task("B", "x", after=["A"])]
    relative = [{**setup.task("A", "x"), "project_dir": "rel"}]
    many = [{"name": f"t{i}", "prompt": "x", "project_dir": "/", "bogus": 1} for i in range(40)]

    async def body(s: ClientSession) -> None:
        assert "(A -> B -> A); break the cycle" in await _refused(s, "submit_plan", tasks=cycle)
        unknown = [setup.task("A", "x", after=["nobody"])]
        assert "nobody" in await _refused(s, "submit_plan", tasks=unknown)
        assert "absolute" in await _refused(s, "submit_plan", tasks=relative)
        assert "not TOML" in await _refused(s, "submit_plan", plan_toml="[[tasks]\n")
        assert "or as tasks" in await _refused(s, "submit_plan")
        both = await _refused(s, "submit_plan", plan_toml="", tasks=[])
        assert "or as tasks" in both
        line = await _refused(s, "submit_plan", tasks=many)
        assert line.endswith("more") and len(line) < 2000, line
        assert "1 to 1000" in await _refused(s, "submit_plan", tasks=[])
        assert "no plan nosuch-1.toml" in await _refused(s, "plan", plan="nosuch-1")
        assert "no plan name" in await _refused(s, "plan", plan="../etc/passwd")
        assert "no plan name" in await _refused(s, "plan", plan="a\x1b[31m")
        assert not list(setup.spool.glob("*.toml"))

    _session(profile, body)


def test_a_cluster_profile_refuses_a_plan(setup: Setup) -> None:
    extra = {"cluster": {"dsn": "postgresql://nobody@127.0.0.1:1/none"}}
    loaded = load_profile(setup.write_profile(extra=extra))
    with pytest.raises(mcp_plans.ToolRefused, match="does not run plans yet"):
        mcp_plans.submit_plan(loaded, None, _plan(setup))


def test_the_same_plan_twice_at_once_makes_two_plans(setup: Setup) -> None:
    loaded = load_profile(setup.write_profile())
    answers: list[dict[str, Any]] = []

    async def both() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(2):
                group.start_soon(_submit, answers, loaded, _plan(setup))

    anyio.run(both)
    assert len({a["plan"] for a in answers}) == 2
    for answer in answers:  # each claimed alone: its tasks wait for its own A
        made = plans.claim(loaded.spool_dir / answer["plan"], loaded)
        assert made is not None and all(c.task_dir for c in made)
    for answer in answers:
        followed = mcp_plans.follow(loaded, answer["plan"])
        tasks = {t["name"]: t for t in followed["tasks"]}
        assert tasks["B"]["after"] == [tasks["A"]["task_id"]]
        assert followed["counts"] == {"queued": 1, "blocked": 2}


async def _submit(answers: list[dict[str, Any]], loaded: Any, tasks: list[Any]) -> None:
    answers.append(await anyio.to_thread.run_sync(mcp_plans.submit_plan, loaded, None, tasks))


def test_a_rejected_plan_is_followed_with_its_reason(setup: Setup) -> None:
    loaded = load_profile(setup.write_profile())
    name = mcp_plans.submit_plan(loaded, None, _plan(setup))["plan"]
    assert mcp_plans.follow(loaded, name)["state"] == "waiting to be claimed"
    spool_file = loaded.spool_dir / name
    spool_file.write_text(spool_file.read_text().replace('"A"', '"Z"', 1))  # B names A: gone
    made = plans.claim(spool_file, loaded)
    assert made is not None and made[0].error
    rejected = mcp_plans.follow(loaded, name)
    assert rejected["state"] == "rejected" and "'A'" in rejected["error"], rejected
    assert Path(rejected["file"]).is_file()


def test_odd_files_in_the_plans_folder_never_block_plan(setup: Setup) -> None:
    """Attack (odd file types): a FIFO as a plan's source.txt or a rejected plan's .error,
    and a 1 MB .error: ``plan`` returns at once, the .error's head only."""
    loaded = load_profile(setup.write_profile())
    odd = loaded.state_dir / plans.PLANS / "plan-0a0b0c"
    odd.mkdir(parents=True)
    os.mkfifo(odd / plans.SOURCE)
    name = mcp_plans.submit_plan(loaded, None, _plan(setup))["plan"]
    made = plans.claim(loaded.spool_dir / name, loaded)
    assert made is not None and all(c.task_dir for c in made)
    assert mcp_plans.follow(loaded, name)["counts"] == {"queued": 1, "blocked": 2}
    rejected = loaded.spool_dir / "rejected"
    rejected.mkdir()
    (rejected / "plan-1a1b1c.toml").write_text("x")
    os.mkfifo(rejected / "plan-1a1b1c.toml.error")
    answer = mcp_plans.follow(loaded, "plan-1a1b1c.toml")
    assert answer["state"] == "rejected" and "cannot be read" in answer["error"]
    (rejected / "plan-2a2b2c.toml").write_text("x")
    (rejected / "plan-2a2b2c.toml.error").write_text("e" * 1_000_000)
    answer = mcp_plans.follow(loaded, "plan-2a2b2c")
    assert len(answer["error"]) == mcp_plans.MAX_ERROR_BYTES


def test_a_claim_finishing_while_plan_reads_never_shows_the_plan_gone(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in CI: ``plan`` took its snapshot of tasks/, the engine then moved the plan's
    tasks in, and ``plan`` read the claim as finished: every task ``gone``, the plan
    ``done`` while it had not started. Here the claim is committed, its tasks still staged,
    and they move in just after the snapshot (or, now, before it). Also: between the claim's
    rename of the spool file and its staging, ``plan`` says "being claimed", never "no plan".
    """
    from supervisor.views import model

    loaded = load_profile(setup.write_profile())
    name = mcp_plans.submit_plan(loaded, None, _plan(setup))["plan"]
    real_stage, real_publish = plans._stage, plans.publish
    seen_mid_claim: list[dict[str, Any]] = []

    def stage(*args: Any) -> None:
        seen_mid_claim.append(mcp_plans.follow(loaded, name))
        real_stage(*args)

    monkeypatch.setattr(plans, "_stage", stage)
    monkeypatch.setattr(plans, "publish", lambda staging, profile: [])
    plans.claim(loaded.spool_dir / name, loaded)
    assert seen_mid_claim[0]["state"] == "being claimed", seen_mid_claim
    staging = next(p for p in (loaded.state_dir / plans.PLANS).iterdir() if p.is_dir())
    real_snapshot = model.snapshot

    def snapshot_then_publish(*args: Any) -> Any:
        taken = real_snapshot(*args)
        real_publish(staging, loaded)
        return taken

    monkeypatch.setattr(model, "snapshot", snapshot_then_publish)
    first = mcp_plans.follow(loaded, name)
    assert first["state"] == "being claimed", first  # not {"gone": 3}, "done"
    real_publish(staging, loaded)
    then = mcp_plans.follow(loaded, name)
    assert then["counts"] == {"queued": 1, "blocked": 2} and not then["done"], then


def test_a_large_plan_is_followed_a_page_at_a_time(setup: Setup) -> None:
    """A plan of 230 tasks: each ``plan`` answer holds one page of tasks (100 by default,
    under Claude Code's 50,000 characters for an MCP answer kept in the conversation), with
    the whole plan's ``counts``; following ``next_offset`` gives every task once. ``status``
    pages the same way. A bad ``offset``/``limit`` is one line."""
    loaded = load_profile(setup.write_profile())
    tasks = [setup.task("T0", "exit: 0")]
    tasks += [setup.task(f"T{k}", "exit: 0", after=["T0"]) for k in range(1, 230)]
    name = mcp_plans.submit_plan(loaded, None, tasks)["plan"]
    made = plans.claim(loaded.spool_dir / name, loaded)
    assert made is not None and len(made) == 230
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        answer = mcp_plans.follow(loaded, name, offset)
        assert answer["counts"] == {"queued": 1, "blocked": 229} and answer["total"] == 230
        assert len(json.dumps(answer)) < 50_000
        seen += [row["task_id"] for row in answer["tasks"]]
        offset = answer["next_offset"]
    assert len(seen) == len(set(seen)) == 230 and len(answer["tasks"]) == 30
    small = mcp_plans.follow(loaded, name, 228, 5)
    assert len(small["tasks"]) == 2 and small["next_offset"] is None
    status = mcp_tools.status(loaded, None, 0, 7)
    assert len(status["tasks"]) == 7 and status["total"] == 230 and status["next_offset"] == 7
    for offset_, limit in ((-1, None), (None, 0), (None, mcp_tools.MAX_ROWS + 1), ("1", None)):
        with pytest.raises(mcp_tools.ToolRefused) as refused:
            mcp_plans.follow(loaded, name, offset_, limit)  # type: ignore[arg-type]
        assert "\n" not in str(refused.value) and (
            "offset" in str(refused.value) or "limit" in str(refused.value)
        )
