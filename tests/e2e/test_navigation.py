"""Hover, definition and document links on addresses in a document."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from mevedel_protocol import methods

from .conftest import SESSION, open_document, request


def _position(text: str, needle: str, into: int = 3) -> types.Position:
    line = text[: text.index(needle)].count("\n")
    column = text.splitlines()[line].index(needle) + into
    return types.Position(line=line, character=column)


async def hover(client, uri, position):
    return await client.text_document_hover_async(
        types.HoverParams(text_document=types.TextDocumentIdentifier(uri=uri), position=position)
    )


async def definition(client, uri, position):
    return await client.text_document_definition_async(
        types.DefinitionParams(text_document=types.TextDocumentIdentifier(uri=uri), position=position)
    )


async def test_hover_shows_canonical_form_of_a_non_canonical_spelling(client, workspace):
    text = "Read work://shared/a%2Db.md first."
    uri = await open_document(client, workspace, text)
    result = await hover(client, uri, _position(text, "work://"))
    value = result.contents.value
    assert result.contents.kind == types.MarkupKind.Markdown
    assert "canonical: `work://shared/a-b.md`" in value
    assert "authored: `work://shared/a%2Db.md`" in value
    assert "family: work" in value
    assert "locator class: exact" in value
    assert "operations: Read, Glob, Grep, ApplyPatch" in value
    assert "status: exists (file, 10 bytes)" in value
    assert str(workspace) not in value
    start = text.index("work://")
    assert result.range == types.Range(
        start=types.Position(0, start), end=types.Position(0, start + len("work://shared/a%2Db.md"))
    )


async def test_hover_on_missing_and_discovery_addresses(client, workspace):
    text = "work://shared/nope.md and mevedel://"
    uri = await open_document(client, workspace, text)
    missing = (await hover(client, uri, _position(text, "work://"))).contents.value
    assert "status: missing" in missing
    listing = (await hover(client, uri, _position(text, "mevedel://"))).contents.value
    assert "locator class: discovery" in listing and "status: discovery" in listing


async def test_hover_names_the_problem_of_a_malformed_address(client, workspace):
    text = "bad work://shared/../x here"
    uri = await open_document(client, workspace, text)
    value = (await hover(client, uri, _position(text, "work://"))).contents.value
    assert "malformed-address" in value and "work://shared/../x" in value and "traversal" in value


async def test_no_hover_on_foreign_urls_and_plain_words(client, workspace):
    text = "see https://example.com and words"
    uri = await open_document(client, workspace, text)
    assert await hover(client, uri, _position(text, "https://")) is None
    assert await hover(client, uri, _position(text, "words")) is None


async def test_definition_of_a_file_backed_address_is_its_backing_file(client, workspace):
    text = "open work://shared/notes.md"
    uri = await open_document(client, workspace, text)
    location = await definition(client, uri, _position(text, "work://"))
    assert location.uri == (workspace / ".mevedel" / "shared" / "notes.md").as_uri()


async def test_definition_of_a_session_file(client, workspace):
    text = "plan work://plans/plan.md"
    uri = await open_document(client, workspace, text)
    location = await definition(client, uri, _position(text, "work://"))
    assert location.uri == (workspace / ".mevedel" / "sessions" / SESSION / "local" / "plans" / "plan.md").as_uri()


async def test_definition_of_a_directory_is_a_virtual_document_readable_by_uri(client, workspace):
    text = "drafts live in work://shared/drafts/"
    uri = await open_document(client, workspace, text)
    location = await definition(client, uri, _position(text, "work://"))
    assert location.uri.startswith("mevedel-resource:/")
    assert location.uri.endswith("/_/work/shared/drafts")
    page = await request(client, methods.RESOURCE_READ, {"uri": location.uri, "view": "plain"})
    assert page["canonical"] == "work://shared/drafts"
    assert "work://shared/drafts/first.md" in page["text"]
    assert not page["text"].lstrip().startswith("1\t")


async def test_definition_of_packaged_docs_listing_needs_no_workspace(client, workspace):
    text = "docs: mevedel://"
    uri = await open_document(client, workspace, text)
    location = await definition(client, uri, _position(text, "mevedel://"))
    assert location.uri == "mevedel-resource:/_/_/mevedel/"
    page = await request(client, methods.RESOURCE_READ, {"uri": location.uri})
    assert "mevedel://protocol.md" in page["text"]


async def test_definition_on_a_malformed_address_is_an_error_naming_it(client, workspace):
    text = "x work://shared/%zz y"
    uri = await open_document(client, workspace, text)
    with pytest.raises(JsonRpcException) as caught:
        await definition(client, uri, _position(text, "work://"))
    assert caught.value.data["kind"] == "malformed-address"
    assert "work://shared/%zz" in caught.value.message


async def test_document_links_cover_every_valid_address(client, workspace):
    text = "\n".join(
        [
            "first work://shared/notes.md, then",
            "[drafts](work://shared/drafts) and https://example.com",
            "broken work://shared/%zz and typo wrok://x",
        ]
    )
    uri = await open_document(client, workspace, text)
    links = await client.text_document_document_link_async(
        types.DocumentLinkParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    by_line = {link.range.start.line: link for link in links}
    assert sorted(by_line) == [0, 1]
    assert by_line[0].target == (workspace / ".mevedel" / "shared" / "notes.md").as_uri()
    assert by_line[0].range == types.Range(start=types.Position(0, 6), end=types.Position(0, 28))
    assert by_line[1].target.startswith("mevedel-resource:/") and by_line[1].target.endswith("/work/shared/drafts")
    assert by_line[1].range.start == types.Position(1, 9)


async def test_links_inside_a_virtual_document_resolve_in_its_own_session(client, workspace):
    text = "see work://plans"
    uri = await open_document(client, workspace, text)
    location = await definition(client, uri, _position(text, "work://"))
    assert f"/{SESSION}/work/plans" in location.uri
    page = await request(client, methods.RESOURCE_READ, {"uri": location.uri, "view": "plain"})
    # The session is no longer current, but the document names it.
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"currentSession": None}))
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=location.uri, language_id="markdown", version=1, text=page["text"])
        )
    )
    links = await client.text_document_document_link_async(
        types.DocumentLinkParams(text_document=types.TextDocumentIdentifier(uri=location.uri))
    )
    plan = (workspace / ".mevedel" / "sessions" / SESSION / "local" / "plans" / "plan.md").as_uri()
    assert plan in [link.target for link in links], page["text"]
