"""Diagnostics on open and change, and the unknownSchemes setting."""

from __future__ import annotations

import asyncio

from lsprotocol import types

from mevedel_protocol import methods

from .conftest import open_document

TEXT = "\n".join(
    [
        "Links: https://example.com and ftp://mirror.example/file",
        "Broken: work://shared/%zz here",
        "Typo: wrok://x and Also: custom://thing",
        "Fine: work://shared/notes.md and mevedel://",
    ]
)


async def diagnostics_for(client, uri: str, after) -> list[types.Diagnostic]:
    waiting = client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    result = after()
    if asyncio.iscoroutine(result):
        await result
    while True:
        params = await asyncio.wait_for(waiting, timeout=30)
        if params.uri == uri:
            return list(params.diagnostics)
        waiting = client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)


async def test_malformed_and_near_miss_are_reported_and_foreign_urls_are_not(client, workspace):
    uri = (workspace / "doc.md").as_uri()
    found = await diagnostics_for(client, uri, lambda: open_document(client, workspace, TEXT))
    by_code = {d.code: d for d in found}
    assert sorted(by_code) == ["malformed-address", "unknown-scheme"]
    malformed = by_code["malformed-address"]
    start = TEXT.splitlines()[1].index("work://")
    assert malformed.range == types.Range(
        start=types.Position(1, start), end=types.Position(1, start + len("work://shared/%zz"))
    )
    assert malformed.message.startswith("work://shared/%zz: ")
    assert malformed.severity == types.DiagnosticSeverity.Error
    assert malformed.source == methods.DIAGNOSTIC_SOURCE
    typo = by_code["unknown-scheme"]
    assert typo.message.startswith("wrok://x: ") and "work://" in typo.message
    assert typo.range.start == types.Position(2, TEXT.splitlines()[2].index("wrok://"))
    assert typo.severity == types.DiagnosticSeverity.Warning


async def test_change_republishes(client, workspace):
    uri = (workspace / "doc.md").as_uri()
    await diagnostics_for(client, uri, lambda: open_document(client, workspace, TEXT))
    fixed = TEXT.replace("%zz", "%20x").replace("wrok://", "work://")

    def change():
        client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                content_changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
            )
        )

    assert await diagnostics_for(client, uri, change) == []


async def test_unknown_schemes_setting_takes_effect(client, workspace):
    uri = (workspace / "doc.md").as_uri()
    await diagnostics_for(client, uri, lambda: open_document(client, workspace, TEXT))

    def configure(mode: str):
        return lambda: client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"mevedel": {"diagnostics": {"unknownSchemes": mode}}})
        )

    every = await diagnostics_for(client, uri, configure("all"))
    unknown = sorted(d.message.partition(":")[0] for d in every if d.code == "unknown-scheme")
    assert unknown == ["custom", "ftp", "https", "wrok"]
    off = await diagnostics_for(client, uri, configure("off"))
    assert [d.code for d in off] == ["malformed-address"]


async def test_close_clears(client, workspace):
    uri = (workspace / "doc.md").as_uri()
    await diagnostics_for(client, uri, lambda: open_document(client, workspace, TEXT))

    def close():
        client.text_document_did_close(
            types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
        )

    assert await diagnostics_for(client, uri, close) == []
