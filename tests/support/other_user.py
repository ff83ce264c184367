"""A second, unprivileged user as fixtures (moved from tests/test_other_user.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _need_root() -> None:
    missing = [tool for tool in ("useradd", "userdel", "runuser") if shutil.which(tool) is None]
    why = None
    if os.geteuid() != 0:
        why = "needs root to create a second user (useradd)"
    elif missing:
        why = f"{', '.join(missing)} not installed (package passwd / util-linux)"
    if why and os.environ.get("CI"):
        pytest.fail(f"{why}; CI must run this test")
    if why:
        pytest.skip(why)


@pytest.fixture
def other_user() -> Iterator[str]:
    """A new local user with no home and no login shell, deleted at the end."""
    _need_root()
    name = f"svother{uuid.uuid4().hex[:8]}"
    made = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=60, check=False)


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder every user may enter and list (unlike pytest's 0700 tmp_path)."""
    folder = Path(tempfile.mkdtemp(prefix="sv-other-user-", dir="/tmp"))
    os.chmod(folder, 0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
