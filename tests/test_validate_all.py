"""Issue 22 item 8: ``supervise validate`` (and the spool, through the same loaders) reports
every problem of a file at once, and names a missing agent program, notifier program or tmux.

A bad value used to stop the checks that come after the model's: a bad ``deadline`` hid a
``project_dir`` that does not exist (``supervisor/config/salvage.py`` explains the fix)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.cli import app as cli
from supervisor.config import LoadedProfile, load_profile, load_task
from supervisor.errors import ConfigError

PROFILE = '[agent]\ncommand = ["true", "{prompt}"]\n'


@pytest.fixture(autouse=True)
def _no_monitor_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("MONITOR_"):
            monkeypatch.delenv(key)


def _problems(call: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        call()  # type: ignore[operator]
    return list(info.value.problems)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_bad_deadline_no_longer_hides_a_missing_project_folder(tmp_path: Path) -> None:
    profile = load_profile(_write(tmp_path / "p.toml", PROFILE))
    task = _write(
        tmp_path / "t.toml",
        'name = "x"\nprompt = "hi"\nproject_dir = "nowhere"\nmodel = "opsu"\n'
        "[monitor]\ndeadline = -5\n",
    )
    lines = _problems(lambda: load_task(task, profile))
    assert len(lines) == 3, lines
    assert "'monitor.deadline'" in lines[0] and "(got -5)" in lines[0]
    assert any("key 'project_dir'" in line and "does not exist" in line for line in lines)
    assert any("unknown model alias 'opsu'" in line for line in lines)


def test_several_bad_values_and_a_refused_key_are_all_reported(tmp_path: Path) -> None:
    profile = load_profile(
        _write(tmp_path / "p.toml", PROFILE + '[security]\ntask_may_set = ["model"]\n')
    )
    (tmp_path / "proj").mkdir()
    task = _write(
        tmp_path / "t.toml",
        'name = "x"\nprompt_file = "missing.md"\nproject_dir = "proj"\n'
        '[monitor]\ndeadline = "soon"\nmax_retries = -1\n',
    )
    lines = _problems(lambda: load_task(task, profile))
    text = "\n".join(lines)
    assert "'monitor.deadline'" in text and "'monitor.max_retries'" in text, text
    assert "key 'prompt_file': cannot read" in text, text
    assert "key 'monitor.deadline': this profile does not let task files set it" in text, text


def test_a_bad_required_key_still_reports_what_can_be_checked(tmp_path: Path) -> None:
    """``name`` cannot be set aside (it is required), so only the model's lines come; the
    loader must not crash or hang on what is left."""
    profile = load_profile(_write(tmp_path / "p.toml", PROFILE))
    task = _write(tmp_path / "t.toml", 'name = 5\nprompt = "hi"\nproject_dir = "nowhere"\n')
    lines = _problems(lambda: load_task(task, profile))
    assert any("key 'name'" in line for line in lines), lines


def test_a_profile_reports_a_bad_value_with_an_unknown_alias_and_a_bad_inline_task(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path / "p.toml",
        PROFILE + 'default_model = "opsu"\n[monitor]\ndeadline = 0\n'
        '[[tasks]]\nname = "a"\nprompt = "hi"\nproject_dir = "nowhere"\n',
    )
    lines = _problems(lambda: load_profile(path))
    text = "\n".join(lines)
    assert "'monitor.deadline'" in text, text
    assert "unknown model alias 'opsu'" in text, text
    assert "key 'tasks.0.project_dir'" in text and "does not exist" in text, text


def test_validate_prints_every_problem_of_one_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = _write(
        tmp_path / "t.toml",
        'name = "x"\nprompt = "hi"\nproject_dir = "nowhere"\n[monitor]\ndeadline = -5\n',
    )
    assert cli.main(["validate", "--json", str(task)]) == 1
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 2, err
    assert len(json.loads(out)[0]["problems"]) == 2, out
    assert "'monitor.deadline'" in err and "key 'project_dir'" in err


def _validate(tmp_path: Path, *files: Path, path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "validate", *map(str, files)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip


def test_validate_warns_about_a_notifier_program_that_is_not_found(tmp_path: Path) -> None:
    profile = _write(
        tmp_path / "p.toml", PROFILE + '[monitor]\nnotifier = ["no-such-notifier", "{message}"]\n'
    )
    done = _validate(tmp_path, profile)
    assert done.returncode == 0, done.stderr  # a warning: the engine's PATH may differ
    assert "[monitor] notifier" in done.stderr and "'no-such-notifier'" in done.stderr
    assert "not found on PATH" in done.stderr
    absolute = _write(
        tmp_path / "q.toml", PROFILE + f'[monitor]\nnotifier = ["{sys.executable}", "-c", ""]\n'
    )
    done = _validate(tmp_path, absolute)
    assert done.returncode == 0 and "notifier" not in done.stderr, done.stderr


def test_validate_of_a_profile_without_tmux_also_names_the_missing_agent(tmp_path: Path) -> None:
    """Both lines at once: tmux is an error (nothing runs without it), the agent a warning."""
    profile = _write(tmp_path / "p.toml", '[agent]\ncommand = ["no-such-agent", "{prompt}"]\n')
    done = _validate(tmp_path, profile, path=str(tmp_path / "empty-bin"))
    assert done.returncode == 1
    assert "'no-such-agent' is not found on PATH" in done.stderr, done.stderr
    assert "tmux is not found on PATH" in done.stderr, done.stderr


def test_validate_with_a_profile_checks_tasks_against_its_aliases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = _write(tmp_path / "p.toml", PROFILE + '[agent.models]\nfast = "claude-haiku-4-5"\n')
    (tmp_path / "proj").mkdir()
    task = _write(tmp_path / "t.toml", 'name = "x"\nprompt = "hi"\nproject_dir = "proj"\n'
                  'model = "fast"\n')  # fmt: skip
    assert cli.main(["validate", "-c", str(profile), str(task)]) == 0, capsys.readouterr().err
    assert isinstance(load_profile(profile), LoadedProfile)
