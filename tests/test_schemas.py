"""The shipped JSON Schemas match the models, and the shipped profiles load."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from supervisor import schemas
from supervisor.config import Profile, load_profile
from supervisor.taskdir.folder import Manifest
from supervisor.taskdir.states import LIVE, TERMINAL, FailureReason, Status, Verdict

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = REPO / "schemas"
PROFILES = sorted((REPO / "profiles").glob("*.toml"))
NAMES = (
    "manifest.schema.json", "profile.schema.json", "task.schema.json", "status.schema.json",
    "permission-event.schema.json",
)  # fmt: skip


@pytest.fixture(autouse=True)
def _no_monitor_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.upper().startswith("MONITOR_"):
            monkeypatch.delenv(key)


def test_default_folder_is_the_repo_schemas_folder() -> None:
    assert schemas.DEFAULT_FOLDER == SCHEMAS


@pytest.mark.parametrize("name", NAMES)
def test_schema_files_match_the_models(name: str) -> None:
    generated = schemas.render(schemas.schemas()[name])
    path = SCHEMAS / name
    on_disk = path.read_text(encoding="utf-8") if path.exists() else None
    assert on_disk == generated, (
        f"{path} has drifted from the pydantic models; regenerate it with "
        "`python -m supervisor.schemas` and commit the result"
    )


def test_no_stray_schema_files() -> None:
    assert sorted(p.name for p in SCHEMAS.glob("*.json")) == sorted(NAMES)


def test_schema_headers() -> None:
    generated = schemas.schemas()
    assert sorted(generated) == sorted(NAMES)
    for name, schema in generated.items():
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"] == f"urn:supervise:schemas:{name}"
        assert schema["title"].startswith("supervise ")
        assert schema["type"] == "object"
    assert generated["profile.schema.json"]["required"] == ["agent"]
    assert set(generated["profile.schema.json"]["properties"]) == set(Profile.model_fields)
    assert generated["task.schema.json"]["required"] == ["name", "project_dir"]
    assert generated["task.schema.json"]["additionalProperties"] is False
    manifest = generated["manifest.schema.json"]
    assert set(manifest["properties"]) == set(Manifest.model_fields)
    assert manifest["properties"]["status"]["enum"] == [
        "queued",
        "blocked",
        "running",
        "crashed",
        "hung",
        "waiting",
        "escalated",
        "verifying",
        "completed",
        "failed",
        "abandoned",
        "superseded",
    ]


def test_render_is_stable() -> None:
    text = schemas.render({"b": 1, "a": {"d": [1, 2], "c": "×"}})
    expected = """\
{
  "a": {
    "c": "×",
    "d": [
      1,
      2
    ]
  },
  "b": 1
}
"""
    assert text == expected


def test_write_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "out"
    written = schemas.write(folder)
    assert [p.name for p in written] == list(schemas.MODELS)
    for path in written:
        assert json.loads(path.read_text(encoding="utf-8")) == schemas.schemas()[path.name]
    assert schemas.drifted(folder) == []
    assert schemas.main(["--check", str(folder)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {len(NAMES)} schemas")


def test_check_names_drifted_and_missing_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schemas.write(tmp_path)
    task = tmp_path / "task.schema.json"
    task.write_text(task.read_text(encoding="utf-8").replace('"name"', '"nmae"'), "utf-8")
    (tmp_path / "manifest.schema.json").unlink()
    assert schemas.drifted(tmp_path) == ["task.schema.json", "manifest.schema.json"]
    assert schemas.main(["--check", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{task}: out of date" in err
    assert f"{tmp_path / 'manifest.schema.json'}: out of date" in err
    assert "profile.schema.json" not in err
    assert f"run: python -m supervisor.schemas {tmp_path}" in err
    # --check never writes
    assert not (tmp_path / "manifest.schema.json").exists()
    assert schemas.main([str(tmp_path)]) == 0
    assert schemas.drifted(tmp_path) == []


def test_check_of_the_repo_folder() -> None:
    assert schemas.main(["--check"]) == 0, "run `python -m supervisor.schemas`"


@pytest.mark.parametrize("path", PROFILES, ids=[p.name for p in PROFILES])
def test_shipped_profiles_load(path: Path) -> None:
    loaded = load_profile(path)
    assert loaded.path == path
    assert loaded.spec.agent.command or loaded.spec.agent.kind == "claude"


def test_there_are_shipped_profiles() -> None:
    assert any(p.name == "demo.toml" for p in PROFILES)


def test_manifest_enums_come_from_states() -> None:
    """status, verdict and failure_reason list exactly the members of supervisor.taskdir.states."""
    props = schemas.schemas()["manifest.schema.json"]["properties"]

    def values(prop: dict) -> list[str]:
        return next(p for p in prop.get("anyOf", [prop]) if "enum" in p)["enum"]

    assert values(props["status"]) == [s.value for s in Status]
    assert values(props["verdict"]) == [v.value for v in Verdict]
    assert values(props["failure_reason"]) == [r.value for r in FailureReason]


def test_terminal_and_live_partition_the_statuses() -> None:
    """Every status is queued, blocked (issue 26: waits for its predecessors, no slot), live
    or terminal, and only one of them."""
    assert {"completed", "failed", "abandoned", "superseded"} == TERMINAL
    waiting = {Status.QUEUED, Status.BLOCKED}
    assert not LIVE & TERMINAL and not waiting & (LIVE | TERMINAL)
    assert LIVE | TERMINAL | waiting == set(Status)
    assert Status.RUNNING == "running" and f"{Status.RUNNING}" == "running"
    assert json.dumps({"status": Status.WAITING}) == '{"status": "waiting"}'


def test_manifest_reads_and_writes_statuses_as_strings(tmp_path: Path) -> None:
    manifest = Manifest.model_validate(
        {"task_id": "t", "task_name": "t", "model": "m", "project_dir": "/", "session_name": "t",
         "session_id": "s", "tmpdir": "/t", "created_at": "2026-01-01T00:00:00.000Z",
         "status": "completed", "verdict": "PASS", "failure_reason": None}
    )  # fmt: skip
    assert manifest.status is Status.COMPLETED and manifest.verdict is Verdict.PASS
    dumped = json.loads(manifest.model_dump_json())
    assert (dumped["status"], dumped["verdict"]) == ("completed", "PASS")
    with pytest.raises(ValueError, match="status"):
        Manifest.model_validate({**dumped, "status": "done"})
