"""Which workspace folder and which session a request runs in, and the
resolver context that follows from them.

A folder is known from ``initialize`` (workspace folders, else the root URI)
and ``workspace/didChangeWorkspaceFolders``, where only ``file:`` folders
count, and from the ``remoteWorkspaces`` setting (``ssh://`` folders, whose
URI is the address as configured). Each folder has at most one current
session for this client; a session's directory is
``<folder>/.mevedel/sessions/<ID>/``.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pygls.exceptions import JsonRpcException
from pygls.uris import to_fs_path

from mevedel_protocol.methods import VIRTUAL_SCHEME

from .. import resources, targets
from ..addresses import ErrorKind
from .errors import failure, invalid_params
from .mcp import access as mcp_access
from .virtual_documents import VirtualDocument, parse_uri

if TYPE_CHECKING:
    from ..targets import SshLocation
    from .server import MevedelLanguageServer

#: A session id is one safe directory name (the store's ids look like
#: ``2026-07-19T09-47-bf87b5dd793a``).
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True, slots=True)
class Folder:
    uri: str
    #: The local directory; for a remote folder, a placeholder never used
    #: as a path (``remote`` says where the folder is).
    root: Path
    remote: SshLocation | None = None

    @property
    def key(self) -> str:
        """A short stable name for the folder in virtual URIs: no path leaks,
        and it survives a server restart."""
        where = self.remote.uri if self.remote is not None else self.root
        return hashlib.sha256(os.fsencode(where)).hexdigest()[:16]

    def session_dir(self, session_id: str) -> Path | None:
        """The session's local directory (``None`` on a remote folder)."""
        if self.remote is not None:
            return None
        return self.root / ".mevedel" / "sessions" / session_id


def remote_folder(uri: str) -> Folder | None:
    """The remote folder an ``ssh://`` address names; ``None`` otherwise."""
    if not uri.startswith("ssh://"):
        return None
    try:
        location = targets.parse_ssh_location(uri)
    except targets.SshLocationError:
        return None
    return Folder(location.uri, Path(os.devnull), location)


def same_folder(uri: str, folder: Folder) -> bool:
    """Whether ``uri`` (a client's spelling) names ``folder``."""
    if folder.remote is not None:
        named = remote_folder(uri)
        return named is not None and named.remote == folder.remote
    local = local_folder(uri)
    return local is not None and local.root == folder.root


def session_id_problem(session_id: str) -> str | None:
    if SESSION_ID.fullmatch(session_id):
        return None
    return f"session id {session_id!r} is not a session id (letters, digits, '.', '_' and '-', starting with a letter or digit)"


def local_folder(uri: str) -> Folder | None:
    """The folder a ``file:`` URI names; ``None`` for any other scheme."""
    if not uri.startswith("file:"):
        return None
    path = to_fs_path(uri)
    return None if path is None else Folder(uri, Path(os.path.normpath(path)))


def folders(ls: MevedelLanguageServer) -> list[Folder]:
    """The server's workspace folders: the client's local ones in the order
    it gave, then the configured remote ones."""
    try:
        workspace = ls.workspace
    except RuntimeError:  # before initialize
        return []
    found = [f for f in (local_folder(folder.uri) for folder in workspace.folders.values()) if f is not None]
    if not found and workspace.root_uri:
        root = local_folder(workspace.root_uri)
        found = [root] if root is not None else []
    remote = [f for f in (remote_folder(uri) for uri in ls.settings.remote_workspaces) if f is not None]
    return found + [f for index, f in enumerate(remote) if f not in remote[:index]]


def _contains(root: Path, path: Path) -> bool:
    return path == root or root in path.parents


def folder_for_uri(ls: MevedelLanguageServer, folder_uri: str) -> Folder:
    """The workspace folder a client named in ``workspaceFolder``."""
    for folder in folders(ls):
        if same_folder(folder_uri, folder):
            return folder
    raise invalid_params(folder_uri, "workspaceFolder is not a workspace folder of this server")


def folder_for_document(ls: MevedelLanguageServer, document_uri: str | None) -> Folder | None:
    """The innermost folder holding the document, else the first folder."""
    known = folders(ls)
    if document_uri and document_uri.startswith("file:"):
        path = to_fs_path(document_uri)
        if path is not None:
            holding = [f for f in known if f.remote is None and _contains(f.root, Path(os.path.normpath(path)))]
            if holding:
                return max(holding, key=lambda f: len(f.root.parts))
    return known[0] if known else None


def folder_for_key(ls: MevedelLanguageServer, key: str) -> Folder | None:
    return next((f for f in folders(ls) if f.key == key), None)


@dataclass(frozen=True, slots=True)
class Scope:
    """Where one request runs: a folder (if any), a session (if any), and the
    resolver context that follows from them."""

    folder: Folder | None
    session_id: str | None
    context: resources.ResolverContext


def scope(ls: MevedelLanguageServer, folder: Folder | None, session_id: str | None) -> Scope:
    """The scope of ``folder`` and exactly ``session_id`` (``None``: no session)."""
    settings = ls.settings
    session_dir = folder.session_dir(session_id) if folder is not None and session_id is not None else None
    # The resolver reads local files only: a remote folder has its sessions
    # (through the store target) but no local root.
    root = folder.root if folder is not None and folder.remote is None else None
    context = resources.ResolverContext(
        workspace_root=root,
        session_dir=session_dir,
        memory_roots=tuple(
            resources.MemoryRoot(path, r.location, r.kind) for r in settings.memory_roots if (path := _root_path(r.path, root))
        ),
        skill_roots=tuple(resources.SkillRoot(path, r.origin) for r in settings.skill_roots if (path := _root_path(r.path, root))),
        completion_limit=settings.completion_limit,
        live_history=ls.sessions.live_history(folder, session_id) if ls.sessions is not None else None,
        store_target=_store_target(ls, folder),
        remote_workspace=folder is not None and folder.remote is not None,
        remote_session=session_id if folder is not None and folder.remote is not None else None,
        mcp=mcp_access(ls, folder),
    )
    return Scope(folder, session_id if folder is not None else None, context)


def _store_target(ls: MevedelLanguageServer, folder: Folder | None):
    if ls.sessions is None or folder is None:
        return None
    if folder.remote is not None:
        # The only way to its files: make the (unconnected) target now.
        return ls.sessions.service(folder).target
    return ls.sessions.target(folder)


def _current(ls: MevedelLanguageServer, folder: Folder | None) -> str | None:
    return None if folder is None else ls.current_session(folder)


def _root_path(configured: str, folder_root: Path | None) -> Path | None:
    """A configured root: ``~`` expands; a relative path is relative to the
    folder in use, and is not used when there is none."""
    path = Path(os.path.expanduser(configured))
    if path.is_absolute():
        return path
    return None if folder_root is None else folder_root / path


def _checked_session(session_id: str, authored: str) -> str:
    problem = session_id_problem(session_id)
    if problem is not None:
        raise invalid_params(authored, problem)
    return session_id


def request_scope(ls: MevedelLanguageServer, workspace_folder: str | None, session_id: str | None) -> Scope:
    """The scope of a custom request's ``workspaceFolder`` and ``sessionId``
    params (defaults: the first folder and its current session)."""
    folder = folder_for_uri(ls, workspace_folder) if workspace_folder is not None else folder_for_document(ls, None)
    if session_id is not None:
        return scope(ls, folder, _checked_session(session_id, session_id))
    return scope(ls, folder, _current(ls, folder))


def virtual_scope(ls: MevedelLanguageServer, uri: str, document: VirtualDocument) -> Scope:
    """The scope a ``mevedel-resource:`` URI names: its own workspace and
    session, never the current one."""
    folder = None
    if document.workspace_key is not None:
        folder = folder_for_key(ls, document.workspace_key)
        if folder is None:
            raise failure(ErrorKind.OWNER_MISSING.value, uri, "the workspace folder of this document is not open in this server")
    if document.session_id is None:
        return scope(ls, folder, None)
    if folder is None:
        raise invalid_params(uri, "a session needs a workspace")
    return scope(ls, folder, _checked_session(document.session_id, uri))


def document_scope(ls: MevedelLanguageServer, uri: str) -> Scope:
    """The scope addresses in an open document resolve in: a virtual
    document's own folder and session (else the current one), or the folder
    holding the file and its current session."""
    if uri.startswith(f"{VIRTUAL_SCHEME}:"):
        try:
            document = parse_uri(uri)
            found = virtual_scope(ls, uri, document)
        except (ValueError, JsonRpcException):
            found = None
        if found is not None:
            if found.session_id is None and found.folder is not None:
                return scope(ls, found.folder, _current(ls, found.folder))
            return found
    folder = folder_for_document(ls, uri)
    return scope(ls, folder, _current(ls, folder))
