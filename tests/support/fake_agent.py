"""A fake coding agent for the tests: a real process that behaves like an agent CLI.

Only the agent's "brain" is fake: it takes a prompt (``-p TEXT`` or ``--prompt-file F``), a
``--session-id`` and a ``--model`` like the Claude Code CLI, prints to its terminal, writes
into its working directory and exits. What it does is read from cue lines in the prompt:

    print: TEXT      print TEXT (repeatable)
    printenv: NAME   print NAME=value of an environment variable
    color: TEXT      print TEXT wrapped in ANSI colour escapes
    sleep: S         sleep S seconds (after printing)
    tick: S          while sleeping, print a line every S seconds
    until_file: PATH after the sleep, wait until PATH exists (a line a second; 300 s at
                     most): a test decides when the run ends, whatever the machine's load
    exit: N          exit with code N (default 0)
    crash            kill itself with SIGKILL instead of exiting
    crash_runs: N    on each of its first N runs in this folder: SIGKILL itself at once
    hang_runs: N     on each of its first N runs: print one line, then hang silently
    busy_runs: N     on each of its first N runs: print a line every second until ended
                     (an agent at long work: a host loss, not its own end, stops it)
    ignore_term      ignore SIGTERM (a stubborn agent)
    die_on_signal    die from SIGTERM / SIGHUP (the default action) instead of trapping them
    flood: N [S]     on every run, right after the start line (before crash_runs and
                     hang_runs act): print N bytes in 100-byte lines ``flood NNNNNNNN
                     xxx...`` (64 KiB writes), as fast as the terminal takes them or, with
                     S, spread evenly over S seconds; then ``flood done N bytes``. Appends
                     ``N SECONDS`` (how long the writes took) to ``flood_times``
    as_model: M CUE  the line CUE, put first, when the agent runs with ``--model M``
    stamp: FILE      append ``start EPOCH TASK_DIR`` to FILE at the start and ``end EPOCH
                     TASK_DIR`` at the end (an exit, or a trapped SIGTERM/SIGHUP); a run
                     killed by SIGKILL has no end line (the fleet chaos test)
    spawn_orphan: S  start a child that leaves the agent's process group (setpgid),
                     ignores SIGHUP and SIGTERM and sleeps S seconds, outliving the agent;
                     its PID goes to ``orphan_pid`` before the agent goes on.
                     ``spawn_orphan_noenv: S`` does the same with an empty environment
                     (PID in ``orphan_noenv_pid``); ``spawn_orphan_setsid: S`` leaves the
                     session instead (``setsid``; PID in ``orphan_setsid_pid``)

As Claude Code in ``-p --output-format stream-json`` mode (run as ``fake_agent.py --claude
CLAUDE_ARGV...``, the adapter's argv: the prompt after ``--``):

    stream_tool: NAME S  print an ``assistant`` line with a ``tool_use`` block of NAME, run
                     it S seconds printing only a ``tool_progress`` heartbeat every
                     ``heartbeat:`` seconds (default 30, measured with CLI 2.1.328, see
                     tests/fixtures/claude/tools/), then its ``tool_result`` and a
                     ``result`` line (its ``total_cost_usd``: ``cost: USD``, default 0)

Signals, as the real Claude Code CLI (2.1.328) behaves (measured, see
``/work/shared/notes/real-world-facts.md``): by default it traps SIGTERM and exits 143, and
exits 129 on SIGHUP, through a normal process exit, so its parent sees an exit code, not a
death by signal. ``die_on_signal`` keeps the default actions (the older agent that dies from
the signal); ``ignore_term`` ignores SIGTERM whatever else is set.

Runs are counted in ``fake_runs`` in the working directory (a resume is a new run). With
``--resume ID`` it prints ``resumed session ID``, like a CLI continuing a conversation.

The prompt, as Claude Code 2.1.328 takes it (issue 21): ``-p TEXT``, ``--prompt-file F``,
the argument after ``--``, else stdin when it is not a terminal (``claude -p`` with the prompt
on stdin). With ``--tui`` it plays the TUI's side of a long prompt's paste: on its terminal
(raw mode, bracketed paste on) it shows an input box (a rule line, then ``❯``), takes one
bracketed paste, shows ``[Pasted text #1 +N lines]`` and submits on Enter (tmux sends the
paste's newlines as CR; they are turned back). A ``context_limit`` line in such a prompt
makes it answer as the real TUI does for a prompt over its model's context window: it
shows ``Context limit reached · /compact or /clear to continue`` and waits, with no hook.
An argv string over 128 KiB never reaches it: the kernel refuses the exec with E2BIG, as for
the real CLI (tests/test_prompt_delivery.py).

It always records, in its working directory, ``received_prompt.bin`` (the prompt bytes
exactly as received), ``received_argv.json`` and ``agent_pid`` (its own PID).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


def _as_model(prompt: str, model: str) -> str:
    """The prompt with each ``as_model: MODEL CUE`` line whose MODEL is ``model`` put
    first as the line ``CUE`` (one brain per model: attempts of one task, issue 26)."""
    found = re.findall(r"^as_model: (\S+) (.*)$", prompt, re.MULTILINE)
    chosen = [cue for name, cue in found if name == model]
    return "\n".join([*chosen, prompt])


def cues(prompt: str, key: str) -> list[str]:
    return re.findall(rf"^{key}:[ ]?(.*)$", prompt, re.MULTILINE)


def _flood(total: int, seconds: float = 0.0) -> None:
    """Write ``total`` bytes to stdout in 100-byte lines, 64 KiB per write, spread over
    ``seconds`` (0: as fast as possible); record how long it took in ``flood_times``."""
    lines = (f"flood {i:08d} " + "x" * 84 + "\n" for i in range(total // 100 + 1))
    data = "".join(lines)[:total].encode()
    out = sys.stdout.buffer
    chunk = 65536
    began = time.monotonic()
    for start in range(0, len(data), chunk):
        if seconds:
            time.sleep(max(0.0, began + seconds * start / len(data) - time.monotonic()))
        out.write(data[start : start + chunk])
        out.flush()
    took = time.monotonic() - began
    with open("flood_times", "a", encoding="utf-8") as handle:
        handle.write(f"{total} {took:.6f}\n")
    print(f"\nflood done {total} bytes", flush=True)


ORPHAN = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "os.setsid() if sys.argv[3] == 'setsid' else os.setpgid(0, 0)\n"
    "open(sys.argv[2] + '.tmp', 'w').write(str(os.getpid()))\n"
    "os.rename(sys.argv[2] + '.tmp', sys.argv[2])\n"
    "time.sleep(float(sys.argv[1]))\n"
)


def _spawn_orphan(
    seconds: str, pid_file: str, env: dict[str, str] | None, how: str = "setpgid"
) -> None:
    """Start an orphan-to-be (see ``spawn_orphan`` above) and wait for its PID file."""
    subprocess.Popen(
        [sys.executable, "-c", ORPHAN, seconds, os.path.abspath(pid_file), how], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    end = time.time() + 10
    while not os.path.exists(pid_file) and time.time() < end:
        time.sleep(0.01)


#: The ``stamp:`` cue's file, once set (the signal handler writes the end line too).
STAMP: list[str] = []


def _stamp(what: str) -> None:
    """Append ``WHAT EPOCH TASK_DIR`` to the ``stamp:`` file (one write: whole lines)."""
    line = f"{what} {time.time():.6f} {os.environ.get('SUPERVISE_TASK_DIR', '?')}\n"
    for path in STAMP:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line)


def _exit_like_claude(signum: int, _frame: object) -> None:
    """Exit 128 + ``signum`` as a normal exit, as Claude Code does on SIGTERM and SIGHUP."""
    code = 128 + signum
    with contextlib.suppress(OSError):
        _stamp("end")
    with contextlib.suppress(OSError):
        os.write(1, f"fake-agent got signal {signum}, exit {code}\n".encode())
    os._exit(code)


def _set_signals(prompt: str) -> None:
    """Trap SIGTERM/SIGHUP like the real CLI, or keep the default actions (``die_on_signal``);
    ``ignore_term`` then ignores SIGTERM."""
    if not re.search(r"^die_on_signal$", prompt, re.MULTILINE):
        signal.signal(signal.SIGTERM, _exit_like_claude)
        signal.signal(signal.SIGHUP, _exit_like_claude)
    if re.search(r"^ignore_term$", prompt, re.MULTILINE):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _stream(obj: dict[str, object]) -> None:
    print(json.dumps(obj), flush=True)


def _stream_tool(prompt: str, session: str) -> None:
    """The ``stream_tool:`` cue (see the module docstring)."""
    for cue in cues(prompt, "stream_tool"):
        name, seconds = cue.split()[0], float(cue.split()[1])
        beat = float((cues(prompt, "heartbeat") or ["30"])[0])
        call = "toolu_fake000001"
        block = {"type": "tool_use", "id": call, "name": name, "input": {}}
        _stream({"type": "assistant", "message": {"content": [block]}, "session_id": session})
        began = time.monotonic()
        for n in range(int(seconds // beat)):
            time.sleep(max(0.0, began + (n + 1) * beat - time.monotonic()))
            beat_line = {"type": "tool_progress", "tool_use_id": f"{call}-heartbeat-{n}"}
            beat_line.update(tool_name=name, parent_tool_use_id=call, heartbeat=True)
            _stream({**beat_line, "elapsed_time_seconds": int((n + 1) * beat)})
        time.sleep(max(0.0, began + seconds - time.monotonic()))
        result = {"type": "tool_result", "tool_use_id": call, "content": "ok", "is_error": False}
        _stream({"type": "user", "message": {"content": [result]}, "session_id": session})
        end = {"type": "result", "subtype": "success", "is_error": False, "result": "done"}
        cost = float((cues(prompt, "cost") or ["0"])[0])
        _stream({**end, "session_id": session, "num_turns": 2, "total_cost_usd": cost})


def _claude_argv(argv: list[str]) -> list[str]:
    """Claude Code's argv (``-p`` is a mode flag; the prompt follows ``--``, or comes on
    stdin) as this fake's own options."""
    cut = argv.index("--") if "--" in argv else len(argv)
    own = [a for a in argv[:cut] if a not in ("-p", "--verbose")]
    return [*own, "-p", " ".join(argv[cut + 1 :])] if cut < len(argv) else own


def _tui_paste() -> bytes:
    """``--tui``: the input box, one bracketed paste, then Enter (see the module docstring)."""
    import termios
    import tty

    saved = termios.tcgetattr(0)
    tty.setraw(0)
    try:
        os.write(1, b"\x1b[?2004h\r\n" + ("─" * 40).encode() + "\r\n❯ \r\n".encode())
        data = b""
        while b"\x1b[201~" not in data:
            data += os.read(0, 65536)
        body = data.split(b"\x1b[200~", 1)[-1].split(b"\x1b[201~", 1)[0]
        lines = body.count(b"\r")
        os.write(1, f"\x1b[?2004l\r\n❯ [Pasted text #1 +{lines} lines]\r\n".encode())
        rest = data.split(b"\x1b[201~", 1)[1]
        while b"\r" not in rest:
            rest += os.read(0, 1024)
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
    return body.replace(b"\r", b"\n")


def _prompt(args: argparse.Namespace, rest: list[str]) -> bytes:
    """The prompt's bytes from wherever this run was given it (the module docstring)."""
    if args.prompt_file:
        return Path(args.prompt_file).read_bytes()
    if args.prompt is not None:
        return os.fsencode(args.prompt)
    if "--" in rest and rest.index("--") + 1 < len(rest):
        return os.fsencode(rest[rest.index("--") + 1])
    if args.tui:
        return _tui_paste()
    return b"" if sys.stdin.isatty() else sys.stdin.buffer.read()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-p", dest="prompt")
    parser.add_argument("--prompt-file")
    parser.add_argument("--session-id", default="")
    parser.add_argument("--model", default="")
    parser.add_argument("--resume", default="")
    parser.add_argument("--tui", action="store_true")
    argv = sys.argv[1:]
    if argv[:1] == ["--claude"]:
        argv = _claude_argv(argv[1:])
    args, rest = parser.parse_known_args(argv)
    raw = _prompt(args, rest)
    Path("received_prompt.bin").write_bytes(raw)
    Path("received_argv.json").write_text(json.dumps(sys.argv[1:]), encoding="utf-8")
    Path("agent_pid").write_text(str(os.getpid()), encoding="utf-8")
    prompt = _as_model(raw.decode("utf-8", errors="replace"), args.model)
    if args.tui and re.search(r"^context_limit$", prompt, re.MULTILINE):
        print("  ⎿  Context limit reached · /compact or /clear to continue", flush=True)
        time.sleep(3600)
    runs_file = Path("fake_runs")
    run = int(runs_file.read_text() or 0) + 1 if runs_file.exists() else 1
    runs_file.write_text(str(run))
    _set_signals(prompt)
    STAMP.extend(cues(prompt, "stamp"))
    _stamp("start")
    session = args.resume or args.session_id
    print(f"fake-agent start session={session} model={args.model} run={run}", flush=True)
    if args.resume:
        print(f"resumed session {args.resume}", flush=True)
    flood = (cues(prompt, "flood") or ["0"])[0].split() or ["0"]
    if int(flood[0]):
        _flood(int(flood[0]), float(flood[1]) if len(flood) > 1 else 0.0)
    if run <= int((cues(prompt, "crash_runs") or ["0"])[0]):
        os.kill(os.getpid(), signal.SIGKILL)
    if run <= int((cues(prompt, "busy_runs") or ["0"])[0]):
        while True:
            print("working...", flush=True)
            time.sleep(1)
    if run <= int((cues(prompt, "hang_runs") or ["0"])[0]):
        print("thinking very hard...", flush=True)
        while True:
            time.sleep(3600)
    for seconds in cues(prompt, "spawn_orphan"):
        _spawn_orphan(seconds, "orphan_pid", None)
    for seconds in cues(prompt, "spawn_orphan_noenv"):
        _spawn_orphan(seconds, "orphan_noenv_pid", {})
    for seconds in cues(prompt, "spawn_orphan_setsid"):
        _spawn_orphan(seconds, "orphan_setsid_pid", None, "setsid")
    for text in cues(prompt, "color"):
        print(f"\x1b[1;32m{text}\x1b[0m", flush=True)
    for text in cues(prompt, "print"):
        print(text, flush=True)
    _stream_tool(prompt, session)
    for name in cues(prompt, "printenv"):
        print(f"{name}={os.environ.get(name, '<unset>')}", flush=True)
    delay = float((cues(prompt, "sleep") or ["0"])[0])
    tick = float((cues(prompt, "tick") or ["0"])[0])
    end = time.monotonic() + delay  # a step of the wall clock must not stretch the sleep
    while time.monotonic() < end:
        step = min(tick or delay, end - time.monotonic())
        time.sleep(max(step, 0))
        if tick:
            print(f"tick {time.time():.1f}", flush=True)
    for path in cues(prompt, "until_file"):
        give_up = time.monotonic() + 300
        while not os.path.exists(path) and time.monotonic() < give_up:
            print(f"waiting for {path}", flush=True)
            time.sleep(1)
    if re.search(r"^crash$", prompt, re.MULTILINE):
        os.kill(os.getpid(), signal.SIGKILL)
    code = int((cues(prompt, "exit") or ["0"])[0])
    print(f"fake-agent done, exit {code}", flush=True)
    _stamp("end")
    return code


if __name__ == "__main__":
    sys.exit(main())
