"""libfaketime (Debian package ``faketime``) for the tests that step a process's wall clock:
where its library is, and the rule that CI must run those tests (a missing library fails
under ``CI`` and skips elsewhere)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest


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
