"""End-to-end tests of ``supervise run`` with real tmux, real processes and the fake agent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

from conftest import Setup, wait_for


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_valid_failing_and_malformed_tasks_dropped_together(setup: Setup) -> None:
    setup.write_profile()
    good = setup.project / "good"
    bad = setup.project / "bad"
    setup.drop("good.toml", setup.task("good", "print: all fine\nsleep: 0.3\nexit: 0", good))
    setup.drop("failing.toml", setup.task("failing", "print: about to fail\nexit: 3", bad))
    setup.drop("broken.toml", 'name = "broken"\nprompt = "unterminated\n')

    started = time.time()
    result = setup.run(timeout=60)
    ended = time.time()
    assert result.returncode == 0, result.stderr

    manifests = setup.manifests()
    assert set(manifests) == {"good", "failing"}
    assert manifests["good"]["status"] == "completed"
    assert manifests["good"]["exit_code"] == 0
    assert "all fine" in manifests["good"]["output_tail"]
    assert manifests["failing"]["status"] == "failed"
    assert manifests["failing"]["exit_code"] == 3
    assert "about to fail" in manifests["failing"]["output_tail"]
    for m in manifests.values():
        for key in ("started_at", "finished_at", "last_checked_at", "created_at"):
            assert m[key].endswith("Z") and ts(m[key]) >= started - 1
        assert str(uuid.UUID(m["session_id"])) == m["session_id"]
        assert m["session_name"] == m["task_id"]
        assert Path(m["tmpdir"]).is_dir()

    rejected = setup.spool / "rejected"
    assert (rejected / "broken.toml").read_text().startswith('name = "broken"')
    error = (rejected / "broken.toml.error").read_text()
    assert "broken.toml" in error and "malformed TOML" in error
    assert not list(setup.spool.glob("*.toml")), "the spool is left empty"

    for m in manifests.values():  # a normal exit, even a failing one, is never a crash
        names = [e["event"] for e in setup.events(m["task_id"])]
        assert names == ["queued", "launched", m["status"]], names
    last_finish = max(ts(m["finished_at"]) for m in manifests.values())
    assert last_finish <= ended  # run returned after its last task, once idle

    listed = setup.supervise("status", "-c", str(setup.profile), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert {
        n: (r["status"], r["exit_code"], r["verdict"], r["retries"]) for n, r in rows.items()
    } == {
        "good": ("completed", 0, "PASS", 0),
        "failing": ("failed", 3, "FAIL", 0),
    }
    for row in rows.values():
        assert 0 <= row["age_s"] < 120 and 0 <= row["since_output_s"] < 120, row
    # Sessions are gone once tasks end.
    assert setup.tmux("list-sessions").returncode != 0 or not setup.tmux("list-sessions").stdout


def test_events_record_every_transition(setup: Setup) -> None:
    setup.write_profile()
    setup.drop("a.toml", setup.task("a", "exit: 0"))
    assert setup.run().returncode == 0
    m = setup.manifests()["a"]
    events = setup.events(m["task_id"])
    assert [e["event"] for e in events] == ["queued", "launched", "completed"]
    assert events[-1]["exit_code"] == 0
    assert all(e["ts"].endswith("Z") for e in events)


def test_prompt_with_shell_metacharacters_arrives_unchanged(setup: Setup, tmp_path: Path) -> None:
    marker = Path(f"/tmp/pwned-{uuid.uuid4().hex}")
    tick = Path(f"/tmp/pwned-tick-{uuid.uuid4().hex}")
    prompt = (
        f"'\"$(touch {marker})\"' and `touch {tick}`\n"
        "newline, $HOME, ${PATH}, \\ backslash, ; && || > /dev/null, {model} {prompt}\n"
        "non-ASCII: ünïcødé 日本語 🚀\ttab\n"
        "exit: 0"
    )
    setup.write_profile()
    # Through {prompt_file} (the profile's default) ...
    setup.drop("meta.toml", setup.task("meta", prompt))
    # ... and through {prompt} as one argv element.
    other = tmp_path / "argv-project"
    profile = setup.write_profile()
    old = '"--prompt-file",\n    "{prompt_file}",'
    text = profile.read_text().replace(old, '"-p",\n    "{prompt}",')
    assert text != profile.read_text()
    setup.profile.write_text(text)
    setup.drop("meta-argv.toml", setup.task("meta-argv", prompt, other))
    assert setup.run().returncode == 0
    manifests = setup.manifests()
    for name, folder in (("meta", setup.project), ("meta-argv", other)):
        assert manifests[name]["status"] == "completed", manifests[name]
        assert (folder / "received_prompt.bin").read_bytes() == prompt.encode("utf-8")
    argv = json.loads((other / "received_argv.json").read_text())
    assert argv[argv.index("-p") + 1] == prompt
    assert not marker.exists() and not tick.exists(), "something ran the prompt"


def test_wrapper_files_and_output_capture(setup: Setup) -> None:
    setup.write_profile()
    setup.drop("cap.toml", setup.task("cap", "color: GREEN-LINE\nprint: plain\nexit: 0"))
    assert setup.run().returncode == 0
    m = setup.manifests()["cap"]
    task_dir = Path(m["tmpdir"])
    # pid is the agent's own PID, not the wrapper's or a shell's.
    assert m["pid"] == int((setup.project / "agent_pid").read_text())
    assert (task_dir / "pid").read_text().strip() == str(m["pid"])
    assert (task_dir / "exit_code").read_text().strip() == "0"
    assert (task_dir / "done").exists()
    log = (task_dir / "output.log").read_text()
    # The very first line the agent printed is captured, and escapes are stripped.
    assert log.splitlines()[0].startswith("fake-agent start session=" + m["session_id"])
    assert "GREEN-LINE" in log and "\x1b" not in log and "\r" not in log
    argv = json.loads((setup.project / "received_argv.json").read_text())
    assert argv[argv.index("--session-id") + 1] == m["session_id"]
    assert argv[argv.index("--model") + 1] == "claude-sonnet-4-6"


def test_max_concurrent_queues_the_rest(setup: Setup) -> None:
    setup.write_profile(max_concurrent=2)
    for index in range(5):
        folder = setup.project / f"p{index}"
        setup.drop(f"t{index}.toml", setup.task(f"t{index}", "sleep: 1\nexit: 0", folder))
    assert setup.run(timeout=90).returncode == 0
    spans = []
    for m in setup.manifests().values():
        assert m["status"] == "completed"
        names = [e["event"] for e in setup.events(m["task_id"])]
        assert names == ["queued", "launched", "completed"], names  # a normal exit: no crash
        events = {e["event"]: ts(e["ts"]) for e in setup.events(m["task_id"])}
        spans.append((events["launched"], events["completed"]))
    for start, _ in spans:
        overlapping = sum(1 for s, e in spans if s <= start < e)
        assert overlapping <= 2, spans
    assert max(s for s, _ in spans) - min(s for s, _ in spans) > 0.9, "some tasks had to wait"


def test_submit_prints_the_id_used_for_the_task(setup: Setup, tmp_path: Path) -> None:
    setup.write_profile()
    task_file = tmp_path / "mytask.toml"
    task_file.write_text('name = "Submitted Task!"\nprompt = "exit: 0"\nproject_dir = "project"\n')
    result = setup.supervise("submit", "-c", str(setup.profile), str(task_file))
    assert result.returncode == 0, result.stderr
    task_id = result.stdout.strip()
    assert task_id.startswith("submitted-task-")
    assert (setup.spool / f"{task_id}.toml").exists()
    assert setup.run().returncode == 0
    manifest = json.loads((setup.state / "tasks" / task_id / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["project_dir"] == str(setup.project)

    shown = setup.supervise("show", "-c", str(setup.profile), task_id)
    assert json.loads(shown.stdout)["task_id"] == task_id
    status = setup.supervise("status", "-c", str(setup.profile), "--json")
    rows = json.loads(status.stdout)
    assert [(r["task_id"], r["status"], r["retries"]) for r in rows] == [(task_id, "completed", 0)]
    assert isinstance(rows[0]["age_s"], float) and rows[0]["since_output_s"] >= 0
    table = setup.supervise("status", "-c", str(setup.profile))
    assert task_id in table.stdout and "completed" in table.stdout

    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nprompt = "y"\nproject_dir = "/does/not/exist"\n')
    refused = setup.supervise("submit", "-c", str(setup.profile), str(bad))
    assert refused.returncode == 1
    assert "project_dir" in refused.stderr and "does not exist" in refused.stderr
    assert not list(setup.spool.glob("*.toml"))


def test_sigterm_leaves_tasks_running_and_restart_adopts_them(setup: Setup) -> None:
    setup.write_profile()
    # It runs until the test releases it, not for a time a loaded engine stop could outlast.
    release = setup.root / "release"
    prompt = f"tick: 0.5\nsleep: 1\nuntil_file: {release}\nexit: 0"
    setup.drop("long.toml", setup.task("long", prompt))
    engine = setup.start(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        manifest = wait_for(lambda: setup.manifests().get("long"), timeout=60)
        wait_for(lambda: setup.manifests()["long"]["status"] == "running", timeout=60)
        engine.send_signal(signal.SIGTERM)
        assert engine.wait(timeout=60) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
    session = manifest["task_id"]
    assert setup.tmux("has-session", "-t", f"={session}").returncode == 0
    assert setup.manifests()["long"]["status"] == "running"

    release.touch()
    assert setup.run(timeout=60).returncode == 0
    m = setup.manifests()["long"]
    assert m["status"] == "completed" and m["exit_code"] == 0
    names = [e["event"] for e in setup.events(m["task_id"])]
    assert names.count("launched") == 1, names
    assert "adopted" in names


def test_deadline_abandons_and_notifier_gets_json(setup: Setup, tmp_path: Path) -> None:
    captured = tmp_path / "notified.json"
    notifier = [
        sys.executable, "-c",
        "import sys, os, json; d = json.load(sys.stdin); d['env_status'] = "
        "os.environ['SUPERVISE_STATUS']; d['argv'] = sys.argv[1:]; "
        f"open({str(captured)!r}, 'w').write(json.dumps(d))",
        "{message}",
    ]  # fmt: skip
    setup.write_profile(deadline=2, notifier=notifier, stale_threshold=60)
    setup.drop("slow.toml", setup.task("slow", "tick: 0.5\nsleep: 60"))
    assert setup.run(timeout=60).returncode == 0
    m = setup.manifests()["slow"]
    assert m["status"] == "abandoned" and m["abandon_reason"] == "deadline"
    # not before the deadline (counted from the start); how late the check lands depends on
    # the machine's load, so no upper bound
    assert ts(m["abandoned_at"]) - ts(m["started_at"]) >= 2 - 0.05
    assert setup.tmux("has-session", "-t", f"={m['task_id']}").returncode != 0
    data = json.loads(captured.read_text())
    assert data["task_id"] == m["task_id"] and data["status"] == "abandoned"
    assert data["reason"] == "deadline" and data["env_status"] == "abandoned"
    assert data["argv"] == [data["message"]] and m["task_id"] in data["message"]
    pid = m["pid"]
    assert pid is None or not Path(f"/proc/{pid}").exists() or _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_bad_spool_file_never_stops_the_engine(setup: Setup) -> None:
    setup.write_profile()
    setup.drop("typo.toml", 'name = "t"\nprompt = "exit: 0"\nprojet_dir = "/tmp"\n')
    setup.spool.mkdir(exist_ok=True)
    (setup.spool / ".binary.tmp").write_bytes(b"\xff\xfe\x00name = 1\n")
    (setup.spool / ".binary.tmp").rename(setup.spool / "binary.toml")
    (setup.spool / "notes.txt").write_text("not a task")
    setup.drop("ok.toml", setup.task("ok", "exit: 0"))
    assert setup.run().returncode == 0
    assert setup.manifests()["ok"]["status"] == "completed"
    error = (setup.spool / "rejected" / "typo.toml.error").read_text()
    assert "projet_dir" in error and "did you mean 'project_dir'" in error
    assert (setup.spool / "rejected" / "binary.toml.error").exists()
    assert (setup.spool / "notes.txt").exists(), "non-task files are left alone"


def test_env_reaches_the_agent(setup: Setup) -> None:
    setup.write_profile(extra={"security": {"task_may_set": ["env", "model"]}})
    value = "a b $(c) 'd'"
    prompt = "printenv: SECRET_VALUE\nprintenv: SUPERVISE_TASK_ID\nexit: 0"
    setup.drop("envy.toml", setup.task("envy", prompt, env={"SECRET_VALUE": value}))
    assert setup.run().returncode == 0
    m = setup.manifests()["envy"]
    assert m["status"] == "completed"
    assert f"SECRET_VALUE={value}" in m["output_tail"]
    assert f"SUPERVISE_TASK_ID={m['task_id']}" in m["output_tail"]
    environ = (Path(m["tmpdir"]) / "launch.json").read_text()
    assert json.loads(environ)["env"]["SECRET_VALUE"] == "a b $(c) 'd'"
    assert oct(os.stat(Path(m["tmpdir"]) / "launch.json").st_mode & 0o777) == "0o600"


def test_second_engine_on_the_same_state_dir_refuses(setup: Setup) -> None:
    setup.write_profile()
    first = setup.start()
    try:
        # its heartbeat is written right after it took the lock
        wait_for(lambda: (setup.state / "engine-stats.json").exists(), timeout=60)
        second = setup.run(timeout=30)
        assert second.returncode == 1
        assert "already owns" in second.stderr and str(setup.state) in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0
    # Once the first is gone the lock is free again.
    assert setup.run(timeout=30).returncode == 0


def test_second_engine_refuses_after_the_lock_file_was_deleted(setup: Setup) -> None:
    """Issue 20: deleting ``state_dir/engine.lock`` (the lock file of earlier versions) let a
    second engine start on the same state dir. The lock is now held on the state dir folder
    itself, which nobody can delete from under the engine: the second refuses in one line."""
    setup.write_profile()
    first = setup.start()
    try:
        wait_for(lambda: (setup.state / "engine-stats.json").exists(), timeout=60)
        for leftover in setup.state.glob("*.lock"):
            leftover.unlink()  # whatever lock file there is, gone
        second = setup.run(timeout=30)
        assert second.returncode == 1, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "already owns" in lines[0] and str(setup.state) in lines[0]
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0


def test_inline_tasks_run_once_per_state_dir(setup: Setup) -> None:
    profile = setup.write_profile()
    text = profile.read_text() + (
        f'\n[[tasks]]\nname = "inline"\nprompt = "exit: 0"\nproject_dir = "{setup.project}"\n'
    )
    profile.write_text(text)
    assert setup.run().returncode == 0
    assert setup.run().returncode == 0
    manifests = list((setup.state / "tasks").glob("*/manifest.json"))
    assert len(manifests) == 1
    assert json.loads(manifests[0].read_text())["status"] == "completed"


def test_task_files_may_not_set_env_or_notifier_by_default(setup: Setup) -> None:
    setup.write_profile()
    setup.drop("e.toml", setup.task("sneaky-env", "exit: 0", env={"PATH": "/tmp/evil"}))
    setup.drop(
        "n.toml", setup.task("sneaky-notify", "exit: 0", monitor={"notifier": ["touch", "/tmp/x"]})
    )
    setup.drop("ok.toml", setup.task("fine", "exit: 0", monitor={"deadline": 60}))
    assert setup.run().returncode == 0
    assert set(setup.manifests()) == {"fine"}
    env_error = (setup.spool / "rejected" / "e.toml.error").read_text()
    assert "key 'env'" in env_error and "task_may_set" in env_error
    notify_error = (setup.spool / "rejected" / "n.toml.error").read_text()
    assert "key 'monitor.notifier'" in notify_error


def test_shared_spool_is_refused_unless_allowed(setup: Setup) -> None:
    setup.write_profile()
    setup.spool.mkdir(mode=0o700)
    os.chmod(setup.spool, 0o777)
    refused = setup.run()
    assert refused.returncode == 1
    assert "writable by others" in refused.stderr and "allow_shared_spool" in refused.stderr
    setup.write_profile(extra={"security": {"allow_shared_spool": True}})
    assert setup.run().returncode == 0
    os.chmod(setup.spool, 0o700)


def test_state_and_spool_are_private(setup: Setup) -> None:
    setup.write_profile()
    assert setup.run().returncode == 0  # creates the folders
    for folder in (setup.state, setup.state / "tasks", setup.spool):
        assert oct(folder.stat().st_mode & 0o777) == "0o700", folder
    setup.drop("a.toml", setup.task("a", "exit: 0"))
    assert setup.run().returncode == 0
    task_dir = Path(setup.manifests()["a"]["tmpdir"])
    assert oct(task_dir.stat().st_mode & 0o777) == "0o700"


def test_a_missing_agent_program_fails_with_reason_launch_and_validate_warns(
    setup: Setup,
) -> None:
    """The agent's program is not on PATH (a typo, or ``claude`` not installed): the task
    ends ``failed`` with ``failure_reason`` ``launch`` and the wrapper's reason, and
    ``supervise validate`` warns on one line naming the key and the fix."""
    profile = setup.write_profile()
    text = profile.read_text().replace(
        f'command = [\n    "{sys.executable}",', 'command = [\n    "no-such-agent-program",', 1
    )
    assert "no-such-agent-program" in text, text
    profile.write_text(text)
    checked = setup.supervise("validate", str(profile))
    assert checked.returncode == 0
    lines = [line for line in checked.stderr.splitlines() if "no-such-agent-program" in line]
    assert len(lines) == 1 and "[agent] command[0]" in lines[0] and "Fix:" in lines[0]
    setup.drop("lost.toml", setup.task("lost", "print: never\nexit: 0"))
    assert setup.run().returncode == 0
    m = setup.manifests()["lost"]
    assert (m["status"], m["verdict"], m["exit_code"]) == ("failed", "FAIL", 127)
    assert m["failure_reason"] == "launch"
    assert "cannot run 'no-such-agent-program'" in m["output_tail"]
