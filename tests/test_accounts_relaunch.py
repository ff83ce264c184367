"""Issue 26 (accounts), found by attack: a task's account was computed once, at claim, and
never again. An engine restarted with another ``[agent] env`` (or ``HOME`` /
``CLAUDE_CONFIG_DIR``) launched the task with other credentials than the account it was
admitted and recorded under. The account is now recomputed where the launch environment is
built (:func:`supervisor.engine.launch.launch_spec`) and when a queued task is adopted; a
change is kept in the manifest with one log line."""

from __future__ import annotations

import json
import os
import time

from conftest import Setup, wait_for

from supervisor import accounts


def _profile_with_key(setup: Setup, key: str) -> None:
    path = setup.write_profile(max_concurrent=2)
    text = path.read_text(encoding="utf-8")
    path.write_text(text + f'\n[agent.env]\nANTHROPIC_API_KEY = "{key}"\n', encoding="utf-8")


def test_a_restart_with_other_credentials_admits_and_records_the_new_account(
    setup: Setup,
) -> None:
    """Claimed under key 1 (held: key 1's account is limited for an hour), the engine
    SIGKILLed, restarted with key 2: the task is not held by key 1's limit, launches at
    once, its launch env has key 2 and its manifest names key 2's account (one line)."""
    _profile_with_key(setup, "sk-old")
    old = accounts.of_task({"ANTHROPIC_API_KEY": "sk-old"}, {}, os.environ)
    new = accounts.of_task({"ANTHROPIC_API_KEY": "sk-new"}, {}, os.environ)
    setup.state.mkdir(parents=True, exist_ok=True)
    book = {old: {"until": time.time() + 3600, "by": "earlier", "last_start": None}}
    (setup.state / "accounts.json").write_text(json.dumps(book))
    setup.drop("t.toml", setup.task("t", "print: hi\nexit: 0"))
    engine = setup.start()
    try:
        wait_for(lambda: setup.manifests().get("t", {}).get("status") == "queued", timeout=60)
    finally:
        engine.kill()  # SIGKILL, by its PID
        engine.wait(timeout=30)
    assert setup.manifests()["t"]["account"] == old
    _profile_with_key(setup, "sk-new")
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()["t"]
    assert (m["status"], m["account"]) == ("completed", new), done.stderr[-2000:]
    launch = json.loads((setup.state / "tasks" / m["task_id"] / "launch.json").read_text())
    assert launch["env"]["ANTHROPIC_API_KEY"] == "sk-new"
    assert "account" not in launch  # the fingerprint is the manifest's, not the wrapper's
    lines = [x for x in done.stderr.splitlines() if f"account {old} -> {new}" in x]
    assert len(lines) == 1, done.stderr[-3000:]
    assert "sk-new" not in done.stderr and "sk-old" not in done.stderr  # never the secret


def test_an_unchanged_account_is_not_rewritten_or_logged(setup: Setup) -> None:
    _profile_with_key(setup, "sk-same")
    setup.drop("t.toml", setup.task("t", "print: hi\nexit: 0"))
    done = setup.run(timeout=120)
    assert done.returncode == 0, done.stderr
    m = setup.manifests()["t"]
    assert m["account"] == accounts.of_task({"ANTHROPIC_API_KEY": "sk-same"}, {}, os.environ)
    assert " -> acct-" not in done.stderr
