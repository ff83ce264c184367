"""The engine's side of attempts (issue 26, part 2): each group's winner, its discarded
attempts and its summed cost (:class:`Groups`, a part of
:class:`supervisor.engine.scheduler.Engine`, like :class:`~supervisor.engine.plans.Plans`).

Each intake run, before the operator requests are taken, the open groups are looked at
again when a task ended since the last look, a group arrived, or
:data:`~supervisor.engine.plans.RECHECK` seconds passed: every attempt's manifest is read
and the pure :func:`supervisor.policy.attempts.decide` answers. The engine then, in this
order: writes the group record (winner, outcome, summed cost; atomically), and leaves a
``discard`` request (:mod:`supervisor.taskdir.control`) for each attempt to discard, which
the same intake run takes like an operator's ``stop`` (a live attempt is stopped; a queued
or blocked one ends without launching), ending it ``abandoned`` with reason ``discarded``.

Crash safety: the winner is recorded before any request; a restart reads every group not
``closed`` (the first look scans ``state_dir/plans``), keeps a recorded winner, and leaves
the requests again for attempts still not ended. Nothing else holds the group's state.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from supervisor import attempts as groups
from supervisor.config import LoadedProfile, ResolvedTask
from supervisor.diskio import iso_epoch
from supervisor.engine.plans import RECHECK
from supervisor.engine.runtime import Runtime
from supervisor.policy import attempts as rules
from supervisor.taskdir import control, layout
from supervisor.taskdir.folder import TaskDir
from supervisor.taskdir.states import DAMAGED, Status
from supervisor.terminal import escape_controls
from supervisor.waiting import load_manifest

log = logging.getLogger("supervise.engine")


def open_groups(state_dir: Path) -> set[str]:
    """The ids of the groups in ``state_dir/plans`` whose record is not ``closed``."""
    found: set[str] = set()
    try:
        entries = list(os.scandir(state_dir / groups.PLANS))
    except OSError:
        return found
    for entry in entries:
        record = groups.read(state_dir, entry.name) or _rebuilt(state_dir, entry.name)
        if record is not None and not record.get("closed"):
            found.add(entry.name)
    return found


def _rebuilt(state_dir: Path, group_id: str) -> dict[str, Any] | None:
    """:func:`groups.rebuild`, logged: one warning when a damaged record was made again,
    one error when it could not be (the group is then left undecided)."""
    try:
        record = groups.rebuild(state_dir, group_id)
    except OSError as exc:
        log.error("attempts %s: its record is damaged and cannot be rebuilt: %s", group_id, exc)
        return None
    if record is not None:
        log.warning(
            "attempts %s: %s could not be read; rebuilt from the plan's files (the damaged "
            "one kept beside it as %s*), its winner decided again",
            group_id,
            groups.GROUP,
            groups.GROUP + layout.DAMAGED,
        )
    return record


def read_attempts(
    tasks_dir: Path, rows: list[dict[str, Any]], running: Mapping[str, str] | None = None
) -> tuple[list[rules.Attempt], list[dict[str, Any]]]:
    """What :func:`rules.decide` needs of each attempt, and the manifests read.
    ``running``: the status of each attempt the engine runs or queues now, taken for one
    whose manifest cannot be read (deleted or replaced under the engine, which writes it
    again at its next check): found by attack, such an attempt counted as ended
    (``damaged``), and a group could close ``none_passed`` while it ran on to pass."""
    running = running or {}
    found, manifests = [], []
    for row in rows:
        task_id, index = row["task_id"], row["index"]
        folder = tasks_dir / task_id
        if not folder.is_dir():
            found.append(rules.Attempt(task_id, index, None))
            continue
        try:
            data = load_manifest(folder / layout.MANIFEST)
        except (OSError, ValueError):
            found.append(rules.Attempt(task_id, index, running.get(task_id, DAMAGED)))
            continue
        manifests.append(data)
        finished = iso_epoch(data.get("finished_at"))
        status, verdict = data.get("status"), data.get("verdict")
        found.append(rules.Attempt(task_id, index, status, verdict, finished))
    return found, manifests


class Groups:
    """Open groups of attempts; the attributes are the engine's own."""

    profile: LoadedProfile
    stats: dict[str, int]
    live: dict[str, Runtime]
    queue: deque[TaskDir]
    _groups: set[str] | None = None  # open group ids; None: not scanned yet
    _groups_look: tuple[int, float] = (-1, 0.0)
    _discarding: set[str] | None = None  # attempts asked to end (once per engine)

    def _note_group(self, task: TaskDir, resolved: ResolvedTask) -> None:
        """A claimed attempt: logged, and its group is looked at from the next intake run
        on (the first look scans every group anyway)."""
        if resolved.spec.attempts is None:
            return
        ref = task.read_manifest().attempt or {}
        group = ref.get("group")
        if not isinstance(group, str):
            return
        log.info(
            "%s is attempt %s of %s of %s (model %s)",
            task.task_id,
            ref.get("index"),
            ref.get("of"),
            group,
            escape_controls(resolved.model),
        )
        if self._groups is not None:
            self._groups.add(group)
            self._groups_look = (-1, 0.0)

    def _look_at_groups(self) -> None:
        """Decide every open group (see the module docstring), at most when a task ended,
        a group arrived, or :data:`RECHECK` s passed."""
        if self._groups is None:
            self._groups = open_groups(self.profile.state_dir)
        finished, looked = self._groups_look
        if not self._groups or (
            finished == self.stats["finished"] and time.monotonic() - looked < RECHECK
        ):
            return
        self._groups_look = (self.stats["finished"], time.monotonic())
        for group_id in sorted(self._groups):
            try:
                self._look_at_group(group_id)
            except Exception:  # one broken group must not hold the others
                log.exception("attempts %s: cannot decide its winner; looked at again", group_id)
                self._groups_look = (-1, 0.0)

    def _look_at_group(self, group_id: str) -> None:
        """Decide one group; record what changed, then ask its losers to end."""
        assert self._groups is not None
        state_dir = self.profile.state_dir
        record = groups.read(state_dir, group_id) or _rebuilt(state_dir, group_id)
        if record is None:
            self._groups.discard(group_id)
            return
        rows = groups.attempt_rows(record)
        running = {t.task_id: Status.QUEUED for t in list(self.queue)}
        running |= {i: str(r.state.status) for i, r in list(self.live.items())}
        found, manifests = read_attempts(self.profile.tasks_dir, rows, running)
        winner = record.get("winner") if isinstance(record.get("winner"), str) else None
        out = rules.decide(str(record.get("pick") or rules.FIRST_PASS), winner, found)
        cost = groups.summed_cost(manifests)
        new = {**record, "winner": out.winner, "outcome": out.outcome, "closed": out.closed}
        new["cost_usd"] = cost
        if new != record:
            groups.write(groups.group_file(self.profile.state_dir, group_id), new)
            self._log_change(group_id, record, new, found)
        asked = self._discarding if self._discarding is not None else set()
        self._discarding = asked
        for task_id in out.discard:
            if task_id not in asked:
                control.request(self.profile.state_dir, task_id, "discard")
                asked.add(task_id)
                log.info("attempts %s: discarding %s (its group has a winner)", group_id, task_id)
        if out.closed:
            self._groups.discard(group_id)

    @staticmethod
    def _log_change(
        group_id: str, old: dict[str, Any], new: dict[str, Any], found: list[rules.Attempt]
    ) -> None:
        """One log line when the group gets its winner or its outcome."""
        if new["winner"] is not None and old.get("winner") != new["winner"]:
            index = next((a.index for a in found if a.task_id == new["winner"]), "?")
            log.info(
                "attempts %s: %s (attempt %s of %d) passed first and wins",
                group_id,
                escape_controls(str(new["winner"])),
                index,
                len(found),
            )
        if new["outcome"] != old.get("outcome") and new["outcome"] != rules.PASSED:
            log.info("attempts %s: %s (pick = %s)", group_id, new["outcome"], new.get("pick"))
