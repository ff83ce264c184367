"""``supervise submit`` never overwrites a waiting task file or hands out the id of an
existing task (issue 20): the random 6-hex id of a new task may collide with a spool file,
a claim in progress or a task folder; the file goes in with ``link(2)``, which refuses an
existing name, and a taken id is drawn again."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Setup

from supervisor import spool
from supervisor.cli import app as cli


def _ids(monkeypatch: pytest.MonkeyPatch, *ids: str) -> None:
    """Make the id source hand out ``ids`` in order (the collision a random id can meet)."""
    source: Iterator[str] = iter(ids)
    monkeypatch.setattr(spool, "new_task_id", lambda name: next(source))


def _submit(setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    task = tmp_path / "t.toml"
    task.write_text('name = "t"\nprompt = "exit: 0"\nproject_dir = "project"\n')
    assert cli.main(["submit", "-c", str(setup.profile), str(task), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_waiting_task_file_with_the_same_id_is_not_overwritten(
    setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    setup.write_profile()
    waiting = setup.drop("t-aaaaaa.toml", "name = 'old'\nprompt = 'keep me'\n")
    _ids(monkeypatch, "t-aaaaaa", "t-bbbbbb")
    data = _submit(setup, tmp_path, capsys)
    assert data["task_id"] == "t-bbbbbb"
    assert waiting.read_text() == "name = 'old'\nprompt = 'keep me'\n"
    assert "exit: 0" in (setup.spool / "t-bbbbbb.toml").read_text()
    assert sorted(p.name for p in setup.spool.iterdir()) == ["t-aaaaaa.toml", "t-bbbbbb.toml"]


@pytest.mark.parametrize("taken", ["folder", "claim"])
def test_the_id_of_an_existing_task_or_claim_is_not_handed_out(
    setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], taken: str,
) -> None:  # fmt: skip
    setup.write_profile()
    if taken == "folder":
        (setup.state / "tasks" / "t-aaaaaa").mkdir(parents=True)
    else:  # a claim in progress: the engine moves it to tasks/t-aaaaaa next
        setup.drop(f"{spool.CLAIM_PREFIX}t-aaaaaa.other.toml", "name = 'other'\n")
    _ids(monkeypatch, "t-aaaaaa", "t-cccccc")
    assert _submit(setup, tmp_path, capsys)["task_id"] == "t-cccccc"


def test_two_submits_drawing_the_same_id_at_once_both_keep_their_file(
    setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup.write_profile()
    lock = threading.Lock()
    drawn: list[str] = []

    def same_first(name: str) -> str:
        with lock:
            drawn.append(name)
            return "t-dddddd" if len(drawn) <= 2 else f"t-{len(drawn):06x}"

    monkeypatch.setattr(spool, "new_task_id", same_first)
    from supervisor import submission

    barrier = threading.Barrier(2)
    placed: list[str] = []

    def place(n: int) -> None:
        barrier.wait()
        placed.append(submission.place(setup.spool, setup.state / "tasks", "t", b"n = %d\n" % n))

    threads = [threading.Thread(target=place, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(set(placed)) == 2
    bodies = sorted((setup.spool / f"{i}.toml").read_text() for i in placed)
    assert bodies == ["n = 0\n", "n = 1\n"]
    assert sorted(p.name for p in setup.spool.iterdir()) == sorted(f"{i}.toml" for i in placed)


def test_no_free_id_is_one_line_and_leaves_no_staging_file(
    setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    setup.write_profile()
    setup.drop("t-aaaaaa.toml", "name = 'old'\n")
    monkeypatch.setattr(spool, "new_task_id", lambda name: "t-aaaaaa")
    task = tmp_path / "t.toml"
    task.write_text('name = "t"\nprompt = "exit: 0"\nproject_dir = "project"\n')
    assert cli.main(["submit", "-c", str(setup.profile), str(task)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no free task id" in err, err
    assert [p.name for p in setup.spool.iterdir()] == ["t-aaaaaa.toml"]


def test_a_spool_that_is_a_file_is_one_line_not_a_traceback(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup.write_profile()
    setup.spool.write_text("not a folder")
    task = tmp_path / "t.toml"
    task.write_text('name = "t"\nprompt = "exit: 0"\nproject_dir = "project"\n')
    assert cli.main(["submit", "-c", str(setup.profile), str(task)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{setup.spool}: cannot write" in err, err
