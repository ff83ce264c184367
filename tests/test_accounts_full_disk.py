"""Attack (issue 26): a full disk (a real 4 MiB tmpfs) when the account book is written.

The hold must go on in the engine that noted it, the book on disk must stay the last one
written whole (never torn, never empty), no temp file may be left behind, and a restart
must read that last whole book.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from support import small_fs as small_fs_module

from supervisor.config.accounts import AccountsSpec
from supervisor.engine.accountbook import AccountBook, load
from supervisor.taskdir import layout

small_fs = small_fs_module.small_fs  # pytest fixture, found by name in this module


def _fill(folder: Path) -> None:
    """Fill the file system of ``folder`` to the last byte (unbuffered writes)."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError:
                    break
    finally:
        os.close(fd)


def test_a_full_disk_keeps_the_hold_in_memory_and_the_old_book_whole(
    small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = small_fs / "state"
    state.mkdir()
    now = time.time()
    book = AccountBook(state, AccountsSpec())
    book.note("acct-aaaaaaaaaaaa", now + 600, "t1", now)
    before = (state / layout.ACCOUNTS).read_bytes()
    _fill(small_fs)
    with caplog.at_level(logging.ERROR, logger="supervise.engine"):
        book.note("acct-bbbbbbbbbbbb", now + 900, "t2", now)
    assert any("cannot write" in r.getMessage() for r in caplog.records)
    assert book.admit("acct-bbbbbbbbbbbb", now) is not None  # held in this engine
    assert (state / layout.ACCOUNTS).read_bytes() == before  # the last whole book
    assert sorted(p.name for p in state.iterdir()) == [layout.ACCOUNTS]  # no temp left
    assert set(load(state / layout.ACCOUNTS, now)) == {"acct-aaaaaaaaaaaa"}  # a restart
