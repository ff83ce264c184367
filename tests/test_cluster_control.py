"""Operating the fleet from any machine (issue 15): ``stop|resume|approve|deny``, ``show``
and ``wait`` for a task that runs on another host, from a process that has only the DSN
(no profile, no state dir). Real PostgreSQL (``tests/support/cluster_support.py``), real engines
(``supervise run`` subprocesses, as in ``tests/test_cluster.py``), the fake agent.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from conftest import wait_for
from support import claude_harness, cluster_engines
from support.cluster_engines import engines, rows, supervise

psycopg = pytest.importorskip("psycopg")
# The fixtures of those modules: a server per module, a fresh database per test, the
# Claude Code harness (a mock API, a throwaway HOME).
server, dsn, harness = cluster_engines.server, cluster_engines.dsn, claude_harness.harness

CONTROLS = "SELECT task_id, host_id, verb, done_at IS NOT NULL, ok, result FROM supervise_controls"


def _submit(hosts: dict, tmp_path: Path, dsn: str, name: str, prompt: str, host: str) -> str:
    """Submit a task pinned to ``host``; its id."""
    from supervisor.cluster.submit import submit
    from supervisor.config import load_profile, load_task

    profile = load_profile(hosts["h0"].profile)
    file = tmp_path / f"{name}.toml"
    file.write_text(tomli_w.dumps(hosts["h0"].task(name, prompt, host=host)))
    return submit(dsn, profile, load_task(file, profile)).task_id


def _state(dsn: str, task_id: str) -> tuple:
    return rows(dsn, "SELECT state, owner_host FROM supervise_tasks WHERE id = %s", task_id)[0]


def test_stop_show_wait_from_a_machine_with_only_the_dsn(tmp_path: Path, dsn: str) -> None:
    """Three engines; a task runs on h2. A fourth process with only SUPERVISE_CLUSTER_DSN
    sees it in ``status --cluster``; ``approve`` (not escalated) is refused in one line and
    writes nothing; ``stop`` ends it on h2 and prints the local verb's line; ``show`` and
    ``wait`` read it across hosts; an unknown id is one line."""
    only_dsn = {"SUPERVISE_CLUSTER_DSN": dsn}
    with engines(tmp_path, dsn, count=3) as hosts:
        long = _submit(hosts, tmp_path, dsn, "long", "print: working\nsleep: 60\n", "h2")
        quick = _submit(hosts, tmp_path, dsn, "quick", "print: hi\nexit: 0\n", "h1")
        wait_for(lambda: _state(dsn, long) == ("running", "h2"), timeout=30)
        status = supervise("status", "--cluster", "--json", env=only_dsn)
        assert status.returncode == 0, status.stderr
        assert {r["id"]: (r["state"], r["owner_host"]) for r in json.loads(status.stdout)}[
            long
        ] == ("running", "h2")

        refused = supervise("approve", long, env=only_dsn)
        assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
        assert refused.stderr == (
            f"supervise approve: task {long} is running, not escalated: nothing to approve\n"
        )
        assert rows(dsn, CONTROLS) == []
        assert not list((hosts["h2"].state / "control").glob("*"))

        stopped = supervise("stop", long, env=only_dsn)
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout == f"{long}: abandoned (retry_count 0)\n"
        manifest = json.loads((hosts["h2"].state / "tasks" / long / "manifest.json").read_text())
        assert manifest["status"] == "abandoned"
        [(task_id, host, verb, done, ok, result)] = rows(dsn, CONTROLS)
        assert (task_id, host, verb, done, ok) == (long, "h2", "stop", True, True)
        assert result == stopped.stdout.strip()
        wait_for(lambda: _state(dsn, long) == ("abandoned", "h2"), timeout=60)

        again = supervise("stop", long, env=only_dsn)
        assert again.returncode == 1
        assert again.stderr == f"supervise stop: task {long} already ended: abandoned\n"

        shown = supervise("show", long, env=only_dsn)
        assert shown.returncode == 0, shown.stderr
        record = json.loads(shown.stdout)
        assert (record["task_id"], record["status"], record["owner_host"]) == (
            long, "abandoned", "h2")  # fmt: skip
        assert record["generation"] == 1 and record["restarted_from"] == []
        events = [(e["event"], e["host_id"]) for e in record["events"]]
        assert ("launched", "h2") in events and events[-1][1] == "h2"

        waited = supervise("wait", long, quick, "--timeout", "30", env=only_dsn)
        assert waited.returncode == 1, waited.stderr  # abandoned is not a PASS
        lines = waited.stdout.splitlines()
        assert lines[0].startswith(f"{long}: abandoned ABANDONED")
        assert lines[1] == f"{quick}: completed PASS"
        assert supervise("wait", quick, env=only_dsn).returncode == 0

        for verb in ("stop", "show", "wait"):
            unknown = supervise(verb, "no-such-task", env=only_dsn)
            assert unknown.returncode in (1, 2) and unknown.stderr.count("\n") == 1
            assert "no task" in unknown.stderr and "Traceback" not in unknown.stderr
    assert supervise("stop", long).returncode == 2  # neither -c nor the DSN: usage


def test_request_to_a_host_not_alive_is_one_line_and_leaves_no_row(
    tmp_path: Path, dsn: str
) -> None:
    """The owner is recorded dead (the sweeper's mark): ``stop`` says so in one line, exit 1,
    and no request row is left pending for it."""
    with engines(tmp_path, dsn, count=1) as hosts:
        task = _submit(hosts, tmp_path, dsn, "long", "print: working\nsleep: 60\n", "h0")
        wait_for(lambda: _state(dsn, task) == ("running", "h0"), timeout=30)
        engine = cluster_engines.ENGINES[hosts["h0"].root]
        os.kill(engine.pid, signal.SIGSTOP)  # silent, as a host the sweeper found dead
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE supervise_hosts SET state = 'dead' WHERE host_id = 'h0'")
            refused = supervise("stop", task, env={"SUPERVISE_CLUSTER_DSN": dsn})
            # Read while the host is still stopped: once it runs again, its own sweeper may
            # find the 'dead' row before its heartbeat and mark the task host_lost, as it
            # should for a host the fleet declared dead.
            state, pending = _state(dsn, task), rows(dsn, CONTROLS)
        finally:
            os.kill(engine.pid, signal.SIGCONT)
        assert refused.returncode == 1
        assert refused.stderr == f"supervise stop: host h0 is dead: cannot stop {task}\n"
        assert pending == []
        assert state == ("running", "h0")


def test_listener_survives_its_connection_being_terminated(tmp_path: Path, dsn: str) -> None:
    """``pg_terminate_backend`` on the engine's LISTEN connection (control requests ride on
    it since issue 25): it listens again, and a ``stop`` from another process is still
    answered (the new LISTEN or the poll backstop)."""
    from supervisor.cluster.db import application_name

    APPLICATION_NAME = application_name("h0", "listen")
    backends = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
    with engines(tmp_path, dsn, count=1) as hosts:
        task = _submit(hosts, tmp_path, dsn, "long", "print: working\nsleep: 60\n", "h0")
        wait_for(lambda: _state(dsn, task) == ("running", "h0"), timeout=30)
        wait_for(lambda: len(rows(dsn, backends, APPLICATION_NAME)) == 1, timeout=60)
        [(first,)] = rows(dsn, backends, APPLICATION_NAME)
        # A row for a task this host does not run, written with no NOTIFY, is answered
        # (one line, not acted on) once the LISTEN connection listens again: each new
        # LISTEN reads the pending rows.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO supervise_controls (task_id, host_id, verb) "
                         "VALUES ('ghost', 'h0', 'stop')")  # fmt: skip
        assert rows(dsn, "SELECT pg_terminate_backend(%s)", first) == [(True,)]
        answered = ("SELECT ok, result FROM supervise_controls "
                    "WHERE task_id = 'ghost' AND done_at IS NOT NULL")  # fmt: skip
        wait_for(lambda: rows(dsn, answered), timeout=60)
        assert rows(dsn, answered) == [
            (False, "task ghost is not run by host h0 (the fleet says owner None, generation None)")
        ]
        stopped = supervise("stop", task, "--json", env={"SUPERVISE_CLUSTER_DSN": dsn})
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout) == {"task_id": task, "verb": "stop", "result": "applied",
                                              "status": "abandoned", "retry_count": 0,
                                              "host_id": "h0"}  # fmt: skip
        [(second,)] = rows(dsn, backends, APPLICATION_NAME)
        assert second != first
        log = (hosts["h0"].root / "engine.log").read_text()
        assert "database unreachable (the LISTEN connection" in log


@pytest.mark.e2e
def test_approve_from_a_machine_with_only_the_dsn(
    tmp_path: Path, dsn: str, harness: Callable[..., Any]
) -> None:
    """THE must-show: engines h0 and h1 (fake agent) and h2 (the real Claude Code CLI
    against the mock API, an approval rule that escalates a Bash step). The task escalates
    on h2; a fourth process with only the DSN sees it in ``status --cluster``, runs
    ``approve ID``, which acts on h2 and prints the local verb's line; the agent goes on in
    the same run and completes."""
    import subprocess
    import sys

    from support.claude_support import scrubbed_environ
    from support.cluster_engines import stop_engines

    from supervisor.cluster.submit import submit
    from supervisor.config import load_profile, load_task

    only_dsn = {"SUPERVISE_CLUSTER_DSN": dsn}
    with engines(tmp_path, dsn, count=2):
        h = harness(final_text="approved on h2")
        project = h.project()
        rules = [{"tool": "Bash", "match": "^echo escalated", "action": "escalate"}]
        h.write_profile(approval={"rules": rules},
                        cluster={"host_id": "h2", "dsn": dsn, "heartbeat": 0.5})  # fmt: skip
        argv = [sys.executable, "-m", "supervisor.cli", "run", str(h.profile)]
        with open(tmp_path / "h2.log", "a") as out:
            engine = subprocess.Popen(argv, cwd=h.root, env=scrubbed_environ(), stdout=out,
                                      stderr=subprocess.STDOUT)  # fmt: skip
        try:
            profile = load_profile(h.profile)
            file = tmp_path / "perm.toml"
            prompt = "[[bash: echo escalated > esc.txt]] do the step"
            file.write_text(tomli_w.dumps({"name": "perm", "project_dir": str(project),
                                           "host": "h2", "prompt": prompt}))  # fmt: skip
            task = submit(dsn, profile, load_task(file, profile)).task_id
            wait_for(lambda: _state(dsn, task) == ("escalated", "h2"), timeout=120)
            status = supervise("status", "--cluster", env=only_dsn)
            assert status.returncode == 0, status.stderr
            [line] = [row for row in status.stdout.splitlines() if row.startswith(task)]
            assert line.split()[2:4] == ["escalated", "h2"]
            approved = supervise("approve", task, env=only_dsn)
            assert approved.returncode == 0, approved.stderr
            assert approved.stdout == f"{task}: running (retry_count 0)\n"
            wait_for(lambda: _state(dsn, task) == ("completed", "h2"), timeout=120)
            assert (project / "esc.txt").exists()
            [(verb, ok, result)] = rows(dsn, "SELECT verb, ok, result FROM supervise_controls")
            assert (verb, ok, result) == ("approve", True, approved.stdout.strip())
        finally:
            stop_engines([engine])
