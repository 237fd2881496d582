"""Fixtures the CLI tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
from pseudo_terminal import Terminal


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty project folder the CLI runs in (``tmp_path`` keeps the
    state and config folders beside it, outside the workspace)."""
    root = tmp_path / "project"
    root.mkdir()
    return root


@pytest.fixture
def terminal(workspace, tmp_path):
    opened: list[Terminal] = []

    def start(*args: str) -> Terminal:
        opened.append(Terminal(workspace, tmp_path, *args))
        return opened[-1]

    yield start
    for each in opened:
        each.close()
