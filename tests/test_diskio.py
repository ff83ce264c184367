"""``read_regular``: the one non-blocking, fstat-checked read that the config loader, the
spool, the child ledger and the clock mark share (hostile file types, huge inputs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from supervisor.diskio import FileTooBig, NotRegularFile, file_kind, read_regular


def test_a_regular_file_within_the_limit_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc\r\n")
    assert read_regular(path, 5) == b"abc\r\n"
    assert read_regular(path) == b"abc\r\n"


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile) as caught:
        read_regular(fifo, 10)
    assert caught.value.kind == "a FIFO"
    assert caught.value.strerror == "a FIFO, not a regular file"


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused_unread(device: str) -> None:
    with pytest.raises(NotRegularFile) as caught:
        read_regular(device)
    assert caught.value.kind == file_kind(os.stat(device).st_mode) == "a character device"


def test_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OSError):  # EISDIR from open, or NotRegularFile
        read_regular(tmp_path)


def test_a_file_over_the_limit_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "big"
    with path.open("wb") as handle:  # sparse: 1 GiB that takes no room
        handle.truncate(1 << 30)
    with pytest.raises(FileTooBig) as caught:
        read_regular(path, 1024)
    assert (caught.value.size, caught.value.limit) == (1 << 30, 1024)
    assert caught.value.strerror == f"{1 << 30} bytes; at most 1024 are allowed"


def test_a_symlink_is_followed_only_when_asked(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"x")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_regular(link, 10) == b"x"
    with pytest.raises(OSError) as caught:
        read_regular(link, 10, follow=False)
    assert not isinstance(caught.value, NotRegularFile | FileTooBig)


def test_a_symlink_to_a_fifo_is_refused_either_way(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    with pytest.raises(NotRegularFile):
        read_regular(link, 10)
    with pytest.raises(OSError):
        read_regular(link, 10, follow=False)


def test_a_file_holding_more_than_its_size_says_is_still_cut_at_the_limit() -> None:
    """A file that grows while it is read looks like this: fstat says little (``/proc``
    files say 0 bytes), the read finds more; it is refused, never read whole."""
    path = Path(f"/proc/{os.getpid()}/maps")
    assert os.stat(path).st_size == 0
    with pytest.raises(FileTooBig) as caught:
        read_regular(path, 16)
    assert caught.value.strerror == "more than 16 bytes"
    assert caught.value.size == 17
