"""Diagnostics for addresses in open documents: malformed addresses of our
schemes, and unknown ``scheme://`` prefixes as ``diagnostics.unknownSchemes``
selects. Published on open and change, and again when settings change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

from mevedel_protocol.methods import DIAGNOSTIC_SOURCE

from ..addresses import AddressError, ErrorKind
from . import document_addresses

if TYPE_CHECKING:
    from pygls.workspace import TextDocument

    from .server import MevedelLanguageServer


def document_diagnostics(document: TextDocument, unknown_schemes: str) -> list[types.Diagnostic]:
    found = []
    for span, result in document_addresses.classified_spans(document, unknown_schemes):
        if not isinstance(result, AddressError):
            continue
        # A misspelt scheme may be someone else's URI; a broken address of ours is wrong.
        severity = types.DiagnosticSeverity.Warning if result.kind is ErrorKind.UNKNOWN_SCHEME else types.DiagnosticSeverity.Error
        found.append(
            types.Diagnostic(
                range=span.range,
                message=f"{span.text}: {result.reason}",
                severity=severity,
                code=result.kind.value,
                source=DIAGNOSTIC_SOURCE,
            )
        )
    return found


def publish(ls: MevedelLanguageServer, uri: str) -> None:
    document = ls.workspace.get_text_document(uri)
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(
            uri=uri,
            version=document.version,
            diagnostics=document_diagnostics(document, ls.settings.diagnostics.unknown_schemes),
        )
    )


def register(ls: MevedelLanguageServer) -> None:
    @ls.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: MevedelLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        publish(ls, params.text_document.uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: MevedelLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        publish(ls, params.text_document.uri)

    @ls.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MevedelLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    def republish_all() -> None:
        for uri in list(ls.workspace.text_documents):
            publish(ls, uri)

    ls.on_settings_changed.append(republish_all)
