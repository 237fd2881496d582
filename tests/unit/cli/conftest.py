"""Fixtures the CLI tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty project folder the CLI runs in (``tmp_path`` keeps the
    state and config folders beside it, outside the workspace)."""
    root = tmp_path / "project"
    root.mkdir()
    return root
