"""Fixtures of the editor-client tests."""

from pathlib import Path

import pytest
from editor_harness import Workspace, make_workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return make_workspace(tmp_path)
