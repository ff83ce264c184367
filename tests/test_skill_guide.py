"""Issue 22 item 7: SKILL.md tells an orchestrator what to do on every status, verdict,
failure reason and abandon reason (from their one definition, ``supervisor/taskdir/states.py``), how
to answer an escalation, and keeps front matter OpenClaw can read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from supervisor.taskdir.states import AbandonReason, FailureReason, Status, Verdict

REPO = Path(__file__).resolve().parent.parent
SKILL = (REPO / "SKILL.md").read_text(encoding="utf-8")
GUIDE_HEADING = "## Every status and reason: what to do next"


def _section(heading: str) -> str:
    """The text of the SKILL.md section under ``heading`` (up to the next ``## ``)."""
    start = SKILL.index(heading)
    end = SKILL.find("\n## ", start + len(heading))
    return SKILL[start : end if end != -1 else len(SKILL)]


def _guided(value: str, text: str) -> bool:
    """``value`` is a row's first cell or a bullet's lead (`` `value` ``) with advice after
    it on the same line."""
    pattern = rf"^(\| `{re.escape(value)}`[^|\n]*\|\s*\S|- `{re.escape(value)}`\S*[^\n]*\S)"
    return re.search(pattern, text, re.MULTILINE) is not None


@pytest.mark.parametrize(
    "value",
    [*Status, *Verdict, *FailureReason, *AbandonReason],
    ids=lambda v: f"{type(v).__name__}.{v.value}",
)
def test_every_status_verdict_and_reason_has_guidance(value: str) -> None:
    assert _guided(str(value), _section(GUIDE_HEADING)), f"no guidance for `{value}`"


def test_the_guide_says_how_to_answer_an_escalation_and_see_the_rules() -> None:
    guide = _section(GUIDE_HEADING)
    for needed in ("escalation", "supervise approve", "supervise deny", "supervise config",
                   "tool", "subject", "reason", "needs_you"):  # fmt: skip
        assert needed in guide, needed


def test_abandon_reasons_are_the_policys_own() -> None:
    """Every reason the policy abandons with is a member (none spelled elsewhere)."""
    policy = "\n".join(p.read_text() for p in (REPO / "supervisor" / "policy").glob("*.py"))
    assert not re.search(r'abandon\(\s*state,\s*"', policy), "a reason spelled as a string"
    assert not re.search(r'abandon_reason="', policy), "a reason spelled as a string"


def test_front_matter_is_yaml_openclaw_reads() -> None:
    yaml = pytest.importorskip("yaml")
    assert SKILL.startswith("---\n")
    front = yaml.safe_load(SKILL.split("---\n")[1])
    assert isinstance(front, dict) and front["name"] == "supervise"
    assert isinstance(front["description"], str) and "\n" not in front["description"]
    metadata = front["metadata"]
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    requires = metadata["openclaw"]["requires"]
    assert {"tmux", "supervise"} <= set(requires["bins"])
