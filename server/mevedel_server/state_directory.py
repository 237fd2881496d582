"""Where mevedel keeps this user's state on this machine (shared by the
``mevedel`` command, ``mevedel mcp`` and ``mevedel-lsp``): the CLI client's
identity, its last sessions, and the saves an SSH host could not record."""

from __future__ import annotations

import os


def state_directory() -> str:
    """``$XDG_STATE_HOME/mevedel`` (by default ``~/.local/state/mevedel``)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "mevedel")
