"""What the tests of a turn whose process is killed mid-turn share: a
workspace, the command its agent runs, the changes the next owner must
find, the tree's whole state, and killing the process at the right moment."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from streamed import read_until

#: The shell command the agent runs after rewriting ``notes.txt``.
SHELL = "set -e; chmod +x run.sh; mkdir made; echo new > made/file.txt; rm gone.txt; ln -s notes.txt link.txt"

#: What ``mevedel diff 1 --json`` names once the turn is recovered.
CHANGED = {
    "notes.txt": "modified",
    "run.sh": "mode changed",
    "made": "directory created",
    "made/file.txt": "added",
    "gone.txt": "deleted",
    "link.txt": "link created",
}


def prepare(root: Path) -> None:
    (root / "notes.txt").write_text("what the user wrote\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o644)
    (root / "gone.txt").write_text("bye\n")


def steps(release: Path) -> list:
    """The turn: a write, the command, then a wait until ``release`` exists."""
    return [
        {"write": {"path": "notes.txt", "content": "the agent's rewrite\n"}},
        {"terminal": {"command": "sh", "args": ["-c", SHELL]}},
        {"say": "all written"},
        {"wait_file": str(release)},
    ]


def tree_state(root: Path) -> dict[str, tuple]:
    """Every path below ``root`` but mevedel's own state: its kind, its
    permission bits, and a file's bytes or a link's target."""
    found: dict[str, tuple] = {}
    for directory, names, files in os.walk(root):
        names[:] = [name for name in names if name != ".mevedel"]
        for name in names + files:
            path = Path(directory) / name
            st = path.lstat()
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
            content = os.readlink(path) if kind == "link" else path.read_bytes() if kind == "file" else None
            found[str(path.relative_to(root))] = (kind, st.st_mode & 0o7777, content)
    return found


def kill_once_said(argv: list[str], said: str, **popen) -> str:
    """Start ``argv`` and SIGKILL it once its standard output holds
    ``said``; what it printed until then."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, **popen)
    seen = read_until(process, said)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    return seen
