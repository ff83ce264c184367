"""``supervise serve -c PROFILE [--bind HOST:PORT | --socket] [--token T] [--allow-actions]``.

The command line half of the web view (:mod:`supervisor.views.web` is the server). This
module imports no web library at load time: the core install has none, and ``supervise``
without the ``web`` extra says which one to install (one line, exit 1).

Access rules (the security model, README "supervise serve"):

- Every request, reads included, needs a token: ``--token T`` (or the environment variable
  ``SUPERVISE_TOKEN``, which ``ps`` does not show), else a random one made at start. A TCP
  port on loopback is open to every local user, and the board shows every prompt, manifest
  and output line that the 0700 state folder denies them (issue 20). The first line on
  stderr is the URL that carries it, ``supervise serve: http://HOST:PORT/?token=T``
  (printed once, as Jupyter does; a first visit sets a cookie and drops it from the address
  bar, see :mod:`supervisor.views.webauth`).
- ``--socket`` listens on the unix socket ``STATE_DIR/serve.sock`` (:data:`SOCKET_NAME`,
  mode 0600) instead, in a state folder that must be 0700: only its owner (and root) can
  connect, so reads need no token there (actions still do). Reach it with
  ``curl --unix-socket`` or ``ssh -L 8765:STATE_DIR/serve.sock``.
- The default bind is ``127.0.0.1:8765`` (:data:`DEFAULT_BIND`). A bind to any address that
  is not loopback (``127.0.0.0/8``, ``::1``, ``localhost``) is refused without an explicit
  token, and with one it warns that the token and the pages travel in clear text (no TLS).
- Port ``0`` takes a free port; the first line names the one taken.

Exit codes: 0 stopped by SIGINT/SIGTERM, 1 refused (bad bind, non-loopback without a token,
extra missing, address or socket in use, state folder open to others), 2 usage error
(argparse).
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import re
import secrets
import socket
import stat
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from supervisor.cli.common import err as _err
from supervisor.cli.common import load_profile
from supervisor.taskdir import layout

if TYPE_CHECKING:
    from supervisor.config import LoadedProfile

#: Where ``supervise serve`` listens unless ``--bind`` says otherwise (8765: free in IANA's
#: registry's common use, and not 8080/8000, which local dev servers take).
DEFAULT_BIND = "127.0.0.1:8765"
#: The environment variable read when ``--token`` is not given.
TOKEN_ENV = "SUPERVISE_TOKEN"
#: The longest unix socket path Linux takes (``sun_path`` is 108 bytes with its NUL).
SUN_PATH_MAX = 107
#: What a token may hold: URL-unreserved characters (RFC 3986 section 2.3), which travel
#: unchanged in ``?token=`` and in a cookie value (``secrets.token_urlsafe`` makes them).
TOKEN_RE = re.compile(r"[A-Za-z0-9._~-]+")
#: ``--socket``'s unix socket in the state dir (its lock: this name plus ``.lock``).
SOCKET_NAME = layout.SERVE_SOCKET
#: The modules the ``web`` extra provides (``pip install 'supervise-agents[web]'``).
WEB_MODULES = ("starlette", "uvicorn", "sse_starlette", "jinja2")


def parse_bind(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``.

    Raises:
        ValueError: no port, a port outside 0-65535, or an empty host; the message says
            what was given and the form wanted.
    """
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"--bind {value!r}: expected HOST:PORT, e.g. {DEFAULT_BIND}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``127.0.0.0/8``, ``::1``) or ``localhost``;
    any other name or address (``0.0.0.0``, ``::`` and a LAN address included) is not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def missing_extra() -> str | None:
    """The one line to print when the ``web`` extra is not installed, else ``None``."""
    import importlib

    absent = []
    for name in WEB_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            absent.append(name)
    if not absent:
        return None
    return (
        f"supervise serve: the web view needs the 'web' extra ({', '.join(absent)} not "
        "installed); install it with: pip install 'supervise-agents[web]'"
    )


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free one).

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def listen_unix(path: Path) -> socket.socket:
    """A listening unix socket at ``path`` (mode 0600) in a folder only its owner can enter.

    A stale socket file that nobody answers on is replaced. The caller holds
    ``path + ".lock"`` (two starts at once cannot take each other's socket).

    Raises:
        ValueError: one line: the folder is open to other users (its mode and the chmod
            that fixes it), the path is not a socket, another server answers on it, or it
            cannot be bound (too long for ``sun_path``, ...).
    """
    folder = path.parent
    mode = stat.S_IMODE(folder.stat().st_mode)
    if mode & 0o077:
        raise ValueError(
            f"{folder} is mode {mode:04o}, so other users could reach {path}; "
            f"chmod 700 {folder}, or serve on TCP with its token"
        )
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise ValueError(f"{path} exists and is not a socket; move it away")
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
            except ConnectionRefusedError:
                path.unlink()  # stale: its server is gone
            else:
                raise ValueError(f"{path} is in use by another 'supervise serve'")
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise ValueError(
            f"{path} is longer than a unix socket path may be ({SUN_PATH_MAX} "
            "bytes); set a shorter [paths] state_dir, or serve on TCP with its token"
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket file is made 0600, never briefly wider
    try:
        sock.bind(str(path))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {path}: {exc.strerror or exc}") from None
    finally:
        os.umask(old)
    sock.set_inheritable(True)
    return sock


def _token(args: argparse.Namespace, host: str | None) -> tuple[str | None, str | None]:
    """``(token, problem)``: the token every request needs (``None`` only for reads over
    ``--socket``), or the one line that refuses the start."""
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and not TOKEN_RE.fullmatch(token):
        return None, (
            f"--token (or {TOKEN_ENV}) may hold only letters, digits and . _ ~ - "
            "(it travels in a URL and a cookie); e.g. python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(24))'"
        )
    if host is not None and not is_loopback(host) and not token:
        return None, (
            f"refusing to bind {host} (not loopback) without a token; give "
            f"--token T (or set {TOKEN_ENV}), or bind 127.0.0.1"
        )
    if not token and (host is not None or args.allow_actions):
        token = secrets.token_urlsafe(24)
    return token, None


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the web view until SIGINT/SIGTERM (see the module docstring for exit codes)."""
    problem = missing_extra()
    if problem:
        _err(problem)
        return 1
    host: str | None = None
    if not args.socket:
        try:
            host, port = parse_bind(args.bind or DEFAULT_BIND)
        except ValueError as exc:
            _err(f"supervise serve: {exc}")
            return 1
    token, problem = _token(args, host)
    if problem:
        _err(f"supervise serve: {problem}")
        return 1
    profile = load_profile(args.config)
    if host is not None:
        try:
            sock = listen(host, port)
        except OSError as exc:
            _err(f"supervise serve: cannot listen on {args.bind}: {exc.strerror or exc}")
            return 1
        shown = f"[{host}]" if ":" in host else host
        return _serve(args, profile, sock, f"http://{shown}:{sock.getsockname()[1]}/", token)
    path = profile.state_dir / SOCKET_NAME
    # Made here, 0700 as the engine makes it: the lock below would make it with the umask.
    profile.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    from filelock import FileLock, Timeout  # only here: `supervise` starts without it

    lock = FileLock(f"{path}.lock", timeout=0)
    try:
        with lock:
            sock = listen_unix(path)
            try:
                return _serve(args, profile, sock, f"unix:{path}", token)
            finally:
                with contextlib.suppress(OSError):
                    path.unlink()
    except Timeout:
        _err(f"supervise serve: {path} is in use by another 'supervise serve'")
    except ValueError as exc:
        _err(f"supervise serve: {exc}")
    return 1


def _serve(
    args: argparse.Namespace,
    profile: LoadedProfile,
    sock: socket.socket,
    url: str,
    token: str | None,
) -> int:
    """Print the start lines (the URL with the token, once), then serve until stopped."""
    from supervisor.views.web import create_app, run

    _err(f"supervise serve: {url}" + (f"?token={token}" if token else ""))
    loopback = url.startswith("unix:") or is_loopback(urlsplit(url).hostname or "")
    if not loopback:
        _err(
            "supervise serve: warning: not loopback and no TLS: the token and every page "
            "travel in clear text; put a TLS proxy in front, or use an SSH tunnel"
        )
    mode = "actions allowed (token and CSRF check)" if args.allow_actions else "read-only"
    _err(f"supervise serve: {profile.state_dir}, {mode}; Ctrl-C stops")
    app = create_app(profile, token=token, allow_actions=args.allow_actions, loopback=loopback)
    run(app, sock)
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``serve`` to the ``supervise`` subcommands."""
    serve = sub.add_parser("serve", help="the live task board as a web page (extra 'web')")
    serve.add_argument("-c", "--config", required=True, help="profile TOML file")
    where = serve.add_mutually_exclusive_group()
    where.add_argument("--bind", help=f"HOST:PORT to listen on ({DEFAULT_BIND})")
    where.add_argument(
        "--socket",
        action="store_true",
        help=f"listen on STATE_DIR/{SOCKET_NAME} (0600) instead: its owner reads without a token",
    )
    serve.add_argument("--token", help=f"a secret every request must carry (or set {TOKEN_ENV})")
    serve.add_argument(
        "--allow-actions",
        action="store_true",
        help="allow approve, deny, stop and resume from the page (token and CSRF checked)",
    )
    serve.set_defaults(func=cmd_serve)
