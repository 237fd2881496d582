"""Where mevedel keeps this user's state on this machine (shared by the
``mevedel`` command, ``mevedel mcp`` and ``mevedel-lsp``): the CLI client's
identity, its last sessions, the saves an SSH host could not record and the
approved workspace MCP servers.

A command that takes ``--client-state DIR`` (``mevedel mcp``) keeps all of
its client's state there instead: the identity, the kept saves and the
approvals follow the one directory (:func:`client_state_directory`), so a
process started without the user's environment is still that client."""

from __future__ import annotations

import os


def state_directory() -> str:
    """``$XDG_STATE_HOME/mevedel`` (by default ``~/.local/state/mevedel``)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "mevedel")


def client_state_directory(given: str | os.PathLike[str] | None = None) -> str:
    """The state directory of a command's client: ``--client-state`` when
    given, else :func:`state_directory`."""
    return os.fspath(given) if given is not None else state_directory()
