"""A client that understands LSP 3.17 ``itemDefaults`` gets the edit range and
insert format once per list instead of once per item; the inserted text is
still the plain canonical address."""

from __future__ import annotations

import sys
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient


async def _completion(root: Path, capabilities: types.ClientCapabilities) -> types.CompletionList:
    client = LanguageClient("item-defaults-test", "0")
    await client.start_io(sys.executable, "-m", "mevedel_server")
    try:
        await client.initialize_async(
            types.InitializeParams(
                capabilities=capabilities,
                workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="w")],
            )
        )
        client.initialized(types.InitializedParams())
        uri = (root / "notes.md").as_uri()
        text = "see work://shared/no"
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "markdown", 1, text))
        )
        result = await client.text_document_completion_async(
            types.CompletionParams(types.TextDocumentIdentifier(uri), types.Position(0, len(text)))
        )
        await client.shutdown_async(None)
        client.exit(None)
    finally:
        await client.stop()
    assert isinstance(result, types.CompletionList)
    return result


async def test_item_defaults_carry_range_and_format_once(tmp_path: Path) -> None:
    (tmp_path / ".mevedel" / "shared").mkdir(parents=True)
    (tmp_path / ".mevedel" / "shared" / "notes.md").write_text("x\n")
    capabilities = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            completion=types.CompletionClientCapabilities(
                completion_list=types.CompletionListCapabilities(item_defaults=["editRange", "insertTextFormat"])
            )
        )
    )
    result = await _completion(tmp_path, capabilities)
    assert result.item_defaults is not None
    assert result.item_defaults.edit_range == types.Range(types.Position(0, 4), types.Position(0, 20))
    assert result.item_defaults.insert_text_format == types.InsertTextFormat.PlainText
    (item,) = [item for item in result.items if item.label == "work://shared/notes.md"]
    assert item.text_edit is None and item.insert_text_format is None


async def test_without_item_defaults_every_item_carries_its_edit(tmp_path: Path) -> None:
    (tmp_path / ".mevedel" / "shared").mkdir(parents=True)
    (tmp_path / ".mevedel" / "shared" / "notes.md").write_text("x\n")
    result = await _completion(tmp_path, types.ClientCapabilities())
    assert result.item_defaults is None
    (item,) = [item for item in result.items if item.label == "work://shared/notes.md"]
    assert item.text_edit is not None and item.text_edit.new_text == "work://shared/notes.md"
    assert item.insert_text_format == types.InsertTextFormat.PlainText
