"""systemd integration: the user unit ``supervise startup`` writes, and the scope the engine
starts its tmux server in so agents survive the end of an ssh login.

Why: on a systemd machine every process of a login lives in that login's session scope
(``session-N.scope``). With ``KillUserProcesses=yes`` in logind.conf (the default on some
distributions, and set by many administrators), logout kills the whole scope, the private tmux
server and every agent in it included (systemd-logind.service(8), logind.conf(5)). Two ways
out, both used here:

* the engine runs as a user service (:func:`unit_text`): the tmux server it starts stays in
  the service's own cgroup, outside any login scope. ``KillMode=process`` (systemd.kill(5))
  makes ``systemctl --user stop/restart`` signal the engine only, so the tmux server and the
  agents keep running and the next engine adopts them;
* an engine started by hand starts the tmux server through ``systemd-run --user --scope``
  (systemd-run(1)), which puts the server in a transient scope of the user manager instead
  of the login's (:func:`scope_prefix`).

Either way the user manager itself (``user@UID.service``) ends with the user's last session
unless lingering is on (``loginctl enable-linger``, loginctl(1)), which also starts it at boot.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Where ``supervise startup --install`` writes units (systemd.unit(5): ``~/.config/systemd/
#: user`` is the user's own unit folder, searched by ``systemctl --user``).
USER_UNIT_DIR = Path("~/.config/systemd/user")

#: Environment variable that turns the ``systemd-run --scope`` start of the tmux server off
#: (``0``); anything else, or unset, leaves it on where systemd is present.
SCOPE_ENV = "SUPERVISE_SYSTEMD_SCOPE"

#: Seconds ``systemd-run`` / ``systemctl`` may take (a D-Bus round trip to the user manager:
#: tens of ms when healthy).
SYSTEMD_TIMEOUT = 10.0


def booted(root: Path = Path("/")) -> bool:
    """Whether the machine runs systemd as init: ``/run/systemd/system`` exists, the test
    sd_booted(3) makes."""
    return (root / "run/systemd/system").is_dir()


def scope_prefix(env: Mapping[str, str] | None = None, root: Path = Path("/")) -> list[str]:
    """The argv prefix that starts a command in a new transient scope of the user manager,
    or ``[]`` when it does not apply.

    ``["systemd-run", "--user", "--scope", "--quiet", "--collect", "--"]`` when all hold:
    systemd is init (:func:`booted`), ``systemd-run`` is on ``PATH``, ``XDG_RUNTIME_DIR`` is
    set (``--user`` reaches the manager through it), the process is not already run by
    systemd (``INVOCATION_ID`` unset: a service's cgroup is already outside the login
    scope, systemd.exec(5)), and :data:`SCOPE_ENV` is not ``0``.
    """
    env = os.environ if env is None else env
    if env.get(SCOPE_ENV) == "0" or env.get("INVOCATION_ID") or not env.get("XDG_RUNTIME_DIR"):
        return []
    program = shutil.which("systemd-run", path=env.get("PATH"))
    if program is None or not booted(root):
        return []
    return [program, "--user", "--scope", "--quiet", "--collect", "--"]


def _specifiers(value: str) -> str:
    """``value`` with ``%`` doubled: every unit setting expands specifiers (systemd.unit(5)
    "Specifiers"); free text such as ``Description=`` and paths such as
    ``WorkingDirectory=`` take nothing else (no quoting)."""
    return value.replace("%", "%%")


def _quoted(value: str) -> str:
    """``value`` double-quoted, ``\\`` and ``"`` escaped, when it holds whitespace or quotes
    (one word of ``ExecStart=`` or ``Environment=``, systemd.service(5) "Command lines")."""
    if value and not any(c.isspace() or c in "\"'\\;" for c in value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _exec_word(value: str) -> str:
    """One word of ``ExecStart=``: specifiers and ``$`` (variable expansion) doubled, then
    quoted."""
    return _quoted(_specifiers(value).replace("$", "$$"))


def unit_name(profile: Path) -> str:
    """``supervise-<name>.service``: the profile file's stem, or its folder's name for the
    ``profile.toml`` that ``supervise init`` writes, reduced to the characters unit names
    allow (systemd.unit(5): ASCII letters, digits, ``:-_.\\``)."""
    name = profile.parent.name if profile.stem == "profile" else profile.stem
    name = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "-" for c in name)
    return f"supervise-{name or 'profile'}.service"


def unit_text(command: Sequence[str], profile: Path, path_env: str) -> str:
    """The user unit that runs ``supervise run PROFILE`` and restarts it after a crash.

    Args:
        command: how to run ``supervise``, absolute (``["/home/u/.local/bin/supervise"]``,
            or ``[python, "-m", "supervisor.cli"]``).
        profile: absolute path of the profile.
        path_env: ``PATH`` for the engine and its agents (the user manager's own ``PATH`` is
            short and usually lacks ``~/.local/bin``, where the ``claude`` CLI installs).

    Returns:
        The unit file's text (systemd.service(5)), ending in a newline.
    """
    exec_start = " ".join(_exec_word(str(x)) for x in (*command, "run", profile))
    return f"""\
[Unit]
Description=supervise: coding-agent sessions of {_specifiers(str(profile))}

[Service]
Type=exec
ExecStart={exec_start}
WorkingDirectory={_specifiers(str(profile.parent))}
Environment={_quoted(_specifiers("PATH=" + path_env))}
Restart=on-failure
RestartSec=5
# Stop and restart signal the engine only: the private tmux server it started stays in this
# unit's cgroup (outside any login scope) with every agent, and the next engine adopts them.
KillMode=process
TimeoutStopSec=60

[Install]
WantedBy=default.target
"""


def lingering(user: str, root: Path = Path("/")) -> bool:
    """Whether ``loginctl enable-linger`` is on for ``user`` (logind keeps a flag file in
    ``/var/lib/systemd/linger/``, loginctl(1))."""
    return (root / "var/lib/systemd/linger" / user).exists()


#: What to do on a machine without systemd (printed by ``supervise startup``).
NO_SYSTEMD = (
    "This machine does not run systemd, so no user unit can start supervise at boot. Instead, "
    "start it from your init system (an OpenRC or runit service, or a '@reboot' line in "
    "crontab -e: '@reboot {command} >> {log} 2>&1'), in its own session (setsid) so that "
    "closing the terminal or ssh login that started it does not end it; the tmux server it "
    "starts, and with it every agent, outlives the login the same way. If the engine dies, "
    "start it again: it adopts the agents that are still running."
)
