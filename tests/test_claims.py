"""Claims run on a thread of their own (issue 11: "claims of large files happen off the check
path"): while one spool file's claim is in progress, a live task's end is still recorded.
The claim is held open by a gate; everything else is real: tmux, the fake agent, the files,
the engine's own threads."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import Setup, wait_for
from support.engine_in_process import _run_engine_in_process

from supervisor import spool
from supervisor.engine.scheduler import Engine


def test_a_claim_in_progress_delays_no_check(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    setup.write_profile(base_interval=30, max_interval=60, stale_threshold=60)
    setup.drop("a.toml", setup.task("running", "tick: 0.2\nsleep: 2\nexit: 0"))
    entered, release = threading.Event(), threading.Event()
    real_claim = spool.claim

    def gated_claim(path: Path, *args: Any, **kwargs: Any) -> Any:
        if path.name == "slow.toml":  # a claim that takes as long as the test needs
            entered.set()
            release.wait(60)
        return real_claim(path, *args, **kwargs)

    monkeypatch.setattr(spool, "claim", gated_claim)
    seen: dict[str, Any] = {}

    def helper(engine: Engine) -> None:
        manifest = wait_for(lambda: next(setup.state.glob("tasks/*/manifest.json"), None))
        wait_for(lambda: json.loads(manifest.read_bytes())["pid"], timeout=60)
        setup.drop("slow.toml", setup.task("claimed-slowly", "exit: 0"))
        try:
            assert entered.wait(20), "the claim of slow.toml never started"
            # base_interval is 30 s: only the done file's event can get this task looked at,
            # and it must be while the other file's claim is still held.
            seen["status"] = wait_for(
                lambda: json.loads(manifest.read_bytes())["status"] == "completed" or None,
                timeout=60,
            )
            seen["claim_still_held"] = not release.is_set()
        finally:
            release.set()

    _run_engine_in_process(setup, helper)
    assert seen == {"status": True, "claim_still_held": True}
    statuses = {name: m["status"] for name, m in setup.manifests().items()}
    assert statuses == {"running": "completed", "claimed-slowly": "completed"}
