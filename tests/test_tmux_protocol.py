"""tmux control mode's wire format (:mod:`supervisor.tmux.protocol`): the parser never
crashes and frames by the ``%begin`` fields, and an argv quoted into one command line
parses back in real tmux to the same argv."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.tmux.protocol import Block, Notification, Parser, command_line, quote

TMUX = shutil.which("tmux") or "/usr/bin/tmux"


def _feed(lines: list[bytes]) -> list[Block | Notification]:
    parser = Parser()
    return [item for line in lines if (item := parser.feed(line)) is not None]


def test_blocks_and_notifications_are_told_apart() -> None:
    items = _feed(
        [
            b"%sessions-changed",
            b"%begin 1795687305 264 1",
            b"a",
            b"",
            b"%end 1795687305 264 1",
            b"%window-close @3",
            b"%begin 1795687305 265 1",
            b"can't find session: x",
            b"%error 1795687305 265 1",
            b"%exit",
        ]
    )
    assert items == [
        Notification("sessions-changed", ()),
        Block(True, ("a", "")),
        Notification("window-close", ("@3",)),
        Block(False, ("can't find session: x",)),
        Notification("exit", ()),
    ]


def test_guard_lines_of_another_block_are_output() -> None:
    """A pane that printed ``%end``/``%begin``/``%error``/``%exit`` lines, read back by
    ``capture-pane``: only the ``%end`` with the ``%begin``'s three fields ends the block."""
    inner = [b"%end 1795687305 264 0", b"%begin 1 2 3", b"%error 1795687305 264 2", b"%exit"]
    items = _feed([b"%begin 1795687305 264 1", *inner, b"%end 1795687305 264 1"])
    assert items == [Block(True, tuple(line.decode() for line in inner))]


@given(st.lists(st.binary(max_size=40), max_size=30))
def test_any_bytes_never_crash_the_parser(lines: list[bytes]) -> None:
    for item in _feed(lines):
        assert isinstance(item, Block | Notification)


@given(
    st.lists(
        st.sampled_from([b"%begin 1 2 1", b"%end 1 2 1", b"%error 1 2 1", b"%begin 1 3 1", b"x"]),
        max_size=30,
    )
)
def test_guard_soup_never_crashes_the_parser(lines: list[bytes]) -> None:
    assert all(isinstance(item, Block | Notification) for item in _feed(lines))


def test_lines_that_cannot_be_one_line_are_refused() -> None:
    """Newline, carriage return, NUL, an unpaired surrogate, or a trailing ``;`` (tmux's
    argv parser splits there): the caller falls back to a client process."""
    for arg in ("a\nb", "a\rb", "a\0b", "a\udc80", "kill;"):
        assert command_line(["display-message", "-p", arg]) is None, repr(arg)
    assert command_line(["a", ";", "b"]) == "'a' ; 'b'"
    assert quote("it's") == "'it'\\''s'"


#: Arguments: any text but the characters no single line can carry (see command_line).
ARGUMENT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\0"),
    min_size=1,  # set-buffer ignores empty data: the empty word has its own test
    max_size=24,
).filter(lambda arg: not arg.endswith(";"))


@pytest.fixture(scope="module")
def probe_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A tmux server with a control client reading lines on its stdin."""
    socket = f"supervise-protocol-{secrets.token_hex(6)}"  # private to this module's run
    subprocess.run([TMUX, "-L", socket, "new-session", "-d", "-s", "p", "sleep 600"], check=True)
    try:
        yield socket, tmp_path_factory.mktemp("buffers")
    finally:
        subprocess.run([TMUX, "-L", socket, "kill-server"], capture_output=True)
        tmpdir = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
        (tmpdir / socket).unlink(missing_ok=True)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args=st.lists(ARGUMENT, min_size=1, max_size=4))
def test_a_quoted_argv_parses_back_in_real_tmux(
    probe_server: tuple[str, Path], args: list[str]
) -> None:
    """Each argument goes through tmux's own parser as ``set-buffer -- ARG`` and comes
    back byte for byte from ``save-buffer``; the commands are chained with ``;``."""
    socket, folder = probe_server
    argv: list[str] = []
    for n, arg in enumerate(args):
        argv += ["set-buffer", "-b", f"q{n}", "--", arg, ";"]
        argv += ["save-buffer", "-b", f"q{n}", str(folder / f"q{n}"), ";"]
    line = command_line(argv[:-1])
    assert line is not None
    for n in range(len(args)):
        (folder / f"q{n}").unlink(missing_ok=True)
    done = subprocess.run(
        [TMUX, "-L", socket, "-C", "attach", "-t", "=p"],
        input=(line + "\n").encode(),
        capture_output=True,
        timeout=20,
    )
    assert b"%error" not in done.stdout, done.stdout
    assert [(folder / f"q{n}").read_bytes() for n in range(len(args))] == [
        arg.encode() for arg in args
    ]


def test_an_empty_argument_stays_one(probe_server: tuple[str, Path]) -> None:
    """``display-message -p ''`` prints an empty line; without the empty word it would
    print tmux's default message."""
    line = command_line(["display-message", "-p", ""])
    assert line is not None
    done = subprocess.run(
        [TMUX, "-L", probe_server[0], "-C", "attach", "-t", "=p"],
        input=(line + "\n").encode(),
        capture_output=True,
        timeout=20,
    )
    reply = done.stdout.split(b"\n")
    begin = next(
        n for n, row in enumerate(reply) if row.startswith(b"%begin") and row.endswith(b" 1")
    )
    assert reply[begin + 1 : begin + 3] == [b"", b"%end" + reply[begin][6:]], done.stdout
