"""The engine's side of task workspaces (:mod:`supervisor.workspace.lifecycle` holds the
git): preparing a worktree before the launch and finishing it before acceptance or the
end, both on the background pool (``git worktree add`` and ``setup`` can take minutes;
nothing waits on the check worker), and the ``shared_with`` bookkeeping of ``shared`` mode.

While its worktree is made, a task holds one ``max_concurrent`` slot (its runtime is in
the engine's ``live`` map with ``preparing`` set) and stays ``queued``; when the work is
done the result is queued here and the intake job is kicked, which launches the task or
ends it through :func:`supervisor.policy.launch_failed` (``failure_reason =
"workspace"``) on the worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from supervisor.engine.runtime import Runtime
from supervisor.taskdir import control, repair
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import Manifest
from supervisor.taskdir.states import Status
from supervisor.workspace import lifecycle
from supervisor.workspace.git import GitError
from supervisor.workspace.lifecycle import WorkspaceError

log = logging.getLogger("supervise.engine")


class Preparer:
    """Makes worktrees on the background pool and hands the results to the worker.

    Args:
        submit: runs a callable on the background pool.
        kick: asks for an intake run now (it collects :meth:`take`).
        cancel: set when the engine stops: a running ``setup`` is ended and the task is
            prepared again on the next start (it is still ``queued``).
    """

    def __init__(
        self,
        submit: Callable[[Callable[[], None]], None],
        kick: Callable[[], None],
        cancel: threading.Event,
    ) -> None:
        self.submit, self.kick, self.cancel = submit, kick, cancel
        # (runtime, error) of finished preparations; appended on the pool, taken on the worker
        self._done: deque[tuple[Runtime, str | None]] = deque()

    def start(self, runtime: Runtime) -> bool:
        """Start making the task's worktree when it needs one not made yet (see
        :func:`lifecycle.needs_prepare`); returns whether it started (then ``preparing``)."""
        if not lifecycle.needs_prepare(runtime.manifest.workspace, runtime.task):
            return False
        runtime.preparing = True
        self.submit(lambda: self._prepare(runtime))
        return True

    def _prepare(self, runtime: Runtime) -> None:
        task, report = runtime.task, runtime.manifest.workspace
        assert report is not None
        error: str | None = None

        def cancelled() -> bool:
            return self.cancel.is_set() or bool(runtime.requests.intersection(control.ENDING))

        try:
            lifecycle.prepare(
                task,
                report,
                runtime.resolved.workspace,
                Path(runtime.manifest.project_dir),
                cancelled,
            )
        except InterruptedError:
            if self.cancel.is_set():
                log.info(
                    "%s: workspace setup ended (supervise stops); prepared again on start",
                    task.task_id,
                )
                return
            if lifecycle.made_worktree(task):  # stopped by the operator: nothing to keep
                assert report.repository is not None
                lifecycle.remove(Path(report.repository), Path(report.path), report.branch)
        except WorkspaceError as exc:
            error = str(exc)
        except Exception as exc:  # anything else still ends the task with its reason
            log.exception("%s: workspace preparation failed", task.task_id)
            error = " ".join(f"{type(exc).__name__}: {exc}".split())
        if error is not None:
            log.error("%s: workspace: %s", task.task_id, error)
            with contextlib.suppress(OSError):
                task.append_event(Event.WORKSPACE_FAILED, status=Status.QUEUED, error=error)
        self._done.append((runtime, error))
        self.kick()

    def take(self) -> list[tuple[Runtime, str | None]]:
        """The preparations finished since the last call: ``(runtime, error)``, ``error``
        being ``None`` when the worktree is ready (``preparing`` is cleared)."""
        done = []
        while self._done:
            runtime, error = self._done.popleft()
            runtime.preparing = False
            done.append((runtime, error))
        return done


def needs_finish(runtime: Runtime) -> bool:
    """Whether the task has a worktree whose end is not recorded yet (no ``head_commit``
    in ``manifest.json``, read from the file: the background finish writes it there)."""
    try:
        report = runtime.task.read_manifest().workspace
    except (OSError, ValueError):
        report = runtime.manifest.workspace
    return (
        report is not None
        and report.mode == "worktree"
        and report.head_commit is None
        and not report.removed
        and Path(report.path).is_dir()
    )


def finish(runtime: Runtime) -> None:
    """Commit what the agent left and record the result in the manifest's ``workspace``
    (:func:`lifecycle.finish`; seconds of git, so on the background pool only). Logged,
    never raised: a worktree that cannot be read leaves the report as it was."""
    task, manifest = runtime.task, runtime.manifest
    if not needs_finish(runtime):
        return
    report = task.read_manifest().workspace
    assert report is not None
    message = lifecycle.commit_message(task.task_id, manifest.task_name, manifest.session_id)
    try:
        done = lifecycle.finish(
            report, runtime.resolved.workspace, Path(manifest.project_dir), message
        )
    except GitError as exc:
        log.error("%s: cannot finish its worktree: %s", task.task_id, exc)
        return

    def change(m: Manifest) -> None:
        m.workspace = done

    runtime.manifest = task.update_manifest(change, fallback=manifest)
    task.append_event(
        Event.WORKSPACE_FINISHED,
        status=runtime.state.status,
        head_commit=done.head_commit,
        files_changed=done.files_changed,
        insertions=done.insertions,
        deletions=done.deletions,
        uncommitted=done.uncommitted,
    )


def _folder(runtime: Runtime) -> str | None:
    report = runtime.manifest.workspace
    if report is None or report.mode != "shared" or runtime.preparing or runtime.launching:
        return None
    return os.path.realpath(report.path)


def _set_shared(runtime: Runtime, peers: list[str]) -> None:
    """Set ``workspace.shared_with`` (the other live tasks in the folder) with no fsync of
    its own (only where the manifest needs one, :func:`supervisor.taskdir.repair.needs_fsync`):
    a power cut ends every one of those runs, so no synced list would be true after it,
    and a folder shared by N tasks would cost 2 N fsyncs per launch and end (issue 24)."""

    def change(m: Manifest) -> None:
        if m.workspace is not None:
            m.workspace.shared_with = peers

    with contextlib.suppress(OSError, ValueError):
        runtime.manifest = runtime.task.update_manifest(
            change, durable=repair.needs_fsync, fallback=runtime.manifest
        )


def share(runtime: Runtime, live: dict[str, Runtime]) -> None:
    """A task just launched in ``shared`` mode: list the other live tasks in the same
    folder in both manifests' ``shared_with`` and warn (``shared_workspace`` event)."""
    folder = _folder(runtime)
    if folder is None:
        return
    me = runtime.task.task_id
    peers = sorted(i for i, r in live.items() if i != me and _folder(r) == folder)
    if not peers:
        return
    log.warning("%s: shares its folder %s with live task(s) %s", me, folder, ", ".join(peers))
    with contextlib.suppress(OSError):
        runtime.task.append_event(
            Event.SHARED_WORKSPACE, status=runtime.state.status, path=folder, shared_with=peers
        )
    _set_shared(runtime, peers)
    for peer in peers:
        other = live[peer]
        assert other.manifest.workspace is not None
        _set_shared(other, sorted({*other.manifest.workspace.shared_with, me}))


def unshare(runtime: Runtime, live: dict[str, Runtime]) -> None:
    """A task ended: drop it from the ``shared_with`` of the live tasks that listed it
    (its own list stays as the record of whom it shared the folder with)."""
    me = runtime.task.task_id
    for other in live.values():
        report = other.manifest.workspace
        if other is not runtime and report is not None and me in report.shared_with:
            _set_shared(other, [i for i in report.shared_with if i != me])
