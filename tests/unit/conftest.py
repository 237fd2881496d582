"""Fixtures the unit tests of several areas share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty workspace folder, ``ws`` in the test's own ``tmp_path`` (a
    test may put files beside it, outside the workspace)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace
