"""The operator's tmux calls (``supervise attach``, the ``a`` key of ``supervise top``),
through libtmux's typed objects, each bounded like the engine's calls.

libtmux's own ``Server.cmd`` waits in ``communicate()`` with no timeout, so a stopped or
wedged tmux server would hang a view for ever. :class:`BoundedServer` is a
``libtmux.Server`` whose ``cmd`` (the one path of every command method: ``has_session``,
``Session.cmd``, ``Pane.capture_pane``...) runs the client through
:meth:`supervisor.tmux.Tmux.cmd`, under :data:`supervisor.tmux.TMUX_TIMEOUT`. libtmux's list
queries (``Server.sessions``, ``Session.panes``, an object's ``refresh``) spawn their clients
without that path, unbounded: nothing here calls them.

The attach itself is interactive (it lasts as long as the operator stays), so it is no
command with a bound: a bounded :func:`attach_problem` asks first whether the session is
there and the server answers, then the caller runs :func:`attach_argv` in the terminal.
Which tmux runs is :func:`supervisor.tmux.tmux_binary` (``$SUPERVISE_TMUX`` honoured).
"""

from __future__ import annotations

from typing import Any

from libtmux import exc
from libtmux.common import tmux_cmd
from libtmux.server import Server

from supervisor.tmux import TMUX_TIMEOUT, Tmux, TmuxError, TmuxResult, TmuxTimeout


class _Answer(tmux_cmd):
    """A finished client in libtmux's result shape (``cmd``, ``returncode``, ``stdout``,
    ``stderr``), filled from our bounded call instead of libtmux's unbounded one."""

    def __init__(self, argv: list[str], done: TmuxResult) -> None:
        self.cmd = argv
        self.returncode = done.returncode
        self.stdout = done.stdout
        self.stderr = done.stderr


class BoundedServer(Server):
    """A ``libtmux.Server`` on the private socket ``socket_name`` whose every ``cmd`` is one
    bounded client (:meth:`supervisor.tmux.Tmux.cmd`, ``timeout`` seconds).

    Raises (from every command method):
        TmuxTimeout: the server did not answer within ``timeout`` s (the client is killed).
        TmuxError: the tmux executable cannot be run.
    """

    def __init__(self, socket_name: str, timeout: float = TMUX_TIMEOUT, **kwargs: Any) -> None:
        self.bounded = Tmux(socket_name, timeout=timeout)
        super().__init__(socket_name=socket_name, tmux_bin=self.bounded.binary, **kwargs)

    def cmd(self, cmd: str, *args: Any, target: str | int | None = None) -> tmux_cmd:
        """``tmux -L socket_name CMD [-t TARGET] ARGS...``, as libtmux's ``Server.cmd`` but
        bounded (see the class)."""
        argv = [cmd, *(("-t", str(target)) if target is not None else ()), *map(str, args)]
        return _Answer(argv, self.bounded.cmd(*argv))


def attach_argv(server: Server, session: str, read_only: bool = True) -> list[str]:
    """``tmux -L SOCKET attach-session [-r] -t =SESSION`` for ``server``'s tmux and socket:
    the exact session (``=``), read-only by default (``-r``; tmux(1): "the client is
    read-only (only keys bound to detach-client or switch-client have an effect)")."""
    flags = ["-r"] if read_only else []
    tmux = server.tmux_bin or "tmux"
    return [tmux, "-L", str(server.socket_name), "attach-session", *flags, "-t", f"={session}"]


def attach_problem(server: Server, session: str) -> str | None:
    """Why attaching to ``session`` would fail or hang, as one line, or ``None`` when it
    can go ahead: no such session, a server that does not answer within its bound (a
    stopped or wedged tmux), or no tmux to run. One bounded ``has-session``; never raises."""
    where = f"on tmux socket {server.socket_name}"
    try:
        if server.has_session(session):
            return None
    except TmuxTimeout as error:
        return f"{error} (a stopped or wedged tmux server): not attaching"
    except (TmuxError, exc.LibTmuxException) as error:
        return f"cannot ask tmux {where} for session {session}: {error}"
    return f"no tmux session {session} {where}"
