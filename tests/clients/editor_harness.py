"""What the editor-client tests share: the workspace they build, the server
command, and a runner that shows the editor's own output when it fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
CLIENTS = REPOSITORY / "clients"

#: The document the editors open; its addresses are what the tests point at.
DOCUMENT_LINES = [
    "See work://shared/notes.md for the notes.",
    "Plans live in work://shared/plans/ now.",
    "",
]

#: A line longer than one Read page width, so clients must continue it.
LONG_LINE = "".join(f"{i:05d} " for i in range(900))


@dataclass(frozen=True)
class Workspace:
    root: Path
    document: Path

    @property
    def notes(self) -> Path:
        return self.root / ".mevedel" / "shared" / "notes.md"


def server_command() -> list[str]:
    """The installed console script of the Python running the tests, else the
    module form of the same installation."""
    script = Path(sys.executable).parent / "mevedel-lsp"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mevedel_server"]


def make_workspace(base: Path) -> Workspace:
    root = base / "project"
    shared = root / ".mevedel" / "shared"
    (shared / "plans").mkdir(parents=True)
    (shared / "notes.md").write_text("# Shared notes\n\nalpha beta\n")
    (shared / "plans" / "first.md").write_text("first plan\n")
    (shared / "plans" / "second.md").write_text("second plan\n")
    (shared / "long.txt").write_text("".join(f"line {n}\n" for n in range(1, 2501)) + LONG_LINE + "\nlast\n")
    document = root / "doc.txt"
    document.write_text("\n".join(DOCUMENT_LINES) + "\n")
    return Workspace(root=root.resolve(), document=document.resolve())


def editor(name: str) -> str:
    """The editor binary, or skip the test saying which one is missing."""
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (scripts/setup --test installs it)")
    return found


def run_editor(argv: list[str], *, env: dict[str, str], cwd: Path, timeout: float = 240) -> str:
    """Run an editor headless; on failure the assertion message carries its
    whole output, which is where the failing check says what it saw."""
    completed = subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = f"$ {' '.join(argv)}\n--- stdout ---\n{completed.stdout}\n--- stderr ---\n{completed.stderr}"
    assert completed.returncode == 0, f"editor exited with {completed.returncode}\n{output}"
    return output


def editor_environment(workspace: Workspace) -> dict[str, str]:
    return {
        "MEVEDEL_TEST_WORKSPACE": str(workspace.root),
        "MEVEDEL_TEST_DOCUMENT": str(workspace.document),
        "MEVEDEL_LSP_COMMAND": json.dumps(server_command()),
        "MEVEDEL_TEST_LONG_LINE": LONG_LINE,
    }
