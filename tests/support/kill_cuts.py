"""An engine SIGKILLed with one task running and others waiting behind it (``queued`` for
the one slot, or ``blocked`` on a predecessor): the start of every test that then writes a
cut by hand (a line logged, the manifest not yet written) and runs the engine again."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from conftest import Setup, stop_engine, wait_for


def kill(engine: subprocess.Popen[bytes]) -> None:
    """SIGKILL the engine and reap it (10 s hang guard)."""
    os.kill(engine.pid, signal.SIGKILL)
    engine.wait(timeout=10)


def running_then_waiting(
    setup: Setup, waiting: Mapping[str, Sequence[str]], **profile: Any
) -> dict[str, str]:
    """One slot: ``a`` runs (8 s); each task of ``waiting`` is dropped, named with its
    ``after`` list (empty: ``queued`` behind ``a``; else ``blocked``), and once each shows
    that status the engine is SIGKILLed (``a``'s agent lives on in tmux). ``profile``:
    more keys for :meth:`Setup.write_profile`. Returns every task's id by name."""
    setup.write_profile(max_concurrent=1, **profile)
    setup.drop("a.toml", setup.task("a", "sleep: 8\nexit: 0"))
    engine = setup.start()
    expected = {name: "blocked" if after else "queued" for name, after in waiting.items()}
    try:
        wait_for(lambda: setup.manifests().get("a", {}).get("status") == "running", timeout=120)
        for name, after in waiting.items():
            extra = {"after": list(after)} if after else {}
            setup.drop(f"{name}.toml", setup.task(name, "exit: 0", **extra))
        found = lambda: {n: setup.manifests().get(n, {}).get("status") for n in expected}  # noqa: E731
        wait_for(lambda: found() == expected, timeout=60)
        kill(engine)
    finally:
        stop_engine(engine)
    return {name: m["task_id"] for name, m in setup.manifests().items()}
