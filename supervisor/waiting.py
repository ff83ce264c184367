"""``supervise wait``: block until each named task has ended, or one needs a person.

The orchestrator's loop (issue 22, item 2) is submit → wait → read → answer or follow up.
:func:`wait_tasks` returns when every named task is terminal
(:data:`supervisor.taskdir.states.TERMINAL`, or its task file was rejected), or as soon as
one of them **needs you**: status
``escalated``, which the engine sets for a permission request a rule escalated and for the
circuit breaker's pause (the manifest's ``escalation`` record, written by
:mod:`supervisor.agents.claude.permissions` and the adapter's breaker). A task that is
escalated when the wait starts returns at once. With ``terminal_only`` an escalated task is
waited through, as before issue 22.

An ended task with a follow-up not yet taken (``supervise continue`` left
:data:`supervisor.taskdir.folder.FOLLOWUP` in its folder; the engine takes it by rename, or
deletes it when it refuses) has not ended: its manifest is the previous turn's, and a
``wait`` right after a ``continue`` that no running engine took at once must wait for the
new turn, not return the old result.

Why "as soon as one": an escalated task makes no progress until a person answers, so
waiting on for its siblings would only delay the answer (the reason the issue was filed).

Exit codes (:attr:`WaitOutcome.code`; README "Exit codes"): ``0`` every task ended with
verdict ``PASS``; ``1`` one or more ended otherwise (or was rejected);
:data:`EXIT_NEEDS_YOU` (10) one or more need a person: this wins over 0 and 1 when some
ended and some need you; :data:`EXIT_TIMEOUT` (124, ``timeout(1)``'s) the timeout passed
first; :data:`EXIT_USAGE` (2) an id naming no task (:class:`UnknownTasks`).

How it waits: inotify on the tasks folder, each named task's folder and the spool
(a manifest is replaced by rename), with a full re-read every :data:`SAFETY_POLL` seconds
as the net under a missed event; a look every :data:`NO_INOTIFY_POLL` seconds when the
user has no inotify instance left.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor.diskio import read_regular
from supervisor.errors import SuperviseError
from supervisor.taskdir import layout
from supervisor.taskdir.states import TERMINAL, Status, Verdict
from supervisor.taskid import is_task_id
from supervisor.taskid import shown as shown_id
from supervisor.terminal import escape_controls

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: One or more named tasks need a person (``escalated``); chosen above the verbs' 3 and 4
#: and far from the shells' 126+ so a script can tell it from every other outcome.
EXIT_NEEDS_YOU = 10
#: ``timeout(1)``'s exit status when the time ran out (GNU coreutils manual).
EXIT_TIMEOUT = 124
EXIT_USAGE = 2
#: Seconds between full re-reads while waiting: the net under the inotify events (a missed
#: event costs at most this much).
SAFETY_POLL = 5.0
#: Seconds between looks when no inotify instance can be had (``fs.inotify.max_user_instances``
#: reached by the user's other programs): ``wait`` polls instead of failing.
NO_INOTIFY_POLL = 0.5
#: Bytes a manifest may have (today's are a few KiB): a bigger file is not read.
MANIFEST_MAX = 16 << 20
#: ``needs.kind`` values.
PERMISSION, BREAKER, OTHER = "permission", "circuit_breaker", "escalation"


class UnknownTasks(SuperviseError, LookupError):
    """Ids that name no task folder, spool file or rejected file; ``str()`` is the one
    line to show, ``ids`` the ids."""

    def __init__(self, ids: list[str], line: str) -> None:
        super().__init__(line)
        self.ids = ids


def load_manifest(path: Path) -> dict[str, Any]:
    """A manifest read without blocking (a FIFO, a device or a file over
    :data:`MANIFEST_MAX` bytes put in its place is refused: :func:`supervisor.diskio.read_regular`).

    Raises:
        OSError: missing, not a regular file, too big, unreadable.
        ValueError: not JSON, or no string ``status``.
    """
    try:
        data = json.loads(read_regular(path, MANIFEST_MAX))
    except RecursionError:  # "[[[[…": nested deeper than the parser goes
        raise ValueError("nested too deep") from None
    if not isinstance(data, dict) or not isinstance(data.get("status"), str):
        raise ValueError("no 'status'")
    return data


def read_manifest(path: Path) -> dict[str, Any] | None:
    """:func:`load_manifest`, or ``None`` (missing, being replaced, damaged, odd)."""
    try:
        return load_manifest(path)
    except (OSError, ValueError):
        return None  # not there yet, or replaced under us: looked at again


def locate(profile: LoadedProfile, task_id: str) -> str | None:
    """Where ``task_id`` is: ``"task"`` (a task folder), ``"spool"`` (its file waits in the
    spool or is being claimed), ``"rejected"`` (its file was rejected), or ``None``."""
    if not is_task_id(task_id):
        return None
    if (profile.tasks_dir / task_id).is_dir():
        return "task"
    spool = profile.spool_dir
    if (spool / f"{task_id}.toml").exists() or any(spool.glob(f"{layout.CLAIM_PREFIX}{task_id}.*")):
        # the claim may have moved it into its task folder meanwhile
        return "task" if (profile.tasks_dir / task_id).is_dir() else "spool"
    if (spool / layout.REJECTED / f"{task_id}.toml").exists():
        return "rejected"
    return None


def rejected(profile: LoadedProfile, task_id: str) -> dict[str, Any]:
    """The stand-in for a task whose file the engine rejected: status ``rejected``."""
    error = profile.spool_dir / layout.REJECTED / f"{task_id}.toml{layout.ERROR_SUFFIX}"
    try:
        text = error.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return {"task_id": task_id, "status": "rejected", "verdict": None, "error": text}


def needs_of(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """What an ``escalated`` task needs from a person, from its manifest's ``escalation``
    record, or ``None`` for any other status.

    Returns ``{"kind", "reason", "tool", "subject", "rule", "detail", "since", "source"}``:
    ``kind`` ``permission`` (a request a rule escalated: ``tool`` and ``subject`` name it;
    ``detail`` says who decided, as the ``permission`` event's ``detail``: ``rule 5 (Bash ~
    /^curl/)``, ``default`` or ``circuit breaker (...)``; ``rule`` is the matching rule's
    1-based position in the task's rules then the profile's, as the event's ``rule``, an
    integer, ``None`` when no rule matched; ``reason`` the sentence ``Bash 'curl x' waits
    for approve or deny: DETAIL``; ``source`` is ``hook`` or ``screen``), ``circuit_breaker``
    (the agent is paused after ``max_denials`` denials or failed tool calls; ``approve``
    lets it go on, ``deny`` ends the task; ``reason`` says so) or ``escalation`` (a record
    of neither shape). Absent values are ``None``. The Brain's trial found ``rule`` and
    ``reason`` holding the same text; they differ since issue 22.
    """
    if manifest.get("status") != Status.ESCALATED:
        return None
    record = manifest.get("escalation")
    record = record if isinstance(record, dict) else {}

    def text(key: str) -> str | None:
        value = record.get(key)
        return value if isinstance(value, str) else None

    if record.get("paused") is True:
        kind = BREAKER
    elif "tool" in record or "answer" in record or record.get("screen") is True:
        kind = PERMISSION
    else:
        kind = OTHER
    permission = kind == PERMISSION
    detail = text("reason")
    return {
        "kind": kind,
        "reason": _sentence(text("tool"), text("subject"), detail) if permission else detail,
        "tool": text("tool"),
        "subject": text("subject"),
        "rule": _rule_index(record.get("rule"), detail) if permission else None,
        "detail": detail if permission else None,
        "since": text("since"),
        "source": ("screen" if record.get("screen") else "hook") if permission else None,
    }


def _sentence(tool: str | None, subject: str | None, detail: str | None) -> str:
    """``needs.reason`` of a permission request: what waits and who escalated it."""
    what = f"{tool or '?'} {(subject or '')[:200]!r}"
    return f"{what} waits for approve or deny: {detail or '?'}"


def _rule_index(value: Any, detail: str | None) -> int | None:
    """The deciding rule's position: the record's ``rule``, or for a record written before
    it was kept, the number in ``detail``'s ``rule N (...)`` (:func:`supervisor.policy.approval`'s
    label)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    from supervisor.policy.approval import RULE_LABEL  # loads the config models: not at import

    found = RULE_LABEL.match(detail or "") if value is None else None
    return int(found.group(1)) if found else None


def needs_line(task_id: str, needs: dict[str, Any]) -> str:
    """The text line for a task that needs you, escaped, e.g.
    ``t-1: escalated needs-you Bash(rm -rf x) rule 2 (Bash ~ /^rm/)``."""
    if needs["kind"] == PERMISSION:
        what = f"{needs['tool'] or '?'}({needs['subject'] or ''}) {needs['detail'] or ''}".strip()
    else:
        what = needs["reason"] or needs["kind"]
    return escape_controls(f"{task_id}: escalated needs-you {what}")


@dataclass(frozen=True)
class WaitOutcome:
    """How a wait ended.

    ``shown``: one entry per named id, in the order named: the final manifest of an ended
    task, the stand-in of a rejected one, ``{"task_id", "status", "verdict", "needs"}`` for
    one that needs you, else its current manifest (``status`` ``spooled`` before its
    folder exists; ``{"task_id", "status": "queued", "verdict": None, "turn", "reason"}``
    for an ended task whose follow-up the engine has not taken yet). ``needs_you``: the
    ids that need a person; ``pending``: the ids still going (neither ended nor needing
    you) when the wait returned; ``code``: the exit status (module docstring);
    ``timeout``: the seconds asked for.
    """

    shown: list[dict[str, Any]]
    needs_you: tuple[str, ...]
    pending: tuple[str, ...]
    code: int
    timeout: float | None

    def lines(self) -> list[str]:
        """The text output, one escaped line per task: ``ID: STATUS VERDICT (why)``, or
        :func:`needs_line` for one that needs you."""
        out = []
        for entry in self.shown:
            if entry.get("needs") is not None and entry["task_id"] in self.needs_you:
                out.append(needs_line(entry["task_id"], entry["needs"]))
                continue
            why = (
                entry.get("failure_reason")
                or entry.get("abandon_reason")
                or entry.get("error")
                or entry.get("reason")
            )
            line = f"{entry.get('task_id')}: {entry.get('status')} {entry.get('verdict') or '-'}"
            out.append(escape_controls(line + (f" ({why})" if why else "")))
        return out


class _Events:
    """inotify on the tasks folder, each named task's folder and the spool (with
    ``rejected``): any rename or write there wakes :meth:`wait`. Folders that appear later
    are added."""

    def __init__(self, profile: LoadedProfile, ids: list[str]) -> None:
        from inotify_simple import INotify
        from inotify_simple import flags as F

        self.flags = F.MOVED_TO | F.CLOSE_WRITE | F.CREATE | F.MOVED_FROM | F.DELETE
        try:
            self.inotify: INotify | None = INotify()
        except OSError:  # EMFILE: the user's inotify instances are used up (128 by default)
            self.inotify = None  # then a look every NO_INOTIFY_POLL s instead
        self.profile, self.ids = profile, set(ids)
        self.watched: set[Path] = set()
        self.refresh()

    def refresh(self) -> None:
        """Watch the folders that exist now (idempotent)."""
        if self.inotify is None:
            return
        spool = self.profile.spool_dir
        folders = [self.profile.tasks_dir, spool / layout.REJECTED, spool]
        folders += [self.profile.tasks_dir / task_id for task_id in self.ids]
        for folder in folders:
            if folder in self.watched:
                continue
            try:
                self.inotify.add_watch(str(folder), self.flags)
            except OSError:
                continue  # not there yet: the next refresh or the safety poll finds it
            self.watched.add(folder)

    def wait(self, seconds: float) -> None:
        """Block until an event or ``seconds`` pass (at most :data:`NO_INOTIFY_POLL`
        without inotify)."""
        if self.inotify is None:
            time.sleep(min(seconds, NO_INOTIFY_POLL))  # a poll interval, not a sync
            return
        self.inotify.read(timeout=max(1, int(seconds * 1000)))
        self.refresh()

    def close(self) -> None:
        if self.inotify is not None:
            self.inotify.close()


class _Look:
    """The named tasks' states, read again at each :meth:`look`: ended ones are kept (an
    ending is final); a need is read afresh each time (someone may have answered it)."""

    def __init__(self, profile: LoadedProfile, ids: list[str], terminal_only: bool) -> None:
        self.profile, self.ids, self.terminal_only = profile, ids, terminal_only
        self.ended: dict[str, dict[str, Any]] = {}
        self.needing: dict[str, dict[str, Any]] = {}

    def look(self) -> bool:
        """Read the unended tasks; whether the wait is over."""
        from supervisor.taskdir.folder import FOLLOWUP  # the manifest model: not at import (status)

        self.needing = {}
        for task_id in self.ids:
            if task_id in self.ended:
                continue
            folder = self.profile.tasks_dir / task_id
            manifest = read_manifest(folder / layout.MANIFEST)
            if manifest is not None and manifest["status"] in TERMINAL:
                if not (folder / FOLLOWUP).exists():  # else a follow-up is yet to run
                    self.ended[task_id] = manifest
            elif manifest is None and locate(self.profile, task_id) == "rejected":
                self.ended[task_id] = rejected(self.profile, task_id)
            elif manifest is not None and not self.terminal_only:
                needs = needs_of(manifest)
                if needs is not None:
                    self.needing[task_id] = {
                        "task_id": task_id,
                        "status": manifest["status"],
                        "verdict": manifest.get("verdict"),
                        "needs": needs,
                    }
        return bool(self.needing) or len(self.ended) == len(self.ids)

    def outcome(self, timeout: float | None) -> WaitOutcome:
        """The :class:`WaitOutcome` of the tasks as last looked at."""
        shown, pending = [], []
        for task_id in self.ids:
            entry = self.ended.get(task_id) or self.needing.get(task_id)
            if entry is None:
                pending.append(task_id)
                entry = read_manifest(self.profile.tasks_dir / task_id / layout.MANIFEST) or {
                    "task_id": task_id,
                    "status": "spooled",
                    "verdict": None,
                }
                if entry.get("status") in TERMINAL:  # its follow-up is not taken yet (look)
                    entry = _followup_waiting(task_id, entry)
            shown.append(entry)
        if self.needing:
            code = EXIT_NEEDS_YOU
        elif pending:
            code = EXIT_TIMEOUT
        else:
            code = 0 if all(m.get("verdict") == Verdict.PASS for m in shown) else 1
        return WaitOutcome(shown, tuple(self.needing), tuple(pending), code, timeout)


def _followup_waiting(task_id: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """The stand-in of an ended task whose follow-up waits for the engine: the new turn,
    ``queued`` (what the engine records when it takes it), never the last turn's result."""
    turn = manifest.get("turn") if isinstance(manifest.get("turn"), int) else 1
    return {
        "task_id": task_id,
        "status": Status.QUEUED.value,
        "verdict": None,
        "turn": turn + 1,
        "reason": f"a follow-up, turn {turn + 1}",
    }


def check_ids(profile: LoadedProfile, ids: list[str]) -> None:
    """Raise :class:`UnknownTasks` (one line naming the folders looked in) when an id
    names no task folder, spool file or rejected file."""
    unknown = [task_id for task_id in ids if locate(profile, task_id) is None]
    if unknown:
        raise UnknownTasks(
            unknown,
            f"no task {', '.join(map(shown_id, unknown))} in {profile.tasks_dir} "
            f"nor in {profile.spool_dir}; "
            f"see 'supervise status -c {profile.path}'",
        )


def wait_tasks(
    profile: LoadedProfile,
    ids: list[str],
    timeout: float | None,
    *,
    terminal_only: bool = False,
    on_block: Callable[[], None] | None = None,
) -> WaitOutcome:
    """Block until every task of ``ids`` has ended, or (unless ``terminal_only``) one of
    them needs a person, or ``timeout`` seconds pass (``None``: no limit). Duplicate ids
    count once. ``on_block`` is called once if the first look does not settle it (the CLI
    prints its no-engine warning there). Rules and exit codes: the module docstring.

    Raises:
        UnknownTasks: an id names no task (checked before any wait).
    """
    ids = list(dict.fromkeys(ids))
    check_ids(profile, ids)
    deadline = None if timeout is None else time.monotonic() + timeout
    state = _Look(profile, ids, terminal_only)
    events = _Events(profile, ids)  # before the first look: a change after it wakes us
    try:
        if state.look():
            return state.outcome(timeout)
        if on_block is not None:
            on_block()
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            events.wait(SAFETY_POLL if left is None else min(left, SAFETY_POLL))
            if state.look():
                break
    finally:
        events.close()
    return state.outcome(timeout)
