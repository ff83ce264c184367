"""``supervise submit`` without a task file (issue 22 item 4): ``--prompt``, ``--prompt-file``
(``-`` for stdin), a task file on stdin (``-``), ``--set KEY=VALUE``, ``--wait``; the same
validation and one-line errors as a task file, the same spool path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import Setup
from support.ops_engine import engine

from supervisor.config import MAX_TASK_FILE_BYTES, load_profile
from supervisor.errors import ConfigError
from supervisor.inline_submit import parse_set, submit_fields


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single error line of a refused submit (no traceback, nothing spooled)."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_prompt_flags_spool_the_same_file_a_task_file_would(setup: Setup) -> None:
    setup.write_profile()
    result = setup.supervise(
        "submit",
        "-c",
        str(setup.profile),
        "--prompt",
        'print: "inline" \\ ok\nexit: 0',
        "--project",
        str(setup.project),
        "--name",
        "inline-one",
        "--model",
        "opus",
        "--set",
        "monitor.deadline=90",
        "--set",
        'acceptance.command=["true"]',
    )
    assert result.returncode == 0, result.stderr
    task_id = result.stdout.strip()
    assert task_id.startswith("inline-one-"), result.stdout
    spooled = tomllib.loads((setup.spool / f"{task_id}.toml").read_text())
    assert spooled["prompt"] == 'print: "inline" \\ ok\nexit: 0'
    assert spooled["project_dir"] == str(setup.project)
    assert spooled["model"] == "opus"
    assert spooled["monitor"] == {"deadline": 90.0}
    assert spooled["acceptance"]["command"] == ["true"]
    run = setup.run()
    assert run.returncode == 0, run.stderr
    manifest = setup.manifests()["inline-one"]
    assert (manifest["task_id"], manifest["status"], manifest["verdict"]) == (
        task_id,
        "completed",
        "PASS",
    )


def test_prompt_file_dash_and_a_task_file_on_stdin(setup: Setup) -> None:
    setup.write_profile()
    piped = setup.supervise(
        "submit",
        "-c",
        str(setup.profile),
        "--prompt-file",
        "-",
        "--project",
        "project",
        input="print: from stdin\n",
        cwd=setup.root,
    )
    assert piped.returncode == 0, piped.stderr
    spooled = tomllib.loads((setup.spool / f"{piped.stdout.strip()}.toml").read_text())
    assert spooled["prompt"] == "print: from stdin\n"
    assert spooled["name"] == "project"  # the project folder's name when --name is left out
    assert spooled["project_dir"] == str(setup.project)  # relative to the current folder
    toml = 'name = "piped"\nprompt = "print: hi"\nproject_dir = "project"\n'
    whole = setup.supervise(
        "submit", "-c", str(setup.profile), "-", "--json", input=toml, cwd=setup.root
    )
    assert whole.returncode == 0, whole.stderr
    placed = json.loads(whole.stdout)
    assert placed["name"] == "piped"
    assert Path(placed["spool_file"]).exists()


def test_bad_inline_input_is_one_line_naming_the_key_and_nothing_is_spooled(
    setup: Setup, tmp_path: Path
) -> None:
    setup.write_profile()
    config = str(setup.profile)
    project = str(setup.project)
    cases = {
        ("--prompt", "x"): "--project DIR is required",
        ("--prompt", "x", "--project", str(tmp_path / "nowhere")): "key 'project_dir'",
        ("--prompt", "x", "--project", project, "--model", "nosuch"): "unknown model alias",
        ("--prompt", "x", "--project", project, "--set", "monitor.deadline=-5"): "'monitor",
        ("--prompt", "x", "--project", project, "--set", "env.PATH=/tmp"): "key 'env'",
        ("--prompt", "x", "--project", project, "--set", "nosuch=1"): "unknown key 'nosuch'",
        ("--prompt", "x", "--project", project, "--set", "oops"): "give KEY=VALUE",
        ("--prompt", "x", "--project", project, "--set", "prompt=y"): "use --prompt",
        ("--prompt", "x", "--prompt-file", "f", "--project", project): "not both",
        ("--name", "n"): "give a task file, '-'",
        ("some.toml", "--prompt", "x"): "cannot be combined with a task file",
        ("--prompt", "x", "--project", project, "--timeout", "5"): "add --wait",
    }
    for argv, expected in cases.items():
        line = _one_line(setup.supervise("submit", "-c", config, *argv, cwd=setup.root))
        assert expected in line, (argv, line)
    big = setup.supervise("submit", "-c", config, "-", input="x" * (MAX_TASK_FILE_BYTES + 10))
    assert "<stdin>" in _one_line(big) and "bytes" in _one_line(big)
    bad = setup.supervise("submit", "-c", config, "-", input="name = [")
    assert "<stdin>: malformed TOML" in _one_line(bad)
    assert not setup.spool.exists() or not list(setup.spool.glob("*.toml"))


def test_submit_wait_prints_the_id_then_waits_for_the_outcome(setup: Setup) -> None:
    setup.write_profile()
    with engine(setup):
        result = setup.supervise(
            "submit",
            "-c",
            str(setup.profile),
            "--prompt",
            "print: waited\nexit: 3",
            "--project",
            str(setup.project),
            "--name",
            "waited",
            "--wait",
            "--timeout",
            "60",
        )
    lines = result.stdout.splitlines()
    assert lines[0].startswith("waited-"), result.stdout
    assert lines[1].startswith(f"{lines[0]}: failed FAIL"), result.stdout
    assert result.returncode == 1, result.stderr  # wait's code: one did not PASS


def test_submit_fields_validates_like_a_file_and_returns_the_id(setup: Setup) -> None:
    profile = load_profile(setup.write_profile())
    fields = {
        "name": "api",
        "prompt": "print: x",
        "project_dir": str(setup.project),
        "model": None,
        "monitor": {"max_retries": 1},
    }
    task_id = submit_fields(profile, fields)
    assert (setup.spool / f"{task_id}.toml").exists()
    try:
        submit_fields(profile, {"name": "api", "prompt": "x", "project_dir": "/nonexistent"})
    except ConfigError as exc:
        assert len(exc.problems) == 1 and "key 'project_dir'" in exc.problems[0], exc.problems
    else:
        raise AssertionError("a missing project folder was accepted")


def test_a_submitted_workspace_copy_list_is_spooled_as_the_file_spells_it(setup: Setup) -> None:
    """``[workspace] copy`` is ``copy_paths`` in the model: the spooled file must say
    ``copy`` (it said ``copy_paths``, which the claim then refused as an unknown key)."""
    from supervisor.config import load_task

    may_set = {"security": {"task_may_set": ["workspace"]}}
    profile = load_profile(setup.write_profile(extra=may_set))
    fields = {
        "name": "copies",
        "prompt": "print: x",
        "project_dir": str(setup.project),
        "workspace": {"copy": [".env"]},
    }
    task_id = submit_fields(profile, fields)
    spooled = setup.spool / f"{task_id}.toml"
    assert tomllib.loads(spooled.read_text())["workspace"] == {"copy": [".env"]}
    assert load_task(spooled, profile).spec.workspace.copy_paths == [".env"]


def test_parse_set_reads_toml_values_and_nests_dotted_keys() -> None:
    table = parse_set(
        [
            "monitor.deadline=60",
            "monitor.max_retries=2",
            "env.A=plain text",
            'acceptance.command=["pytest", "-q"]',
            "host=h1",
        ]
    )
    assert table == {
        "monitor": {"deadline": 60, "max_retries": 2},
        "env": {"A": "plain text"},
        "acceptance": {"command": ["pytest", "-q"]},
        "host": "h1",
    }
    for bad in (["a.=1"], ["monitor.deadline=1", "monitor.deadline=2"], ["x=1", "x.y=2"]):
        try:
            parse_set(bad)
        except ConfigError as exc:
            assert len(exc.problems) == 1
        else:
            raise AssertionError(bad)


def test_two_inline_submits_at_once_get_two_ids(setup: Setup) -> None:
    setup.write_profile()
    argv = [
        "submit",
        "-c",
        str(setup.profile),
        "--prompt",
        "print: x",
        "--project",
        str(setup.project),
        "--name",
        "same",
    ]
    env = {**os.environ}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    ids = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(ids)) == 4
    assert sorted(p.stem for p in setup.spool.glob("*.toml")) == sorted(ids)
