"""What ``supervise`` prints to an operator shows control characters escaped, never raw.

The CLI runs as a real process on a task whose name (from its task file) and output hold
terminal escapes; a raw ESC or C1 control on the operator's terminal could set the window
title or write the clipboard (OSC 52).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import tempfile
import unicodedata
from pathlib import Path

from conftest import Setup
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.engine import notify
from supervisor.terminal import ControlEscapingFormatter, escape_controls, escape_json_text

#: A task name no operator should see raw: a title OSC, a CSI, a C1 CSI and a newline.
EVIL_NAME = "evil\x1b]0;pwned\x07-\x1b[2J-\u009b31m-\nforged"
RAW = ("\x1b", "\x07", "\u009b", "\x9b")


def assert_no_raw_controls(text: str, where: str) -> None:
    for ch in RAW:
        assert ch not in text, f"{where} printed {ch!r} raw: {text!r}"


def _control(ch: str) -> bool:
    """A character no view may print raw: Cc, Cf (bidi, zero-width), Cs, Zl and Zp."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")


#: Bidi overrides and isolates, zero-width characters and the BOM (Unicode category Cf):
#: they reorder or hide text on a terminal ("Trojan Source", CVE-2021-42574).
FORMAT_CHARS = (
    "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\u200c\u200d"
    "\u200e\u200f\u2060\ufeff\u00ad\u061c\U000e0001\u2028\u2029"
)
#: Hostile text for the views: controls and format characters among ordinary ones.
HOSTILE = st.text(st.sampled_from(FORMAT_CHARS + "\x1b\x07\x9b\x85\r\t\nab<&"), max_size=40)


@given(st.text(st.characters(), max_size=300))
def test_escape_controls_leaves_no_control_and_is_idempotent(text: str) -> None:
    out = escape_controls(text)
    assert not [ch for ch in out if _control(ch)]
    assert escape_controls(out) == out
    if not any(_control(ch) for ch in text):
        assert out == text


@given(st.text(st.characters(), max_size=300))
def test_escape_controls_keeps_only_what_is_asked(text: str) -> None:
    out = escape_controls(text, keep="\n\t")
    assert [ch for ch in out if _control(ch)] == [ch for ch in text if ch in "\n\t"]


@given(st.characters().filter(_control))
def test_each_control_has_its_visible_form(ch: str) -> None:
    code = ord(ch)
    if code < 0x80:
        expected = f"\\x{code:02x}"
    else:
        expected = f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    assert escape_controls(f"a{ch}b") == f"a{expected}b"


def test_every_format_character_of_this_python_is_escaped() -> None:
    """The hard-coded ranges in supervisor/terminal.py cover Unicode's Cf set as this
    Python's unicodedata knows it (a newer Unicode adds to it: this test says so)."""
    wanted = (chr(c) for c in range(0x110000))
    missed = [f"U+{ord(ch):04X}" for ch in wanted if _control(ch) and escape_controls(ch) == ch]
    assert not missed


def test_a_lone_surrogate_is_escaped() -> None:
    """A byte that was not UTF-8, decoded with surrogateescape, would print as that raw
    byte (0x9b is CSI on an 8-bit terminal)."""
    raw = b"a\x9bb".decode("utf-8", "surrogateescape")
    assert escape_controls(raw) == "a\\udc9bb"


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(st.characters()),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
))  # fmt: skip
def test_escape_json_text_keeps_json_equal(value: object) -> None:
    for text in (json.dumps(value, ensure_ascii=False), json.dumps(value, indent=2)):
        out = escape_json_text(text)
        assert json.loads(out) == value
        assert not [ch for ch in out if _control(ch) and ch not in "\n"]


def test_log_formatter_escapes_the_message_and_keeps_traceback_lines() -> None:
    formatter = ControlEscapingFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "queued %s (%s)", ("x", EVIL_NAME),
                               None)  # fmt: skip
    line = formatter.format(record)
    assert "\n" not in line and "\\x1b]0;pwned\\x07" in line and "\\u009b31m" in line
    try:
        raise OSError(f"cannot open {EVIL_NAME}")
    except OSError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "boom", (), sys.exc_info())
    text = formatter.format(record)
    assert text.count("\n") >= 3 and "Traceback" in text  # the traceback keeps its lines
    assert_no_raw_controls(text, "the log formatter")


def test_notifier_message_and_fields_are_escaped(tmp_path: Path) -> None:
    out = tmp_path / "notified.json"
    script = (
        "import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': os.environ"
        "['SUPERVISE_TASK_NAME'], 'stdin': json.load(sys.stdin)}, open(sys.argv[1], 'w'))"
    )
    argv = [sys.executable, "-c", script, str(out), "{message}", "{task_name}", "{last_lines}"]
    event = {"task_id": "evil-1a2b3c", "task_name": EVIL_NAME, "status": "failed",
             "reason": "agent said \x1b]52;c;eA==\x07", "exit_code": 3,
             "last_lines": "line 1\n\x1b[31mred\x1b[0m\tx"}  # fmt: skip
    assert notify.run_notifier(argv, event, timeout=30) == 0
    got = json.loads(out.read_text())
    message, name, last = got["argv"][1:]
    assert message == "supervise: task evil-1a2b3c failed (exit 3): agent said \\x1b]52;c;eA==\\x07"
    assert name == got["env"] == escape_controls(EVIL_NAME)
    assert last == "line 1\n\\x1b[31mred\\x1b[0m\tx"
    assert got["stdin"]["task_name"] == EVIL_NAME  # the JSON on stdin stays exact


def test_status_show_tail_and_engine_log_print_controls_escaped(setup: Setup) -> None:
    setup.write_profile()
    setup.drop("evil.toml", setup.task(EVIL_NAME, "print: hello\nexit: 0"))
    run = setup.run()
    assert run.returncode == 0, run.stderr[-2000:]
    # The engine log names the task: escaped, on one line.
    assert_no_raw_controls(run.stderr, "the engine log")
    assert "\\x1b]0;pwned\\x07-\\x1b[2J-\\u009b31m-\\x0aforged" in run.stderr
    (m,) = setup.manifests().values()
    assert m["task_name"] == EVIL_NAME and m["status"] == "completed"
    task_id = m["task_id"]
    # output.log from before the capture filter was safe (or put there by hand): tail escapes.
    with open(Path(m["tmpdir"]) / "output.log", "ab") as handle:
        handle.write(b"old \x1b]52;c;cHduZWQ=\x07 clip \xc2\x9b31m c1 \x9b raw\n")

    status = setup.supervise("status", "-c", str(setup.profile))
    assert status.returncode == 0, status.stderr
    assert_no_raw_controls(status.stdout, "status")
    assert "evil\\x1b]0;pwned\\x07-\\x1b[2J-\\u009b31m-\\x0aforged" in status.stdout

    as_json = setup.supervise("status", "-c", str(setup.profile), "--json")
    assert_no_raw_controls(as_json.stdout, "status --json")
    assert json.loads(as_json.stdout)[0]["name"] == EVIL_NAME

    show = setup.supervise("show", "-c", str(setup.profile), task_id)
    assert show.returncode == 0, show.stderr
    assert_no_raw_controls(show.stdout, "show")
    assert json.loads(show.stdout)["task_name"] == EVIL_NAME

    tail = setup.supervise("tail", "-c", str(setup.profile), task_id, "-n", "5")
    assert tail.returncode == 0, tail.stderr
    assert_no_raw_controls(tail.stdout, "tail")
    assert "old \\x1b]52;c;cHduZWQ=\\x07 clip \\u009b31m c1 \ufffd raw" in tail.stdout
    assert "hello" in tail.stdout

    follow = setup.supervise("tail", "-c", str(setup.profile), task_id, "-f", timeout=30)
    assert follow.returncode == 0 and "clip \\u009b31m" in follow.stdout
    assert_no_raw_controls(follow.stdout, "tail -f")


def _views_of(root: Path, name: str, line: str) -> dict[str, str]:
    """What every view prints for one task named ``name`` whose output holds ``line``:
    ``status``, ``show``, ``tail`` (the CLI in this process), the web board and task page,
    the notifier's message and expanded argv, and an engine log line."""
    from supervisor.cli import app as cli
    from supervisor.config import load_profile
    from supervisor.taskdir.folder import Manifest, TaskDir, utc_iso
    from supervisor.views import webpage
    from supervisor.views.webauth import Access

    profile = root / "profile.toml"
    profile.write_text(
        f'[paths]\nspool_dir = "{root / "spool"}"\nstate_dir = "{root / "state"}"\n'
        '[tmux]\nsocket_name = "sv-terminal-views"\n[agent]\ncommand = ["true"]\n'
    )
    folder = root / "state" / "tasks" / "hostile-1a2b3c"
    folder.mkdir(parents=True)
    (root / "spool").mkdir()
    fields = {
        "task_id": "hostile-1a2b3c", "task_name": name, "status": "failed",
              "model": line, "project_dir": "/tmp/p", "session_name": "x", "session_id": "s",
              "tmpdir": str(folder), "created_at": utc_iso(), "failure_reason": "auth",
              "abandon_reason": line}  # fmt: skip
    TaskDir(folder).write_manifest(Manifest.model_validate(fields))
    (folder / "output.log").write_text(f"before\n{line}\n", errors="surrogateescape")
    out: dict[str, str] = {}
    for verb in (["status"], ["status", "--status", "failed"], ["show", "hostile-1a2b3c"],
                 ["tail", "hostile-1a2b3c", "-n", "5"]):  # fmt: skip
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            cli.main([verb[0], "-c", str(profile), *verb[1:]])
        out[" ".join(verb)] = buffer.getvalue()
    pages = webpage.Pages(
        load_profile(profile), Access(token=None, allow_actions=False, loopback=True)
    )
    out["web board"] = pages.index(pages.board())
    out["web task"] = pages.task("hostile-1a2b3c", pages.task_body("hostile-1a2b3c") or "")
    event = {"task_id": "hostile-1a2b3c", "task_name": name, "status": "failed",
             "reason": line, "last_lines": f"{line}\n{line}"}  # fmt: skip
    out["notification"] = notify.message_for(event)
    out["notifier argv"] = "".join(notify.expand(["{task_name}", "{last_lines}"], event))
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "%s: %s", (name, line), None)
    out["engine log"] = ControlEscapingFormatter("%(message)s").format(record)
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=HOSTILE, line=HOSTILE)
def test_no_control_or_format_character_survives_any_view(name: str, line: str) -> None:
    """Issue 20: bidi and zero-width characters (Cf) passed status, tail, the web page and
    notifications raw. Only newline and tab may stand in multi-line views."""
    with tempfile.TemporaryDirectory() as tmp:
        views = _views_of(Path(tmp), name, line)
    for where, text in views.items():
        raw = sorted({f"U+{ord(ch):04X}" for ch in text if _control(ch) and ch not in "\n\t"})
        assert not raw, f"{where} printed {raw} raw: {text!r}"
