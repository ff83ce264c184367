"""The acceptance check and the verdict summary (seed 003: "a verdict, not a guess").

:func:`run` executes a task's ``[acceptance]`` after its agent exited 0: every
``artifacts`` path must exist (relative paths resolve against the project folder) and the
``command`` argv (never a shell) must exit 0 within ``timeout`` seconds in the project
folder; it runs in a process group of its own, ended at its timeout and at its end, so a
background process it started does not outlive it (:mod:`supervisor.children`). The
result goes to ``TASK_DIR/acceptance.json`` atomically; the engine's inotify
watch turns that into an immediate check.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from supervisor import children
from supervisor.config import AcceptanceSpec
from supervisor.taskdir import layout
from supervisor.taskdir.folder import TaskDir, atomic_write

RESULT = layout.ACCEPTANCE
#: Characters of the command's output kept in the result and the summary.
TAIL_CHARS = 2000
#: Bytes of the command's output read into memory (its start and its end, see
#: :class:`supervisor.children.Capture`); the rest is read and dropped.
OUTPUT_BYTES = 64 * 1024
#: Characters of the agent's final text kept in the summary.
SUMMARY_RESULT_CHARS = 600


def _exists(path: Path) -> bool:
    """Whether an artifact exists; a path the filesystem refuses to look up (too long,
    no permission, a NUL) is missing, never an error that would stop the check from
    ending (issue 20: the check then ran again at every check, forever)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def run(task: TaskDir, project_dir: Path, spec: AcceptanceSpec) -> dict[str, Any]:
    """Run the check and write ``acceptance.json``; returns what was written.

    Result keys: ``passed`` (bool), ``missing`` (artifact paths not found), ``exit_code``
    (``None`` without a command; ``-1`` on timeout or when the command cannot start),
    ``output_tail`` (last :data:`TAIL_CHARS` characters of stdout+stderr), ``duration_s``.
    """
    started = time.monotonic()
    missing = [p for p in spec.artifacts if not _exists(project_dir / p)]
    code: int | None = None
    output = ""
    if spec.command:
        capture = children.Capture(OUTPUT_BYTES)
        done = children.run(
            spec.command, timeout=spec.timeout, cwd=project_dir, stdout=capture, merge_stderr=True
        )
        output = done.stdout.decode("utf-8", "replace")
        code = -1 if done.returncode is None else done.returncode
        if done.timed_out:
            output += f"\n[supervise] acceptance command timed out after {spec.timeout:g} s"
        elif done.error is not None:
            output = f"[supervise] cannot run {spec.command[0]!r}: {done.error}"
        elif done.left_behind:
            output += "\n[supervise] ended the background process(es) the command left running"
    if missing:
        output += "\n[supervise] missing artifacts: " + ", ".join(missing)
    result = {
        "passed": not missing and (code is None or code == 0),
        "missing": missing,
        "exit_code": code,
        "output_tail": output[-TAIL_CHARS:].strip(),
        "duration_s": round(time.monotonic() - started, 3),
    }
    atomic_write(task.file(RESULT), json.dumps(result, ensure_ascii=False).encode())
    return result


def read(task: TaskDir) -> dict[str, Any] | None:
    """The stored result, or ``None`` when the check has not finished."""
    try:
        data = json.loads(task.file(RESULT).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def summary(result_text: str | None, accepted: dict[str, Any] | None, why: str) -> str:
    """One paragraph for the manifest: the agent's final text (clipped), the acceptance
    outcome with its output tail, and otherwise ``why`` the task ended."""
    parts = []
    if result_text:
        text = " ".join(result_text.split())
        if len(text) > SUMMARY_RESULT_CHARS:
            text = text[: SUMMARY_RESULT_CHARS - 1] + "…"
        parts.append(f"Agent: {text}")
    if accepted is not None:
        verdict = "passed" if accepted.get("passed") else "failed"
        tail = " ".join(str(accepted.get("output_tail") or "").split()[-60:])
        parts.append(
            f"Acceptance {verdict} (exit {accepted.get('exit_code')})"
            + (f": {tail}" if tail else ".")
        )
    if not parts or why:
        parts.append(f"Ended: {why}" if why else "")
    return " ".join(p for p in parts if p).strip()
