"""What a task spent, and when (issue 26): the one owner of how a task's total is made and
how it is split over days, for ``supervise cost`` (:mod:`supervisor.cli.cost`), the engine's
daily cap (:mod:`supervisor.engine.dailyspend`), ``serve``'s chart and the MCP ``cost`` tool.

**A task's total** is its agent kind's ``cost_usd`` column
(:func:`supervisor.agents.kinds.columns`; for Claude Code ``claude.total_cost_usd``): the sum
of the ``total_cost_usd`` of every run's ``result`` line, over every launch, resume and
follow-up turn (:class:`supervisor.agents.claude.stream.StreamState`; each run reports its
own process's spend, measured with the real CLI 2.1.328 against the mock:
``tests/test_issue22_attacks.py::test_a_real_follow_up_turn_has_its_own_cost``). A follow-up
keeps that total and records in ``turns[].cost_usd`` the total *as it stood* when each
earlier turn ended (a running total), so the turns are never added to it: that would count
turn 1 twice.

**The split over days** (:func:`pieces`): turn ``k``'s own spend is its running total less
turn ``k-1``'s (each clamped into ``[0, total]``, so the pieces always add up to the total
exactly), dated when that turn ended (``turns[k].finished_at``); the current turn's spend is
the rest, dated at the task's ``finished_at`` when it has ended, else at its latest manifest
write (``last_checked_at``: the engine writes the manifest whenever the agent reports a new
cost), else ``launched_at``, ``started_at``, ``created_at``. A turn that ran over midnight
counts on the day it ended; a piece with no time at all is undated (day ``-``). Days are the
local time zone's (:func:`day_of`, ``time.localtime``: the ``TZ`` of the process).

Standard library only (the CLI's import stays light); no pydantic.
"""

from __future__ import annotations

import json
import os
import tarfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from supervisor.agents import kinds
from supervisor.diskio import iso_epoch as epoch
from supervisor.diskio import read_regular
from supervisor.taskdir import layout
from supervisor.waiting import MANIFEST_MAX

#: The day of a piece of spend with no time at all.
UNDATED = "-"
#: The account of a task whose manifest names none (the ``account`` field, issue 26 part 3).
NO_ACCOUNT = "-"
#: Micro-dollars per dollar: the engine's running totals add integers, never drifting floats.
MICRO = 1_000_000
#: Largest amount in USD believed from a manifest (a task's total or a turn's): no run costs a
#: billion dollars, and a larger value (1e308, a hand edit) would overflow the micro-dollar
#: sums; it is read as "not reported".
MAX_USD = 1e9


@dataclass(frozen=True, slots=True)
class TaskSpend:
    """One task's spend.

    Attributes:
        task_id: the task folder's name.
        task_name, status: as the manifest says (``None``/``"-"`` when missing).
        account: the manifest's ``account`` (``acct-`` + 12 hex), else :data:`NO_ACCOUNT`.
        total_usd: the task's total (see the module docstring); ``None`` when its agent
            reports no cost.
        pieces: ``(epoch s or None, usd)`` per turn with spend (:func:`pieces`); their sum
            is ``total_usd``.
        turns: how many turns the task has had (1 without a follow-up).
        profile: the profile's name (filled in by the reader's caller).
        archived: read from ``state_dir/archive``.
        held: the manifest carries a daily budget hold (``budget_hold``).
    """

    task_id: str
    task_name: str | None
    status: str
    account: str
    total_usd: float | None
    pieces: tuple[tuple[float | None, float], ...]
    turns: int = 1
    profile: str = ""
    archived: bool = False
    held: bool = False


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A task folder whose manifest could not be read: where and why (one line)."""

    task_id: str
    path: str
    error: str
    profile: str = ""


def day_of(when: float | None) -> str:
    """``YYYY-MM-DD`` of ``when`` (epoch s) in the local time zone; :data:`UNDATED` for
    ``None`` or a time the platform cannot convert."""
    if when is None:
        return UNDATED
    try:
        return time.strftime("%Y-%m-%d", time.localtime(when))
    except (OverflowError, OSError, ValueError):
        return UNDATED


def utc_offset(when: float) -> int:
    """The local time zone's offset from UTC at ``when`` (seconds east; DST included)."""
    try:
        return time.localtime(when).tm_gmtoff
    except (OverflowError, OSError, ValueError):
        return 0


def zone_name(when: float) -> str:
    """The local time zone at ``when`` as stated in every report: ``CET (UTC+01:00)``."""
    offset = utc_offset(when)
    sign, offset = ("+" if offset >= 0 else "-"), abs(offset)
    try:
        name = time.localtime(when).tm_zone or "local"
    except (OverflowError, OSError, ValueError):
        name = "local"
    return f"{name} (UTC{sign}{offset // 3600:02d}:{offset % 3600 // 60:02d})"


def _number(value: Any) -> float | None:
    """``value`` as a float of USD, ``None`` unless it is a finite number within
    :data:`MAX_USD` either way (a manifest edited by hand may say anything)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past the float range
        return None
    return number if abs(number) <= MAX_USD else None  # NaN fails the comparison


def _get(obj: Any, name: str) -> Any:
    """A field of a dict or of a model (a ``TurnRecord``)."""
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def total_of(manifest: Mapping[str, Any]) -> float | None:
    """The task's total in USD (its agent kind's ``cost_usd``), ``None`` when not reported;
    never negative."""
    value = _number(kinds.columns(manifest).get("cost_usd"))
    return None if value is None else max(0.0, value)


def _current_time(manifest: Mapping[str, Any]) -> float | None:
    for key in ("finished_at", "last_checked_at", "launched_at", "started_at", "created_at"):
        found = epoch(manifest.get(key))
        if found is not None:
            return found
    return None


def pieces(
    manifest: Mapping[str, Any], total: float | None = None
) -> tuple[tuple[float | None, float], ...]:
    """The task's spend split by turn: ``(epoch s or None, usd)`` for each turn that spent
    something (see the module docstring). Their sum equals :func:`total_of` exactly
    (``total``: that value when the caller has it already)."""
    total = total_of(manifest) if total is None else total
    if total is None:
        return ()
    out: list[tuple[float | None, float]] = []
    before = 0.0
    turns = manifest.get("turns")
    for turn in turns if isinstance(turns, list) else []:
        running = _number(_get(turn, "cost_usd"))
        if running is None:
            continue
        running = min(max(running, before), total)
        if running > before:
            when = epoch(_get(turn, "finished_at")) or epoch(_get(turn, "started_at"))
            out.append((when, running - before))
        before = running
    if total > before:
        out.append((_current_time(manifest), total - before))
    return tuple(out)


def task_spend(manifest: Mapping[str, Any], task_id: str) -> TaskSpend:
    """A :class:`TaskSpend` of one manifest dict (any value of a wrong type is ignored)."""
    name, status, account = (
        manifest.get("task_name"),
        manifest.get("status"),
        manifest.get("account"),
    )
    turn = manifest.get("turn")
    total = total_of(manifest)
    return TaskSpend(
        task_id=task_id,
        task_name=name if isinstance(name, str) else None,
        status=status if isinstance(status, str) else "-",
        account=account if isinstance(account, str) and account else NO_ACCOUNT,
        total_usd=total,
        pieces=pieces(manifest, total) if total is not None else (),
        turns=turn if isinstance(turn, int) and not isinstance(turn, bool) and turn > 0 else 1,
        held=isinstance(manifest.get("budget_hold"), dict),
    )


def manifest_fields(model: Any) -> dict[str, Any]:
    """A pydantic ``Manifest`` as the mapping :func:`pieces` reads (its fields and extra
    keys, one level, no copy of the values): the engine's way in, without a dump."""
    return {**vars(model), **(getattr(model, "__pydantic_extra__", None) or {})}


def read_manifest(folder: str) -> dict[str, Any] | str | None:
    """A task folder's manifest dict, or why it cannot be used (one line), or ``None``
    when the folder has no manifest yet (a claim being finished: no task yet)."""
    path = os.path.join(folder, layout.MANIFEST)
    try:
        data = json.loads(read_regular(path, MANIFEST_MAX, follow=False))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    if not isinstance(data, dict):
        return "not a JSON object"
    return data


def scan(tasks_dir: Path) -> Iterator[TaskSpend | Unreadable]:
    """Every task folder of ``tasks_dir`` (``state_dir/tasks``), in name order: its
    :class:`TaskSpend`, or :class:`Unreadable`. A missing folder yields nothing."""
    try:
        entries = sorted(os.scandir(tasks_dir), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
            continue
        found = read_manifest(entry.path)
        if isinstance(found, dict):
            yield task_spend(found, entry.name)
        elif isinstance(found, str):
            yield Unreadable(entry.name, os.path.join(entry.path, layout.MANIFEST), found)


def scan_archive(state_dir: Path) -> Iterator[TaskSpend | Unreadable]:
    """Every task in ``state_dir/archive/*.tar.gz`` (``supervise archive``), as
    :func:`scan`; an unreadable tarball or member is one :class:`Unreadable`."""
    for path in sorted((state_dir / layout.ARCHIVE).glob("*.tar.gz")):
        try:
            with tarfile.open(path, "r:gz") as archive:
                yield from _archived(archive, path)
        except (OSError, tarfile.TarError, EOFError) as exc:
            yield Unreadable("-", str(path), " ".join(f"{type(exc).__name__}: {exc}".split()))


def _archived(archive: tarfile.TarFile, path: Path) -> Iterator[TaskSpend | Unreadable]:
    for member in archive:
        parts = member.name.split("/")
        if len(parts) != 2 or parts[1] != layout.MANIFEST or not member.isfile():
            continue
        if member.size > MANIFEST_MAX:
            yield Unreadable(parts[0], f"{path}:{member.name}", "manifest too large")
            continue
        handle = archive.extractfile(member)
        try:
            data = json.loads(handle.read() if handle is not None else b"")
        except (ValueError, RecursionError) as exc:
            yield Unreadable(parts[0], f"{path}:{member.name}", f"{type(exc).__name__}: {exc}")
            continue
        if isinstance(data, dict):
            yield replace(task_spend(data, parts[0]), archived=True)
        else:
            yield Unreadable(parts[0], f"{path}:{member.name}", "not a JSON object")


def with_profile(found: Iterable[TaskSpend | Unreadable], profile: str) -> Iterator[Any]:
    """``found`` with each record's ``profile`` set."""
    for item in found:
        yield replace(item, profile=profile)


@dataclass
class Window:
    """The time a report covers: pieces dated in ``[since, until)`` (epoch s; ``None``:
    open). An undated piece is in a window only when both ends are open."""

    since: float | None = None
    until: float | None = None

    def holds(self, when: float | None) -> bool:
        """Whether a piece dated ``when`` counts."""
        if when is None:
            return self.since is None and self.until is None
        return (self.since is None or when >= self.since) and (
            self.until is None or when < self.until
        )


@dataclass
class Totals:
    """Spend per key, in micro-dollars, and the tasks that spent under each key."""

    usd: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, set[str]] = field(default_factory=dict)

    def add(self, key: str, micro: int, task: str) -> None:
        """Add ``micro`` under ``key`` for ``task``."""
        self.usd[key] = self.usd.get(key, 0) + micro
        self.tasks.setdefault(key, set()).add(task)

    def rows(self, name: str, order: str = "key") -> list[dict[str, Any]]:
        """``[{name: key, "usd", "tasks"}]``, by key (``order="key"``) or highest first."""
        keys = sorted(self.usd)
        if order != "key":
            keys.sort(key=lambda k: -self.usd[k])
        return [
            {name: k, "usd": round(self.usd[k] / MICRO, 6), "tasks": len(self.tasks[k])}
            for k in keys
        ]


def micro(usd: float) -> int:
    """``usd`` in whole micro-dollars (the engine's and the report's unit of addition)."""
    return round(usd * MICRO)


#: ``--by`` sections of a report, in the order they are printed.
SECTIONS = ("day", "profile", "account", "task")
#: The version of the JSON shape of :func:`report` (``supervise cost --json``).
REPORT_VERSION = 1


def report(found: Iterable[TaskSpend | Unreadable], window: Window, now: float) -> dict[str, Any]:
    """``supervise cost --json``'s object (version :data:`REPORT_VERSION`): ``timezone``
    (:func:`zone_name`), ``since``/``until`` (ISO 8601 UTC or ``null``), ``total_usd``,
    ``tasks`` (folders read), ``tasks_with_cost`` (tasks with spend in the window),
    ``unreadable`` (``[{profile, task_id, path, error}]``, each once), ``by_day`` (oldest
    first), ``by_profile``, ``by_account`` (highest first; ``usd``, ``tasks``), ``by_task``
    (highest first: ``task_id``, ``task_name``, ``profile``, ``account``, ``status``,
    ``usd`` in the window, ``total_usd`` of the task, ``turns``, ``last_day``,
    ``archived``). Amounts are USD rounded to 1e-6."""
    days, profiles, accounts = Totals(), Totals(), Totals()
    rows: list[dict[str, Any]] = []
    unreadable: list[dict[str, Any]] = []
    total, read = 0, 0
    for item in found:
        if isinstance(item, Unreadable):
            unreadable.append(asdict(item))
            continue
        read += 1
        spent, last = 0, None
        for when, usd in item.pieces:
            if not window.holds(when):
                continue
            part = micro(usd)
            spent += part
            day = day_of(when)
            days.add(day, part, item.task_id)
            last = day if last is None or (day != UNDATED and day > last) else last
        if spent <= 0:
            continue
        total += spent
        profiles.add(item.profile, spent, item.task_id)
        accounts.add(item.account, spent, item.task_id)
        rows.append(_task_row(item, spent, last))
    rows.sort(key=lambda r: (-r["usd"], r["task_id"]))
    return {
        "version": REPORT_VERSION,
        "timezone": zone_name(now),
        "since": _iso(window.since),
        "until": _iso(window.until),
        "total_usd": round(total / MICRO, 6),
        "tasks": read,
        "tasks_with_cost": len(rows),
        "unreadable": unreadable,
        "by_day": days.rows("day"),
        "by_profile": profiles.rows("profile", "usd"),
        "by_account": accounts.rows("account", "usd"),
        "by_task": rows,
    }


def _task_row(item: TaskSpend, spent: int, last: str | None) -> dict[str, Any]:
    return {
        "task_id": item.task_id,
        "task_name": item.task_name,
        "profile": item.profile,
        "account": item.account,
        "status": item.status,
        "usd": round(spent / MICRO, 6),
        "total_usd": item.total_usd,
        "turns": item.turns,
        "last_day": last,
        "archived": item.archived,
    }


def _iso(when: float | None) -> str | None:
    if when is None:
        return None
    return datetime.fromtimestamp(when).astimezone().isoformat(timespec="seconds")


def day_start(when: float) -> float:
    """Epoch s of the local midnight that starts ``when``'s day."""
    moment = datetime.fromtimestamp(when)
    return moment.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


#: The most days a report may reach back (``--days``): 100 years.
MAX_DAYS = 36525


def days_back(now: float, days: int) -> float:
    """Epoch s of the local midnight that starts the day ``days - 1`` days before ``now``'s
    (``days`` = 1: today's midnight), whatever DST did in between (counted from noon).

    Raises:
        ValueError: ``days`` outside 1 to :data:`MAX_DAYS`.
    """
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"--days {days}: give 1 to {MAX_DAYS}")
    return day_start(day_start(now) + 12 * 3600 - (days - 1) * 86400)


def hours_today(found: Iterable[TaskSpend], now: float) -> list[float]:
    """USD per local hour of today up to ``now`` (index 0 = 00:00-01:00), for ``serve``."""
    start = day_start(now)
    hours = [0] * (int((now - start) // 3600) + 1)
    for item in found:
        for when, usd in item.pieces:
            if when is not None and start <= when <= now:
                hours[min(int((when - start) // 3600), len(hours) - 1)] += micro(usd)
    return [h / MICRO for h in hours]


def budgets(
    caps: Iterable[tuple[str, float | None]], found: Iterable[TaskSpend | Unreadable], now: float
) -> list[dict[str, Any]]:
    """``budgets``: each profile (name, ``[budget] daily_usd``) with a cap, its spend in the
    local day of ``now`` and whether that reached the cap (its engine holds launches)."""
    today = day_of(now)
    spent: dict[str, int] = {}
    for item in found:
        if isinstance(item, TaskSpend):
            for when, usd in item.pieces:
                if when is not None and day_of(when) == today:
                    spent[item.profile] = spent.get(item.profile, 0) + micro(usd)
    out = []
    for name, cap in caps:
        if cap is not None:
            usd = spent.get(name, 0) / MICRO
            row = {"profile": name, "daily_usd": cap, "today_usd": round(usd, 6)}
            out.append({**row, "reached": usd >= cap})
    return out


def profiles_report(
    profiles: Iterable[tuple[str, Any]], window: Window, now: float, archived: bool = False
) -> dict[str, Any]:
    """:func:`report` over the task folders of ``profiles`` (``(name, LoadedProfile)``;
    with ``archived``, their archives too), plus ``budgets`` (:func:`budgets`): what
    ``supervise cost --json``, the MCP ``cost`` tool and ``serve`` give."""
    found: list[TaskSpend | Unreadable] = []
    caps = []
    for name, profile in profiles:
        found.extend(with_profile(scan(profile.tasks_dir), name))
        if archived:
            found.extend(with_profile(scan_archive(profile.state_dir), name))
        caps.append((name, profile.spec.budget.daily_usd))
    result = report(found, window, now)
    result["budgets"] = budgets(caps, found, now)
    return result
