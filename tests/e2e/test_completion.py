"""Completion over stdio: schemes first, real directory descendants, the
bound, and plain canonical insert text replacing the typed token."""

from __future__ import annotations

from lsprotocol import types

from .conftest import BIG_ENTRIES, open_document


async def complete(client, uri: str, line: int, character: int, trigger: str | None = None):
    context = (
        types.CompletionContext(trigger_kind=types.CompletionTriggerKind.TriggerCharacter, trigger_character=trigger)
        if trigger
        else types.CompletionContext(trigger_kind=types.CompletionTriggerKind.Invoked)
    )
    return await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=character),
            context=context,
        )
    )


def _ordered(result: types.CompletionList) -> list[types.CompletionItem]:
    return sorted(result.items, key=lambda item: item.sort_text)


async def test_scheme_prefixes_come_first(client, workspace):
    uri = await open_document(client, workspace, "see w")
    result = await complete(client, uri, 0, 5)
    labels = [item.label for item in _ordered(result)]
    assert labels[0] == "work://"
    assert "work://shared/" in labels
    assert all(label.startswith("w") for label in labels)
    first = _ordered(result)[0]
    assert first.text_edit.new_text == "work://"
    assert first.text_edit.range == types.Range(start=types.Position(0, 4), end=types.Position(0, 5))
    assert first.insert_text_format == types.InsertTextFormat.PlainText


async def test_every_scheme_is_offered_on_an_empty_token(client, workspace):
    uri = await open_document(client, workspace, "")
    result = await complete(client, uri, 0, 0)
    schemes = [item.label for item in _ordered(result) if item.label.endswith("://")]
    assert schemes[:9] == [
        "work://",
        "artifact://",
        "skill://",
        "agent://",
        "history://",
        "memory://",
        "mcp://",
        "shared://",
        "mevedel://",
    ]


async def test_work_shared_descendants_come_from_the_directory(client, workspace):
    text = "notes in [here](work://shared/"
    uri = await open_document(client, workspace, text)
    result = await complete(client, uri, 0, len(text), trigger="/")
    by_label = {item.label: item for item in result.items}
    assert {"work://shared/notes.md", "work://shared/a-b.md", "work://shared/drafts/", "work://shared/big/"} <= set(by_label)
    assert by_label["work://shared/notes.md"].kind == types.CompletionItemKind.File
    assert by_label["work://shared/drafts/"].kind == types.CompletionItemKind.Folder
    edit = by_label["work://shared/notes.md"].text_edit
    assert edit.range.start == types.Position(0, text.index("work://"))
    assert edit.range.end == types.Position(0, len(text))
    assert result.is_incomplete is False


async def test_partial_name_narrows_and_inserts_canonical_text(client, workspace):
    (workspace / ".mevedel" / "shared" / "with space.md").write_text("x\n")
    text = "work://shared/wi"
    uri = await open_document(client, workspace, text)
    result = await complete(client, uri, 0, len(text))
    assert [item.label for item in result.items] == ["work://shared/with%20space.md"]
    assert result.items[0].text_edit.new_text == "work://shared/with%20space.md"


async def test_session_scope_descendants(client, workspace):
    text = "work://pl"
    uri = await open_document(client, workspace, text)
    result = await complete(client, uri, 0, len(text))
    assert "work://plans/" in [item.label for item in result.items]


async def test_the_bound_marks_the_list_incomplete(client, workspace):
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"completionLimit": 5}))
    text = "work://shared/big/"
    uri = await open_document(client, workspace, text)
    result = await complete(client, uri, 0, len(text), trigger="/")
    assert result.is_incomplete is True
    assert [item.label for item in _ordered(result)] == [f"work://shared/big/file-{i:03d}.md" for i in range(5)]
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"completionLimit": BIG_ENTRIES})
    )
    result = await complete(client, uri, 0, len(text), trigger="/")
    assert result.is_incomplete is False and len(result.items) == BIG_ENTRIES


async def test_ordinary_text_gets_no_completion(client, workspace):
    uri = await open_document(client, workspace, "either and/")
    assert await complete(client, uri, 0, 11, trigger="/") is None
