"""Issue 21, Build 2: a prompt of any documented size (10 MiB) reaches its agent, and one that
cannot is refused up front or named as the cause of the failed launch.

Linux caps one argv or environment string at 128 KiB (``MAX_ARG_STRLEN``): the kernel's
``execve`` fails with ``E2BIG`` ("Argument list too long"). These tests use the real kernel,
real tmux panes, the real wrapper and the fake agent (tests/support/fake_agent.py), which takes its
prompt as Claude Code 2.1.328 does (stdin for ``-p``, a bracketed paste in ``--tui`` mode).
The real CLI's side is in tests/test_prompt_e2e.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAKE_AGENT, Setup
from hypothesis import given
from hypothesis import strategies as st
from support.prompt_claude import _claude

from supervisor import policy
from supervisor.agents.claude import delivery
from supervisor.config import MonitorPolicy
from supervisor.config.argsize import ARGV_PROMPT_MAX
from supervisor.engine import signals
from supervisor.taskdir.folder import TaskDir
from supervisor.wrapper import ARG_STRLEN_MAX

WRAPPER = Path(__file__).resolve().parents[1] / "supervisor" / "wrapper.py"
SCREENS = Path(__file__).parent / "fixtures" / "claude" / "screens"
#: A prompt well over the kernel's per-string cap (the issue's 300 KB case).
BIG = 300_000


def big_prompt(head: str = "print: got the big prompt") -> str:
    body = "".join(
        f"line {i:06d} of a long task description, padding it out\n" for i in range(6000)
    )
    return (head + "\n" + body)[: BIG - 12] + "\nEND-OF-IT\n"


# ---------------------------------------------------------------- the adapter's choice


def test_headless_claude_reads_its_prompt_from_stdin_never_argv(tmp_path: Path) -> None:
    """``-p`` reads the prompt from stdin (measured with CLI 2.1.328): the first run has no
    prompt in argv whatever its size, and gets the task's ``prompt`` file as stdin."""
    adapter = _claude(tmp_path, big_prompt())
    first = adapter.launch(resume=False)
    assert "{prompt}" not in first.argv and "--" not in first.argv
    assert first.stdin == str(tmp_path / "task" / "prompt") and first.paste is None
    again = adapter.launch(resume=True)
    assert again.argv[-2:] == ["--", "continue the task"] and again.stdin is None


def test_interactive_claude_pastes_a_prompt_too_long_for_argv(tmp_path: Path) -> None:
    """The TUI keeps a prompt up to ARGV_PROMPT_MAX bytes as its argument; a longer one is
    pasted by the wrapper once the input box shows, never put in argv."""
    short = _claude(tmp_path, "x" * ARGV_PROMPT_MAX, mode="interactive").launch(resume=False)
    assert short.argv[-2:] == ["--", "{prompt}"] and short.paste is None and short.stdin is None
    # one byte more (a 2-byte character at the end): pasted
    long = _claude(tmp_path, "x" * (ARGV_PROMPT_MAX - 1) + "é", mode="interactive")
    part = long.launch(resume=False)
    assert "{prompt}" not in part.argv and part.stdin is None
    assert part.paste is not None and part.paste["path"] == str(
        tmp_path / "task" / delivery.PASTE_FILE
    )
    assert ARGV_PROMPT_MAX < ARG_STRLEN_MAX // 2 + 1


def test_ready_pattern_matches_the_real_input_box_and_no_dialog() -> None:
    """The wrapper pastes only into the empty input box (real screens of CLI 2.1.328, see
    the fixtures' README), never into a permission dialog whose cursor is also ``❯``."""
    ready = re.compile(delivery.READY, re.MULTILINE)
    pasted = re.compile(delivery.PASTED)
    assert ready.search((SCREENS / "prompt_ready.txt").read_text("utf-8"))
    assert pasted.search((SCREENS / "prompt_pasted.txt").read_text("utf-8"))
    assert not pasted.search((SCREENS / "prompt_ready.txt").read_text("utf-8"))
    for name in ("permission_bash", "permission_write_create", "permission_edit"):
        assert not ready.search((SCREENS / f"{name}.txt").read_text("utf-8")), name
    refused = re.compile(delivery.REFUSED, re.MULTILINE)
    assert refused.search((SCREENS / "context_limit_reached.txt").read_text("utf-8"))
    for name in ("prompt_pasted", "idle_after_turn", "working_streaming_a"):
        assert not refused.search((SCREENS / f"{name}.txt").read_text("utf-8")), name


# ---------------------------------------------------------------- validate and submit


def _generic_profile(setup: Setup, token: str) -> Path:
    setup.write_profile(
        extra={"agent": {"command": [sys.executable, str(FAKE_AGENT), "-p", token]}}
    )
    return setup.profile


@pytest.mark.parametrize("verb", ["validate", "submit"])
def test_a_prompt_the_generic_argv_cannot_carry_is_refused_in_one_line(
    setup: Setup, verb: str
) -> None:
    """``{prompt}`` in a generic argv with a 300 KB prompt_file: ``validate`` and ``submit``
    refuse it in one line naming the task file, the key and the fix; nothing is spooled.
    ``{prompt_file}`` carries the same prompt."""
    profile = _generic_profile(setup, "{prompt}")
    prompt = setup.root / "prompt.md"
    prompt.write_text(big_prompt(), encoding="utf-8")
    task = setup.root / "task.toml"
    task.write_text(
        f'name = "big"\nprompt_file = "{prompt}"\nproject_dir = "{setup.project}"\n', "utf-8"
    )
    args = ["validate", "-c", str(profile), str(task)] if verb == "validate" else [
        "submit", "-c", str(profile), str(task)]  # fmt: skip
    done = setup.supervise(*args)
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{task}:2: key 'prompt_file'" in lines[0], lines
    assert "{prompt_file}" in lines[0] and "E2BIG" in lines[0], lines
    assert not list(setup.spool.glob("*.toml")) if setup.spool.exists() else True
    profile = _generic_profile(setup, "{prompt_file}")
    again = setup.supervise("validate", "-c", str(profile), str(task))
    assert again.returncode == 0, again.stderr


# ---------------------------------------------------------------- the wrapper


def _run_wrapper(folder: Path, launch: dict, timeout: float = 30) -> int:
    folder.mkdir(exist_ok=True)
    (folder / "launch.json").write_text(json.dumps(launch), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(WRAPPER), str(folder)],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False,
    )  # fmt: skip
    return done.returncode


def test_an_exec_refused_with_e2big_names_its_cause(tmp_path: Path) -> None:
    """The kernel refuses a 300 KB argv element: the wrapper records ``launch_error`` with
    the cause (which element, its size, the cap), exits 127 and writes ``done``; the
    policy's reason, so the manifest's summary, carries it."""
    folder = tmp_path / "task"
    argv = [sys.executable, str(FAKE_AGENT), "-p", big_prompt()]
    launch = {"argv": argv, "env": {}, "cwd": str(tmp_path), "resume_exit_codes": []}
    assert _run_wrapper(folder, launch) == 127
    text = (folder / "launch_error").read_text("utf-8")
    assert "prompt too long for argv (E2BIG): argv[3] is" in text, text
    assert str(ARG_STRLEN_MAX) in text and (folder / "done").exists()
    seen = signals.observe(TaskDir(folder))
    assert seen.failure == "launch" and "prompt too long for argv (E2BIG)" in seen.launch_error
    state = policy.TaskState(status="running", started_at=0.0, launched_at=0.0)
    decided = policy.decide(state, seen, MonitorPolicy(deadline=1e6))
    assert decided.state.failure_reason == "launch" and decided.state.retry_count == 0
    assert "prompt too long for argv (E2BIG)" in decided.reason


def test_the_wrapper_feeds_the_prompt_file_to_stdin(tmp_path: Path) -> None:
    """``launch.json`` ``stdin``: the agent reads a 300 KB prompt from stdin, byte for byte,
    and the argv holds none of it."""
    folder = tmp_path / "task"
    folder.mkdir()
    prompt = big_prompt()
    (folder / "prompt").write_text(prompt, encoding="utf-8")
    launch = {"argv": [sys.executable, str(FAKE_AGENT)], "env": {}, "cwd": str(tmp_path),
              "resume_exit_codes": [], "stdin": str(folder / "prompt")}  # fmt: skip
    assert _run_wrapper(folder, launch) == 0
    assert (tmp_path / "received_prompt.bin").read_bytes() == prompt.encode()


@given(st.text(min_size=1, max_size=200).filter(lambda t: t.strip()))
def test_any_launch_error_ends_failed_launch_with_its_words(text: str) -> None:
    """Pure policy: whatever the wrapper wrote, a 127 with a launch error ends the run
    ``failed``/``launch`` without a retry, and the reason quotes it."""
    seen = policy.Signals(now=10.0, done=True, exit_code=127, failure="launch",
                          launch_error=text)  # fmt: skip
    state = policy.TaskState(status="running", started_at=0.0, launched_at=0.0)
    decided = policy.decide(state, seen, MonitorPolicy(deadline=1e6))
    assert (decided.state.status, decided.state.failure_reason) == ("failed", "launch")
    assert text in decided.reason and decided.state.retry_count == 0


# ---------------------------------------------------------------- live, with the engine


def test_engine_e2big_launch_is_failed_with_its_cause_in_the_summary(setup: Setup) -> None:
    """A prompt that slips past the up-front check (its bound lifted in the engine, as
    for a task claimed under another profile) meets the kernel's real E2BIG: the task
    ends ``failed``/``launch``, retry_count 0, and the summary names the cause."""
    _generic_profile(setup, "{prompt}")
    setup.drop("big.toml", setup.task("big", big_prompt()))
    done = _run_patched(setup, "supervisor.config.argsize", "ARGV_PROMPT_MAX", 1 << 30)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()["big"]
    assert (m["status"], m["failure_reason"], m["retry_count"]) == ("failed", "launch", 0), m
    assert m["exit_code"] == 127 and "prompt too long for argv (E2BIG)" in m["summary"], m


def _run_patched(
    setup: Setup, module: str, name: str, value: object
) -> subprocess.CompletedProcess:
    """``supervise run --exit-when-idle`` with ``module.name`` set to ``value`` first."""
    code = (
        f"import sys; import {module} as m; m.{name} = {value!r}; "
        "from supervisor.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "run", str(setup.profile), "--exit-when-idle"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _tui_shim(root: Path) -> Path:
    """A ``claude`` binary that is the fake agent's TUI (``--tui``)."""
    shim = root / "fake-claude"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_AGENT}" --tui "$@"\n', "utf-8")
    shim.chmod(0o755)
    return shim


def test_interactive_long_prompts_are_pasted_whole_and_inert_into_two_tuis(setup: Setup) -> None:
    """Interactive mode, two 300 KB prompts at once (fake TUI, real tmux): the wrapper waits
    for each TUI's input box, pastes its prompt file as one bracketed paste and presses
    Enter; each agent gets its own prompt, both complete with no retry, and no argv element
    holds a prompt. Found by attack (hostile values): tmux 3.3a pastes the text as it is,
    so a prompt holding ``ESC [201~`` ended the paste early and its next characters were
    keystrokes (Ctrl-C, Shift-Tab cycles the permission mode, CR submits); a pasted prompt's
    controls (but tab and newline) now arrive as visible escapes."""
    shim = str(_tui_shim(setup.root))
    setup.write_profile(extra={"agent": {"kind": "claude", "mode": "interactive", "binary": shim}})
    plain = big_prompt()
    hostile = "print: hostile\n\x1b[201~\x03\x1b[Z\r/exit\r\n" + big_prompt("print: x")
    setup.drop("plain.toml", setup.task("plain", plain, setup.root / "one"))
    setup.drop("hostile.toml", setup.task("hostile", hostile, setup.root / "two"))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    for name in ("plain", "hostile"):
        m = setup.manifests()[name]
        assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), m
        launch = json.loads((Path(m["tmpdir"]) / "launch.json").read_text("utf-8"))
        assert max(len(a.encode()) for a in launch["argv"]) < ARGV_PROMPT_MAX
    assert (setup.root / "one" / "received_prompt.bin").read_bytes() == plain.encode()
    got = (setup.root / "two" / "received_prompt.bin").read_bytes()
    assert got == delivery.inert(hostile).encode()
    assert got.startswith(b"print: hostile\n\\x1b[201~\\x03\\x1b[Z\\x0d/exit\\x0d\n")


def test_a_tui_that_never_shows_its_input_box_is_not_launched(setup: Setup) -> None:
    """The paste waits for the input box at most its timeout (2 s here): an agent that
    never shows one is stopped, and the task ends ``failed``/``launch`` with the reason,
    not idle until staleness resumes it without its prompt."""
    shim = setup.root / "mute-claude"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "import time; time.sleep(60)"\n')
    shim.chmod(0o755)
    setup.write_profile(extra={"agent": {"kind": "claude", "mode": "interactive",
                                         "binary": str(shim)}})  # fmt: skip
    setup.drop("mute.toml", setup.task("mute", big_prompt()))
    done = _run_patched(setup, "supervisor.agents.claude.delivery", "PASTE_TIMEOUT", 2.0)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()["mute"]
    assert (m["status"], m["failure_reason"], m["retry_count"]) == ("failed", "launch", 0), m
    assert m["exit_code"] == 127 and "could not be pasted" in m["summary"], m


# ---------------------------------------------------------------- environment strings


def test_a_task_env_value_too_long_for_exec_is_refused(setup: Setup) -> None:
    """32768 four-byte characters are within the 32768-character bound of a task's env
    value, but ``KEY=VALUE`` is then over the kernel's 128 KiB per string (E2BIG at every
    launch): ``validate`` refuses it in one line naming the file, the key and the fix."""
    setup.write_profile(extra={"security": {"task_may_set": ["env"]}})
    task = setup.root / "task.toml"
    value = "\U0001f600" * 32768
    task.write_text(
        f'name = "env"\nprompt = "exit: 0"\nproject_dir = "{setup.project}"\n'
        f'[env]\nBIG = "{value}"\n',
        encoding="utf-8",
    )
    done = setup.supervise("validate", "-c", str(setup.profile), str(task))
    assert done.returncode == 1, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{task}:5: key 'env.BIG'" in lines[0], lines
    assert str(ARG_STRLEN_MAX) in lines[0] and "shorten" in lines[0], lines


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("env", {"BIG": "x" * ARG_STRLEN_MAX}),
        ("extra_args", ["--append-system-prompt", "x" * ARG_STRLEN_MAX]),
        ("resume_prompt", "continue " * (ARGV_PROMPT_MAX // 8)),
    ],
)
def test_a_profile_string_too_long_for_exec_is_refused(
    setup: Setup, key: str, value: object
) -> None:
    """A profile's ``[agent]`` string that would make every launch (or resume) fail with
    E2BIG is refused when the profile is loaded, in one line naming the key."""
    setup.write_profile(extra={"agent": {"kind": "claude", key: value}})
    done = setup.supervise("validate", str(setup.profile))
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr and f"agent.{key}" in done.stderr, done.stderr
    assert "E2BIG" in done.stderr, done.stderr


def test_an_error_line_never_echoes_a_huge_value_whole(setup: Setup) -> None:
    """Found by attack (huge inputs): a refused 80 KB value was echoed whole into its
    error line (``(got '...')``); the line keeps a short, escaped head of it."""
    setup.write_profile(extra={"agent": {"kind": "claude", "resume_prompt": "go on " * 15000}})
    done = setup.supervise("validate", str(setup.profile))
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert "agent.resume_prompt" in line and len(line) < 1000, len(line)


def test_a_nul_in_a_prompt_bound_for_argv_is_refused_and_never_a_traceback(
    setup: Setup, tmp_path: Path
) -> None:
    """Found by attack (NUL): a prompt holding NUL was accepted for a generic ``{prompt}``
    argv; ``execve`` cannot take it, the wrapper's child died in a traceback and the task
    ended ``failed`` with exit 1 and no reason. Now ``validate`` refuses it in one line,
    and a wrapper given such an argv records a launch error (exit 127)."""
    profile = _generic_profile(setup, "{prompt}")
    task = setup.root / "nul.toml"
    task.write_text(f'name = "n"\nprompt = "a\\u0000b"\nproject_dir = "{setup.project}"\n')
    done = setup.supervise("validate", "-c", str(profile), str(task))
    assert done.returncode == 1, done.stdout
    [line] = done.stderr.strip().splitlines()
    assert f"{task}:2: key 'prompt'" in line and "NUL" in line, line
    folder = tmp_path / "w"
    launch = {"argv": ["/bin/echo", "a\0b"], "env": {}, "cwd": str(tmp_path),
              "resume_exit_codes": []}  # fmt: skip
    assert _run_wrapper(folder, launch) == 127
    assert "NUL" in (folder / "launch_error").read_text("utf-8")


def test_a_pasted_prompt_over_the_context_window_ends_failed_at_once(setup: Setup) -> None:
    """Measured with CLI 2.1.328 (sonnet-4-6, a 200k-token window): the TUI answers a
    prompt over its model's context window with ``Context limit reached`` and waits, with no
    Stop or StopFailure hook, so the task sat idle until staleness resumed it into the same
    wall. The wrapper sees the refusal on screen: the task ends ``failed``/``launch`` with
    the cause in its summary, without a retry (fake TUI here; tests/test_prompt_e2e.py has
    the real one)."""
    shim = str(_tui_shim(setup.root))
    setup.write_profile(extra={"agent": {"kind": "claude", "mode": "interactive", "binary": shim}})
    setup.drop("ctx.toml", setup.task("ctx", "context_limit\n" + big_prompt()))
    done = setup.run(timeout=90)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()["ctx"]
    assert (m["status"], m["failure_reason"], m["retry_count"]) == ("failed", "launch", 0), m
    assert "context window" in m["summary"], m


def test_a_task_env_too_big_in_total_for_exec_is_refused(setup: Setup, tmp_path: Path) -> None:
    """Found by attack (thousands of items): 200 env values of 20 KB each pass every
    per-string bound, but 4 MB of environment is over what ``execve`` takes in total (a
    quarter of the stack limit: 2 MiB at the usual 8 MiB), so every launch failed with E2BIG.
    ``validate`` refuses it in one line; a wrapper meeting such an exec names the total."""
    setup.write_profile(extra={"security": {"task_may_set": ["env"]}})
    task = setup.root / "task.toml"
    env = "".join(f'V{i} = "{"x" * 20000}"\n' for i in range(200))
    task.write_text(
        f'name = "env"\nprompt = "exit: 0"\nproject_dir = "{setup.project}"\n[env]\n{env}',
        encoding="utf-8",
    )
    done = setup.supervise("validate", "-c", str(setup.profile), str(task))
    assert done.returncode == 1, done.stdout
    [line] = done.stderr.strip().splitlines()
    assert f"{task}:4: key 'env'" in line and "in total" in line, line
    folder = tmp_path / "w"
    launch = {"argv": ["/bin/true"], "env": {f"V{i}": "x" * 20000 for i in range(200)},
              "cwd": str(tmp_path), "resume_exit_codes": []}  # fmt: skip
    assert _run_wrapper(folder, launch) == 127
    assert "argv and environment total" in (folder / "launch_error").read_text("utf-8")
