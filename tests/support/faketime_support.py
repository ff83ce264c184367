"""libfaketime (Debian package ``faketime``) for the tests that step a process's wall clock:
where its library is, and the rule that CI must run those tests (a missing library fails
under ``CI`` and skips elsewhere)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

#: A ``sitecustomize`` for the faked processes: libfaketime 0.9.10 answers Python's
#: ``time.sleep`` with EINVAL when it leaves the monotonic clock alone, so they sleep on an
#: ``Event`` instead (tests/test_clock_steps.py).
SLEEP_SHIM = (
    "import threading, time\n"
    "def _sleep(seconds):\n"
    "    if seconds < 0:\n"
    "        raise ValueError('sleep length must be non-negative')\n"
    "    threading.Event().wait(seconds)\n"
    "time.sleep = _sleep\n"
)


def libfaketime(threaded: bool = False) -> Path | None:
    """The library's path (``threaded``: ``libfaketimeMT``, which a multithreaded process
    such as the engine needs), whatever the machine's multiarch folder; None without it."""
    name = "libfaketimeMT.so.1" if threaded else "libfaketime.so.1"
    found = sorted(glob.glob(f"/usr/lib/*/faketime/{name}"))
    return Path(found[0]) if found else None


def require_libfaketime(threaded: bool = False) -> Path:
    """The library's path; fails the test under ``CI`` and skips it elsewhere without it."""
    path = libfaketime(threaded)
    if path is None:
        message = "libfaketime is not installed; apt-get install -y faketime"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def stepped_env(folder: Path, offset: str = "+0") -> tuple[dict[str, str], Path]:
    """The environment of an engine whose wall clock a test steps (``TZ=UTC``; the
    thread-safe library, :data:`SLEEP_SHIM`, the monotonic clock left true, as NTP leaves
    it), and the offset file (``+SECONDS``, read on every call) to rewrite for a step."""
    library = require_libfaketime(threaded=True)
    step = folder / "faketime"
    step.write_text(f"{offset}\n")
    shim = folder / "faketime-site"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SLEEP_SHIM)
    env = {**os.environ, "TZ": "UTC", "PYTHONPATH": str(shim), "LD_PRELOAD": str(library)}
    env |= {"FAKETIME_TIMESTAMP_FILE": str(step), "FAKETIME_NO_CACHE": "1"}
    env["DONT_FAKE_MONOTONIC"] = "1"
    return env, step


def step_clock(offset_file: Path, offset: str) -> None:
    """Step the faked wall clock: ``offset`` (``+SECONDS``, ``-1h``...) into the offset file
    by an atomic rename. libfaketime reads the file on every call (``FAKETIME_NO_CACHE``):
    a write in place could be read half done, a step the test never made."""
    part = offset_file.with_name(offset_file.name + ".part")
    part.write_text(f"{offset}\n")
    os.replace(part, offset_file)
