"""Issue 25, parts 4 and 5 in ``status --cluster``: pages and filters chosen on the server
(``--limit``, ``--after``, ``--state``/``--status``, ``--host``: the query's ``WHERE`` and
``LIMIT``), and each task's host state (``host_state``: its owner's ``alive``/``stopped``/
``dead``). Real PostgreSQL (``tests/support/cluster_support.py``), the real CLI.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from support import cluster_hosts
from support.cluster_engines import supervise

psycopg = pytest.importorskip("psycopg")

server, dsn = cluster_hosts.server, cluster_hosts.dsn  # pytest fixtures, found by name

#: id -> (state, owner, pinned host), submitted in this order, one minute apart.
TASKS = {
    "t1": ("completed", "h1", None),
    "t2": ("running", "h2", None),
    "t3": ("running", "h3", None),
    "t4": ("host_lost", "h3", None),
    "t5": ("queued", None, "h2"),
    "t6": ("running", "h1", None),
    "t7": ("queued", None, None),
}


@pytest.fixture
def fleet(dsn: str) -> Iterator[dict[str, str]]:
    """Hosts h1 alive, h2 stopped, h3 dead, and :data:`TASKS`; the CLI's environment."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for host_id, state in (("h1", "alive"), ("h2", "stopped"), ("h3", "dead")):
            conn.execute(
                "INSERT INTO supervise_hosts (host_id, capacity, state) VALUES (%s, 2, %s)",
                (host_id, state),
            )
        for n, (task_id, (state, owner, pin)) in enumerate(TASKS.items()):
            conn.execute(
                "INSERT INTO supervise_tasks (id, name, spec, queue, state, owner_host, host, "
                "submitted_at) VALUES (%s, %s, '{}', 'supervise', %s, %s, %s, "
                "'2026-01-01'::timestamptz + make_interval(mins => %s))",
                (task_id, f"name-{task_id}", state, owner, pin, n),
            )
    yield {"SUPERVISE_CLUSTER_DSN": dsn}


def listed(env: dict[str, str], *args: str) -> tuple[list[dict[str, Any]], str]:
    done = supervise("status", "--cluster", "--json", *args, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def ids(env: dict[str, str], *args: str) -> list[str]:
    return [row["id"] for row in listed(env, *args)[0]]


def test_pages_follow_each_other_in_submission_order(fleet: dict[str, str]) -> None:
    """``--limit 3`` gives the first three and says how to get the next page on stderr;
    ``--after`` the last one gives the next three, then the last one with no hint; ``--limit
    0`` gives all."""
    rows, note = listed(fleet, "--limit", "3")
    assert [r["id"] for r in rows] == ["t1", "t2", "t3"]
    assert note.strip() == "more tasks: supervise status --cluster --after t3 (or --limit 0)"
    rows, note = listed(fleet, "--limit", "3", "--after", "t3")
    assert [r["id"] for r in rows] == ["t4", "t5", "t6"]
    assert "--after t6" in note
    rows, note = listed(fleet, "--limit", "3", "--after", "t6")
    assert [r["id"] for r in rows] == ["t7"] and note == ""
    assert ids(fleet, "--limit", "0") == list(TASKS)
    assert ids(fleet) == list(TASKS)  # under the default limit


def test_the_default_limit_is_a_page_not_every_row(dsn: str) -> None:
    """101 tasks: the default shows 100 and points at the rest (it printed every row ever)."""
    from supervisor.views.fleet_status import DEFAULT_LIMIT

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO supervise_tasks (id, name, spec, queue, submitted_at) "
            "SELECT 'x' || lpad(n::text, 3, '0'), 'n', '{}', 'supervise', "
            "'2026-01-01'::timestamptz + make_interval(secs => n) "
            "FROM generate_series(1, %s) n",
            (DEFAULT_LIMIT + 1,),
        )
    rows, note = listed({"SUPERVISE_CLUSTER_DSN": dsn})
    assert len(rows) == DEFAULT_LIMIT == 100
    assert f"--after x{DEFAULT_LIMIT:03d}" in note


def test_state_and_host_filters(fleet: dict[str, str]) -> None:
    """``--state`` is ``--status`` (a state or a group, repeatable); ``--host`` takes the
    tasks a host owns and those pinned to it that no host owns yet; filters and the page
    combine."""
    assert ids(fleet, "--state", "running") == ["t2", "t3", "t6"]
    assert ids(fleet, "--status", "host_lost") == ["t4"]
    assert ids(fleet, "--state", "queued", "--state", "done") == ["t1", "t5", "t7"]
    assert ids(fleet, "--host", "h2") == ["t2", "t5"]
    assert ids(fleet, "--host", "h1", "--state", "running") == ["t6"]
    assert ids(fleet, "--state", "running", "--limit", "1", "--after", "t2") == ["t3"]
    assert ids(fleet, "--host", "nobody") == []


def test_host_state_of_each_task(fleet: dict[str, str]) -> None:
    """Every row carries its owner's state; the table shows it for a task not ended (a
    running task on a stopped or dead host says so), not for an ended one."""
    rows, _ = listed(fleet, "--limit", "0")
    assert {r["id"]: r["host_state"] for r in rows} == {
        "t1": "alive",
        "t2": "stopped",
        "t3": "dead",
        "t4": "dead",
        "t5": None,
        "t6": "alive",
        "t7": None,
    }
    table = supervise("status", "--cluster", env=fleet).stdout.splitlines()
    assert table[0].split()[:5] == ["id", "name", "state", "owner_host", "host_state"]
    line = {row.split()[0]: row.split() for row in table[1:]}
    assert line["t2"][4] == "stopped" and line["t3"][4] == "dead" and line["t6"][4] == "alive"
    assert "dead" not in line["t4"] and "alive" not in line["t1"]


def test_snapshot_totals_count_the_selection_its_tasks_are_the_page(
    fleet: dict[str, str],
) -> None:
    done = supervise("status", "--cluster", "--snapshot", "--limit", "2", env=fleet)
    data = json.loads(done.stdout)
    assert [t["id"] for t in data["tasks"]] == ["t1", "t2"]
    assert data["totals"]["tasks"] == 7
    assert (data["totals"]["running"], data["totals"]["queued"]) == (3, 2)
    assert (data["totals"]["failed"], data["totals"]["done"]) == (1, 1)
    done = supervise("status", "--cluster", "--snapshot", "--host", "h3", env=fleet)
    assert json.loads(done.stdout)["totals"]["tasks"] == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--cluster", "--after", "nosuch"), "no task 'nosuch' in the fleet to page after"),
        (("--cluster", "--limit", "-1"), "'-1' is not a row count"),
        (("--cluster", "--limit", "many"), "'many' is not a row count"),
        (("--cluster", "--limit", "1" + "0" * 30), "is not a row count (0 to 1000000000"),
        (("--cluster", "--after", "x\x1b[31m\u202e"), "no task 'x\\x1b[31m"),
        (("-c", "nowhere.toml", "--limit", "3"), "--limit need --cluster"),
        (("-c", "nowhere.toml", "--host", "h1", "--after", "t1"), "--after, --host need"),
    ],
)
def test_bad_page_options_are_one_line(fleet: dict[str, str], args: tuple, says: str) -> None:
    done = supervise("status", *args, env=fleet)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "\x1b" not in done.stderr
    assert says in done.stderr.strip().splitlines()[-1]  # argparse's usage comes first
