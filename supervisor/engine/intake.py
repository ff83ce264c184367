"""Where new tasks come from: the :class:`Intake` protocol the scheduler needs, and
:class:`SpoolIntake`, its first implementation (task files dropped in the spool folder,
plus the profile's inline ``[[tasks]]``).

Whoever starts the engine picks its intake and hands it over as an :data:`IntakeFactory`
(``supervise run``: :func:`supervisor.cli.ops.intake_for`, the spool's or, with
``[cluster]``, the fleet's :class:`supervisor.cluster.intake.ClusterIntake`): the engine
never imports ``supervisor/cluster/``.

An intake claims work into task folders and reports it; it never launches anything. The
scheduler queues what it takes and starts it while slots are free.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from supervisor import folderaccess, heartbeats, plannames, plans, spool
from supervisor.config import LoadedProfile, ResolvedTask, resolve_task
from supervisor.engine import statefs
from supervisor.errors import SuperviseError
from supervisor.taskdir.folder import Manifest, TaskDir, atomic_write, utc_iso

log = logging.getLogger("supervise.engine")

#: Seconds a spool file whose ``after`` names a task not claimed yet waits in the spool
#: (tried again at each intake run) before it is rejected: files of one plan dropped
#: together are claimed whatever their order (issue 26).
AFTER_WAIT = 60.0
#: Spool files claimed per intake run; more are taken on the next run, right after the
#: checks that are due, so a burst of files never starves the checks.
INTAKE_BATCH = 25


@dataclass
class Taken:
    """What one :meth:`Intake.take` claimed: ``tasks`` (task folder and resolved spec, in
    order), how many were ``claimed`` and ``rejected``, and whether ``more`` work is ready
    now (the scheduler runs intake again right after the checks that are due)."""

    tasks: list[tuple[TaskDir, ResolvedTask]] = field(default_factory=list)
    claimed: int = 0
    rejected: int = 0
    more: bool = False


class Intake(Protocol):
    """A source of tasks for one engine."""

    def recover(self) -> None:
        """At start, before adoption: finish or undo claims a crash cut short."""

    def submit_initial(self) -> list[tuple[TaskDir, ResolvedTask]]:
        """At start, after adoption: tasks the source holds from the outset."""

    def take(self) -> Taken:
        """Claim ready work (a bounded batch) into task folders."""

    def waiting(self) -> bool:
        """True while work is waiting that :meth:`take` has not claimed yet."""

    def notice(self, name: str) -> bool:
        """A file event in the spool folder; True: intake should run now."""

    def report(self, task: TaskDir, manifest: Manifest, event: str, ended: bool) -> None:
        """A transition of a task (the engine's worker: must not block). ``event``:
        ``launched`` or the decision's status; ``ended``: the task left the engine."""

    def close(self) -> None:
        """At shutdown, after the last claim batch: stop what the source runs."""


#: Builds an engine's intake, once, in the engine's constructor:
#: ``factory(profile, disk, wake)``; ``wake()`` asks for an intake run now (from any thread).
#: It may raise ``ConfigError`` (``[cluster]`` without a DSN).
IntakeFactory = Callable[[LoadedProfile, statefs.StateDisk, Callable[[], None]], Intake]


def spool_intake(
    profile: LoadedProfile, disk: statefs.StateDisk, wake: Callable[[], None]
) -> Intake:
    """The spool folder's intake (:class:`SpoolIntake`), the engine's default
    :data:`IntakeFactory`; ``wake`` is not needed (the spool watcher kicks intake)."""
    return SpoolIntake(profile, disk)


class Claims:
    """Runs :meth:`Intake.take` on a thread of its own, one batch at a time in order, so
    reading, validating and moving task files (up to 11 MiB each) never delays a check.

    The scheduler's intake job calls :meth:`collect` then :meth:`start`; a finished batch
    that holds work calls ``wake`` (the intake job runs again at once to queue it); an
    empty one waits for the next ``intake_interval``, so an idle spool costs nothing more.

    Args:
        source: the intake.
        wake: called on the claim thread when a batch with work (or a failure) is ready.
    """

    def __init__(self, source: Intake, wake: Callable[[], None]) -> None:
        self.source = source
        self.wake = wake
        self._pool = futures.ThreadPoolExecutor(1, thread_name_prefix="supervise-claim")
        self._batch: futures.Future[Taken] | None = None

    def start(self) -> None:
        """Start the next batch unless one is running or waits to be collected."""
        if self._batch is None:
            self._batch = self._pool.submit(self.source.take)
            self._batch.add_done_callback(self._done)

    def _done(self, batch: futures.Future[Taken]) -> None:
        if batch.cancelled():
            return
        failed = batch.exception() is not None
        if failed or (taken := batch.result()).tasks or taken.rejected or taken.more:
            self.wake()

    def collect(self) -> Taken | None:
        """The finished batch (then forgotten), or ``None`` while none is finished. A batch
        that raised is logged and yields ``None``; its files stay in the spool."""
        batch = self._batch
        if batch is None or not batch.done():
            return None
        self._batch = None
        if batch.exception() is not None:
            log.error("spool claim failed: %r; tried again at the next intake", batch.exception())
            return None
        return batch.result()

    def shutdown(self) -> None:
        """Wait for the batch in progress. A batch claimed but not queued yet is safe:
        its task folders are ``queued`` on disk and the next start queues them again."""
        self._pool.shutdown(wait=True)


class UnsafeSpool(SuperviseError, RuntimeError):
    """The spool folder can be written by other users and the profile does not allow it."""


def check_spool_permissions(profile: LoadedProfile) -> None:
    """Refuse a spool that other users could write to: whoever writes there runs commands
    as us. ``[security] allow_shared_spool = true`` accepts it. A group-writable spool
    whose group is our user private group is not shared (see :func:`spool.sharing_problem`).

    A spool or state dir that others can only read is logged, one warning per folder
    (:mod:`supervisor.folderaccess`); its mode is left as it is.

    Raises:
        UnsafeSpool: one line naming the folder, its mode, owner and group, and the fix.
    """
    folder = profile.spool_dir
    problem = spool.sharing_problem(folder)
    if problem is not None and not profile.spec.security.allow_shared_spool:
        raise UnsafeSpool(
            f"{problem}; anyone who can write there runs commands as this user. "
            f"Fix: chmod 700 {folder}, or set [security] allow_shared_spool = true in "
            f"{profile.path}"
        )
    for line in folderaccess.exposure_warnings(profile):
        log.warning(line)
    for line in heartbeats.check(profile):  # what validate says, for who skipped it
        log.warning(line.removeprefix("warning: "))


class SpoolIntake:
    """The spool folder as an :class:`Intake` (see :mod:`supervisor.spool`).

    Args:
        profile: the validated profile (its ``spool_dir``, ``tasks_dir`` and ``[[tasks]]``).
        disk: the state filesystem; while it is full, files wait in the spool (a valid task
            must never be rejected for want of space).
    """

    def __init__(self, profile: LoadedProfile, disk: statefs.StateDisk) -> None:
        self.profile = profile
        self.disk = disk
        self._complete: set[str] = set()  # spool names inotify saw finished by their writer
        self._kicked = False  # a spool event arrived since take() last started
        self._seen: spool.Seen = {}  # first looks at future mtimes (spool.pending)
        self._deferred: dict[str, float] = {}  # spool name -> first put back (monotonic s)

    def notice(self, name: str) -> bool:
        """A file event in the spool folder (the watcher thread). True: a task file was
        finished by its writer, intake should run now."""
        if name.endswith(".toml") and not name.startswith("."):
            self._complete.add(name)
            self._kicked = True  # seen by a running take(), which then asks for more
            return True
        return False

    def recover(self) -> None:
        """Finish or undo spool claims a crash cut short (see :func:`spool.recover_claims`)."""
        try:
            for path in spool.recover_claims(self.profile):
                log.warning("claim of %s was cut short; put back into the spool", path)
            for line in plans.recover(self.profile):  # plan files (issue 26)
                log.warning("%s", line)
        except OSError:
            log.exception("cannot recover interrupted spool claims")

    def submit_initial(self) -> list[tuple[TaskDir, ResolvedTask]]:
        """Materialize the profile's ``[[tasks]]`` once per state dir (marker file)."""
        marker = self.profile.state_dir / "inline-tasks.submitted"
        if not self.profile.spec.tasks or marker.exists():
            return []
        base, shown = self.profile.path.parent, self.profile.path
        taken = plans.reserved_ids(self.profile)  # free ids, as a plan's (plans.free_id)
        ids = [plans.free_id(spec.name, self.profile, taken) for spec in self.profile.spec.tasks]
        local = {spec.name: i for spec, i in zip(self.profile.spec.tasks, ids, strict=True)}
        known = plannames.known_tasks(self.profile.tasks_dir)
        checked = []
        for spec in self.profile.spec.tasks:  # every task valid before any is made
            resolved = resolve_task(spec.model_copy(deep=True), self.profile, base, shown)
            checked.append((resolved, plannames.resolve_after(resolved, local, known, str(shown))))
        plannames.no_cycle(dict(zip(ids, (after for _, after in checked), strict=True)), shown)
        made = []
        for task_id, (resolved, after) in zip(ids, checked, strict=True):
            (self.profile.tasks_dir / task_id).mkdir(mode=0o700)
            task = TaskDir(self.profile.tasks_dir / task_id)
            source = f"{shown} [[tasks]]"
            spool.materialize(task, resolved, source, self.profile.state_dir, after=after)
            made.append((task, resolved))
        atomic_write(marker, utc_iso().encode())
        return made

    def take(self) -> Taken:
        """Claim up to :data:`INTAKE_BATCH` settled spool files. A bad file is rejected or
        quarantined with the reason, never lost, and never stops the engine."""
        self._kicked = False
        ready = spool.pending(
            self.profile.spool_dir, complete=frozenset(self._complete), seen=self._seen
        )
        claimable = [] if ready and self.disk.full() else ready
        taken = Taken()
        for path in claimable[:INTAKE_BATCH]:
            self._complete.discard(path.name)
            try:
                made = plans.claim(path, self.profile) if plans.is_plan(path) else None
                first = self._deferred.setdefault(path.name, time.monotonic())
                defer = time.monotonic() - first < AFTER_WAIT
                claimed = spool.claim(path, self.profile, defer) if made is None else None
            except Exception as exc:  # a bad file must never stop the engine
                self._deferred.pop(path.name, None)
                log.exception("cannot claim %s", path)
                self._quarantine(path, exc)
                continue
            if claimed is not None and claimed.deferred:
                continue  # waits for its predecessor's file (at most AFTER_WAIT s)
            self._deferred.pop(path.name, None)
            for one in made or [claimed]:
                self._count_claim(taken, path, one)
        # More files than one batch, or a file dropped while this run was busy (APScheduler
        # skips a kick that lands on a running job): run again right after the due checks.
        taken.more = len(ready) > INTAKE_BATCH or self._kicked
        return taken

    @staticmethod
    def _count_claim(taken: Taken, path: Path, claimed: spool.Claimed | None) -> None:
        """Add one claim's result to ``taken`` (a rejection is logged, one line a problem)."""
        if claimed is None:
            return
        if claimed.error:
            taken.rejected += 1
            log.warning("rejected %s -> %s", path, claimed.rejected_to)
            for problem in claimed.error.splitlines():  # one log line per problem
                log.warning("  %s", problem)
            return
        taken.claimed += 1
        assert claimed.task_dir is not None and claimed.resolved is not None
        taken.tasks.append((claimed.task_dir, claimed.resolved))

    def waiting(self) -> bool:
        """True while task files wait in the spool folder."""
        return spool.has_waiting_files(self.profile.spool_dir)

    def report(self, task: TaskDir, manifest: Manifest, event: str, ended: bool) -> None:
        """Nothing: the task folder is the whole record of a spool task."""

    def close(self) -> None:
        """Nothing runs besides the claim thread (:class:`Claims` stops that)."""

    def _quarantine(self, path: Path, exc: BaseException) -> None:
        """Move a file that broke the claim aside with the reason (never delete it)."""
        if not os.path.lexists(path):
            return  # already moved (its claim got that far); re-examined on restart
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return  # no room to claim it now: it stays in the spool for a later run
        try:
            spool.reject(path, self.profile.spool_dir, [f"{path}: cannot be processed: {exc!r}"])
        except Exception:
            log.exception("cannot move %s aside either; it stays in the spool", path)
