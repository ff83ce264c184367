"""Issue 21, Build 2: a prompt of any documented size launches in both modes with the real
Claude Code CLI (pinned 2.1.328) against the mock Messages API.

Linux caps one argv or environment string at 128 KiB (``MAX_ARG_STRLEN``): a 300 KB prompt
passed as one argument fails with exit 127, "Argument list too long". Measured with the
real CLI: ``-p`` reads its prompt from stdin (a regular file, EOF at its end; also with
``--resume``), and the TUI takes a 300 KB bracketed paste (``tmux paste-buffer -p``) as
``[Pasted text #1 +N lines]`` and sends all of it on Enter.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.claude_harness import Harness
from support.claude_support import start_mock, stop_mock
from support.mock_anthropic import MockAnthropic, first_user_text

pytestmark = pytest.mark.e2e

#: Bytes of the big prompt: well over the kernel's 128 KiB per argv string.
BIG = 300_000


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    made: list[tuple[Harness, MockAnthropic]] = []

    def make(**mock_args: Any) -> Harness:
        mock = start_mock(**mock_args)
        h = Harness(tmp_path, mock)
        made.append((h, mock))
        return h

    yield make
    for h, mock in made:
        h.close()
        stop_mock(mock)


def big_prompt(head: str) -> str:
    """``head`` (the mock's directives), then lines of filler up to :data:`BIG` bytes,
    then an end mark the test looks for in what the API received."""
    filler = "".join(f"filler line {i:06d} of a very long task description\n" for i in range(6000))
    return (head + "\n" + filler)[: BIG - 20] + "\nEND-OF-PROMPT-MARK\n"


@pytest.mark.parametrize("mode", ["headless", "interactive"])
def test_a_300_kb_prompt_file_launches_and_completes(harness, mode: str) -> None:
    """A 300 KB ``prompt_file`` ends ``completed``/PASS with ``retry_count`` 0, and the
    API received the whole prompt (its first and last lines) in the first user turn."""
    h = harness(final_text="done with the big prompt")
    project = h.project()
    h.write_profile(
        agent={"mode": mode},
        approval={"rules": [{"tool": "Write", "action": "approve"}]},
    )
    prompt_file = h.root / "prompt.md"
    prompt_file.write_text(big_prompt("[[write: big.txt | written]] write big.txt"), "utf-8")
    assert prompt_file.stat().st_size > 128 * 1024
    task = {"name": "big", "prompt_file": str(prompt_file), "project_dir": str(project)}
    (h.spool / "big.toml").write_text(json_to_toml(task), encoding="utf-8")
    h.start()
    h.finish()
    m = h.manifests()["big"]
    info = json.dumps({k: m[k] for k in m if k != "output_tail"}, indent=1) + h.diagnostics()
    assert (m["status"], m["verdict"], m["retry_count"]) == ("completed", "PASS", 0), info
    assert (project / "big.txt").read_text() == "written\n", info
    main = [r for r in h.mock.message_requests() if r.offers_tools]
    assert main, info
    first = first_user_text(main[0].messages)
    assert "[[write: big.txt | written]]" in first and "END-OF-PROMPT-MARK" in first, info
    argv = json.loads((Path(m["tmpdir"]) / "launch.json").read_text("utf-8"))["argv"]
    assert max(len(a.encode()) for a in argv) < 128 * 1024, argv


def json_to_toml(data: dict[str, str]) -> str:
    import tomli_w

    return tomli_w.dumps(data)


@pytest.mark.parametrize(
    ("mode", "reason", "said"),
    [
        ("headless", "invalid_request", "Prompt is too long"),
        ("interactive", "launch", "context window"),
    ],
)
def test_a_prompt_over_the_context_window_fails_at_once(
    harness, mode: str, reason: str, said: str
) -> None:
    """An 800 KB prompt is over sonnet-4-6's 200k-token window (the CLI estimates; 650 KB
    passes). The CLI refuses it without an API call: ``-p`` exits 1 with "Prompt is too
    long"; the TUI shows "Context limit reached" and waits with no hook, which the wrapper
    sees. Both end ``failed`` at once, retry 0, with the cause in the summary."""
    h = harness()
    project = h.project()
    h.write_profile(agent={"mode": mode})
    prompt_file = h.root / "prompt.md"
    filler = "".join(f"filler line {i:06d} of a very long task description\n" for i in range(16000))
    prompt_file.write_text(filler, "utf-8")
    assert prompt_file.stat().st_size > 750_000
    task = {"name": "huge", "prompt_file": str(prompt_file), "project_dir": str(project)}
    (h.spool / "huge.toml").write_text(json_to_toml(task), encoding="utf-8")
    h.start()
    h.finish()
    m = h.manifests()["huge"]
    info = json.dumps({k: m[k] for k in m if k != "output_tail"}, indent=1) + h.diagnostics()
    assert (m["status"], m["failure_reason"], m["retry_count"]) == ("failed", reason, 0), info
    assert said in m["summary"], info
    assert not [r for r in h.mock.message_requests() if r.offers_tools], info
