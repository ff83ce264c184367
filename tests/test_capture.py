"""Output capture under every locale, and terminal safety of what it writes.

The filter is the real one (``capture.pipe_command``: GNU sed behind tmux's pipe-pane) on a
real tmux server that inherits the locale under test, as the engine's server inherits the
operator's. GNU sed 4.9 under ``en_US.UTF-8`` rejected the old filter's ``[0-?]`` range and
exited at once, leaving ``output.log`` empty (see /work/shared/notes: real-world facts).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import Setup, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.capture import pipe_command

REPO = Path(__file__).resolve().parent.parent
LOCALES = ["C", "C.UTF-8", "en_US.UTF-8", "de_DE.UTF-8"]
#: Each example uses its own file in tmp_path, so sharing the fixture is fine.
TMP_PATH_OK = [HealthCheck.function_scoped_fixture]


def _have_locale(name: str) -> bool:
    """Whether ``name`` is generated here (``locale -a`` lists ``en_US.utf8`` for it)."""
    if name in ("C", "POSIX", "C.UTF-8"):
        return True
    wanted = name.lower().replace("utf-8", "utf8")
    listed = subprocess.run(["locale", "-a"], capture_output=True, text=True, check=False)
    return wanted in {line.strip().lower() for line in listed.stdout.splitlines()}


def need_locale(name: str) -> None:
    if not _have_locale(name):
        pytest.skip(
            f"locale {name} is not generated on this machine (.ci/run generates it: "
            "apt-get install locales, add it to /etc/locale.gen, locale-gen)"
        )


#: Hostile pane output: what an agent (or a file it cats) can print. Each line is labelled so
#: a test can find what is left of it.
HOSTILE = (
    b"L1 plain \x1b[1;32mgreen\x1b[0m text\r\n"
    # OSC 52 clipboard write with a C0 byte between ESC and ']': the old filter stripped the
    # 0x01 after its escape rules and left a working ESC ] 52 ; ... sequence.
    b"L2 \x1b\x01]52;c;cHduZWQ=\x07after\n"
    b"L3 \x1b]0;title-osc0\x07 \x1b]2;title-osc2\x1b\\ \x1b]52;c;Y2xpcA==\x07 osc\n"
    b"L4 csi \x1b[3\x011m with c0 inside \x1b[?25l \x1b(B \x1b7 \x1bP1$r\x1b\\ dcs\n"
    b"L5 c1-utf8 \xc2\x9b31m \xc2\x9d0;t\xc2\x9c \xc2\x85 nel\n"
    b"L6 c1-raw \x9b31m \x9d0;t\x07 \xc2\xc2\x9b\x9b nested\n"
    b"L7 unicode \xe2\x94\x82 \xe2\x8f\xba r\xc3\xa9sum\xc3\xa9 \xf0\x9f\x99\x82\ttab\n"
    b"L8 del\x7f bs\x08 nul\x00 bel\x07 end\n"
)


def assert_terminal_safe(data: bytes) -> str:
    """``data`` is valid UTF-8 with no control character but newline and tab; return it."""
    text = data.decode("utf-8")  # raises on anything that is not valid UTF-8
    bad = sorted({ch for ch in text if (ord(ch) < 0x20 and ch not in "\n\t") or
                  0x7f <= ord(ch) <= 0x9f})  # fmt: skip
    assert not bad, f"control characters left: {[hex(ord(c)) for c in bad]} in {text!r}"
    return text


def check_hostile_result(text: str) -> None:
    lines = text.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == [f"L{i}" for i in range(1, 9)], text
    assert lines[0] == "L1 plain green text"
    assert "52;c;cHduZWQ=" in lines[1] and lines[1].endswith("after")  # plain text, no ESC
    assert "title-osc0" not in lines[2] and "Y2xpcA==" not in lines[2]  # whole OSC removed
    assert lines[2].endswith(" osc")
    assert lines[3].endswith(" dcs")
    assert lines[4].endswith(" nel")
    assert lines[5].endswith(" nested")
    assert lines[6] == "L7 unicode │ ⏺ résumé 🙂\ttab"  # valid UTF-8 and tab kept
    assert lines[7] == "L8 del bs nul bel end"


def _run_filter(data: bytes, log: Path, locale: str) -> bytes:
    env = {**os.environ, "LC_ALL": locale, "LANG": locale}
    subprocess.run(["sh", "-c", pipe_command(log)], input=data, env=env, check=True, timeout=30)
    return log.read_bytes()


@pytest.mark.parametrize("locale", LOCALES)
def test_pane_capture_under_each_locale_strips_every_escape(
    locale: str, socket_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real tmux server started under ``locale`` pipes a pane's hostile output through the
    filter: output.log holds every line, without ESC, C1 or invalid UTF-8."""
    need_locale(locale)
    # The server inherits the environment of the client that starts it, as the engine's does.
    monkeypatch.setenv("LC_ALL", locale)
    monkeypatch.setenv("LANG", locale)
    payload = tmp_path / "payload.bin"
    payload.write_bytes(HOSTILE + b"END-OF-OUTPUT\n")
    log = tmp_path / "output.log"
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    pane = f"tmux wait-for {gate} && cat {payload} && sleep 30"
    tmux = ["tmux", "-L", socket_name]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "cap", "-x", "200", "-y", "50", pane,
         ";", "pipe-pane", "-t", "=cap:", pipe_command(log),
         ";", "wait-for", "-S", gate],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    wait_for(lambda: log.exists() and b"END-OF-OUTPUT" in log.read_bytes(), timeout=60)
    text = assert_terminal_safe(log.read_bytes())
    check_hostile_result(text.replace("END-OF-OUTPUT\n", ""))


@pytest.mark.parametrize("locale", ["C.UTF-8", "en_US.UTF-8"])
def test_filter_alone_gives_the_same_bytes_under_each_locale(locale: str, tmp_path: Path) -> None:
    need_locale(locale)
    out = _run_filter(HOSTILE, tmp_path / "out.log", locale)
    check_hostile_result(assert_terminal_safe(out))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=40),
            st.sampled_from([b"\x1b", b"\x1b[", b"\x1b]", b"\x9b", b"\x9d", b"\xc2", b"\xc2\x9b",
                             b"\x07", b"\x1b\\", b"\x01", b"\r", b"\n", b"\xe2\x80"]),
            st.text(max_size=20).map(lambda s: s.encode("utf-8", "surrogatepass")),
        ),
        max_size=30,
    )
)  # fmt: skip
def test_filter_output_is_always_terminal_safe(tmp_path: Path, parts: list[bytes]) -> None:
    """Whatever bytes a pane prints, the real filter (under en_US.UTF-8 when generated) writes
    valid UTF-8 with no ESC, no C0 but tab and newline, no DEL and no C1 control."""
    locale = "en_US.UTF-8" if _have_locale("en_US.UTF-8") else "C.UTF-8"
    log = tmp_path / f"{uuid.uuid4().hex}.log"
    try:
        assert_terminal_safe(_run_filter(b"".join(parts), log, locale))
    finally:
        log.unlink(missing_ok=True)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.text(
        st.characters(exclude_categories=["Cc", "Cs"]) | st.sampled_from("\t"), max_size=200
    )
)  # fmt: skip
def test_filter_leaves_safe_text_alone(tmp_path: Path, text: str) -> None:
    """Text without controls or escapes (any script, emoji, tab) passes unchanged."""
    log = tmp_path / f"{uuid.uuid4().hex}.log"
    try:
        out = _run_filter((text + "\n").encode("utf-8", "surrogatepass"), log, "C.UTF-8")
    finally:
        log.unlink(missing_ok=True)
    assert out.decode("utf-8") == text + "\n"


def test_engine_under_en_us_captures_agent_output(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine started under en_US.UTF-8 (the default on most desktops and servers):
    output.log holds the agent's lines with escapes stripped, and the task completes."""
    need_locale("en_US.UTF-8")
    monkeypatch.setenv("LC_ALL", "en_US.UTF-8")
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    setup.write_profile()
    prompt = (
        "color: GREEN-LINE\nprint: plain line\n"
        "print: osc \x1b]52;c;cHduZWQ=\x07 title \x1b]0;pwned\x07 c1 \u009b31m done\n"
        "exit: 0"
    )
    setup.drop("loc.toml", setup.task("loc", prompt))
    result = setup.run()
    assert result.returncode == 0, result.stderr[-2000:]
    m = setup.manifests()["loc"]
    assert m["status"] == "completed", m
    text = assert_terminal_safe((Path(m["tmpdir"]) / "output.log").read_bytes())
    assert "GREEN-LINE" in text and "plain line" in text
    assert "osc  title  c1 31m done" in text
    assert "cHduZWQ" not in text and "pwned" not in text


def _readme_command_1() -> list[str]:
    """README's command 1 split at ``&&``, without the venv and pip steps (the test's venv
    stands in for them: installing again would need the network)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^# 1\..*\n(.+)$", text, re.MULTILINE)
    assert match, "README.md lost its command 1"
    steps = [step.strip() for step in match.group(1).split("&&")]
    assert steps[0].startswith("python3 -m venv .venv"), steps
    assert steps[1].startswith(".venv/bin/pip install"), steps
    return steps[2:]


def test_readme_demo_under_en_us_captures_every_agent_line(
    tmp_path: Path, socket_name: str
) -> None:
    """README command 1 (the demo) in a copy of the repository under LC_ALL=en_US.UTF-8:
    each task's output.log holds the demo agent's lines (it was empty before, and the
    healthy demo tasks were taken for hung)."""
    need_locale("en_US.UTF-8")
    tracked = (
        subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=30
        )
        .stdout.decode()
        .split("\0")
    )
    clone = tmp_path / "repo"
    for name in filter(None, tracked):
        source = REPO / name
        if source.is_file():  # files deleted in the working tree are not copied
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    (clone / ".venv").symlink_to(Path(sys.prefix))
    # The demo's fixed socket name could meet another run of the demo; the test's own
    # socket (killed afterwards) keeps it apart.
    demo = clone / "profiles" / "demo.toml"
    text = demo.read_text(encoding="utf-8")
    assert 'socket_name = "supervise-demo"' in text
    demo.write_text(text.replace('"supervise-demo"', f'"{socket_name}"'), encoding="utf-8")
    env = {**os.environ, "LC_ALL": "en_US.UTF-8", "LANG": "en_US.UTF-8"}
    result = subprocess.run(
        ["bash", "-c", " && ".join(_readme_command_1())],
        cwd=clone, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    paths = clone.glob("examples/demo/state/tasks/*/manifest.json")
    manifests = {m["task_name"]: m for m in (json.loads(p.read_text()) for p in paths)}
    assert {name: m["status"] for name, m in manifests.items()} == {
        "demo hello": "completed",
        "demo fails": "failed",
    }
    assert manifests["demo hello"]["retry_count"] == 0
    for name, steps in (("demo hello", 3), ("demo fails", 2)):
        log = Path(manifests[name]["tmpdir"]) / "output.log"
        lines = assert_terminal_safe(log.read_bytes()).splitlines()
        assert lines, f"{name}: output.log is empty"
        assert lines[0].startswith("demo agent (not a model) starting"), (name, lines)
        for step in range(1, steps + 1):
            assert f"working... step {step}/{steps}" in lines, (name, lines)
        assert any(line.startswith("RESULT: wrote DEMO_RESULT.txt") for line in lines)
