"""``rename_noreplace`` and the spool's ``put_back`` on it: a file that appears under the
target name is never replaced, not even one that appears between a look and the rename."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from support.small_fs import small_fs  # noqa: F401  (a fixture)

from supervisor import diskio, spool
from supervisor.diskio import move_file, rename_noreplace


def test_a_free_name_is_taken(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    rename_noreplace(tmp_path / "a", tmp_path / "b")
    assert not (tmp_path / "a").exists() and (tmp_path / "b").read_text() == "a"


@pytest.mark.parametrize("kind", ["file", "folder", "dangling link"])
def test_a_taken_name_is_never_replaced(tmp_path: Path, kind: str) -> None:
    (tmp_path / "a").write_text("a")
    target = tmp_path / "b"
    if kind == "file":
        target.write_text("b")
    elif kind == "folder":
        target.mkdir()
    else:
        target.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        rename_noreplace(tmp_path / "a", target)
    assert (tmp_path / "a").read_text() == "a" and os.path.lexists(target)


def test_a_file_that_appears_after_the_look_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look finds the name free (as it would a moment before a user drops a file
    there); the kernel's check still refuses, so the user's file stays."""
    if diskio._renameat2() is None:
        pytest.skip("this C library has no renameat2: the fallback leaves that instant open")
    monkeypatch.setattr(diskio.os.path, "lexists", lambda _path: False)
    (tmp_path / "claimed").write_text("old")
    (tmp_path / "task.toml").write_text("new, dropped by the user")
    with pytest.raises(FileExistsError):
        rename_noreplace(tmp_path / "claimed", tmp_path / "task.toml")
    assert (tmp_path / "task.toml").read_text() == "new, dropped by the user"


def test_without_renameat2_the_look_still_refuses_a_taken_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diskio, "_renameat2", lambda: None)
    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    with pytest.raises(FileExistsError):
        rename_noreplace(tmp_path / "a", tmp_path / "b")
    rename_noreplace(tmp_path / "a", tmp_path / "c")
    assert (tmp_path / "b").read_text() == "b" and (tmp_path / "c").read_text() == "a"


def test_put_back_racing_a_user_loses_neither_file(tmp_path: Path) -> None:
    """A user drops ``task.toml`` while the engine puts its claimed copy back, 200 times:
    both files are there each time, the engine's under a stamped name when it came second."""
    for round_ in range(200):
        folder = tmp_path / str(round_)
        folder.mkdir()
        claimed, original = folder / ".claim.x.task.toml", folder / "task.toml"
        claimed.write_text("engine")
        dropped = threading.Thread(target=lambda p=original: _drop(p))
        dropped.start()
        landed = spool.put_back(claimed, original)
        dropped.join()
        texts = sorted(p.read_text() for p in folder.iterdir())
        assert texts == ["engine", "user"], (round_, texts)
        assert landed.read_text() == "engine" and not claimed.exists()


def _drop(path: Path) -> None:
    """The user's write: create-or-fail, as an editor's save of a new file would."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # the engine's put-back came first: save beside it
        fd = os.open(path.with_name("task.user.toml"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"user")
    os.close(fd)


def test_a_move_across_filesystems_never_replaces_the_target(
    tmp_path: Path,
    small_fs: Path,  # noqa: F811
) -> None:
    """The copy (``EXDEV``) lands with the same no-replace rename: the target stays, the
    source stays, and no temp file is left beside the target."""
    source, target = tmp_path / "claimed.toml", small_fs / "task.toml"
    source.write_text("engine")
    target.write_text("user")
    with pytest.raises(FileExistsError):
        move_file(source, target)
    assert source.read_text() == "engine" and target.read_text() == "user"
    assert [p.name for p in small_fs.iterdir()] == ["task.toml"]
    move_file(source, small_fs / "free.toml")
    assert (small_fs / "free.toml").read_text() == "engine" and not source.exists()


def test_two_rejections_of_one_name_at_once_keep_both(tmp_path: Path) -> None:
    """Two engines sharing a spool reject a ``task.toml`` each at the same instant (here
    two threads, 100 times): ``rejected/`` keeps both files, each with its ``.error``."""
    for round_ in range(100):
        spool_dir = tmp_path / str(round_)
        (spool_dir / "a").mkdir(parents=True)
        (spool_dir / "b").mkdir()
        for side in "ab":
            (spool_dir / side / "task.toml").write_text(side)
        threads = [
            threading.Thread(
                target=spool.reject, args=(spool_dir / side / "task.toml", spool_dir, [side])
            )
            for side in "ab"
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        kept = sorted(p for p in (spool_dir / "rejected").iterdir() if p.suffix == ".toml")
        assert sorted(p.read_text() for p in kept) == ["a", "b"], round_
        for path in kept:
            assert path.with_name(path.name + ".error").read_text() == path.read_text() + "\n"


def test_a_manifest_set_aside_twice_in_one_second_keeps_both_copies(tmp_path: Path) -> None:
    """Found by attack: ``manifest.json.damaged-<second>`` was a plain rename, so a second
    damaging in the same second replaced the first kept copy. Every stamped name of the
    next two minutes is taken first; each copy keeps its bytes."""
    import time

    from supervisor.taskdir import repair

    path = tmp_path / "manifest.json"
    now = int(time.time())
    taken = {tmp_path / f"manifest.json.damaged-{t}" for t in range(now - 1, now + 120)}
    for kept in taken:
        kept.write_bytes(b"first")
    for body in (b"second", b"third"):
        path.write_bytes(body)
        assert repair.set_aside(path) not in taken
    copies = {p: p.read_bytes() for p in tmp_path.glob("manifest.json.damaged-*")}
    assert all(copies[p] == b"first" for p in taken)
    assert sorted(b for p, b in copies.items() if p not in taken) == [b"second", b"third"]
    assert repair.set_aside(path) is None  # nothing there: nothing moved
