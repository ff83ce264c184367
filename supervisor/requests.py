"""Operator requests to the engine, one task or many: ``stop``, ``resume``, ``approve``, ``deny``.

A request is a file in ``state_dir/control`` (:mod:`supervisor.taskdir.control`); the engine
takes it on its next intake tick and applies it through the policy. This module checks that a task
can take the verb, leaves the request and waits up to ``wait_s`` seconds for the manifest to
show it applied (:func:`supervisor.taskdir.control.acted`). The CLI verbs, the views and the MCP
server call it, so every path refuses and reports the same way.

Results (``result`` of each dict): ``applied`` (exit code 0), ``queued`` (no engine runs on
the state dir: it happens when ``supervise run`` starts; :data:`EXIT_QUEUED`),
``not_applied`` (the engine did not apply it within ``wait_s`` seconds; the request stays;
:data:`EXIT_NOT_APPLIED`), ``refused`` (unknown task, already ended, not ``escalated`` for
approve/deny: nothing requested; 1) and ``skipped`` (a task chosen by ``--all``/``--status``
whose status moved out of the selection before its request was left, e.g. another copy of
``stop --all`` ended it: nothing requested, and nothing wrong; 0).

Several tasks exit with the worst of their codes, in the order 1 (refused) > 4 (not
applied) > 3 (queued) > 0 (:func:`worst`). Requests are idempotent: the same request twice
(two ``stop --all`` at once) leaves one file, and the engine ignores one for a task that
has ended, so nothing is done twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from supervisor.errors import SuperviseError
from supervisor.taskdir import control, layout
from supervisor.taskid import is_task_id, refusal
from supervisor.waiting import load_manifest, read_manifest

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: Exit status of a request left for an engine that is not running (issue 10: an operator
#: script must not take "queued" for "done").
EXIT_QUEUED = 3
#: Exit status of a request the running engine has not applied within ``--wait`` seconds.
EXIT_NOT_APPLIED = 4
#: Exit status of each result (module docstring).
CODES = {
    "applied": 0,
    "skipped": 0,
    "queued": EXIT_QUEUED,
    "not_applied": EXIT_NOT_APPLIED,
    "refused": 1,
}
#: Worst first: the exit status of several results is the first of these found among them.
SEVERITY = (1, EXIT_NOT_APPLIED, EXIT_QUEUED, 0)
#: Seconds between looks at the manifests while waiting for the engine.
POLL = 0.1


class RequestRefused(SuperviseError):
    """Nothing was requested: the one line (``str()``) says why (no such task, unreadable
    manifest, already ended, not escalated)."""


@dataclass
class Result:
    """One task's outcome: ``result`` (module docstring), the manifest last read
    (``manifest``: before the request, or after it was applied), and ``line``, what to
    tell a person (the refusal, the queued or not-applied note; empty when applied)."""

    task_id: str
    verb: str
    result: str
    manifest: dict[str, Any] = field(default_factory=dict)
    line: str = ""

    @property
    def code(self) -> int:
        """This result's exit status (:data:`CODES`)."""
        return CODES[self.result]

    def as_dict(self) -> dict[str, Any]:
        """``{"task_id", "verb", "result", "status", "retry_count"}`` (``--json``; a
        refused or skipped one adds ``error``, its line)."""
        out = {
            "task_id": self.task_id,
            "verb": self.verb,
            "result": self.result,
            "status": self.manifest.get("status"),
            "retry_count": self.manifest.get("retry_count"),
        }
        if self.result in ("refused", "skipped"):
            out["error"] = self.line
        return out


def worst(codes: Iterable[int]) -> int:
    """The exit status of several results: the worst by :data:`SEVERITY` (0 for none)."""
    found = set(codes)
    return next((code for code in SEVERITY if code in found), 0)


def applies(verb: str, status: str) -> bool:
    """Whether ``verb`` can be asked of a task in ``status`` (:func:`control.refusal`)."""
    return control.refusal("-", status, verb) is None


def read_before(profile: LoadedProfile, task_id: str) -> dict[str, Any]:
    """The manifest of ``task_id`` (``retry_count`` defaulted to 0).

    Raises:
        RequestRefused: no such task folder, or its manifest cannot be read (a FIFO or a
            huge file in its place included: :func:`supervisor.waiting.load_manifest`).
    """
    if not is_task_id(task_id):
        raise RequestRefused(refusal(task_id))
    path = profile.tasks_dir / task_id / layout.MANIFEST
    if not path.exists():
        raise RequestRefused(
            f"no task {task_id!r} in {profile.tasks_dir}; see 'supervise status -c ...'"
        )
    try:
        before = load_manifest(path)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        line = f"{path}: cannot read the manifest ({why}); see 'supervise status'"
        raise RequestRefused(line) from None
    before.setdefault("retry_count", 0)
    return before


def select(profile: LoadedProfile, verb: str, statuses: list[str] | None) -> list[str]:
    """``--all`` / ``--status``: the ids of the tasks ``verb`` applies to (not ended; for
    approve/deny ``escalated``), narrowed to ``statuses`` when given (a status, or a group
    of :data:`supervisor.views.model.GROUPS` as ``status --status`` takes it), in id order.
    A folder whose manifest cannot be read is left out."""
    from supervisor.views.model import GROUP_OF

    wanted = set(statuses or ())
    chosen = []
    try:
        names = sorted(entry.name for entry in profile.tasks_dir.iterdir())
    except OSError:
        return []
    for task_id in names:
        try:
            status = read_before(profile, task_id)["status"]
        except RequestRefused:
            continue
        if not applies(verb, status):
            continue
        if not wanted or status in wanted or GROUP_OF.get(status) in wanted:
            chosen.append(task_id)
    return chosen


def apply_requests(
    profile: LoadedProfile,
    ids: list[str],
    verb: str,
    wait_s: float,
    *,
    selected: bool = False,
    warn: Callable[[str], None] | None = None,
) -> list[Result]:
    """Ask ``verb`` of each task of ``ids`` (duplicates count once) and wait up to
    ``wait_s`` seconds, for all of them together, until the engine has applied each.
    ``selected``: the ids came from :func:`select`, so a task that no longer takes the
    verb is ``skipped``, not ``refused``. ``warn`` gets the one-line note of an engine that
    looks stuck (``supervisor.engine_probe``). Returns one :class:`Result` per id, in order.

    Raises:
        ValueError: ``verb`` is not one of :data:`supervisor.taskdir.control.VERBS`.
    """
    from supervisor import engine_probe

    if verb not in control.VERBS:
        raise ValueError(f"unknown verb {verb!r}; use one of {', '.join(control.VERBS)}")
    results = [_leave(profile, task_id, verb, selected) for task_id in dict.fromkeys(ids)]
    waiting = [r for r in results if r.result == "pending"]
    if not waiting:
        return results
    found = engine_probe.engine(profile.state_dir)
    if not found.lock_held:
        why = f"no engine runs on {profile.state_dir}, so it happens when 'supervise run' starts"
        for r in waiting:
            r.result, r.line = "queued", f"queued '{verb}' for {r.task_id}; {why}"
        return results
    if found.state != "running" and warn is not None:
        what = f"'{verb}' waits until it moves"
        warn(engine_probe.warning(profile.state_dir, profile.path, what) or found.line())
    _await(profile, waiting, time.monotonic() + wait_s)
    where = profile.state_dir / control.CONTROL
    for r in waiting:
        if r.result == "pending":
            r.result = "not_applied"
            r.line = (
                f"requested '{verb}' for {r.task_id}; the engine has not applied it within "
                f"{wait_s:g} s (the request stays in {where})"
            )
    return results


def _leave(profile: LoadedProfile, task_id: str, verb: str, selected: bool) -> Result:
    """Check one task and leave its request: a ``pending`` result, or a refused/skipped one."""
    try:
        before = read_before(profile, task_id)
    except RequestRefused as exc:
        return Result(task_id, verb, "refused", line=str(exc))
    refused = control.refusal(task_id, before["status"], verb)
    if refused:
        return Result(task_id, verb, "skipped" if selected else "refused", before, refused)
    try:
        control.request(profile.state_dir, task_id, verb)
    except PermissionError:
        raise  # another user's state dir: the CLI's one line (folderaccess.denied_line)
    except OSError as exc:  # a file in place of control/ (found by attack: a traceback)
        return Result(
            task_id,
            verb,
            "refused",
            before,
            control.folder_problem(profile.state_dir, exc, "write"),
        )
    return Result(task_id, verb, "pending", before)


def _await(profile: LoadedProfile, waiting: list[Result], deadline: float) -> None:
    """Mark each result ``applied`` (with the new manifest) once the engine applied it, until
    all are or ``deadline`` (monotonic) passes."""
    left = list(waiting)
    while left:
        for r in list(left):
            after = _manifest(profile, r.task_id)
            if after is not None and control.acted(r.verb, r.manifest, after):
                r.result, r.manifest = "applied", after
                left.remove(r)
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(POLL)


def _manifest(profile: LoadedProfile, task_id: str) -> dict[str, Any] | None:
    # replaced atomically; a damaged one is looked at again
    return read_manifest(profile.tasks_dir / task_id / layout.MANIFEST)


def apply_request(profile: LoadedProfile, task_id: str, verb: str, wait_s: float) -> dict[str, Any]:
    """Ask ``verb`` of one task and wait up to ``wait_s`` seconds for the engine to apply
    it. Returns ``{"task_id", "verb", "result", "status", "retry_count"}``, ``result``
    ``applied``, ``queued`` (no engine runs) or ``not_applied`` (not within ``wait_s``).

    Raises:
        RequestRefused: nothing was requested (no such task, already ended, not escalated
            for approve/deny); the one line says why.
        ValueError: an unknown verb.
    """
    [result] = apply_requests(profile, [task_id], verb, wait_s)
    if result.result == "refused":
        raise RequestRefused(result.line)
    return result.as_dict()
