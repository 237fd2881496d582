"""Where a workspace lives, as a person writes it: a directory of this
machine (a path or a ``file:`` URI) or ``ssh://[user@]host[:port]/path`` on
another one, and the :class:`Target` rooted there.

The spelling only says how this process reaches the directory. Two
processes that reach one directory through different spellings (a local path
on the host, an ``ssh://`` address elsewhere) share its sessions, because
the store identifies sessions by the workspace id and lease records inside
the directory, never by the path string.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .local import LocalTarget
from .remote_errors import WorkspaceLocationError
from .ssh_config import SCHEME, SshLocation, parse_ssh_location
from .target import Target

WorkspaceLocation = Path | SshLocation

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_EXPECTED = "a workspace is a directory, a file: URI or ssh://[user@]host[:port]/path"


def parse_workspace_location(text: str) -> WorkspaceLocation:
    """The location ``text`` names: a :class:`Path` (as written, not yet
    resolved) or an :class:`SshLocation`. Raises
    :class:`WorkspaceLocationError` naming ``text`` and the reason."""
    if not isinstance(text, str) or not text.strip():
        raise WorkspaceLocationError(str(text), f"names no workspace; {_EXPECTED}")
    if "\x00" in text:
        raise WorkspaceLocationError(text.replace("\x00", "\\0"), "contains a NUL byte")
    if text.startswith("ssh:") and not text.startswith(SCHEME):
        raise WorkspaceLocationError(text, "an SSH workspace is written ssh://[user@]host[:port]/path")
    if text.startswith(SCHEME):
        return parse_ssh_location(text)
    if text.startswith("file:"):
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost") or parts.query or parts.fragment:
            raise WorkspaceLocationError(text, "a file: URI names a directory of this machine (file:///path)")
        return Path(unquote(parts.path, errors="surrogateescape"))
    scheme = _SCHEME.match(text)
    if scheme is not None and len(scheme.group()) > 2:  # "C:" is a drive, not a scheme
        raise WorkspaceLocationError(text, f"unknown scheme {scheme.group()!r}; {_EXPECTED}")
    return Path(text)


def workspace_target(location: WorkspaceLocation, **ssh_options) -> Target:
    """The target rooted at ``location``. A local directory is checked now
    (:class:`TargetError` when it cannot be one); an SSH one connects at its
    first program, with the user's SSH configuration under ``ssh_options``
    (see :meth:`SshTarget.deferred`)."""
    if isinstance(location, SshLocation):
        from .ssh import SshTarget  # asyncssh loads only for SSH workspaces

        return SshTarget.deferred(location, **ssh_options)
    return LocalTarget(location)
