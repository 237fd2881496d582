"""``mevedel-resource:`` URIs: read-only documents for addresses that are not
a real file (listings, directories, transcripts, agent results...).

Grammar (docs/protocol.md, "Virtual documents")::

    mevedel-resource:/WORKSPACE/SESSION/SCHEME/TAIL

WORKSPACE is the 16-hex key of the workspace folder (``_`` when the address
needs none), SESSION the session id (``_`` for none), SCHEME the address
scheme and TAIL the canonical address after ``SCHEME://`` with every
component percent-encoded once more. That second encoding leaves only
unreserved characters, ``/`` and ``%XX`` in the URI, so a client that decodes
and re-encodes the path (VS Code does) gives back the same string.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

from mevedel_protocol.methods import VIRTUAL_SCHEME

from ..addresses import SCHEMES, Address, Family

ABSENT = "_"
_PREFIX = f"{VIRTUAL_SCHEME}:"

#: Families whose content belongs to a session (work://shared/... and
#: history://saved are workspace-owned and excepted below).
_SESSION_FAMILIES = {Family.WORK, Family.ARTIFACT, Family.AGENT, Family.HISTORY, Family.SHARED}


@dataclass(frozen=True, slots=True)
class VirtualDocument:
    address: str
    workspace_key: str | None
    session_id: str | None


def needs_session(address: Address) -> bool:
    if address.family not in _SESSION_FAMILIES:
        return False
    return not (address.family is Family.WORK and address.scope == "shared") and not (
        address.family is Family.HISTORY and address.scope == "saved"
    )


def needs_workspace(address: Address) -> bool:
    return address.family is not Family.MEVEDEL


def format_uri(address: Address, workspace_key: str | None, session_id: str | None) -> str:
    """The virtual URI of ``address`` (its canonical form) in that workspace
    and session; the parts the address does not depend on are dropped."""
    scheme, _sep, tail = address.canonical.partition("://")
    workspace = workspace_key if workspace_key and needs_workspace(address) else ABSENT
    session = session_id if session_id and needs_session(address) else ABSENT
    encoded = "/".join(quote(component, safe="") for component in tail.split("/"))
    return f"{_PREFIX}/{workspace}/{quote(session, safe='')}/{scheme}/{encoded}"


def parse_uri(uri: str) -> VirtualDocument:
    """The address, workspace key and session a virtual URI names; raises
    ValueError saying what is wrong with it."""
    if not uri.startswith(_PREFIX):
        raise ValueError(f"is not a {VIRTUAL_SCHEME}: URI")
    path = uri[len(_PREFIX) :]
    if path.startswith("//"):
        authority, _slash, rest = path[2:].partition("/")
        if authority:
            raise ValueError(f"a {VIRTUAL_SCHEME}: URI has no authority, found {authority!r}")
        path = "/" + rest
    if "?" in path or "#" in path:
        raise ValueError(f"a {VIRTUAL_SCHEME}: URI has no query or fragment")
    parts = path.split("/", 4)
    if len(parts) != 5 or parts[0] != "":
        raise ValueError(f"expected {VIRTUAL_SCHEME}:/WORKSPACE/SESSION/SCHEME/TAIL")
    _root, workspace, session, scheme, encoded = parts
    if scheme not in SCHEMES:
        raise ValueError(f"{scheme!r} is not an address scheme")
    tail = "/".join(unquote(component, errors="strict") for component in encoded.split("/"))
    session = unquote(session)
    return VirtualDocument(
        address=f"{scheme}://{tail}",
        workspace_key=None if workspace == ABSENT else workspace,
        session_id=None if session == ABSENT else session,
    )
