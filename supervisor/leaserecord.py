"""The fence's lease record (issue 20), read by the wrapper (:mod:`supervisor.wrapper`,
step 6) and written by the engine (:mod:`supervisor.cluster.lease`): ``held PID COUNTER``
(renewed: the bytes change), ``released PID`` (a clean stop: it never expires) or, since
issue 25, ``released PID SECONDS`` (a clean stop whose agents may run on for SECONDS:
the host's ``stopped_host_grace`` less the fence's margin).

Standard library only, and loaded by the wrapper from its own folder (it runs as
``python3 -I -S wrapper.py``, without the package on ``sys.path``), as
:mod:`supervisor.streamcopy` is.
"""

from __future__ import annotations

import os

#: Bytes of one lease record: the engine rewrites them in place, so a full disk never stops
#: a renewal (no new block is needed).
LEASE_RECORD = 64
#: The start of a released lease's record (the engine stopped cleanly).
LEASE_RELEASED = b"released"


def read_lease(path: str) -> bytes | None:
    """The lease record, or ``None`` when it cannot be read (never blocks on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, LEASE_RECORD)
    except OSError:
        return None
    finally:
        os.close(fd)


def expires_after(record: bytes | None, expiry: float) -> float | None:
    """Seconds after which ``record``, unchanged, has expired: ``expiry`` for a held (or
    unreadable) one, the seconds a released one names, None for a released one that names
    none (or names no number): it never expires."""
    parts = (record or b"").split()
    if parts[:1] != [LEASE_RELEASED]:
        return expiry
    try:
        return max(0.0, float(parts[2]))
    except (IndexError, ValueError):
        return None
