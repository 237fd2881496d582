"""Who may write a session's files.

An ApplyPatch of a session's ``work://`` files (its ``local/`` scope) runs
only when that session is open and writable by this client. The front end
that built the request's context answers (the LSP server from its open
sessions, the CLI after resuming the session under its own lease, the MCP
tool server from the session it serves) through
``ResolverContext.session_writable``; no answer is no. A session id the
client has not opened for writing -- an unknown one included -- is refused
before anything is read or written, so nothing is ever created under it.
The same holds for a plain project path an ApplyPatch changes (the change
belongs to the session's turn, whose checkpoint records it). The shared
scope (``work://shared/``) and memory roots belong to the workspace and the
user, not to a session, and need no session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ...addresses import AddressError, ErrorKind
from .context import ResolverContext

if TYPE_CHECKING:
    # The session service is imported by the caller that holds one: a
    # command that only reads an address does not load it.
    from ...store import SessionService


def not_writable(session_id: str, authored: str, *, project: bool = False) -> AddressError:
    what = "changing project files in it" if project else "changing its work:// files"
    return AddressError(
        ErrorKind.OWNER_MISSING,
        authored,
        f"session {session_id} is not open for writing by this client; resume it (or take control of it) "
        f"before {what}",
    )


def require_writable_session(context: ResolverContext, authored: str, *, project: bool = False) -> None:
    """Refuse a write to the open session's scope (or, ``project``, to the
    project's files on its behalf) unless this client holds the session
    open and writable."""
    session_id = context.session_id
    if session_id is None:
        reason = (
            "no session is open; project files are changed only on behalf of a session this client holds open"
            if project
            else "no session is open; work:// session files belong to the open session"
        )
        raise AddressError(ErrorKind.OWNER_MISSING, authored, reason)
    allowed = context.session_writable
    if allowed is None or not allowed(session_id):
        raise not_writable(session_id, authored, project=project)


def writable_sessions(service: SessionService) -> Callable[[str], bool]:
    """The ``session_writable`` answer of a client: the sessions its
    ``service`` holds open and writable (a session joined read-only, or
    taken over by someone else since, is not)."""

    from ...store import Access

    def writable(session_id: str) -> bool:
        return service.is_open(session_id) and service.info(session_id).access is Access.WRITABLE

    return writable
