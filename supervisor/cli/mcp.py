"""``supervise mcp -c PROFILE``: the command that runs :mod:`supervisor.mcp_server` over
stdio. Importing this module imports no SDK (``supervise`` starts fast without the extra).

Exit codes: 0 when the client closes stdin, 1 the profile cannot be loaded, 2 usage (the
``mcp`` extra is missing). Nothing but the protocol goes to stdout; warnings go to stderr.
"""

from __future__ import annotations

import argparse
import importlib.util

from supervisor.cli.common import EXIT_USAGE, err, load_profile

#: The one line ``supervise mcp`` prints without the SDK.
EXTRA_HINT = "supervise mcp needs the 'mcp' extra: pip install 'supervise-agents[mcp]'"


def cmd_mcp(args: argparse.Namespace) -> int:
    """``supervise mcp -c PROFILE``: serve until the client closes stdin."""
    if importlib.util.find_spec("mcp") is None:
        err(EXTRA_HINT)
        return EXIT_USAGE
    from supervisor import mcp_tools
    from supervisor.mcp_server import build_server

    server = build_server(load_profile(args.config))
    try:
        server.run("stdio")
    finally:  # a wait still blocking on a worker thread returns now, not at its timeout
        mcp_tools.CLOSING.set()
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``mcp`` to the ``supervise`` parser."""
    mcp = sub.add_parser("mcp", help="serve the profile's tasks as an MCP server over stdio")
    mcp.add_argument("-c", "--config", required=True, help="profile TOML file")
    mcp.set_defaults(func=cmd_mcp)
