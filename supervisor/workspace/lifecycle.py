"""A task's workspace from claim to end: resolve (at claim), prepare (before the agent
starts), finish (when the agent is done, before acceptance).

- :func:`resolve` (claim time, a few fast git reads): the mode (``worktree`` when
  ``project_dir`` is inside a git work tree, else ``shared``), the worktree's path
  (``root/<task_id>``), the task branch, the base (the branch checked out in
  ``project_dir`` unless ``base`` is given) and its commit. It never refuses a task: what
  cannot work (a detached HEAD without ``base``, a base that names no commit) makes
  :func:`prepare` fail, so the task ends ``failed`` with ``failure_reason = "workspace"``
  and one line saying why. A repository without a commit yet (a fresh ``git init``) and
  no ``base`` runs in place instead (``shared``, with :data:`IN_PLACE` logged at claim):
  there is nothing to branch from, and a worktree on an orphan branch would start empty,
  without the project's files (all untracked then), besides needing git 2.42 (issue 22).
  So does a ``project_dir`` its repository does not track (untracked or ignored there):
  a worktree of that repository would not hold the folder at all.
- :func:`prepare` (off the engine's worker: ``git worktree add``, submodules, copies and
  ``setup`` can take minutes) makes the worktree, or raises :class:`WorkspaceError` after
  removing whatever it made. It is idempotent across a crash of ``supervise``: the
  ``workspace_preparing`` event is written before ``git worktree add``, so a second run
  knows the worktree and the branch are its own and reuses them.
- :func:`finish` commits what the agent left (``commit = true``) and measures the result
  against the base commit.

The agent works in :func:`agent_dir`: the worktree, or the same sub-folder of it when
``project_dir`` is a sub-folder of its repository.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from supervisor import children
from supervisor.config.workspace import TASK_ID_FIELD, WorkspaceSpec
from supervisor.errors import SuperviseError
from supervisor.taskdir import layout
from supervisor.taskdir.events import Event
from supervisor.taskdir.folder import TaskDir
from supervisor.taskdir.states import Status
from supervisor.workspace import git
from supervisor.workspace.git import GitError
from supervisor.workspace.gitops import ReviewError
from supervisor.workspace.model import WorkspaceReport
from supervisor.workspace.worktreelock import worktree_lock

log = logging.getLogger(__name__)

#: Events of :func:`prepare` (``events.jsonl``): before ``git worktree add``, when done.
PREPARING, READY = Event.WORKSPACE_PREPARING, Event.WORKSPACE_READY
#: Event at claim of a task that runs in place because its repository has no commit yet,
#: or does not track ``project_dir`` (:func:`note_in_place`); its ``message`` is the
#: report's ``warning``.
IN_PLACE = Event.WORKSPACE_IN_PLACE
#: Bytes of a ``setup``'s output written to ``output.log``; the rest is read and dropped
#: (one line says so), so a flooding ``setup`` cannot fill the state filesystem.
SETUP_LOG_BYTES = 16 * 1024 * 1024


class WorkspaceError(SuperviseError, RuntimeError):
    """The workspace could not be made; ``str(error)`` is one line naming the cause (git's
    own last line, the setup's exit, the path). Whatever was made has been removed."""


def resolve(
    task_id: str, project_dir: Path, spec: WorkspaceSpec, state_dir: Path
) -> WorkspaceReport:
    """The workspace a task will use, fixed at claim time (see the module docstring).

    ``base_commit`` is ``None`` when the base names no commit (an empty repository, a
    detached HEAD without ``base``, a missing ref): :func:`prepare` then fails with the
    reason. A git that cannot run counts as "not a repository".
    """
    try:
        top = git.toplevel(project_dir)
    except GitError:
        top = None
    mode = spec.mode or ("worktree" if top is not None else "shared")
    repository = str(top) if top is not None else None
    if mode == "shared":
        return WorkspaceReport(mode="shared", path=str(project_dir), repository=repository)
    if top is not None and spec.base is None and _unborn(top):
        return WorkspaceReport(
            mode="shared", path=str(project_dir), repository=repository, warning=_in_place_line(top)
        )
    root = Path(spec.root) if spec.root else state_dir / "worktrees"
    report = WorkspaceReport(
        mode="worktree",
        path=str(root / task_id),
        repository=repository,
        branch=spec.branch.replace(TASK_ID_FIELD, task_id),
        base=spec.base,
    )
    if top is None:
        return report
    try:
        report.base = spec.base or git.current_branch(top)
        report.base_commit = git.commit_of(top, report.base) if report.base else None
        below = _below(top, project_dir)
        if report.base_commit and below and not git.has_path(top, report.base_commit, below):
            return WorkspaceReport(
                mode="shared",
                path=str(project_dir),
                repository=repository,
                warning=_untracked_line(top, project_dir),
            )
    except GitError:
        pass  # prepare names the cause
    return report


def _below(top: Path, project_dir: Path) -> str | None:
    """``project_dir`` relative to ``top`` (``/``-separated), ``None`` when it is ``top``."""
    try:
        below = Path(os.path.realpath(project_dir)).relative_to(os.path.realpath(top))
    except ValueError:
        return None
    return below.as_posix() if below != Path() else None


def _untracked_line(top: Path, project_dir: Path) -> str:
    # A worktree of ``top`` would not hold project_dir (untracked or ignored there), so the
    # agent's working folder would not exist: ``init --claude DIR`` inside a home folder
    # kept in git made exactly that, and every task failed ``launch``.
    return (
        f"project_dir {project_dir} is not tracked by repository {top} (untracked or "
        "ignored there), so a worktree of it would not hold the folder: the task runs in "
        "place, in project_dir itself. Make project_dir a repository of its own (git "
        'init; one commit) for a worktree per task, or set [workspace] mode = "shared" '
        "to silence this"
    )


def _unborn(top: Path) -> bool:
    """Whether ``HEAD``'s branch has no commit yet (``git init`` and nothing else, or
    ``git checkout --orphan``). A git that cannot run counts as "has one"."""
    try:
        return git.commit_of(top, "HEAD") is None and git.current_branch(top) is not None
    except GitError:
        return False


def _in_place_line(top: Path) -> str:
    return (
        f"repository {top} has no commit yet, so there is no branch to make a worktree "
        "from: the task runs in place, in project_dir itself. Commit once for a worktree "
        'per task, or set [workspace] mode = "shared" to silence this'
    )


def note_in_place(task: TaskDir, report: WorkspaceReport) -> None:
    """At claim: log :data:`IN_PLACE` (and a warning line in the engine's log) when
    :func:`resolve` chose to run the task in place; nothing otherwise."""
    if report.warning is None:
        return
    log.warning("%s: %s", task.task_id, report.warning)
    task.append_event(IN_PLACE, status=Status.QUEUED, message=report.warning)


def agent_dir(report: WorkspaceReport | None, project_dir: Path | str) -> Path:
    """The agent's working directory: ``project_dir`` (shared, or no report), else the
    worktree, or the same sub-folder of it when ``project_dir`` is below the top of its
    repository."""
    if report is None or report.mode == "shared" or report.repository is None:
        return Path(project_dir)
    try:
        below = Path(os.path.realpath(project_dir)).relative_to(report.repository)
    except ValueError:
        below = Path()
    return Path(report.path) / below


def is_ready(task: TaskDir) -> bool:
    """Whether :func:`prepare` completed for this task (its ``workspace_ready`` event)."""
    return any(e.get("event") == READY for e in task.events())


def made_worktree(task: TaskDir) -> bool:
    """Whether :func:`prepare` got as far as ``git worktree add`` for this task (its
    ``workspace_preparing`` event): then the worktree and the branch are this task's."""
    return any(e.get("event") == PREPARING for e in task.events())


def needs_prepare(report: WorkspaceReport | None, task: TaskDir) -> bool:
    """A worktree task whose worktree is not ready yet (never prepared, or cut short)."""
    return report is not None and report.mode == "worktree" and not is_ready(task)


def _why_no_base(report: WorkspaceReport, project_dir: Path) -> str | None:
    """Why the worktree cannot be made from what :func:`resolve` found, or ``None``."""
    if report.repository is None:
        return (
            f"project_dir {project_dir} is not in a git repository; set [workspace] "
            'mode = "shared" to run there'
        )
    if report.base_commit is not None:
        return None
    if report.base is None:
        return (
            f"HEAD of {report.repository} is detached (no branch checked out); set "
            "[workspace] base to a branch or commit, or check out a branch"
        )
    return (
        f"base {report.base!r} names no commit in {report.repository} (a missing ref, or "
        "a repository without a commit yet); commit first or set [workspace] base"
    )


def prepare(
    task: TaskDir,
    report: WorkspaceReport,
    spec: WorkspaceSpec,
    project_dir: Path,
    cancelled: Callable[[], bool] | None = None,
) -> WorkspaceReport:
    """Make the task's worktree: ``git worktree add -b BRANCH PATH BASE_COMMIT``, then
    ``git submodule update --init --recursive`` (``submodules``), the ``copy`` paths, then
    ``setup`` (output appended to ``output.log``). Writes ``workspace_preparing`` before
    the add and ``workspace_ready`` at the end (``events.jsonl``).

    Args:
        cancelled: true when the work should stop (``supervise`` stops, or the task was
            stopped): a running ``setup`` is then ended (:class:`InterruptedError`).

    Returns:
        The report (unchanged fields; the worktree exists at ``report.path``).

    Raises:
        WorkspaceError: any step failed; the worktree and a branch this task created are
            removed, nothing is left behind.
        InterruptedError: ``cancelled`` said so before the start or during ``setup`` (the
            worktree is kept: prepared again on the next start, or :func:`remove`).
    """
    if cancelled is not None and cancelled():
        raise InterruptedError("cancelled before the start")
    why = _why_no_base(report, project_dir)
    if why is not None:
        raise WorkspaceError(why)
    assert report.repository is not None and report.branch is not None
    repo, path, branch = Path(report.repository), Path(report.path), report.branch
    ours = any(e.get("event") == PREPARING for e in task.events())
    created = ours
    try:
        created = _add_worktree(task, report, spec, ours) or ours
        if spec.submodules and (path / ".gitmodules").exists():
            git.run_git(
                ["submodule", "update", "--init", "--recursive"], path, timeout=spec.setup_timeout
            )
        _copy(project_dir, agent_dir(report, project_dir), spec.copy_paths, task)
        if spec.setup:
            _setup(task, agent_dir(report, project_dir), spec, cancelled)
    except InterruptedError:
        raise
    except (GitError, OSError, WorkspaceError) as exc:
        remove(repo, path, branch if created else None)
        raise WorkspaceError(_one_line(exc)) from None
    task.append_event(
        READY, status=Status.QUEUED, path=str(path), branch=branch, base_commit=report.base_commit
    )
    return report


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return f"disk full: {exc}"
    return " ".join(str(exc).split())


def _add_worktree(task: TaskDir, report: WorkspaceReport, spec: WorkspaceSpec, ours: bool) -> bool:
    """``git worktree add`` (or reuse this task's own, after a crash). Returns whether the
    branch was created by this call.

    Raises:
        WorkspaceError: the branch or the path is taken by something not this task's.
        GitError: git failed (its last line says why: a full disk, a bad name).
    """
    assert report.repository is not None and report.branch is not None
    repo, path, branch = Path(report.repository), Path(report.path), report.branch
    if not git.valid_branch_name(repo, branch):
        raise WorkspaceError(f"branch {branch!r} is not a valid name; fix [workspace] branch")
    known = {Path(os.path.realpath(p)): b for p, b in git.worktrees(repo).items()}
    real = Path(os.path.realpath(path))
    if ours and known.get(real) == f"refs/heads/{branch}":
        return False  # made before a crash of supervise: reuse it
    has_branch = git.branch_exists(repo, branch)
    if not ours:
        if has_branch:
            raise WorkspaceError(
                f"branch {branch!r} already exists in {repo}; delete it or "
                "set another [workspace] branch template"
            )
        if os.path.lexists(path) or real in known:
            raise WorkspaceError(f"worktree path {path} already exists; remove it first")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    task.append_event(
        PREPARING,
        status=Status.QUEUED,
        path=str(path),
        branch=branch,
        base_commit=report.base_commit,
    )
    if ours:  # a half-made worktree of ours: start it again
        if real in known or path.exists():
            remove(repo, path, None)
        if has_branch:
            try:
                with worktree_lock(repo):
                    git.run_git(
                        ["worktree", "add", str(path), branch], repo, timeout=spec.setup_timeout
                    )
            except ReviewError as exc:
                raise WorkspaceError(str(exc)) from None
            return False
    assert report.base_commit is not None
    try:
        with worktree_lock(repo):
            git.run_git(
                ["worktree", "add", "-b", branch, str(path), report.base_commit],
                repo,
                timeout=spec.setup_timeout,
            )
    except ReviewError as exc:
        raise WorkspaceError(str(exc)) from None
    except GitError:
        # git makes the branch before the checkout (which may then fail, e.g. on ENOSPC)
        # and leaves it; it did not exist before this call, so it is ours to delete
        remove(repo, path, branch)
        raise
    return True


def remove(repo: Path, path: Path, branch: str | None) -> None:
    """Remove the worktree at ``path`` (``git worktree remove --force --force``, then the
    folder itself if git left it) and, when given, delete ``branch`` (``git branch -D``):
    only ever a branch this task created. Errors are swallowed: this is the undo of a
    failure that is already being reported."""
    with contextlib.suppress(GitError, ReviewError), worktree_lock(repo):
        git.run_git(["worktree", "remove", "--force", "--force", str(path)], repo)
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)
    for args in (["worktree", "prune"], ["branch", "-D", branch] if branch else None):
        if args is not None:
            with contextlib.suppress(GitError):
                git.run_git(args, repo)


def _copy(project_dir: Path, target: Path, paths: list[str], task: TaskDir) -> None:
    """Copy each of ``paths`` (relative to ``project_dir``: files or folders, symlinks kept
    as symlinks) to the same place under ``target``. A path that is absent is noted in
    ``output.log`` and skipped.

    Raises:
        WorkspaceError: a path is absolute or leaves ``project_dir`` (``..``, a symlink).
        OSError: the copy failed (ENOSPC).
    """
    base = Path(os.path.realpath(project_dir))
    for name in paths:
        source = Path(os.path.realpath(base / name))
        if Path(name).is_absolute() or not source.is_relative_to(base):
            raise WorkspaceError(
                f"copy path {name!r} leaves project_dir {project_dir}; give paths inside it"
            )
        destination = target / source.relative_to(base)
        if not source.exists():
            _log(task, f"workspace: copy: {name} not found in {project_dir}; skipped")
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, destination, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(source, destination)


def _log(task: TaskDir, line: str) -> None:
    with open(task.file(layout.OUTPUT), "ab") as handle:
        handle.write(f"[supervise] {line}\n".encode())


def _setup(
    task: TaskDir, cwd: Path, spec: WorkspaceSpec, cancelled: Callable[[], bool] | None
) -> None:
    """Run ``setup`` in ``cwd``, its output appended to ``output.log`` (at most
    :data:`SETUP_LOG_BYTES`), in a session of its own (no terminal; its whole process group
    is ended on timeout, on cancel and at its end, :mod:`supervisor.children`).

    Raises:
        WorkspaceError: a non-zero exit, the timeout, or a program that cannot run.
        InterruptedError: ``cancelled`` said so.
    """
    assert spec.setup is not None
    _log(task, f"workspace: setup: {' '.join(spec.setup)} (in {cwd})")
    env = {
        **os.environ,
        "SUPERVISE_TASK_ID": task.task_id,
        "SUPERVISE_TASK_DIR": str(task.path),
        "SUPERVISE_WORKSPACE": str(cwd),
    }
    with open(task.file(layout.OUTPUT), "ab", buffering=0) as out:
        # Nothing kept in memory (cap 0): the log gets the first SETUP_LOG_BYTES as they come.
        sink = children.Capture(0, sink=out, sink_limit=SETUP_LOG_BYTES)
        done = children.run(
            spec.setup,
            timeout=spec.setup_timeout,
            cwd=cwd,
            env=env,
            stdout=sink,
            merge_stderr=True,
            cancelled=cancelled,
        )
    if done.error is not None:
        raise WorkspaceError(f"setup {spec.setup[0]!r} cannot run: {done.error}")
    if done.cancelled:
        raise InterruptedError("supervise is stopping")
    if done.timed_out:
        limit = f"setup_timeout = {spec.setup_timeout:g} s"
        raise WorkspaceError(f"setup {spec.setup[0]!r} ran out of time ({limit})")
    if done.returncode != 0:
        where = f"its output is in {task.file(layout.OUTPUT)}"
        raise WorkspaceError(f"setup {' '.join(spec.setup)!r} exited {done.returncode} ({where})")


def finish(
    report: WorkspaceReport,
    spec: WorkspaceSpec,
    project_dir: Path,
    message: str,
) -> WorkspaceReport:
    """Commit what the agent left (``commit``: ``git add -A`` except the ``copy`` paths,
    ``git commit --no-verify``: the repository's hooks judge people's commits, not this
    record; the fallback identity only when git has none) and measure the branch against
    ``base_commit`` (``git diff --shortstat``).

    Returns:
        A copy of ``report`` with ``head_commit``, ``files_changed``, ``insertions``,
        ``deletions`` and ``uncommitted`` filled. A commit that fails leaves
        ``uncommitted = true``.

    Raises:
        GitError: the worktree cannot be read at all (gone, git timed out).
    """
    done = report.model_copy(deep=True)
    path = Path(report.path)
    if spec.commit and git.is_dirty(path):
        where = agent_dir(report, project_dir)
        # the copies are not the agent's work; an ignored one needs no exclusion (and
        # git add exits 1 when a pathspec, even an exclusion, names an ignored file)
        ignored = git.ignored(where, spec.copy_paths)
        excluded = [f":(exclude){p}" for p in spec.copy_paths if p not in ignored]
        identity = () if git.has_identity(path) else git.FALLBACK_IDENTITY
        try:
            git.run_git(["add", "-A", "--", ":/", *excluded], where)
            git.run_git([*identity, "commit", "-q", "--no-verify", "-m", message], path)
        except GitError:
            pass  # reported as uncommitted work
    done.head_commit = git.commit_of(path, "HEAD")
    if report.base_commit and done.head_commit:
        stat = git.run_git(["diff", "--shortstat", report.base_commit, done.head_commit], path)
        done.files_changed, done.insertions, done.deletions = git.parse_shortstat(stat.stdout)
    done.uncommitted = git.is_dirty(path)
    return done


def commit_message(task_id: str, task_name: str, session_id: str) -> str:
    """The final commit's message: the task name, then its id and session id."""
    name = " ".join(task_name.split())[:72]
    return f"supervise: {name}\n\ntask {task_id}\nsession {session_id}\n"


#: The result fields of :func:`finish`, recorded in its ``workspace_finished`` event.
RESULT_FIELDS = ("head_commit", "files_changed", "insertions", "deletions", "uncommitted")


def report_from_events(events: list[dict[str, Any]]) -> WorkspaceReport | None:
    """The manifest's ``workspace`` as ``events.jsonl`` fixes it (for
    :func:`supervisor.taskdir.repair.rebuild`): the report the ``queued`` event recorded at claim,
    with the result of the last ``workspace_finished`` event; ``None`` for a task claimed
    before workspaces existed."""
    queued = next((e for e in events if e.get("event") == Event.QUEUED), None)
    if queued is None or not isinstance(queued.get("workspace"), dict):
        return None
    report = WorkspaceReport.model_validate(queued["workspace"])
    finished = [e for e in events if e.get("event") == Event.WORKSPACE_FINISHED]
    for key in RESULT_FIELDS if finished else ():
        setattr(report, key, finished[-1].get(key))
    return report
