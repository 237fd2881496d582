"""Go-to-definition and document links for addresses in a document.

A file-backed address leads to its backing file (``file://``); anything else
to its ``mevedel-resource:`` virtual document, which clients open through
``mevedel/resource/read``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from .. import resources as core
from ..addresses import AddressError, ErrorKind, parse_address
from . import document_addresses, virtual_documents
from .errors import answers_errors, failure
from .opened_documents import text_document
from .workspaces import Scope, document_scope

if TYPE_CHECKING:
    from .server import MevedelLanguageServer


def definition_uri(address_text: str, scope: Scope) -> str | None:
    """Where ``address_text`` leads, or ``None`` when it needs a session and
    there is none. Raises AddressError for a malformed address."""
    backing = core.backing_file(address_text, scope.context)
    if backing is not None:
        return backing.as_uri()
    address = parse_address(address_text)
    if virtual_documents.needs_session(address) and scope.session_id is None:
        return None
    return virtual_documents.format_uri(address, scope.folder.key if scope.folder else None, scope.session_id)


def register(ls: MevedelLanguageServer) -> None:
    @ls.feature(types.TEXT_DOCUMENT_DEFINITION)
    @answers_errors(types.TEXT_DOCUMENT_DEFINITION)
    async def definition(ls: MevedelLanguageServer, params: types.DefinitionParams) -> types.Location | None:
        document = text_document(ls, params.text_document.uri)
        span = document_addresses.address_at_position(document, params.position)
        if span is None:
            return None
        target = definition_uri(span.text, document_scope(ls, document.uri))
        if target is None:
            raise failure(ErrorKind.OWNER_MISSING.value, span.text, "no session is open; this address belongs to the open session")
        start = types.Position(line=0, character=0)
        return types.Location(uri=target, range=types.Range(start=start, end=start))

    @ls.feature(types.TEXT_DOCUMENT_DOCUMENT_LINK)
    @answers_errors(types.TEXT_DOCUMENT_DOCUMENT_LINK)
    async def document_link(ls: MevedelLanguageServer, params: types.DocumentLinkParams) -> list[types.DocumentLink]:
        document = text_document(ls, params.text_document.uri)
        scope = document_scope(ls, document.uri)
        tooltips = _supports_tooltips(ls)
        links = []
        for span, address in document_addresses.classified_spans(document, "off"):
            if isinstance(address, AddressError):
                continue
            target = definition_uri(span.text, scope)
            if target is None:
                continue
            links.append(
                types.DocumentLink(range=span.range, target=target, tooltip=f"Open {address.canonical}" if tooltips else None)
            )
        return links


def _supports_tooltips(ls: MevedelLanguageServer) -> bool:
    text_document = ls.client_capabilities.text_document
    link = text_document.document_link if text_document else None
    return bool(link and link.tooltip_support)
