"""Notifications (issue 14): the message and the JSON payload carry the failure class, the
verdict, the summary's first sentence and the task dir; the README's recipes run for real
(apprise's ``json://`` target and ntfy's plain POST, both against a local HTTP server that
records what it got)."""

from __future__ import annotations

import json
import shutil
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import Setup

from supervisor.engine.notify import first_sentence, message_for

APPRISE = Path(sys.executable).with_name("apprise")


class Recorder(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 (ephemeral port) keeping every request: method, path,
    headers and body."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                recorder.requests.append({"path": self.path, "body": body,
                                          "headers": dict(self.headers)})  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def _failing_task(setup: Setup, notifier: list[str]) -> dict:
    setup.write_profile(notifier=notifier)
    setup.drop("bad.toml", setup.task("bad", "print: working\nexit: 3"))
    assert setup.run().returncode == 0
    m = setup.manifests()["bad"]
    assert m["status"] == "failed" and m["failure_reason"] == "exit_code"
    return m


def _expected_message(m: dict) -> str:
    return (f"supervise: task {m['task_id']} failed (exit 3, exit_code, verdict FAIL): "
            f"Ended: done-file with exit code 3 [{m['tmpdir']}]")  # fmt: skip


def test_apprise_recipe_posts_the_message_to_a_json_target(
    setup: Setup, recorder: Recorder
) -> None:
    """README recipe: ``notifier = ["apprise", "-b", "{message}", "URL"]``."""
    assert APPRISE.exists(), "apprise is a test dependency (pyproject.toml [test])"
    notifier = [str(APPRISE), "-b", "{message}", f"json://127.0.0.1:{recorder.port}/"]
    m = _failing_task(setup, notifier)
    assert len(recorder.requests) == 1, recorder.requests
    posted = json.loads(recorder.requests[0]["body"])
    assert posted["message"] == _expected_message(m)
    notified = [e for e in setup.events(m["task_id"]) if e["event"] == "notified"]
    assert [(e["notified_event"], e["notifier_exit_code"]) for e in notified] == [("failed", 0)]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_ntfy_recipe_posts_the_message_as_the_body(setup: Setup, recorder: Recorder) -> None:
    """README recipe: ``notifier = ["curl", "-fsS", "-H", "Title: supervise {status}",
    "-d", "{message}", "https://ntfy.sh/TOPIC"]`` (ntfy takes the POST body as the message)."""
    url = f"http://127.0.0.1:{recorder.port}/my-topic"
    notifier = ["curl", "-fsS", "-H", "Title: supervise {status}", "-d", "{message}", url]
    m = _failing_task(setup, notifier)
    assert len(recorder.requests) == 1, recorder.requests
    request = recorder.requests[0]
    assert request["path"] == "/my-topic" and request["headers"]["Title"] == "supervise failed"
    assert request["body"].decode() == _expected_message(m)


def test_payload_carries_failure_class_verdict_summary_and_task_dir(
    setup: Setup, tmp_path: Path
) -> None:
    captured = tmp_path / "payload.json"
    notifier = [sys.executable, "-c",
                f"import sys; open({str(captured)!r}, 'w').write(sys.stdin.read())"]  # fmt: skip
    m = _failing_task(setup, notifier)
    payload = json.loads(captured.read_text())
    assert payload["event"] == "failed"
    assert payload["failure_reason"] == "exit_code" and payload["verdict"] == "FAIL"
    assert payload["summary"] == "Ended: done-file with exit code 3"
    assert payload["task_dir"] == m["tmpdir"] == str(setup.state / "tasks" / m["task_id"])
    assert payload["message"] == _expected_message(m)


def test_message_names_class_verdict_first_sentence_and_dir() -> None:
    event = {"task_id": "t-1", "status": "failed", "exit_code": 1, "failure_reason": "billing",
             "verdict": "FAIL", "reason": "done-file with exit code 1",
             "summary": first_sentence("Agent: Credit balance is too low. Add funds.\nMore."),
             "task_dir": "/s/tasks/t-1"}  # fmt: skip
    assert message_for(event) == ("supervise: task t-1 failed (exit 1, billing, verdict FAIL): "
                                  "Agent: Credit balance is too low. [/s/tasks/t-1]")  # fmt: skip
    stopped = {"task_id": "t-2", "status": "abandoned", "abandon_reason": "budget",
               "verdict": "ABANDONED", "reason": "budget", "summary": ""}  # fmt: skip
    said = "supervise: task t-2 abandoned (budget, verdict ABANDONED): budget"
    assert message_for(stopped) == said
    assert first_sentence("x" * 300).endswith("…") and len(first_sentence("x" * 300)) == 200
    assert first_sentence(None) == ""
