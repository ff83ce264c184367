"""The TUI app over a fixture state dir (moved from tests/test_tui.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from supervisor.views.tui import TopApp
from support import views_fixture as vf


@pytest.fixture
def fixture(tmp_path: Path) -> vf.Fixture:
    return vf.build(tmp_path)


def make_app(fixture: vf.Fixture, refresh_every: float | None = None, **kw: Any) -> TopApp:
    return TopApp(fixture.state_dir, fixture.spool_dir, "sv-views-fixture",
                  title="profile.toml", clock=lambda: vf.NOW, refresh_every=refresh_every,
                  **kw)  # fmt: skip
