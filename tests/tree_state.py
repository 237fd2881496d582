"""A workspace's whole state as a value, for tests that compare a tree
before a turn with the tree after a Rewind of it."""

from __future__ import annotations

import os
from pathlib import Path


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
