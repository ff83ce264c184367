"""A real small tmpfs (root only), as a fixture (moved from tests/test_disk.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB tmpfs mounted for this test (root only), unmounted afterwards."""
    mount_bin, umount_bin = shutil.which("mount"), shutil.which("umount")
    if os.geteuid() != 0 or not mount_bin or not umount_bin:
        pytest.skip("mounting a tmpfs needs root (and mount(8)); the ENOSPC test is skipped")
    mount = tmp_path / "fs"
    mount.mkdir()
    result = subprocess.run(
        [mount_bin, "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mount)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip()}); ENOSPC test skipped")
    try:
        yield mount
    finally:
        subprocess.run([umount_bin, "-l", str(mount)], capture_output=True, check=False)
