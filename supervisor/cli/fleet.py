"""``stop|resume|approve|deny|show|wait ID`` for a task on another host of the fleet.

:func:`register` (called by :func:`supervisor.cli.cluster.register`, after every command
exists) makes ``-c`` optional on these six commands and puts a router in front of each: a
task found in the profile's own state dir is handled locally exactly as before; otherwise,
with a DSN (``-c PROFILE`` with ``[cluster]``, or ``SUPERVISE_CLUSTER_DSN`` alone), the
fleet's database answers (:mod:`supervisor.cluster.control`):

* the four verbs are routed to the host owning the task and print the line the local verb
  prints (exit 0 applied, 1 refused / unknown / host not alive, 4 not answered in
  ``--wait`` seconds; ``--json`` as the local verbs);
* ``show`` prints the fleet's record (the manifest's summary fields, owner, generation,
  restarted_from, events) as JSON;
* ``wait`` polls every :data:`WAIT_POLL` seconds until each row's state is final
  (:data:`supervisor.taskdir.states.FINAL`) or, unless ``--terminal-only``, one is
  ``escalated`` (exit 10, ``needs`` naming its host), and prints and exits as the local ``wait``
  (0 every task PASS, 1 otherwise, 2 unknown id, 124 timeout). It rides out a database
  that stops answering (a PostgreSQL restart, a failover): one line on stderr, then it
  reads again every :data:`WAIT_POLL` seconds until its own deadline (``--timeout``), or
  for at most :data:`OUTAGE_S` seconds without one; the tasks go on meanwhile (issue 20).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from supervisor.cli.common import (
    EXIT_NEEDS_YOU,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    err,
    load_profile,
    missing_cluster_extra,
)
from supervisor.cluster import DSN_ENV
from supervisor.errors import ConfigError
from supervisor.taskdir import layout
from supervisor.taskdir.states import Status, Verdict
from supervisor.terminal import escape_controls, escape_json_text

#: Seconds between reads of the fleet's rows in ``wait``.
WAIT_POLL = 0.5
#: Seconds ``wait`` without ``--timeout`` waits for a database that does not answer before
#: it gives up (exit 1): a restart or failover takes seconds to a minute.
OUTAGE_S = 300.0
_LINE_RE = re.compile(r"^\S+: (\S+) \(retry_count (\d+)\)$")
Command = Callable[[argparse.Namespace], int]


def _ids(args: argparse.Namespace) -> list[str]:
    if hasattr(args, "task_ids"):  # the verbs and wait take several (or --all/--status)
        return list(args.task_ids)
    return [args.task_id]


def _is_local(args: argparse.Namespace, profile: Any) -> bool:
    """Every named task is in the profile's own state dir (or spool, for ``wait``)."""
    if args.command == "wait":
        from supervisor.waiting import locate

        return all(locate(profile, task_id) is not None for task_id in _ids(args))
    from supervisor.taskid import is_task_id

    return all(
        is_task_id(t) and (profile.tasks_dir / t / layout.MANIFEST).exists() for t in _ids(args)
    )


def _fleet_dsn(args: argparse.Namespace) -> str | int | None:
    """The DSN for the fleet's path; ``None``: the local path; an int: exit with it."""
    if args.config:
        profile = load_profile(args.config)
        if profile.spec.cluster is None or _is_local(args, profile):
            return None
        if missing_cluster_extra():
            return EXIT_USAGE
        from supervisor.cluster.db import dsn_of

        return dsn_of(profile)
    if os.environ.get(DSN_ENV):
        return EXIT_USAGE if missing_cluster_extra() else os.environ[DSN_ENV]
    err(
        f"supervise {args.command}: -c/--config PROFILE is required (or {DSN_ENV} for a "
        "task on another host)"
    )
    return EXIT_USAGE


def _routed(local: Command, fleet: Callable[[argparse.Namespace, str], int]) -> Command:
    def run(args: argparse.Namespace) -> int:
        try:
            dsn = _fleet_dsn(args)
        except ConfigError as exc:
            for line in exc.problems:
                err(line)
            return 1
        if dsn is None:
            return local(args)
        if isinstance(dsn, int):
            return dsn
        from supervisor.cluster.db import ClusterError
        from supervisor.cluster.roles import denied_line

        try:
            return fleet(args, dsn)
        except ClusterError as exc:  # a permission error names the role it needs
            err(denied_line(args.command, dsn, exc) or str(exc))
            return 1

    return run


def _verb(args: argparse.Namespace, dsn: str) -> int:
    """Each named task through the fleet; the worst code (:func:`supervisor.requests.worst`).
    ``--all``/``--status`` read one state dir, so they need ``-c``."""
    from supervisor.requests import worst

    if not args.task_ids:
        err(f"supervise {args.command}: --all/--status need -c PROFILE (one host's tasks)")
        return EXIT_USAGE
    return worst(_verb_one(args, dsn, task_id) for task_id in dict.fromkeys(args.task_ids))


def _verb_one(args: argparse.Namespace, dsn: str, task_id: str) -> int:
    import getpass
    import socket

    from supervisor.cluster.control import route

    who = f"{getpass.getuser()}@{socket.gethostname()}"
    answer = route(dsn, task_id, args.command, args.wait, who)
    if answer.ok and not args.json:
        print(escape_controls(answer.text))
    elif not answer.ok:
        err(f"supervise {args.command}: {answer.text}")
    if args.json and answer.code in (0, 4):
        match = _LINE_RE.match(answer.text)
        print(
            json.dumps(
                {
                    "task_id": task_id,
                    "verb": args.command,
                    "result": "applied" if answer.ok else "not_applied",
                    "status": match.group(1) if match else None,
                    "retry_count": int(match.group(2)) if match else None,
                    "host_id": answer.host_id,
                }
            )
        )
    return answer.code


def _show(args: argparse.Namespace, dsn: str) -> int:
    from supervisor.cluster.control import show_row

    row = show_row(dsn, args.task_id)
    if row is None:
        err(f"no task {args.task_id!r} in the fleet; see 'supervise status --cluster'")
        return 1
    sys.stdout.write(escape_json_text(json.dumps(row, indent=2, default=str)) + "\n")
    return 0


class _Reader:
    """``final_rows`` for ``wait``, riding out a database that does not answer: a failed
    read returns the rows read last (``None`` before the first), says so once on stderr,
    and raises only when the outage has lasted past ``limit`` (a monotonic time)."""

    def __init__(self, dsn: str, ids: list[str], deadline: float | None) -> None:
        self.dsn, self.ids = dsn, ids
        self.deadline = deadline
        self.rows: dict[str, dict[str, Any]] | None = None
        self.down_since: float | None = None
        self.error: str | None = None

    def read(self) -> dict[str, dict[str, Any]] | None:
        """The rows now, or the last ones read while the database is away.

        Raises:
            ClusterError: the database has not answered for :data:`OUTAGE_S` seconds
                (without a deadline), or at the deadline before any read succeeded.
        """
        from supervisor.cluster.control import final_rows
        from supervisor.cluster.db import ClusterError

        try:
            self.rows = final_rows(self.dsn, self.ids)
        except ClusterError as exc:
            now = time.monotonic()
            if self.down_since is None:
                self.down_since = now
                err(f"supervise wait: {exc}; retrying every {WAIT_POLL:g} s (the tasks go on)")
            self.error = str(exc)
            limit = self.deadline if self.deadline is not None else self.down_since + OUTAGE_S
            if now >= limit and (self.rows is None or self.deadline is None):
                raise ClusterError(f"{exc} (for {now - self.down_since:.0f} s; gave up)") from None
            return self.rows
        if self.down_since is not None:
            err("supervise wait: the database answers again")
            self.down_since = None
        return self.rows


def _wait(args: argparse.Namespace, dsn: str) -> int:
    from supervisor.taskdir.states import FINAL

    ids = list(dict.fromkeys(args.task_ids))
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    reader = _Reader(dsn, ids, deadline)
    rows = reader.read()
    while rows is None:  # no answer yet: each read raises at the end of its patience
        time.sleep(WAIT_POLL)
        rows = reader.read()
    unknown = [task_id for task_id in ids if task_id not in rows]
    if unknown:
        err(
            f"supervise wait: no task {', '.join(unknown)} in the fleet; see "
            "'supervise status --cluster'"
        )
        return EXIT_USAGE
    while not all(row["status"] in FINAL for row in rows.values()):
        if not args.terminal_only and any(_needs_you(row) for row in rows.values()):
            break
        if deadline is not None and time.monotonic() >= deadline:
            break
        time.sleep(WAIT_POLL)
        rows = reader.read() or rows
    if reader.down_since is not None:
        err(
            f"supervise wait: the rows below are from before the database stopped answering "
            f"({reader.error})"
        )
    return _print_waited(args, [rows[task_id] for task_id in ids])


def _needs_you(row: dict[str, Any]) -> bool:
    return row["status"] == Status.ESCALATED


def _print_waited(args: argparse.Namespace, shown: list[dict[str, Any]]) -> int:
    """Print the rows ``wait`` ends with; its exit code (0 all PASS, 1 not, 10 one or more
    need you, 124 timeout: :mod:`supervisor.waiting`'s). The fleet's row has no escalation
    record: ``needs`` names the host, where ``supervise show`` or ``-c`` there reads it."""
    from supervisor.taskdir.states import FINAL
    from supervisor.waiting import OTHER

    needing = [] if args.terminal_only else [row for row in shown if _needs_you(row)]
    for row in needing:
        row["needs"] = {"kind": OTHER, "host": row.get("owner_host")}
    if args.json:
        print(escape_json_text(json.dumps(shown, indent=2, default=str)))
    else:
        for row in shown:
            why = row.get("failure_reason") or row.get("error") or ""
            line = f"{row['task_id']}: {row['status']} {row.get('verdict') or '-'}"
            if "needs" in row:
                line = f"{row['task_id']}: escalated needs-you on host {row.get('owner_host')}"
            print(escape_controls(line + (f" ({why})" if why else "")))
    if needing:
        err(f"supervise wait: {len(needing)} task(s) need you: 'supervise approve|deny ID'")
        return EXIT_NEEDS_YOU
    still = [row for row in shown if row["status"] not in FINAL]
    if still:
        err(f"supervise wait: {len(still)} task(s) still running after {args.timeout:g} s")
        return EXIT_TIMEOUT
    return 0 if all(row.get("verdict") == Verdict.PASS for row in shown) else 1


def register(sub: Any) -> None:
    """Route ``stop|resume|approve|deny|show|wait`` (already in ``sub``) through the fleet
    for a task not in the local state dir; ``-c`` becomes optional on them."""
    for name in ("stop", "resume", "approve", "deny", "show", "wait"):
        parser = sub.choices[name]
        config = parser._option_string_actions["-c"]
        config.required = False
        config.help = f"profile TOML file (without it: a task on another host, via ${DSN_ENV})"
        fleet = _show if name == "show" else _wait if name == "wait" else _verb
        parser.set_defaults(func=_routed(parser.get_default("func"), fleet))
