"""Profiles, tasks and ``MONITOR_*`` overrides: every bad input gives ONE clear line.

Each error line must name the file (and the TOML line where the key is written), the key,
what is wrong and what is allowed. The tests assert on that content, not just on "raises".
Also: policy precedence, path resolution, prompt files and ``supervise validate``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from supervisor.cli import app as cli
from supervisor.config import (
    DEFAULT_MODELS,
    PLACEHOLDERS,
    ConfigError,
    LoadedProfile,
    MonitorOverrides,
    MonitorPolicy,
    ResolvedTask,
    effective_policy,
    load_profile,
    load_task,
    looks_like_profile,
    read_env_overrides,
    resolve_task,
)

# ``true`` is on every PATH: ``validate`` warns about an agent program it cannot find.
MINIMAL_PROFILE = """
[agent]
command = ["true", "--prompt", "{prompt}"]
"""

# The lists printed as "allowed" follow the models, so a new policy key needs no test edit.
KNOWN_MONITOR_KEYS = ", ".join(MonitorOverrides.model_fields)
KNOWN_ENV = ", ".join(sorted(f"MONITOR_{name.upper()}" for name in MonitorOverrides.model_fields))


# ------------------------------------------------------------------ helpers


@pytest.fixture(autouse=True)
def _no_monitor_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without any MONITOR_* variable (whatever the caller's shell has)."""
    for key in list(os.environ):
        if key.upper().startswith("MONITOR_"):
            monkeypatch.delenv(key)


def write(path: Path, text: str) -> Path:
    """Write dedented TOML (leading blank line dropped) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def lineno(path: Path, start: str, nth: int = 1) -> int:
    """1-based number of the ``nth`` line of ``path`` that starts with ``start`` (stripped)."""
    seen = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip().startswith(start):
            seen += 1
            if seen == nth:
                return number
    raise AssertionError(f"{start!r} (#{nth}) not in {path}")


def problems(call: Callable[[], object]) -> list[str]:
    """The problem lines of the ConfigError that ``call`` raises (each one line)."""
    with pytest.raises(ConfigError) as info:
        call()
    found = info.value.problems
    assert found, "a ConfigError must carry at least one problem"
    for line in found:
        assert "\n" not in line, f"problem spans several lines: {line!r}"
    assert str(info.value) == "\n".join(found)
    return found


def one_problem(call: Callable[[], object]) -> str:
    """The single problem line of the ConfigError that ``call`` raises."""
    found = problems(call)
    assert len(found) == 1, f"expected exactly one problem, got {found}"
    return found[0]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


@pytest.fixture
def profile_path(tmp_path: Path) -> Path:
    return write(tmp_path / "profile.toml", MINIMAL_PROFILE)


@pytest.fixture
def profile(profile_path: Path) -> LoadedProfile:
    return load_profile(profile_path)


def task_file(tmp_path: Path, body: str, name: str = "task.toml") -> Path:
    """A task file in ``tmp_path`` (project_dir "project" is relative to it)."""
    return write(tmp_path / name, body)


GOOD_TASK = """
name = "fix-bug"
project_dir = "project"
prompt = "Fix the bug."
"""


# ------------------------------------------------------------------ malformed TOML


def test_malformed_profile_names_file_and_toml_position(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", '[agent\ncommand = ["x"]\n')
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(f"{path}: malformed TOML: ")
    assert "line 1" in line


def test_malformed_task_names_file_and_toml_position(
    tmp_path: Path, profile: LoadedProfile, project: Path
) -> None:
    path = task_file(tmp_path, 'name = "t"\nproject_dir = "project"\nprompt = "unterminated\n')
    line = one_problem(lambda: load_task(path, profile))
    assert line.startswith(f"{path}: malformed TOML: ")
    assert "line 3" in line


def test_task_error_uses_shown_as_name(
    tmp_path: Path, profile: LoadedProfile, project: Path
) -> None:
    path = task_file(tmp_path, "name = = 1\n")
    shown = Path("/spool/where-the-user-dropped-it.toml")
    line = one_problem(lambda: load_task(path, profile, shown_as=shown))
    assert line.startswith(f"{shown}: malformed TOML")
    assert str(path) not in line


def test_not_utf8_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[agent]\ncommand = ["caf\xe9"]\n')
    line = one_problem(lambda: load_profile(path))
    assert line == f"{path}: not UTF-8 text (byte 23); TOML must be UTF-8"


def test_missing_file_is_one_clear_line(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    assert one_problem(lambda: load_profile(path)) == (
        f"{path}: cannot read: No such file or directory"
    )


# ------------------------------------------------------------------ unknown keys (typos)


def test_unknown_top_level_profile_key_suggests_right_one(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", "max_concurent = 2\n" + MINIMAL_PROFILE)
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(f"{path}:1: unknown key 'max_concurent'")
    assert "(did you mean 'max_concurrent'?)" in line
    assert "allowed keys here: max_concurrent, intake_interval, paths, tmux, agent" in line


def test_unknown_monitor_key_in_profile(tmp_path: Path) -> None:
    path = write(
        tmp_path / "p.toml",
        MINIMAL_PROFILE
        + """
        [monitor]
        base_interval = 10
        dedline = 600
        """,
    )
    line = one_problem(lambda: load_profile(path))
    assert line == (
        f"{path}:{lineno(path, 'dedline')}: unknown key 'monitor.dedline' "
        f"(did you mean 'deadline'?); allowed keys here: {KNOWN_MONITOR_KEYS}"
    )


def test_unknown_agent_key_in_profile(tmp_path: Path) -> None:
    path = write(
        tmp_path / "p.toml",
        """
        [agent]
        command = ["x"]
        defualt_model = "opus"
        """,
    )
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(f"{path}:3: unknown key 'agent.defualt_model'")
    assert "did you mean 'default_model'?" in line
    assert "allowed keys here: kind, command, resume_command, env, models, default_model" in line


def test_unknown_table_points_at_its_header(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL_PROFILE + "\n[monitr]\ndeadline = 5\n")
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(f"{path}:{lineno(path, '[monitr]')}: unknown key 'monitr'")
    assert "did you mean 'monitor'?" in line


def test_unknown_top_level_task_key(tmp_path: Path, profile: LoadedProfile, project: Path) -> None:
    path = task_file(tmp_path, 'name = "t"\nproject_dir = "project"\npromt = "hi"\n')
    line = one_problem(lambda: load_task(path, profile))
    assert line.startswith(f"{path}:3: unknown key 'promt' (did you mean 'prompt'?)")
    assert "allowed keys here: name, prompt, prompt_file, project_dir, model, env, monitor" in line


def test_unknown_monitor_key_in_task(tmp_path: Path, profile: LoadedProfile, project: Path) -> None:
    path = task_file(tmp_path, GOOD_TASK + "\n[monitor]\nmax_intreval = 60\n")
    line = one_problem(lambda: load_task(path, profile))
    assert line == (
        f"{path}:{lineno(path, 'max_intreval')}: unknown key 'monitor.max_intreval' "
        f"(did you mean 'max_interval'?); allowed keys here: {KNOWN_MONITOR_KEYS}"
    )


def test_unknown_key_in_second_inline_task_points_at_that_entry(
    tmp_path: Path, project: Path
) -> None:
    path = write(
        tmp_path / "p.toml",
        MINIMAL_PROFILE
        + """
        [[tasks]]
        name = "one"
        project_dir = "project"
        prompt = "a"
        modle = "opus"

        [[tasks]]
        name = "two"
        project_dir = "project"
        prompt = "b"
        modle = "opus"
        """,
    )
    found = problems(lambda: load_profile(path))
    assert len(found) == 2, found
    assert found[0].startswith(f"{path}:{lineno(path, 'modle', 1)}: unknown key 'tasks.0.modle'")
    assert found[1].startswith(f"{path}:{lineno(path, 'modle', 2)}: unknown key 'tasks.1.modle'")
    assert all("(did you mean 'model'?)" in line for line in found)


# ------------------------------------------------------------------ wrong types


@pytest.mark.parametrize(
    ("value", "shown"),
    [('"soon"', "'soon'"), ("true", "True"), ('"600"', "'600'"), ("[600]", "")],
)
def test_wrong_type_for_deadline_in_profile(tmp_path: Path, value: str, shown: str) -> None:
    path = write(tmp_path / "p.toml", MINIMAL_PROFILE + f"\n[monitor]\ndeadline = {value}\n")
    line = one_problem(lambda: load_profile(path))
    expected = f"{path}:{lineno(path, 'deadline')}: key 'monitor.deadline': "
    assert line.startswith(expected)
    assert "Input should be a valid number" in line
    if shown:
        assert line.endswith(f"(got {shown})")


def test_wrong_type_for_deadline_in_task(
    tmp_path: Path, profile: LoadedProfile, project: Path
) -> None:
    path = task_file(tmp_path, GOOD_TASK + '\n[monitor]\ndeadline = "soon"\n')
    line = one_problem(lambda: load_task(path, profile))
    assert line.startswith(f"{path}:{lineno(path, 'deadline')}: key 'monitor.deadline': ")
    assert "Input should be a valid number" in line
    assert line.endswith("(got 'soon')")


def test_integer_seconds_are_fine(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL_PROFILE + "\n[monitor]\ndeadline = 600\n")
    loaded = load_profile(path)
    assert loaded.spec.monitor.deadline == 600.0


@pytest.mark.parametrize(
    ("toml", "key", "expect"),
    [
        ('max_concurrent = "two"\n', "max_concurrent", "Input should be a valid integer"),
        ("max_concurrent = 0\n", "max_concurrent", "Input should be greater than or equal to 1"),
        ("intake_interval = -1\n", "intake_interval", "Input should be greater than 0"),
    ],
)
def test_wrong_top_level_values(tmp_path: Path, toml: str, key: str, expect: str) -> None:
    path = write(tmp_path / "p.toml", toml + MINIMAL_PROFILE)
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(f"{path}:1: key '{key}': {expect}")


def test_command_must_be_a_list(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", '[agent]\ncommand = "claude -p"\n')
    line = one_problem(lambda: load_profile(path))
    assert line == f"{path}:2: key 'agent.command': Input should be a valid list (got 'claude -p')"


def test_command_must_not_be_empty(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", "[agent]\ncommand = []\n")
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(f"{path}:2: key 'agent.command': List should have at least 1 item")


def test_max_retries_must_be_a_whole_number(
    tmp_path: Path, profile: LoadedProfile, project: Path
) -> None:
    path = task_file(tmp_path, GOOD_TASK + "[monitor]\nmax_retries = 1.5\n")
    line = one_problem(lambda: load_task(path, profile))
    assert line.startswith(f"{path}:{lineno(path, 'max_retries')}: key 'monitor.max_retries': ")
    assert "valid integer" in line
    assert line.endswith("(got 1.5)")


def test_socket_name_default_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL_PROFILE + '[tmux]\nsocket_name = "default"\n')
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(f"{path}:{lineno(path, 'socket_name')}: key 'tmux.socket_name': ")
    assert "not 'default'" in line
    assert "letters, digits" in line


def test_missing_agent_table(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", "max_concurrent = 2\n")
    assert one_problem(lambda: load_profile(path)) == f"{path}: missing required key 'agent'"


# ------------------------------------------------------------------ intervals <= 0

INTERVALS = ("base_interval", "max_interval", "deadline", "stale_threshold")
#: What a value at or below 0 is told, with the whole range allowed (issue 20: the intervals
#: a check runs at are at least 0.1 s).
TOO_LOW = {
    "deadline": "Input should be greater than 0; allowed: more than 0, at most 31536000",
    **dict.fromkeys(
        ("base_interval", "max_interval", "stale_threshold"),
        "Input should be greater than or equal to 0.1; allowed: from 0.1 to 31536000",
    ),
}


@pytest.mark.parametrize("key", INTERVALS)
@pytest.mark.parametrize("value", ["0", "-5", "-0.5"])
def test_non_positive_interval_in_profile(tmp_path: Path, key: str, value: str) -> None:
    path = write(tmp_path / "p.toml", MINIMAL_PROFILE + f"\n[monitor]\n{key} = {value}\n")
    line = one_problem(lambda: load_profile(path))
    assert line == (
        f"{path}:{lineno(path, key)}: key 'monitor.{key}': {TOO_LOW[key]} "
        f"(got {float(value) if '.' in value else int(value)!r})"
    )


@pytest.mark.parametrize("key", INTERVALS)
@pytest.mark.parametrize("value", ["0", "-5"])
def test_non_positive_interval_in_task(
    tmp_path: Path, profile: LoadedProfile, project: Path, key: str, value: str
) -> None:
    path = task_file(tmp_path, GOOD_TASK + f"\n[monitor]\n{key} = {value}\n")
    line = one_problem(lambda: load_task(path, profile))
    assert line == (
        f"{path}:{lineno(path, key)}: key 'monitor.{key}': {TOO_LOW[key]} (got {value})"
    )


def test_negative_grace_period_but_zero_is_fine(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL_PROFILE + "[monitor]\ngrace_period = -1\n")
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(f"{path}:{lineno(path, 'grace_period')}: key 'monitor.grace_period'")
    assert "greater than or equal to 0" in line
    write(path, MINIMAL_PROFILE + "[monitor]\ngrace_period = 0\n")
    assert load_profile(path).spec.monitor.grace_period == 0


def test_several_problems_one_line_each(tmp_path: Path) -> None:
    path = write(
        tmp_path / "p.toml",
        MINIMAL_PROFILE + "[monitor]\nbase_interval = 0\ndeadline = -1\ndedline = 3\n",
    )
    found = problems(lambda: load_profile(path))
    assert len(found) == 3, found
    assert {line.split(": ", 1)[0] for line in found} == {
        f"{path}:{lineno(path, k)}" for k in ("base_interval", "deadline", "dedline")
    }


# ------------------------------------------------------------------ max_interval < base_interval


def test_max_smaller_than_base_in_profile(tmp_path: Path) -> None:
    path = write(
        tmp_path / "p.toml", MINIMAL_PROFILE + "[monitor]\nbase_interval = 100\nmax_interval = 50\n"
    )
    line = one_problem(lambda: load_profile(path))
    assert line == (
        f"{path}:{lineno(path, 'max_interval')}: monitor policy: max_interval (50) is smaller "
        "than base_interval (100); it must be >= base_interval "
        "(base_interval from profile, max_interval from profile)"
    )


def test_max_equal_to_base_is_fine(tmp_path: Path) -> None:
    path = write(
        tmp_path / "p.toml", MINIMAL_PROFILE + "[monitor]\nbase_interval = 60\nmax_interval = 60\n"
    )
    policy, _ = effective_policy(load_profile(path).spec.monitor)
    assert (policy.base_interval, policy.max_interval) == (60, 60)


def test_max_from_env_smaller_than_base_from_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "p.toml", MINIMAL_PROFILE + "[monitor]\nbase_interval = 100\n")
    monkeypatch.setenv("MONITOR_MAX_INTERVAL", "50")
    line = one_problem(lambda: load_profile(path))
    assert line == (
        f"{path}:{lineno(path, 'base_interval')}: monitor policy: max_interval (50) is smaller "
        "than base_interval (100); it must be >= base_interval "
        "(base_interval from profile, max_interval from env)"
    )


def test_base_from_env_larger_than_default_max(
    profile_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONITOR_BASE_INTERVAL", "301")
    line = one_problem(lambda: load_profile(profile_path))
    assert line.startswith(f"{profile_path}: monitor policy: max_interval (300) is smaller")
    assert "(base_interval from env, max_interval from default)" in line


def test_max_in_task_smaller_than_base_in_profile(tmp_path: Path, project: Path) -> None:
    profile = load_profile(
        write(tmp_path / "p.toml", MINIMAL_PROFILE + "[monitor]\nbase_interval = 60\n")
    )
    path = task_file(tmp_path, GOOD_TASK + "[monitor]\nmax_interval = 10\n")
    line = one_problem(lambda: load_task(path, profile))
    assert line == (
        f"{path}:{lineno(path, 'max_interval')}: monitor policy: max_interval (10) is smaller "
        "than base_interval (60); it must be >= base_interval "
        "(base_interval from profile, max_interval from task)"
    )


def test_base_in_task_larger_than_max_from_env(
    tmp_path: Path, profile: LoadedProfile, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONITOR_MAX_INTERVAL", "120")
    path = task_file(tmp_path, GOOD_TASK + "[monitor]\nbase_interval = 500\n")
    line = one_problem(lambda: load_task(path, profile))
    assert line.startswith(f"{path}:{lineno(path, 'base_interval')}: monitor policy: ")
    assert "max_interval (120) is smaller than base_interval (500)" in line
    assert "(base_interval from task, max_interval from env)" in line


# ------------------------------------------------------------------ model aliases


def test_unknown_model_alias_lists_known_ones(
    tmp_path: Path, profile: LoadedProfile, project: Path
) -> None:
    path = task_file(tmp_path, GOOD_TASK + 'model = "opsu"\n')
    line = one_problem(lambda: load_task(path, profile))
    assert line == (
        f"{path}:{lineno(path, 'model')}: key 'model': unknown model alias 'opsu'; "
        "known aliases: opus (claude-opus-4-6), sonnet (claude-sonnet-4-6); "
        "or give a full model id such as claude-sonnet-4-6"
    )


@pytest.mark.parametrize(
    ("written", "resolved"),
    [
        ('model = "opus"\n', "claude-opus-4-6"),
        ('model = "sonnet"\n', "claude-sonnet-4-6"),
        ('model = "claude-opus-4-6"\n', "claude-opus-4-6"),
        ('model = "claude-3-5-haiku-20241022"\n', "claude-3-5-haiku-20241022"),
        ('model = "us.anthropic.claude-opus-4-6:0"\n', "us.anthropic.claude-opus-4-6:0"),
        ("", DEFAULT_MODELS["sonnet"]),  # no model: the profile's default_model (sonnet)
    ],
)
def test_model_aliases_and_full_ids(
    tmp_path: Path, profile: LoadedProfile, project: Path, written: str, resolved: str
) -> None:
    path = task_file(tmp_path, GOOD_TASK + written)
    assert load_task(path, profile).model == resolved


def test_profile_models_extend_and_override_aliases(tmp_path: Path, project: Path) -> None:
    profile = load_profile(
        write(
            tmp_path / "p.toml",
            MINIMAL_PROFILE
            + """
            default_model = "fast"

            [agent.models]
            fast = "claude-haiku-4-5"
            opus = "claude-opus-4-1"
            """,
        )
    )
    assert load_task(task_file(tmp_path, GOOD_TASK), profile).model == "claude-haiku-4-5"
    path = task_file(tmp_path, GOOD_TASK + 'model = "opus"\n', "t2.toml")
    assert load_task(path, profile).model == "claude-opus-4-1"
    path = task_file(tmp_path, GOOD_TASK + 'model = "haiku"\n', "t3.toml")
    line = one_problem(lambda: load_task(path, profile))
    assert "unknown model alias 'haiku'" in line
    assert (
        "known aliases: fast (claude-haiku-4-5), opus (claude-opus-4-1), "
        "sonnet (claude-sonnet-4-6)" in line
    )


def test_unknown_default_model_alias_in_profile(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", MINIMAL_PROFILE + 'default_model = "gtp"\n')
    line = one_problem(lambda: load_profile(path))
    assert line == (
        f"{path}:{lineno(path, 'default_model')}: key 'agent.default_model': "
        "unknown model alias 'gtp'; known aliases: opus, sonnet"
    )


def test_full_model_id_as_default_model(tmp_path: Path, project: Path) -> None:
    profile = load_profile(
        write(tmp_path / "p.toml", MINIMAL_PROFILE + 'default_model = "claude-opus-4-6"\n')
    )
    assert load_task(task_file(tmp_path, GOOD_TASK), profile).model == "claude-opus-4-6"


def test_unknown_alias_in_inline_task(tmp_path: Path, project: Path) -> None:
    path = write(
        tmp_path / "p.toml",
        MINIMAL_PROFILE + '[[tasks]]\nname = "a"\nproject_dir = "project"\nprompt = "x"\n'
        'model = "gpt"\n',
    )
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(f"{path}:{lineno(path, 'model')}: key 'tasks.0.model': ")
    assert "unknown model alias 'gpt'; known aliases: opus (claude-opus-4-6)" in line


# ------------------------------------------------------------------ project_dir


def test_missing_project_dir(tmp_path: Path, profile: LoadedProfile) -> None:
    path = task_file(tmp_path, 'name = "t"\nprompt = "hi"\n')
    assert one_problem(lambda: load_task(path, profile)) == (
        f"{path}: missing required key 'project_dir'"
    )


def test_project_dir_that_does_not_exist(tmp_path: Path, profile: LoadedProfile) -> None:
    path = task_file(tmp_path, 'name = "t"\nprompt = "hi"\nproject_dir = "no/such/dir"\n')
    line = one_problem(lambda: load_task(path, profile))
    assert line == (
        f"{path}:3: key 'project_dir': folder {str(tmp_path / 'no/such/dir')!r} does not "
        "exist; give an existing project folder (absolute, or relative to this file)"
    )


def test_project_dir_that_is_a_file(tmp_path: Path, profile: LoadedProfile) -> None:
    (tmp_path / "afile").write_text("x")
    path = task_file(tmp_path, 'name = "t"\nprompt = "hi"\nproject_dir = "afile"\n')
    line = one_problem(lambda: load_task(path, profile))
    assert line.startswith(f"{path}:3: key 'project_dir': folder ")
    assert "give an existing project folder" in line


def test_every_problem_of_a_task_is_reported(tmp_path: Path, profile: LoadedProfile) -> None:
    path = task_file(tmp_path, 'name = "t"\nprompt = "hi"\nproject_dir = "nope"\nmodel = "x"\n')
    found = problems(lambda: load_task(path, profile))
    assert [line.split(": key ")[0] for line in found] == [f"{path}:3", f"{path}:4"]
    assert "'project_dir'" in found[0]
    assert "'model'" in found[1]


# ------------------------------------------------------------------ prompt / prompt_file


def test_both_prompt_and_prompt_file(tmp_path: Path, profile: LoadedProfile, project: Path) -> None:
    (tmp_path / "p.md").write_text("hi")
    path = task_file(
        tmp_path, 'name = "t"\nproject_dir = "project"\nprompt = "hi"\nprompt_file = "p.md"\n'
    )
    line = one_problem(lambda: load_task(path, profile))
    assert line == (
        f"{path}:3: keys 'prompt', 'prompt_file': give exactly one of 'prompt' or "
        "'prompt_file' (both are given)"
    )


def test_neither_prompt_nor_prompt_file(
    tmp_path: Path, profile: LoadedProfile, project: Path
) -> None:
    path = task_file(tmp_path, 'name = "t"\nproject_dir = "project"\n')
    line = one_problem(lambda: load_task(path, profile))
    assert line == (
        f"{path}: keys 'prompt', 'prompt_file': give exactly one of 'prompt' or "
        "'prompt_file' (neither is given)"
    )


def test_both_prompts_in_second_inline_task(tmp_path: Path, project: Path) -> None:
    path = write(
        tmp_path / "p.toml",
        MINIMAL_PROFILE
        + """
        [[tasks]]
        name = "a"
        project_dir = "project"
        prompt = "x"

        [[tasks]]
        name = "b"
        project_dir = "project"
        prompt = "x"
        prompt_file = "f.md"
        """,
    )
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(
        f"{path}:{lineno(path, 'prompt =', 2)}: keys 'tasks.1.prompt', 'tasks.1.prompt_file': "
    )
    assert "(both are given)" in line


def test_prompt_file_that_cannot_be_read(
    tmp_path: Path, profile: LoadedProfile, project: Path
) -> None:
    path = task_file(tmp_path, 'name = "t"\nproject_dir = "project"\nprompt_file = "gone.md"\n')
    line = one_problem(lambda: load_task(path, profile))
    assert line.startswith(
        f"{path}:3: key 'prompt_file': cannot read {str(tmp_path / 'gone.md')!r}"
    )
    assert "UTF-8" not in line  # a missing file is not an encoding problem


def test_a_prompt_file_too_big_is_not_blamed_on_utf8(
    tmp_path: Path, profile: LoadedProfile, project: Path
) -> None:
    """Found by trying it as a user: an 11 MB file of ``a`` was "cannot read ... as UTF-8"."""
    from supervisor.config.loading import MAX_PROMPT_BYTES

    (tmp_path / "huge.md").write_bytes(b"a" * (MAX_PROMPT_BYTES + 1))
    path = task_file(tmp_path, 'name = "t"\nproject_dir = "project"\nprompt_file = "huge.md"\n')
    line = one_problem(lambda: load_task(path, profile))
    assert line.startswith(f"{path}:3: key 'prompt_file': cannot read ")
    assert "UTF-8" not in line and f"at most {MAX_PROMPT_BYTES}" in line


def test_prompt_file_not_utf8(tmp_path: Path, profile: LoadedProfile, project: Path) -> None:
    (tmp_path / "bad.md").write_bytes(b"caf\xe9\n")
    path = task_file(tmp_path, 'name = "t"\nproject_dir = "project"\nprompt_file = "bad.md"\n')
    line = one_problem(lambda: load_task(path, profile))
    assert line.startswith(f"{path}:3: key 'prompt_file': cannot read ")
    assert "as UTF-8" in line


def test_prompt_file_is_read_byte_for_byte(
    tmp_path: Path, profile: LoadedProfile, project: Path
) -> None:
    raw = "  Fix it.\r\nKeep\ttabs, trailing spaces   \n\nünïcödé ✓ and a lone \r end".encode()
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "p.md").write_bytes(raw)
    path = task_file(
        tmp_path, 'name = "t"\nproject_dir = "project"\nprompt_file = "prompts/p.md"\n'
    )
    resolved = load_task(path, profile)
    assert resolved.prompt.encode("utf-8") == raw
    assert resolved.spec.prompt_file == tmp_path / "prompts" / "p.md"


def test_inline_prompt_is_used_as_written(
    tmp_path: Path, profile: LoadedProfile, project: Path
) -> None:
    path = task_file(tmp_path, 'name = "t"\nproject_dir = "project"\nprompt = "a\\tb\\n"\n')
    assert load_task(path, profile).prompt == "a\tb\n"


# ------------------------------------------------------------------ MONITOR_* env overrides


def test_env_deadline_not_a_number(profile_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_DEADLINE", "abc")
    expected = (
        "env MONITOR_DEADLINE='abc': Input should be a valid number, "
        "unable to parse string as a number"
    )
    assert one_problem(read_env_overrides) == expected
    assert one_problem(lambda: load_profile(profile_path)) == expected


def test_env_error_when_loading_a_task_names_the_task_file(
    tmp_path: Path, profile: LoadedProfile, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = task_file(tmp_path, GOOD_TASK)
    monkeypatch.setenv("MONITOR_DEADLINE", "abc")
    line = one_problem(lambda: load_task(path, profile))
    assert line.startswith(f"{path}: env MONITOR_DEADLINE='abc': Input should be a valid number")


def test_env_base_interval_negative(profile_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_BASE_INTERVAL", "-1")
    assert one_problem(lambda: load_profile(profile_path)) == (
        f"env MONITOR_BASE_INTERVAL='-1': {TOO_LOW['base_interval']}"
    )


def test_env_unknown_variable_suggests_right_one(
    profile_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONITOR_DEADLIN", "600")
    assert one_problem(lambda: load_profile(profile_path)) == (
        f"env MONITOR_DEADLIN: unknown MONITOR_* variable (did you mean MONITOR_DEADLINE?); "
        f"known: {KNOWN_ENV}"
    )


def test_env_notifier_as_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_NOTIFIER", '["notify-send", "supervise", "{message} now"]')
    assert read_env_overrides() == {"notifier": ["notify-send", "supervise", "{message} now"]}
    policy, sources = effective_policy(MonitorOverrides())
    assert policy.notifier == ["notify-send", "supervise", "{message} now"]
    assert sources["notifier"] == "env"


def test_env_notifier_as_shell_like_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_NOTIFIER", "notify-send 'task {task_id}' \"{status}: {reason}\"")
    assert read_env_overrides() == {
        "notifier": ["notify-send", "task {task_id}", "{status}: {reason}"]
    }


def test_env_notifier_bad_json_says_what_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_NOTIFIER", '["notify-send", ')
    line = one_problem(read_env_overrides)
    assert line.startswith("env MONITOR_NOTIFIER='[\"notify-send\", ': ")
    assert line.endswith("give a JSON list of strings or a shell-like string")


def test_env_notifier_unbalanced_quote(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_NOTIFIER", "notify-send 'oops")
    line = one_problem(read_env_overrides)
    assert "No closing quotation" in line
    assert line.startswith("env MONITOR_NOTIFIER=")


def test_env_notifier_unknown_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_NOTIFIER", "notify-send {mesage}")
    line = one_problem(read_env_overrides)
    assert line.startswith("env MONITOR_NOTIFIER='notify-send {mesage}': unknown placeholder")
    assert "{message}" in line


def test_env_values_are_parsed_from_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_BASE_INTERVAL", "12.5")
    monkeypatch.setenv("MONITOR_MAX_RETRIES", "7")
    monkeypatch.setenv("MONITOR_GRACE_PERIOD", "0")
    assert read_env_overrides() == {"base_interval": 12.5, "max_retries": 7, "grace_period": 0}


def test_env_lists_as_comma_separated_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_NOTIFY_ON", "failed, abandoned")
    monkeypatch.setenv("MONITOR_RESUME_EXIT_CODES", "[75, 76]")
    monkeypatch.setenv("MONITOR_STALE_SIGNAL", "screen")
    monkeypatch.setenv("MONITOR_MAX_LOG_BYTES", "8192")
    assert read_env_overrides() == {
        "notify_on": ["failed", "abandoned"],
        "resume_exit_codes": [75, 76],
        "stale_signal": "screen",
        "max_log_bytes": 8192,
    }


def test_env_list_items_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_RESUME_EXIT_CODES", "75,0")
    monkeypatch.setenv("MONITOR_NOTIFY_ON", "failed,done")
    found = problems(read_env_overrides)
    assert len(found) == 2, found
    assert (
        "env MONITOR_RESUME_EXIT_CODES='75,0': Input should be greater than or equal to 1; "
        "allowed: from 1 to 255"
    ) in found
    assert any(
        line.startswith("env MONITOR_NOTIFY_ON='failed,done': Input should be") for line in found
    )


def test_env_seconds_keep_the_one_year_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_DEADLINE", "1e12")
    assert one_problem(read_env_overrides) == (
        "env MONITOR_DEADLINE='1e12': at most 31536000 seconds (1 year) is allowed; give fewer; "
        "allowed: more than 0, at most 31536000"
    )


def shapes(prop: dict) -> list[dict]:
    """The non-null JSON Schema alternatives of one property: its types and bounds."""
    plain = {k: v for k, v in prop.items() if k not in ("default", "title", "description")}
    return [choice for choice in plain.get("anyOf", [plain]) if choice != {"type": "null"}]


def test_monitor_keys_are_declared_once() -> None:
    """The override and env models are derived from MonitorPolicy: same keys, in the same
    order, with the same types and bounds (every key optional), and strict only for TOML."""
    from supervisor.config.env import monitor_env

    keys = list(MonitorPolicy.model_fields)
    assert len(keys) == 16  # max_cost_usd (issue 14), tool_budget (issue 21)
    assert list(MonitorOverrides.model_fields) == keys
    assert list(monitor_env().model_fields) == keys
    policy = MonitorPolicy.model_json_schema()["properties"]
    overrides = MonitorOverrides.model_json_schema()["properties"]
    for key in keys:
        assert shapes(overrides[key]) == shapes(policy[key]), key
        assert {"type": "null"} in overrides[key]["anyOf"]
        assert overrides[key]["default"] is None
        assert overrides[key]["description"] == policy[key]["description"]
    with pytest.raises(ValidationError, match="valid number"):
        MonitorOverrides(deadline="600")  # a TOML string is a wrong type
    assert monitor_env()(deadline="600").deadline == 600.0  # an env value is always a string


def test_several_env_problems_one_line_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONITOR_DEADLINE", "abc")
    monkeypatch.setenv("MONITOR_MAX_RETRIES", "-2")
    monkeypatch.setenv("MONITOR_BASEINTERVAL", "5")
    found = problems(read_env_overrides)
    assert len(found) == 3, found
    assert any(line.startswith("env MONITOR_BASEINTERVAL: unknown") for line in found)
    assert any(line.startswith("env MONITOR_DEADLINE='abc'") for line in found)
    assert any(
        line == "env MONITOR_MAX_RETRIES='-2': Input should be greater than or equal to 0; "
        "allowed: from 0 to 100"
        for line in found
    )


# ------------------------------------------------------------------ placeholders


def test_unknown_placeholder_in_command(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", '[agent]\ncommand = ["claude", "-p", "{promt}"]\n')
    line = one_problem(lambda: load_profile(path))
    assert line == (
        f"{path}:2: key 'agent.command': unknown placeholder {{promt}} in '{{promt}}'; allowed: "
        + ", ".join("{" + p + "}" for p in PLACEHOLDERS)
    )


def test_unknown_placeholder_in_resume_command(tmp_path: Path) -> None:
    path = write(
        tmp_path / "p.toml", MINIMAL_PROFILE + 'resume_command = ["claude", "--resume={sesion}"]\n'
    )
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(
        f"{path}:{lineno(path, 'resume_command')}: key 'agent.resume_command': "
        "unknown placeholder {sesion} in '--resume={sesion}'; allowed: {prompt}"
    )
    assert "{session_id}" in line


def test_every_documented_placeholder_is_accepted(tmp_path: Path) -> None:
    argv = ", ".join(f'"--{p}={{{p}}}"' for p in PLACEHOLDERS)
    path = write(tmp_path / "p.toml", f"[agent]\ncommand = [{argv}]\n")
    assert load_profile(path).spec.agent.command[0] == "--prompt={prompt}"


def test_notifier_placeholders_are_the_event_fields(tmp_path: Path) -> None:
    good = '"{message}", "{task_id}", "{task_name}", "{status}", "{reason}", "{exit_code}"'
    path = write(tmp_path / "p.toml", MINIMAL_PROFILE + f"[monitor]\nnotifier = [{good}]\n")
    assert load_profile(path).spec.monitor.notifier[3] == "{status}"
    write(path, MINIMAL_PROFILE + '[monitor]\nnotifier = ["notify-send", "{prompt}"]\n')
    line = one_problem(lambda: load_profile(path))
    assert line.startswith(
        f"{path}:{lineno(path, 'notifier')}: key 'monitor.notifier': unknown placeholder "
        "{prompt} in '{prompt}'; allowed: {message}, {task_id}"
    )


# ------------------------------------------------------------------ precedence and defaults


def test_defaults(tmp_path: Path, profile: LoadedProfile, project: Path) -> None:
    resolved = load_task(task_file(tmp_path, GOOD_TASK), profile)
    policy = resolved.policy
    assert policy.base_interval == 30
    assert policy.max_interval == 300
    assert policy.deadline == 18000
    assert policy.grace_period == 30
    assert policy.stale_threshold == 90 == 3 * policy.base_interval
    assert policy.max_retries == 3
    assert policy.notifier == []
    assert policy.notify_on == ["escalated", "failed", "abandoned", "completed"]
    assert policy.resume_exit_codes == []
    assert resolved.sources == {
        "base_interval": "default",
        "max_interval": "default",
        "deadline": "default",
        "grace_period": "default",
        "stale_threshold": "default (3 x base_interval)",
        "max_retries": "default",
        "notifier": "default",
        "notifier_timeout": "default",
        "notify_on": "default",
        "resume_exit_codes": "default",
        "max_log_bytes": "default",
        "log_backups": "default",
        "stale_signal": "default",
        "max_denials": "default",
        "max_cost_usd": "default",
        "tool_budget": "default",
    }
    assert policy.max_cost_usd is None  # no budget unless one is set


def test_precedence_task_over_env_over_profile_over_default(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = load_profile(
        write(
            tmp_path / "p.toml",
            MINIMAL_PROFILE
            + """
            [monitor]
            base_interval = 10
            max_interval = 100
            deadline = 1000
            max_retries = 5
            [security]
            task_may_set = ["model", "monitor"]
            """,
        )
    )
    monkeypatch.setenv("MONITOR_BASE_INTERVAL", "20")
    monkeypatch.setenv("MONITOR_DEADLINE", "2000")
    monkeypatch.setenv("MONITOR_NOTIFIER", "notify-send {message}")
    path = task_file(tmp_path, GOOD_TASK + "[monitor]\ndeadline = 3000\nnotifier = []\n")
    resolved = load_task(path, profile)
    policy = resolved.policy
    assert policy.base_interval == 20  # env beats profile
    assert policy.max_interval == 100  # profile beats default
    assert policy.deadline == 3000  # task beats env and profile
    assert policy.notifier == []  # task beats env, even when empty
    assert policy.max_retries == 5  # profile
    assert policy.grace_period == 30  # default
    assert policy.stale_threshold == 60  # 3 x the effective base_interval (from env)
    assert resolved.sources == {
        "base_interval": "env",
        "max_interval": "profile",
        "deadline": "task",
        "grace_period": "default",
        "stale_threshold": "default (3 x base_interval)",
        "max_retries": "profile",
        "notifier": "task",
        "notifier_timeout": "default",
        "notify_on": "default",
        "resume_exit_codes": "default",
        "max_log_bytes": "default",
        "log_backups": "default",
        "stale_signal": "default",
        "max_denials": "default",
        "max_cost_usd": "default",
        "tool_budget": "default",
    }


def test_explicit_stale_threshold_wins_over_three_times_base(
    tmp_path: Path, profile: LoadedProfile, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONITOR_STALE_THRESHOLD", "45")
    path = task_file(tmp_path, GOOD_TASK + "[monitor]\nbase_interval = 5\n")
    resolved = load_task(path, profile)
    assert resolved.policy.stale_threshold == 45
    assert resolved.policy.stale_after == 45
    assert resolved.sources["stale_threshold"] == "env"


def test_profile_monitor_alone(tmp_path: Path, project: Path) -> None:
    profile = load_profile(
        write(tmp_path / "p.toml", MINIMAL_PROFILE + "[monitor]\nbase_interval = 7\n")
    )
    resolved = load_task(task_file(tmp_path, GOOD_TASK), profile)
    assert resolved.policy.base_interval == 7
    assert resolved.policy.stale_threshold == 21
    assert resolved.sources["base_interval"] == "profile"


def test_inline_tasks_get_their_own_monitor(tmp_path: Path, project: Path) -> None:
    profile = load_profile(
        write(
            tmp_path / "p.toml",
            MINIMAL_PROFILE
            + """
            [monitor]
            deadline = 100

            [[tasks]]
            name = "a"
            project_dir = "project"
            prompt = "x"

            [tasks.monitor]
            deadline = 50
            """,
        )
    )
    task = profile.spec.tasks[0]
    assert task.project_dir == project  # resolved against the profile's folder
    resolved = resolve_task(task, profile, tmp_path, profile.path)
    assert isinstance(resolved, ResolvedTask)
    assert resolved.policy.deadline == 50
    assert resolved.sources["deadline"] == "task"


# ------------------------------------------------------------------ relative paths


def test_relative_paths_resolve_against_the_profile_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path = write(
        tmp_path / "conf" / "p.toml",
        MINIMAL_PROFILE + '[paths]\nspool_dir = "spool"\nstate_dir = "../var/state"\n',
    )
    loaded = load_profile(path)
    assert loaded.path == path
    assert loaded.spool_dir == tmp_path / "conf" / "spool"
    assert loaded.state_dir == tmp_path / "var" / "state"
    assert loaded.tasks_dir == tmp_path / "var" / "state" / "tasks"


def test_default_paths_are_next_to_the_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    loaded = load_profile(write(tmp_path / "conf" / "p.toml", MINIMAL_PROFILE))
    assert loaded.spool_dir == tmp_path / "conf" / "spool"
    assert loaded.state_dir == tmp_path / "conf" / "state"


def test_absolute_and_home_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    absolute = tmp_path / "abs" / "spool"
    path = write(
        tmp_path / "conf" / "p.toml",
        MINIMAL_PROFILE + f'[paths]\nspool_dir = "{absolute}"\nstate_dir = "~/state"\n',
    )
    loaded = load_profile(path)
    assert loaded.spool_dir == absolute
    assert loaded.state_dir == tmp_path / "home" / "state"


def test_profile_given_as_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "conf" / "p.toml", MINIMAL_PROFILE)
    monkeypatch.chdir(tmp_path)
    loaded = load_profile("conf/p.toml")
    assert loaded.path == tmp_path / "conf" / "p.toml"
    assert loaded.spool_dir == tmp_path / "conf" / "spool"


def test_task_paths_resolve_against_the_task_file_folder(
    tmp_path: Path, profile: LoadedProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "repo").mkdir()
    write(tmp_path / "tasks" / "prompts" / "p.md", "do it")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    path = write(
        tmp_path / "tasks" / "t.toml",
        'name = "t"\nproject_dir = "../repo"\nprompt_file = "prompts/p.md"\n',
    )
    resolved = load_task(path, profile)
    assert resolved.spec.project_dir == tmp_path / "repo"
    assert resolved.spec.prompt_file == tmp_path / "tasks" / "prompts" / "p.md"
    assert resolved.prompt == "do it"


def test_task_paths_resolve_against_base_when_given(tmp_path: Path, profile: LoadedProfile) -> None:
    (tmp_path / "origin" / "repo").mkdir(parents=True)
    path = write(tmp_path / "moved" / "t.toml", 'name = "t"\nproject_dir = "repo"\nprompt = "x"\n')
    resolved = load_task(path, profile, base=tmp_path / "origin")
    assert resolved.spec.project_dir == tmp_path / "origin" / "repo"


def test_inline_task_paths_resolve_against_the_profile_folder(tmp_path: Path) -> None:
    (tmp_path / "conf" / "proj").mkdir(parents=True)
    write(tmp_path / "conf" / "prompt.md", "inline prompt file")
    loaded = load_profile(
        write(
            tmp_path / "conf" / "p.toml",
            MINIMAL_PROFILE
            + '[[tasks]]\nname = "a"\nproject_dir = "proj"\nprompt_file = "prompt.md"\n',
        )
    )
    task = loaded.spec.tasks[0]
    assert task.project_dir == tmp_path / "conf" / "proj"
    assert task.prompt_file == tmp_path / "conf" / "prompt.md"


# ------------------------------------------------------------------ looks_like_profile


@pytest.mark.parametrize(
    ("text", "is_profile"),
    [
        (MINIMAL_PROFILE, True),
        ('name = "x"\nprompt = "y"\n' + MINIMAL_PROFILE, True),  # [agent] decides
        ('[paths]\nspool_dir = "s"\n', True),  # no [agent]: still a (broken) profile
        ("max_concurrent = 2\n[tmux]\nsocket_name = 'x'\n", True),
        (GOOD_TASK, False),
        ('name = "x"\n', False),
        ("[monitor]\ndeadline = 5\n", False),  # ambiguous: a task
        ("", False),
    ],
)
def test_looks_like_profile(tmp_path: Path, text: str, is_profile: bool) -> None:
    assert looks_like_profile(write(tmp_path / "f.toml", text)) is is_profile


def test_looks_like_profile_on_bad_toml(tmp_path: Path) -> None:
    path = write(tmp_path / "f.toml", "= 1\n")
    assert one_problem(lambda: looks_like_profile(path)).startswith(f"{path}: malformed TOML")


# ------------------------------------------------------------------ supervise validate


@pytest.fixture
def files(tmp_path: Path, project: Path) -> dict[str, Path]:
    """A good profile (with a custom alias), good and bad tasks."""
    return {
        "profile": write(
            tmp_path / "profile.toml",
            MINIMAL_PROFILE + '[agent.models]\nfast = "claude-haiku-4-5"\n',
        ),
        "bad_profile": write(
            tmp_path / "bad_profile.toml", MINIMAL_PROFILE + "[monitor]\ndeadline = 0\n"
        ),
        "task": task_file(tmp_path, GOOD_TASK),
        "fast_task": task_file(tmp_path, GOOD_TASK + 'model = "fast"\n', "fast.toml"),
        "bad_task": task_file(tmp_path, GOOD_TASK + 'model = "opsu"\n', "bad.toml"),
        "broken": write(tmp_path / "broken.toml", "name = \n"),
    }


def test_validate_good_files(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["validate", str(files["profile"]), str(files["task"])])
    out, err = capsys.readouterr()
    assert code == 0
    assert out.splitlines() == [
        f"ok: {files['profile']} (profile)",
        f"ok: {files['task']} (task)",
    ]
    assert err == ""


def test_validate_reports_every_bad_file(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        [
            "validate",
            str(files["bad_profile"]),
            str(files["task"]),
            str(files["bad_task"]),
            str(files["broken"]),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 1
    assert out.splitlines() == [f"ok: {files['task']} (task)"]
    lines = err.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith(f"{files['bad_profile']}:")
    assert "'monitor.deadline': Input should be greater than 0" in lines[0]
    assert lines[1].startswith(f"{files['bad_task']}:")
    assert "unknown model alias 'opsu'" in lines[1]
    assert lines[2].startswith(f"{files['broken']}: malformed TOML")


def test_validate_uses_the_profile_for_aliases(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["validate", str(files["fast_task"])]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "unknown model alias 'fast'" in err

    code = cli.main(["validate", "-c", str(files["profile"]), str(files["fast_task"])])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == f"ok: {files['fast_task']} (task)\n"


def test_validate_with_a_bad_profile_stops(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["validate", "-c", str(files["bad_profile"]), str(files["task"])])
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert err.startswith(f"{files['bad_profile']}:")


def test_validate_sees_env_overrides(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONITOR_DEADLIN", "5")
    assert cli.main(["validate", str(files["profile"])]) == 1
    assert "did you mean MONITOR_DEADLINE?" in capsys.readouterr().err


def test_validate_needs_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["validate"])
    assert info.value.code == 2
    assert "FILE" in capsys.readouterr().err


def _supervise_command() -> list[str]:
    script = Path(sys.executable).with_name("supervise")
    if script.exists():
        return [str(script)]
    found = shutil.which("supervise")
    if found is None:
        pytest.skip("the supervise console script is not installed")
    return [found]


def test_validate_console_script(files: dict[str, Path]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("MONITOR_")}
    command = _supervise_command()
    profile, task, fast = (str(files[k]) for k in ("profile", "task", "fast_task"))
    good = subprocess.run(
        [*command, "validate", "-c", profile, profile, task, fast],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert good.returncode == 0, good.stderr
    assert good.stdout.splitlines() == [
        f"ok: {files['profile']} (profile)",
        f"ok: {files['task']} (task)",
        f"ok: {files['fast_task']} (task)",
    ]
    bad = subprocess.run(
        [*command, "validate", str(files["task"]), str(files["bad_task"])],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stdout == f"ok: {files['task']} (task)\n"
    assert bad.stderr.startswith(f"{files['bad_task']}:")
    assert "unknown model alias 'opsu'" in bad.stderr


def test_claude_headless_without_hooks_must_not_ask_for_permissions(tmp_path: Path) -> None:
    path = write(tmp_path / "p.toml", '[agent]\nkind = "claude"\nhooks = false\n')
    line = one_problem(lambda: load_profile(path))
    assert "with hooks = false nothing answers permission requests" in line, line
    ok = write(
        tmp_path / "q.toml",
        '[agent]\nkind = "claude"\nhooks = false\npermission_mode = "acceptEdits"\n',
    )
    assert load_profile(ok).spec.agent.permission_mode == "acceptEdits"


def test_claude_kind_refuses_a_command_and_generic_needs_one(tmp_path: Path) -> None:
    claude = write(tmp_path / "c.toml", '[agent]\nkind = "claude"\ncommand = ["claude"]\n')
    assert "kind 'claude' builds the command line itself" in one_problem(
        lambda: load_profile(claude)
    )
    generic = write(tmp_path / "g.toml", "[agent]\ndefault_model = 'opus'\n")
    assert "kind 'generic' needs 'command'" in one_problem(lambda: load_profile(generic))
