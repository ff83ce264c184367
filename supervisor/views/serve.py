"""``supervise serve -c PROFILE [--bind HOST:PORT] [--token T] [--allow-actions]``.

The command line half of the web view (:mod:`supervisor.views.web` is the server). This
module imports no web library at load time: the core install has none, and ``supervise``
without the ``web`` extra says which one to install (one line, exit 1).

Access rules (the security model, README "supervise serve"):

- The default bind is ``127.0.0.1:8765`` (:data:`DEFAULT_BIND`). A bind to any address that
  is not loopback (``127.0.0.0/8``, ``::1``, ``localhost``) is refused without a token: such
  a page shows agents' output to the network and, with ``--allow-actions``, lets a visitor
  approve tool calls.
- ``--token T`` (or the environment variable ``SUPERVISE_TOKEN``, which ``ps`` does not
  show) makes every request need the token; ``--allow-actions`` without one makes a random
  token and prints the URL that carries it, as Jupyter does.
- Port ``0`` takes a free port; the line ``supervise serve: http://HOST:PORT/`` on stderr
  names the one taken.

Exit codes: 0 stopped by SIGINT/SIGTERM, 1 refused (bad bind, non-loopback without a token,
extra missing, address in use), 2 usage error (argparse).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import socket
import sys

from supervisor.terminal import escape_controls

#: Where ``supervise serve`` listens unless ``--bind`` says otherwise (8765: free in IANA's
#: registry's common use, and not 8080/8000, which local dev servers take).
DEFAULT_BIND = "127.0.0.1:8765"
#: The environment variable read when ``--token`` is not given.
TOKEN_ENV = "SUPERVISE_TOKEN"
#: The modules the ``web`` extra provides (``pip install 'supervise[web]'``).
WEB_MODULES = ("starlette", "uvicorn", "sse_starlette", "jinja2")


def _err(message: str) -> None:
    print(escape_controls(message), file=sys.stderr)


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
        "installed); install it with: pip install 'supervise[web]'"
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


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the web view until SIGINT/SIGTERM (see the module docstring for exit codes)."""
    problem = missing_extra()
    if problem:
        _err(problem)
        return 1
    try:
        host, port = parse_bind(args.bind)
    except ValueError as exc:
        _err(f"supervise serve: {exc}")
        return 1
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if not is_loopback(host) and not token:
        _err(f"supervise serve: refusing to bind {host} (not loopback) without a token; "
             f"give --token T (or set {TOKEN_ENV}), or bind 127.0.0.1")  # fmt: skip
        return 1
    made_token = args.allow_actions and not token
    if made_token:
        token = secrets.token_urlsafe(24)
    from supervisor.cli import _profile

    profile = _profile(args.config)
    try:
        sock = listen(host, port)
    except OSError as exc:
        _err(f"supervise serve: cannot listen on {args.bind}: {exc.strerror or exc}")
        return 1
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{sock.getsockname()[1]}/"
    _err(f"supervise serve: {url}" + (f"?token={token}" if made_token else ""))
    mode = "actions allowed (token and CSRF check)" if args.allow_actions else "read-only"
    _err(f"supervise serve: {profile.state_dir}, {mode}; Ctrl-C stops")
    from supervisor.views.web import create_app, run

    app = create_app(profile, token=token, allow_actions=args.allow_actions,
                     loopback=is_loopback(host))  # fmt: skip
    run(app, sock)
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``serve`` to the ``supervise`` subcommands."""
    serve = sub.add_parser("serve", help="the live task board as a web page (extra 'web')")
    serve.add_argument("-c", "--config", required=True, help="profile TOML file")
    serve.add_argument(
        "--bind", default=DEFAULT_BIND, help=f"HOST:PORT to listen on ({DEFAULT_BIND})"
    )
    serve.add_argument("--token", help=f"a secret every request must carry (or set {TOKEN_ENV})")
    serve.add_argument(
        "--allow-actions",
        action="store_true",
        help="allow approve, deny, stop and resume from the page (token and CSRF checked)",
    )
    serve.set_defaults(func=cmd_serve)
