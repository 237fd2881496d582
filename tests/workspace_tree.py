"""What a workspace holds, for a test comparing it before and after (a
rewind must give back the exact tree)."""

from __future__ import annotations

import os
from pathlib import Path


def tree_of(root: Path) -> dict:
    """Kind, permission bits, bytes or link target of every path but
    mevedel's own state (empty directories included)."""
    found = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".mevedel"]
        for name in dirs + files:
            full = os.path.join(directory, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                found[rel] = ("link", os.readlink(full))
            elif os.path.isdir(full):
                found[rel] = ("dir", oct(st.st_mode & 0o7777))
            else:
                found[rel] = ("file", oct(st.st_mode & 0o7777), Path(full).read_bytes())
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(directory, d))]
    return found
