"""Several hosts (issue 15), the foundation: ``[cluster]`` in the profile, the schema
(``supervise cluster init|check``), submission into PostgreSQL, and dispatch through
procrastinate to engines that each start a task exactly once and never exceed their
``max_concurrent``. Every test runs against a real PostgreSQL server
(``tests/support/cluster_support.py``) and real ``supervise`` processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import tomli_w
from conftest import Setup, wait_for
from support import cluster_engines
from support.cluster_engines import (
    DOING,
    ENGINES,
    TERMINAL,
    _host_runs,
    _max_overlap,
    cluster_profile,
    engines,
    rows,
    start_engine,
    stop_engines,
    supervise,
)

server, dsn = (
    cluster_engines.server,
    cluster_engines.dsn,
)  # pytest fixtures, found by name in this module

# ---------------------------------------------------------------- config and bad input


def test_single_host_profile_loads_no_postgresql_library(setup: Setup) -> None:
    """A profile without [cluster] builds its engine without importing procrastinate or
    psycopg (they are the 'cluster' extra)."""
    profile = setup.write_profile()
    code = (
        "import sys; from supervisor.config import load_profile; "
        "from supervisor.engine.scheduler import Engine; import supervisor.cli; "
        f"e = Engine(load_profile({str(profile)!r})); "
        "print(type(e.source).__name__, sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('procrastinate', 'psycopg', 'psycopg_pool')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split(" ", 1)  # fmt: skip
    assert out == ["SpoolIntake", "[]\n"]
    # The CLI module itself (what `supervise status` loads) stays free of pydantic too.
    code = "import sys, supervisor.cli; print('pydantic' in sys.modules)"
    light = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, timeout=60).stdout  # fmt: skip
    assert light == "False\n"


@pytest.mark.parametrize(
    ("table", "key", "says"),
    [
        ({"host_id": "two words"}, "cluster.host_id", "not a usable host id"),
        ({"on_host_lost": "reboot"}, "cluster.on_host_lost", "'report' or 'restart'"),
        ({"host_timeout": -1}, "cluster.host_timeout", ""),
        ({"queues": ["host.x"]}, "cluster.queues", "hosts' own queues"),
        ({"dns": "x"}, "cluster.dns", ""),
    ],
)
def test_bad_cluster_table_is_one_line(setup: Setup, table: dict, key: str, says: str) -> None:
    profile = setup.write_profile(extra={"cluster": table})
    result = supervise("validate", str(profile))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(profile) in lines[0] and key in lines[0] and says in lines[0]
    assert "Traceback" not in result.stderr


def test_cluster_without_dsn_names_the_variable(setup: Setup) -> None:
    profile = cluster_profile(setup, None, "h1")
    result = supervise("cluster", "check", "-c", str(profile))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert "SUPERVISE_CLUSTER_DSN" in result.stderr and str(profile) in result.stderr
    no_dsn = supervise("hosts")
    assert no_dsn.returncode == 2 and "SUPERVISE_CLUSTER_DSN" in no_dsn.stderr


def test_unreachable_database_is_one_line(tmp_path: Path) -> None:
    missing = f"host={tmp_path} port=1 dbname=x user=x"
    result = supervise("cluster", "check", env={"SUPERVISE_CLUSTER_DSN": missing})
    assert result.returncode == 1
    assert result.stderr.startswith("cannot connect to the cluster database: ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


# ---------------------------------------------------------------- schema


def test_init_twice_then_check(dsn: str) -> None:
    env = {"SUPERVISE_CLUSTER_DSN": dsn}
    before = supervise("cluster", "check", "--json", env=env)
    assert before.returncode == 1
    assert json.loads(before.stdout)["schema_version"] == 0
    first = supervise("cluster", "init", env=env)
    assert first.returncode == 0, first.stderr
    from supervisor.cluster.schema import SCHEMA_VERSION as last

    assert first.stdout == (
        "applied procrastinate's schema, "
        + ", ".join(f"supervise schema v{v}" for v in range(1, last + 1))
        + f"; schema version {last}\n"
    )
    second = supervise("cluster", "init", env=env)
    assert second.returncode == 0, second.stderr
    assert second.stdout == f"already up to date; schema version {last}\n"
    check = supervise("cluster", "check", "--json", env=env)
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    assert report["schema_version"] == last and report["procrastinate"] and not report["problems"]
    tables = {r[0] for r in rows(dsn, "SELECT tablename FROM pg_tables WHERE schemaname='public'")}
    assert {"supervise_tasks", "supervise_events", "supervise_hosts", "procrastinate_jobs",
            "supervise_schema_version", "supervise_controls"} <= tables  # fmt: skip


def test_submit_before_init_says_run_init(setup: Setup, dsn: str) -> None:
    profile = cluster_profile(setup, dsn, "h1")
    task = setup.root / "t.toml"
    task.write_text(tomli_w.dumps(setup.task("a", "exit: 0")))
    result = supervise("submit", "-c", str(profile), str(task))
    assert result.returncode == 1
    assert "supervise cluster init" in result.stderr and result.stderr.count("\n") == 1


# ---------------------------------------------------------------- submission


def test_engine_on_a_database_without_init_is_one_line(setup: Setup, dsn: str) -> None:
    """``supervise run`` against a database that answers but has no schema: one line with
    the fix, exit 1 (it used to start and log "Database error." forever)."""
    profile = cluster_profile(setup, dsn, "h1")
    done = supervise("run", str(profile), "--exit-when-idle")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("supervise run: procrastinate's tables are missing; run "
                           "'supervise cluster init'\n")  # fmt: skip


def test_second_engine_with_a_host_id_in_use_is_refused(tmp_path: Path, dsn: str) -> None:
    """An engine runs as h0; another state dir whose profile also says h0 is refused in
    one line (they would share h0's queue and heartbeat row). After the first is
    SIGKILLed (its heartbeat stays still) the same id starts again."""
    with engines(tmp_path, dsn, count=1) as hosts:
        (tmp_path / "twin").mkdir()
        twin = Setup(tmp_path / "twin", f"sv-test-{uuid.uuid4().hex[:10]}")
        cluster_profile(twin, dsn, "h0")
        done = supervise("run", str(twin.profile), "--exit-when-idle")
        assert (done.returncode, done.stdout) == (1, "")
        assert done.stderr == ("supervise run: host id 'h0' is in use by an engine that is "
                               "running (its heartbeat moves); give this engine its own "
                               "[cluster] host_id\n")  # fmt: skip
        first = ENGINES.pop(hosts["h0"].root)
        first.kill()
        first.wait()
        ENGINES[hosts["h0"].root] = start_engine(hosts["h0"])
        beat = "SELECT heartbeat_at FROM supervise_hosts WHERE host_id = 'h0'"
        before = rows(dsn, beat)
        wait_for(lambda: rows(dsn, beat) != before, timeout=60)


def test_submit_validates_like_the_spool(setup: Setup, dsn: str) -> None:
    """The same checks and error lines as the spool path; a valid task becomes a queued row
    with its prompt inline and one procrastinate job (queue, queueing_lock = task id)."""
    assert supervise("cluster", "init", env={"SUPERVISE_CLUSTER_DSN": dsn}).returncode == 0
    profile = cluster_profile(setup, dsn, "h1")
    bad = setup.root / "bad.toml"
    bad.write_text(tomli_w.dumps(setup.task("b", "hi", env={"PATH": "/tmp"})))
    spool_like = supervise("validate", "-c", str(setup.write_profile()), str(bad))
    profile = cluster_profile(setup, dsn, "h1")
    refused = supervise("submit", "-c", str(profile), str(bad))
    assert refused.returncode == 1
    assert refused.stderr.replace(str(profile), "P") == spool_like.stderr.replace(
        str(setup.profile), "P"
    )
    assert "task_may_set" in refused.stderr
    missing = setup.root / "missing.toml"
    missing.write_text(tomli_w.dumps({"name": "m", "prompt": "x", "project_dir": "/nonexistent"}))
    # issue 25: project_dir is checked on the host that runs it, here with --check-local
    assert supervise("submit", "-c", str(profile), str(missing), "--check-local").returncode == 1
    assert rows(dsn, "SELECT count(*) FROM supervise_tasks") == [(0,)]

    prompt = setup.root / "prompt.md"
    prompt.write_text("print: from a file\nexit: 0\n")
    good = setup.root / "good.toml"
    good.write_text(tomli_w.dumps({"name": "good", "prompt_file": str(prompt),
                                   "project_dir": str(setup.project)}))  # fmt: skip
    done = supervise("submit", "-c", str(profile), str(good), "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    [(state, spec, queue)] = rows(dsn, "SELECT state, spec, queue FROM supervise_tasks "
                                       "WHERE id = %s", answer["task_id"])  # fmt: skip
    assert (state, queue) == ("queued", "supervise")
    assert spec["prompt"] == "print: from a file\nexit: 0\n" and "prompt_file" not in spec
    jobs = rows(dsn, "SELECT queue_name, queueing_lock, args, status FROM procrastinate_jobs")
    assert jobs == [("supervise", answer["task_id"], {"task_id": answer["task_id"]}, "todo")]

    pinned = setup.root / "pinned.toml"
    pinned.write_text(tomli_w.dumps(setup.task("p", "exit: 0", host="h2")))
    done = supervise("submit", "-c", str(profile), str(pinned), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["queue"] == "host.h2"
    badhost = setup.root / "badhost.toml"
    badhost.write_text(tomli_w.dumps(setup.task("p", "exit: 0", host="a/b")))
    result = supervise("submit", "-c", str(profile), str(badhost))
    assert result.returncode == 1 and "key 'host'" in result.stderr


def _prompt(index: int) -> tuple[str, str, int]:
    """Task ``index``'s prompt and the status and exit code it must end with."""
    if index % 8 == 1:  # pinned to h1 (see run_fleet), and long enough for a duplicate job
        return "print: pinned\nsleep: 1\nexit: 0\n", "completed", 0
    if index % 4 == 0:
        return "print: failing on purpose\nsleep: 0.2\nexit: 3\n", "failed", 3
    return f"print: task {index}\nsleep: 0.{index % 3 + 1}\nexit: 0\n", "completed", 0


def _refill_gaps(local: dict[str, tuple[float, float, list[dict]]], until: float) -> list[float]:
    """Seconds from each task's end to the next launch on the same host, for ends before
    ``until`` (the fleet's last launch: tasks were still waiting in the database then)."""
    launches = sorted(a for a, _, _ in local.values())
    gaps = []
    for _, end, _ in local.values():
        later = [a for a in launches if a >= end]
        if end < until and later:
            gaps.append(later[0] - end)
    return gaps


def run_fleet(tmp_path: Path, dsn: str, tasks: int, max_concurrent: int = 2,
              timeout: float = 120) -> None:  # fmt: skip
    """Three engines (own state dir, tmux socket, host id) take ``tasks`` tasks from the
    database: each starts exactly once (launch events counted on every host and in the
    database), no host ever runs more than ``max_concurrent`` (its local event log's
    launch-to-end intervals, and the heartbeats sampled meanwhile), and each ends as its
    prompt says."""
    from supervisor.cluster.submit import TASK_NAME, submit, sync_app
    from supervisor.config import load_profile, load_task

    expected = {}
    pinned: set[str] = set()
    sampled: list[tuple[str, int, int]] = []
    with engines(tmp_path, dsn, max_concurrent=max_concurrent) as hosts:
        submitter = load_profile(hosts["h0"].profile)
        projects = tmp_path / "projects"
        for index in range(tasks):
            prompt, status, code = _prompt(index)
            project = projects / f"p{index}"
            project.mkdir(parents=True)
            file = tmp_path / "task.toml"
            pin = {"host": "h1"} if index % 8 == 1 else {}
            file.write_text(tomli_w.dumps({"name": f"t{index}", "prompt": prompt,
                                           "project_dir": str(project), **pin}))  # fmt: skip
            done = submit(dsn, submitter, load_task(file, submitter))
            expected[done.task_id] = (status, code)
            if pin:
                pinned.add(done.task_id)
        # procrastinate is at-least-once: a second job for a task (a retried or stalled
        # one) must find it claimed and do nothing, also on the host running it.
        app = sync_app(dsn)
        with app.open():
            for task_id in list(expected)[:: max(1, tasks // 8)]:
                app.configure_task(TASK_NAME, queue="supervise").defer(task_id=task_id)
            for task_id in pinned:
                app.configure_task(TASK_NAME, queue="host.h1").defer(task_id=task_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sampled += rows(dsn, "SELECT host_id, running, capacity FROM supervise_hosts")
            ended = rows(dsn, "SELECT count(*) FROM supervise_tasks WHERE state = ANY(%s)",
                         list(TERMINAL))[0][0]  # fmt: skip
            if ended == tasks:
                # Every job, the duplicates' included, finished: none holds a worker slot.
                wait_for(lambda: rows(dsn, DOING) == [(0,)], timeout=60)
                break
            time.sleep(0.2)
        else:
            states = rows(dsn, "SELECT state, count(*) FROM supervise_tasks GROUP BY state")
            raise AssertionError(f"not all tasks ended within {timeout} s: {states}")

    runs: dict[str, str] = {}  # task id -> the host whose log launched it
    logs = {host_id: _host_runs(setup.state) for host_id, setup in hosts.items()}
    last_launch = max(a for local in logs.values() for a, _, _ in local.values())
    gaps = sorted(g for local in logs.values() for g in _refill_gaps(local, last_launch))
    # A full host takes the next task soon after a slot frees (issue 15); the figure is
    # printed here and measured by benchmarks/cluster.py, never asserted (a loaded machine).
    assert gaps, "no host refilled a freed slot"
    print(
        f"refill after an end: p50 {gaps[len(gaps) // 2]:.3f} s, "
        f"p95 {gaps[int(len(gaps) * 0.95)]:.3f} s, max {gaps[-1]:.3f} s ({len(gaps)})"
    )
    for host_id, setup in hosts.items():
        local = logs[host_id]
        for task_id, (_, _, events) in local.items():
            assert task_id not in runs, f"{task_id} ran on {runs[task_id]} and {host_id}"
            assert sum(e["event"] == "launched" for e in events) == 1, (task_id, events)
            runs[task_id] = host_id
        overlap = _max_overlap([(a, b) for a, b, _ in local.values()])
        assert 1 <= overlap <= max_concurrent, (host_id, overlap)
        manifests = setup.manifests()
        for manifest in manifests.values():
            want_status, want_code = expected[manifest["task_id"]]
            assert (manifest["status"], manifest["exit_code"]) == (want_status, want_code)
    assert sorted(runs) == sorted(expected)
    assert pinned and all(runs[t] == "h1" for t in pinned)
    launched = rows(dsn, "SELECT task_id, count(*), min(host_id) FROM supervise_events "
                         "WHERE event = 'launched' GROUP BY task_id")  # fmt: skip
    assert {t: (n, h) for t, n, h in launched} == {t: (1, runs[t]) for t in expected}
    final = rows(dsn, "SELECT id, state, owner_host, generation, exit_code FROM supervise_tasks")
    assert {r[0]: r[1:] for r in final} == {
        t: (expected[t][0], runs[t], 1, expected[t][1]) for t in expected
    }
    assert sampled and all(running <= capacity for _, running, capacity in sampled)
    assert max(running for _, running, _ in sampled) >= 1
    # The fleet's view from a fourth process that has only the DSN.
    only_dsn = {"SUPERVISE_CLUSTER_DSN": dsn}
    listed = supervise("hosts", "--json", env=only_dsn)
    assert listed.returncode == 0, listed.stderr
    assert [(h["host_id"], h["capacity"], h["running"]) for h in json.loads(listed.stdout)] == [
        (host_id, max_concurrent, 0) for host_id in sorted(hosts)
    ]
    status = supervise("status", "--cluster", "--json", "--limit", "0", env=only_dsn)
    assert status.returncode == 0, status.stderr
    assert {r["id"]: (r["state"], r["owner_host"]) for r in json.loads(status.stdout)} == {
        t: (expected[t][0], runs[t]) for t in expected
    }
    table = supervise("status", "--cluster", "--limit", "0", env=only_dsn).stdout.splitlines()
    assert table[0].split()[:4] == ["id", "name", "state", "owner_host"]
    assert len(table) == tasks + 1


def test_fleet_quick(tmp_path: Path, dsn: str) -> None:
    """24 tasks over 3 engines with 2 slots each (see :func:`run_fleet`)."""
    run_fleet(tmp_path, dsn, tasks=24)


@pytest.mark.slow
def test_fleet_300_tasks_over_3_engines(tmp_path: Path, dsn: str) -> None:
    """The issue's Must-show: 300 tasks over 3 engines (see :func:`run_fleet`)."""
    run_fleet(tmp_path, dsn, tasks=300, max_concurrent=4, timeout=600)


def test_task_this_host_cannot_run_is_rejected_not_lost(tmp_path: Path, dsn: str) -> None:
    """A task valid where it was submitted but not on the host that claims it (its
    project_dir is gone) is recorded rejected with the reason, its file kept in the host's
    spool/rejected/; a task pinned to a host that does not run stays queued."""
    from supervisor.cluster.submit import submit
    from supervisor.config import load_profile, load_task

    with engines(tmp_path, dsn, count=1) as hosts:
        submitter = load_profile(hosts["h0"].profile)
        gone = tmp_path / "gone"
        gone.mkdir()
        file = tmp_path / "task.toml"
        file.write_text(tomli_w.dumps({"name": "gone", "prompt": "exit: 0",
                                       "project_dir": str(gone), "host": "h9"}))  # fmt: skip
        waiting = submit(dsn, submitter, load_task(file, submitter)).task_id
        file.write_text(tomli_w.dumps({"name": "gone", "prompt": "exit: 0",
                                       "project_dir": str(gone)}))  # fmt: skip
        resolved = load_task(file, submitter)
        gone.rmdir()
        task_id = submit(dsn, submitter, resolved).task_id
        wait_for(lambda: rows(dsn, "SELECT state FROM supervise_tasks WHERE id = %s",
                              task_id) == [("rejected",)], timeout=30)  # fmt: skip
        wait_for(lambda: rows(dsn, DOING) == [(0,)], timeout=60)
        [(error,)] = rows(dsn, "SELECT error FROM supervise_tasks WHERE id = %s", task_id)
        assert "project_dir" in error and str(gone) in error
        rejected = hosts["h0"].spool / "rejected"
        assert (rejected / f"{task_id}.toml").is_file()
        assert "project_dir" in (rejected / f"{task_id}.toml.error").read_text()
        assert not (hosts["h0"].state / "tasks" / task_id).exists()
        assert rows(dsn, "SELECT state FROM supervise_tasks WHERE id = %s", waiting) == [
            ("queued",)
        ]
        assert rows(dsn, "SELECT status FROM procrastinate_jobs WHERE queueing_lock = %s",
                    waiting) == [("todo",)]  # fmt: skip


def test_database_down_transitions_kept_in_the_outbox(tmp_path: Path) -> None:
    """PostgreSQL stops while tasks run: the engine keeps supervising them (they end as
    their prompts say), keeps their transitions in its outbox file when stopped meanwhile,
    and its next start writes them in order, each event once."""
    from support.cluster_support import postgres_executor, wait_ready

    from supervisor.cluster.submit import submit
    from supervisor.config import load_profile, load_task

    with postgres_executor() as (dsn, server):
        with engines(tmp_path, dsn, count=1) as hosts:
            setup = hosts["h0"]
            profile = load_profile(setup.profile)
            ids = {}
            for name, code in (("ok", 0), ("bad", 5)):
                file = tmp_path / f"{name}.toml"
                file.write_text(tomli_w.dumps(setup.task(name, f"sleep: 2\nexit: {code}")))
                ids[name] = submit(dsn, profile, load_task(file, profile)).task_id
            running = "SELECT count(*) FROM supervise_tasks WHERE state = 'running'"
            wait_for(lambda: rows(dsn, running) == [(2,)], timeout=30)
            server.stop()
            wait_for(lambda: {m["status"] for m in setup.manifests().values()}
                     == {"completed", "failed"}, timeout=30)  # fmt: skip
        outbox = setup.state / "cluster-outbox.jsonl"
        kept = [json.loads(line) for line in outbox.read_text().splitlines()]
        assert {(t["task_id"], t["state"]) for t in kept} >= {
            (ids["ok"], "completed"), (ids["bad"], "failed")}  # fmt: skip
        server.start()
        wait_ready(dsn)
        assert rows(dsn, running) == [(2,)]  # nothing was written while it was down
        again = start_engine(setup)
        try:
            ended = "SELECT id, state, exit_code FROM supervise_tasks ORDER BY name"
            want = [(ids["bad"], "failed", 5), (ids["ok"], "completed", 0)]
            wait_for(lambda: rows(dsn, ended) == want, timeout=30)
            wait_for(lambda: not outbox.exists(), timeout=60)
        finally:
            stop_engines([again])
            setup.tmux("kill-server")
        events = rows(dsn, "SELECT task_id, event, count(*) FROM supervise_events "
                           "GROUP BY task_id, event")  # fmt: skip
        assert all(n == 1 for _, _, n in events), events
        assert {(t, e) for t, e, _ in events} >= {(ids["ok"], "launched"),
            (ids["ok"], "completed"), (ids["bad"], "launched"), (ids["bad"], "failed")}  # fmt: skip


def test_engine_restarted_mid_run_adopts_and_reports(tmp_path: Path, dsn: str) -> None:
    """An engine stopped while its cluster tasks run (tmux keeps them) and started again
    adopts them from its task folders and goes on writing their transitions under the
    claim's generation; nothing starts twice, the task still queued is taken, and no
    procrastinate job is left ``doing``."""
    from supervisor.cluster.submit import submit
    from supervisor.config import load_profile, load_task

    with engines(tmp_path, dsn, count=1) as hosts:
        setup = hosts["h0"]
        profile = load_profile(setup.profile)
        ids = []
        for index in range(3):
            file = tmp_path / f"t{index}.toml"
            file.write_text(tomli_w.dumps(setup.task(f"t{index}", "sleep: 3\nexit: 0")))
            ids.append(submit(dsn, profile, load_task(file, profile)).task_id)
        running = "SELECT count(*) FROM supervise_tasks WHERE state = 'running'"
        wait_for(lambda: rows(dsn, running) == [(2,)], timeout=30)
        stop_engines([ENGINES[setup.root]])
        ENGINES[setup.root] = start_engine(setup)
        done = "SELECT count(*) FROM supervise_tasks WHERE state = 'completed'"
        wait_for(lambda: rows(dsn, done) == [(3,)], timeout=60)
        wait_for(lambda: rows(dsn, DOING) == [(0,)], timeout=60)
    launched = rows(dsn, "SELECT task_id, count(*) FROM supervise_events "
                         "WHERE event = 'launched' GROUP BY task_id")  # fmt: skip
    assert sorted(launched) == sorted((t, 1) for t in ids)
    local = _host_runs(setup.state)
    assert sorted(local) == sorted(ids)
    assert all(sum(e["event"] == "launched" for e in ev) == 1 for _, _, ev in local.values())
    assert rows(dsn, "SELECT DISTINCT generation, owner_host FROM supervise_tasks") == [(1, "h0")]
