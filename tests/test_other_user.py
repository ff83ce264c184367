"""Another local user cannot read the board or the state (issue 20).

The test creates a second user (``useradd``, as root), runs a real engine on a task whose
prompt holds a secret, leaves a second task waiting in the spool, starts ``supervise serve``
on TCP (its default: a token made at start) and on ``--socket``, and then, running as that
user (``runuser -u USER --``, the system ``python3``, stdlib only), tries to read every
file of the state dir and the spool, the board over HTTP without the token, and the unix
socket, and to write a task file into the spool or a request into the state dir. The
folders above the state dir are opened to everyone (0755), so only the state dir's, the
spool's and the socket's own modes stand in the way; a world-readable file beside them
proves that the user reaches them.

Not root: skipped, unless ``CI`` is set (``.ci/run`` runs as root): then it fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import tomli_w
from conftest import Setup
from support import other_user as other_user_module
from support.web_serve import _web_extra, serve

from supervisor.config.accounts import AccountsSpec
from supervisor.diskio import atomic_write
from supervisor.engine.accountbook import AccountBook
from supervisor.taskdir import layout

base, other_user = (
    other_user_module.base,
    other_user_module.other_user,
)  # pytest fixtures, found by name in this module

SECRET = "the-secret-prompt-7f3a"

#: Run as the other user: tries each path and URL given as JSON in argv[1]; prints what it
#: got for each (``"denied"``, ``"missing"``, an HTTP status, or ``"read: ..."``).
PROBE = r"""
import json, os, socket, sys, urllib.error, urllib.request
todo = json.loads(sys.argv[1])
out = {}
for path in todo["files"]:
    try:
        with open(path, "rb") as handle:
            out[path] = "read: " + handle.read(200).decode("utf-8", "replace")
    except PermissionError:
        out[path] = "denied"
    except FileNotFoundError:
        out[path] = "missing"
for path in todo["folders"]:
    try:
        out[path] = "read: " + " ".join(os.listdir(path))
    except PermissionError:
        out[path] = "denied"
for url in todo["urls"]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            out[url] = "read: " + answer.read(2000).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        out[url] = exc.code
for path in todo["writes"]:
    try:
        with open(path, "x") as handle:
            handle.write("prompt = 'run this as the owner'\n")
        out[path] = "read: written"
    except PermissionError:
        out[path] = "denied"
for path in todo["sockets"]:
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.connect(path)
            sock.sendall(b"GET /api/snapshot HTTP/1.0\r\nHost: localhost\r\n\r\n")
            out[path] = "read: " + sock.recv(2000).decode("utf-8", "replace")
        except PermissionError:
            out[path] = "denied"
print(json.dumps(out))
"""


def _as_user(user: str, todo: dict[str, list[str]]) -> dict[str, object]:
    done = subprocess.run(
        ["runuser", "-u", user, "--", "/usr/bin/python3", "-I", "-c", PROBE, json.dumps(todo)],
        capture_output=True, text=True, timeout=60, check=False, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_another_user_cannot_read_the_board_or_the_state(
    other_user: str, base: Path, socket_name: str
) -> None:
    _web_extra()
    setup = Setup(base, socket_name)
    setup.write_profile()
    # Both tasks go in through 'supervise submit', which makes the spool (0700) and its
    # files; a spool made by hand with mkdir under umask 022 is listable by everyone.
    _submit(setup, "ran", f"{SECRET}\nprint: {SECRET} in the output\nexit: 0")
    _submit_plan(setup)
    run = setup.run()
    assert run.returncode == 0, run.stderr[-2000:]
    _issue26_records(setup)
    _submit(setup, "waiting", SECRET)
    public = base / "public.txt"
    public.write_text("anyone may read this")
    public.chmod(0o644)
    files, folders = [str(public)], []
    for top in (setup.state, setup.spool):
        for folder, _dirs, names in os.walk(top):
            folders.append(folder)
            files += [os.path.join(folder, name) for name in names]
    assert any(SECRET in Path(f).read_text(errors="replace") for f in files[1:])
    assert any(f.startswith(str(setup.spool)) and f.endswith(".toml") for f in files)
    with serve(setup.profile) as tcp, serve(setup.profile, "--socket", bind=None) as unix:
        pages = ("", "api/snapshot", "task/" + _task_id(setup), "spend", "api/cost")
        urls = [tcp.base + path for path in pages]
        sock = unix.url.removeprefix("unix:")
        writes = [str(setup.spool / "evil.toml"), str(setup.state / "control" / "x.stop"),
                  str(setup.state / "tasks" / "evil")]  # fmt: skip
        got = _as_user(other_user, {"files": files, "folders": folders, "urls": urls,
                                    "sockets": [sock], "writes": writes})  # fmt: skip
    assert any("/plans/" in f for f in files)  # the claimed plan's record is tried
    assert got.pop(str(public)) == "read: anyone may read this"  # it does reach the folder
    leaked = {where: what for where, what in got.items() if what not in ("denied", 401)}
    assert not leaked, leaked
    print(f"\nas {other_user}: {len(got)} reads refused", file=sys.stderr)


def _issue26_records(setup: Setup) -> None:
    """The account book and the daily cap's record (issue 26) as the engine writes them,
    so the walk below tries to read them as the other user too."""
    book = AccountBook(setup.state, AccountsSpec())
    book.note("acct-other-user", time.time() + 3600, "t1", time.time())
    assert (setup.state / layout.ACCOUNTS).exists()
    atomic_write(setup.state / layout.DAILY_BUDGET, json.dumps({"day": SECRET}).encode())


def _submit_plan(setup: Setup) -> None:
    """A plan file of one task, claimed by the engine into ``state_dir/plans``."""
    plan = setup.root / "plan.toml"
    plan.write_text(tomli_w.dumps({"tasks": [setup.task("p1", f"{SECRET}\nexit: 0")]}))
    done = setup.supervise("submit", "-c", str(setup.profile), str(plan))
    assert done.returncode == 0, done.stderr
    plan.unlink()


def _submit(setup: Setup, name: str, prompt: str) -> None:
    path = setup.root / f"{name}.toml"
    path.write_text(tomli_w.dumps(setup.task(name, prompt)))
    done = setup.supervise("submit", "-c", str(setup.profile), str(path))
    assert done.returncode == 0, done.stderr
    path.unlink()


def _task_id(setup: Setup) -> str:
    manifest = next(iter(setup.manifests().values()))  # "ran" or the plan's task
    return str(manifest["task_id"])
