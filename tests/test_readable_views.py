"""Issue 22, item 1: every view shows a Claude Code task's output rendered, never its raw
stream-json: ``supervise tail`` (``--raw`` keeps the raw log), ``tail -f`` on a task that
is still writing, the ``status`` / ``top`` / web board last line, the web page's output
box and the notifier's ``last_lines``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from supervisor.cli import app as cli
from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso

HEADLESS = Path(__file__).parent / "fixtures" / "claude" / "headless"
STREAM = (HEADLESS / "success.jsonl").read_bytes()
RESULT = "result: success · 2 turns · $0.0174 · 0.4 s"
TASK = "hello-1a2b3c"


def make_task(root: Path, output: bytes, status: str = "completed", claude: bool = True) -> Path:
    """A profile and one task folder (no engine): returns the profile path."""
    profile = root / "profile.toml"
    profile.write_text(
        f'[paths]\nspool_dir = "{root / "spool"}"\nstate_dir = "{root / "state"}"\n'
        '[tmux]\nsocket_name = "sv-readable-views"\n[agent]\ncommand = ["true"]\n'
    )
    (root / "spool").mkdir(exist_ok=True)
    folder = root / "state" / "tasks" / TASK
    folder.mkdir(parents=True, exist_ok=True)
    fields = {
        "task_id": TASK,
        "task_name": "hello",
        "status": status,
        "model": "m",
        "project_dir": "/tmp/p",
        "session_name": TASK,
        "session_id": "s",
        "tmpdir": str(folder),
        "created_at": utc_iso(),
        "claude": {"result": "DONE: wrote hello.txt"} if claude else None,
    }
    TaskDir(folder).write_manifest(Manifest.model_validate(fields))
    (folder / "output.log").write_bytes(output)
    return profile


def run_cli(*argv: str) -> tuple[int, str]:
    """``supervise ARGV`` in this process: its exit status and stdout."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue()


def test_tail_renders_and_tail_raw_gives_the_log(tmp_path: Path) -> None:
    profile = make_task(tmp_path, STREAM + b"[supervise] agent exited with code 0\n")
    code, out = run_cli("tail", "-c", str(profile), TASK, "-n", "50")
    assert code == 0
    assert '{"type"' not in out
    assert out.split("\n")[:3] == [
        "init: claude-sonnet-4-6 · session 249cfb55-c70e-422e-877a-e872bac29326",
        "I will write hello.txt.",
        "Write(hello.txt)",
    ]
    assert out.endswith(f"DONE: wrote hello.txt\n{RESULT}\n[supervise] agent exited with code 0\n")
    code, few = run_cli("tail", "-c", str(profile), TASK, "-n", "2")
    assert few == f"{RESULT}\n[supervise] agent exited with code 0\n"
    code, raw = run_cli("tail", "-c", str(profile), TASK, "-n", "3", "--raw")
    assert code == 0 and raw.startswith('{"type":"assistant"') and '"result":"DONE' in raw


def test_tail_of_a_generic_task_is_as_it_is(tmp_path: Path) -> None:
    profile = make_task(tmp_path, b'{"type":"own json"}\nplain \x1b[2J\n', claude=False)
    code, out = run_cli("tail", "-c", str(profile), TASK)
    assert (code, out) == (0, '{"type":"own json"}\nplain \\x1b[2J\n')


@pytest.mark.parametrize("lines", ["0", "-3", "x"])
def test_tail_refuses_a_bad_line_count(tmp_path: Path, lines: str) -> None:
    profile = make_task(tmp_path, STREAM)
    with pytest.raises(SystemExit) as exc:
        run_cli("tail", "-c", str(profile), TASK, "-n", lines)
    assert exc.value.code == 2


def read_until(proc: subprocess.Popen[bytes], wanted: bytes, timeout: float = 20) -> bytes:
    """Read the process's stdout until ``wanted`` appears (or fail at ``timeout``)."""
    assert proc.stdout is not None
    got = b""
    end = time.monotonic() + timeout
    while wanted not in got:
        left = end - time.monotonic()
        assert left > 0, f"no {wanted!r} in {got!r}"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            assert chunk, f"ended without {wanted!r}: {got!r}"
            got += chunk
    return got


def test_tail_follow_renders_lines_as_they_come(tmp_path: Path) -> None:
    lines = STREAM.splitlines(keepends=True)
    profile = make_task(tmp_path, b"".join(lines[:3]), status="running")
    folder = tmp_path / "state" / "tasks" / TASK
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "tail", "-c", str(profile), TASK, "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        seen = read_until(proc, b"session 249cfb55")
        with open(folder / "output.log", "ab") as handle:
            handle.write(lines[3] + lines[4][:40])  # a whole line, half of the next
        seen += read_until(proc, b"I will write hello.txt.\n")
        with open(folder / "output.log", "ab") as handle:
            handle.write(lines[4][40:] + b"".join(lines[5:]))
        seen += read_until(proc, RESULT.encode())
        TaskDir(folder).update_manifest(lambda m: setattr(m, "status", "completed"))
        rest, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    text = (seen + rest).decode()
    assert b'{"type"' not in seen + rest
    assert text.count("I will write hello.txt.") == 1 and "Write(hello.txt)\n" in text


def test_status_and_the_model_show_the_rendered_last_line(tmp_path: Path) -> None:
    profile = make_task(tmp_path, STREAM + b"[supervise] agent exited with code 0\n")
    code, out = run_cli("status", "-c", str(profile))
    assert code == 0 and RESULT in out and '{"' not in out
    code, out = run_cli("status", "-c", str(profile), "--json")
    assert json.loads(out)[0]["last_line"] == RESULT
    from supervisor.views import model

    (task,) = model.Reader(tmp_path / "state", tmp_path / "spool").snapshot().tasks
    assert task.last_line == RESULT  # what `top` shows


def test_the_web_page_shows_the_rendered_output(tmp_path: Path) -> None:
    from supervisor.config import load_profile
    from supervisor.views import webpage
    from supervisor.views.webauth import Access

    profile = make_task(tmp_path, STREAM)
    pages = webpage.Pages(
        load_profile(profile), Access(token=None, allow_actions=False, loopback=True)
    )
    board = pages.index(pages.board())
    assert RESULT in board and "&#34;type&#34;" not in board and '"type"' not in board
    body = pages.task_body(TASK) or ""
    output = body[body.index('<pre id="output">') :]
    output = output[: output.index("</pre>")]
    assert "Write(hello.txt)" in output and RESULT in output and "&#34;type" not in output


def test_the_notifier_gets_rendered_last_lines(tmp_path: Path) -> None:
    from supervisor.engine.notifications import notify_payload

    make_task(tmp_path, b"")
    folder = tmp_path / "state" / "tasks" / TASK
    manifest = TaskDir(folder).read_manifest()
    manifest.output_tail = STREAM.decode()
    payload = notify_payload(manifest, "completed", "done")
    assert payload["last_lines"].split("\n")[-2:] == ["DONE: wrote hello.txt", RESULT]
    assert '{"' not in payload["last_lines"]
    manifest.claude = None  # a generic task: as it is
    manifest.output_tail = "a\nb"
    assert notify_payload(manifest, "completed", "done")["last_lines"] == "a\nb"


def test_the_tail_screen_of_top_renders_and_follows(tmp_path: Path) -> None:
    import asyncio

    from textual.app import App
    from textual.widgets import Log

    from supervisor.views.tui_screens import TailScreen

    lines = STREAM.splitlines(keepends=True)
    make_task(tmp_path, b"".join(lines[:5]), status="running")
    log_path = tmp_path / "state" / "tasks" / TASK / "output.log"

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(TailScreen("tail", log_path))

    async def drive() -> None:
        app = Host()
        async with app.run_test(size=(100, 20)) as pilot:
            await pilot.pause()
            shown = app.screen.query_one(Log)
            assert "Write(hello.txt)" in [str(line) for line in shown.lines]
            with open(log_path, "ab") as handle:
                handle.write(b"".join(lines[5:]))
            for _ in range(200):  # up to 10 s of pauses: a limit on the wait
                if RESULT in [str(line) for line in shown.lines]:
                    break
                await pilot.pause(0.05)
            assert RESULT in [str(line) for line in shown.lines], [str(x) for x in shown.lines]
            assert not any('{"type"' in str(line) for line in shown.lines)

    asyncio.run(drive())


@pytest.mark.parametrize("raw", [False, True])
def test_tail_of_a_fifo_log_returns_at_once(tmp_path: Path, raw: bool) -> None:
    """An ``output.log`` replaced by a FIFO (nobody writing): ``tail`` and ``tail --raw``
    print nothing and exit 0 instead of blocking in ``open``."""
    profile = make_task(tmp_path, b"")
    log = tmp_path / "state" / "tasks" / TASK / "output.log"
    log.unlink()
    os.mkfifo(log)
    argv = [sys.executable, "-m", "supervisor.cli", "tail", "-c", str(profile), TASK]
    done = subprocess.run(argv + ["--raw"] * raw, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


def test_tail_in_a_locale_that_cannot_show_the_rendering(tmp_path: Path) -> None:
    """Under a Latin-1 terminal the rendering's "⎿" and "·" come out as escapes, and the
    command does not die on a UnicodeEncodeError."""
    profile = make_task(tmp_path, STREAM)
    argv = [sys.executable, "-m", "supervisor.cli", "tail", "-c", str(profile), TASK]
    env = {**os.environ, "PYTHONIOENCODING": "latin-1"}
    done = subprocess.run(argv, capture_output=True, timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    assert b"result: success \xb7 2 turns" in done.stdout  # in Latin-1: as it is
    assert b"\\u23bf" in done.stdout and b"Traceback" not in done.stderr
