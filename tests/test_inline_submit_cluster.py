"""``supervise submit --prompt`` and the MCP path (``submit_fields``) with a ``[cluster]``
profile (issue 22 item 4): the task goes into the fleet's database as a file submit's does."""

from __future__ import annotations

import json

import pytest
from conftest import Setup
from support import cluster_engines
from support.cluster_engines import cluster_profile, rows, supervise

from supervisor.config import load_profile
from supervisor.errors import ConfigError
from supervisor.inline_submit import submit_fields

psycopg = pytest.importorskip("psycopg")


server, dsn = cluster_engines.server, cluster_engines.dsn


def test_inline_submit_to_the_fleet_is_a_queued_row(setup: Setup, dsn: str) -> None:
    assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn}).returncode == 0
    profile = cluster_profile(setup, dsn, "h1")
    done = supervise(
        "submit",
        "-c",
        str(profile),
        "--prompt",
        "print: inline\nexit: 0",
        "--project",
        str(setup.project),
        "--name",
        "fleet",
        "--set",
        "host=h2",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["queue"] == "host.h2"
    [(state, spec)] = rows(
        dsn, "SELECT state, spec FROM supervise_tasks WHERE id = %s", answer["task_id"]
    )
    assert state == "queued" and spec["prompt"] == "print: inline\nexit: 0"
    task_id = submit_fields(
        load_profile(profile), {"name": "api", "prompt": "x", "project_dir": str(setup.project)}
    )
    assert rows(dsn, "SELECT state FROM supervise_tasks WHERE id = %s", task_id) == [("queued",)]
    with pytest.raises(ConfigError, match="key 'host'"):
        submit_fields(
            load_profile(profile),
            {"name": "bad", "prompt": "x", "host": "a/b", "project_dir": str(setup.project)},
        )
    assert rows(dsn, "SELECT count(*) FROM supervise_tasks") == [(2,)]


def test_a_workspace_copy_list_goes_to_the_fleet_as_the_file_spells_it(
    setup: Setup, dsn: str
) -> None:
    """``[workspace] copy`` (``copy_paths`` in the model) is stored as ``copy``, which the
    claiming host writes back as its task.toml (``copy_paths`` was refused there)."""
    assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn}).returncode == 0
    cluster = {"host_id": "h1", "heartbeat": 0.5, "dsn": dsn}
    may_set = {"task_may_set": ["workspace"]}
    profile = setup.write_profile(extra={"cluster": cluster, "security": may_set})
    fields = {"name": "copies", "prompt": "x", "project_dir": str(setup.project),
              "workspace": {"copy": [".env"]}}  # fmt: skip
    copies = submit_fields(load_profile(profile), fields)
    [(spec,)] = rows(dsn, "SELECT spec FROM supervise_tasks WHERE id = %s", copies)
    assert spec["workspace"] == {"copy": [".env"]}
