"""Settings: initializationOptions, didChangeConfiguration (bare, nested,
pulled), invalid settings reported and ignored, capabilities advertised."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient

from deadlines import ticks
from mevedel_protocol import COMMANDS, methods

from .conftest import SERVER, initialize_params, request


async def _messages(client: LanguageClient, count: int) -> list[str]:
    for _ in ticks():
        if len(client.messages) >= count:
            break
        await asyncio.sleep(0.05)
    return [m.message for m in client.messages]


async def _completion_count(client, uri: str, text: str) -> types.CompletionList:
    return await client.text_document_completion_async(
        types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=len(text))
        )
    )


@pytest_lsp.fixture(config=SERVER)
async def configured(lsp_client: LanguageClient, workspace):
    lsp_client.initialize_result = await lsp_client.initialize_session(
        initialize_params(workspace, completionLimit=0, diagnostics={"unknownSchemes": "sometimes"}, colour="blue")
    )
    yield
    await lsp_client.shutdown_session()


async def test_capabilities_advertise_features_and_commands(configured):
    capabilities = configured.initialize_result.capabilities
    assert list(capabilities.completion_provider.trigger_characters) == ["/", ":", "@"]
    assert capabilities.hover_provider and capabilities.definition_provider
    assert capabilities.document_link_provider is not None
    assert sorted(capabilities.execute_command_provider.commands) == sorted(COMMANDS)
    assert methods.COMMAND_APPLY_PATCH in COMMANDS and methods.COMMAND_TURN_SETTLE in COMMANDS
    assert configured.initialize_result.server_info.name == "mevedel-lsp"


async def test_invalid_initialization_options_are_reported_by_name_and_ignored(configured, workspace):
    shown = await _messages(configured, 3)
    assert any("completionLimit" in m and "between 1 and" in m for m in shown), shown
    assert any("diagnostics.unknownSchemes" in m and "near-miss" in m for m in shown), shown
    assert any("'colour'" in m and "unknown" in m for m in shown), shown
    assert [m.type for m in configured.messages if m.message.startswith("mevedel setting completionLimit")] == [
        types.MessageType.Error
    ]
    assert [m.type for m in configured.messages if "'colour'" in m.message] == [types.MessageType.Warning]
    # The valid one (currentSession) applied; the invalid one kept its default (200).
    page = await request(configured, methods.RESOURCE_READ, {"address": "work://plans/plan.md"})
    assert page["totalLines"] == 2
    text = "work://shared/big/"
    configured.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=(workspace / "c.md").as_uri(), language_id="markdown", version=1, text=text)
        )
    )
    result = await _completion_count(configured, (workspace / "c.md").as_uri(), text)
    assert len(result.items) == 40 and not result.is_incomplete


async def test_a_bad_change_keeps_the_previous_value(client, workspace):
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"mevedel": {"currentSession": "../escape"}})
    )
    shown = await _messages(client, 1)
    assert "currentSession" in shown[0] and "keeping its previous value" in shown[0]
    page = await request(client, methods.RESOURCE_READ, {"address": "work://plans/plan.md"})
    assert page["totalLines"] == 2


async def test_current_session_per_workspace_folder(client, workspace):
    other = workspace / ".mevedel" / "sessions" / "other-session" / "local"
    other.mkdir(parents=True)
    (other / "only-here.md").write_text("other\n")
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"currentSession": {workspace.as_uri(): "other-session"}})
    )
    await asyncio.sleep(0)
    page = await request(client, methods.RESOURCE_READ, {"address": "work://only-here.md", "view": "plain"})
    assert page["text"] == "other"


async def test_null_settings_are_pulled_with_workspace_configuration(client, workspace):
    client.set_configuration({"completionLimit": 2}, section="mevedel")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    text = "work://shared/big/"
    uri = (workspace / "p.md").as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="markdown", version=1, text=text)
        )
    )
    for _ in ticks():
        result = await _completion_count(client, uri, text)
        if len(result.items) == 2:
            break
        await asyncio.sleep(0.05)
    assert len(result.items) == 2 and result.is_incomplete


async def test_explicit_workspace_folder_must_be_ours(client, workspace, tmp_path):
    with pytest.raises(JsonRpcException) as caught:
        await request(
            client, methods.RESOURCE_READ, {"address": "work://shared/notes.md", "workspaceFolder": tmp_path.as_uri()}
        )
    assert caught.value.data["kind"] == "invalid-params"
    assert caught.value.data["authored"] == tmp_path.as_uri()
    page = await request(
        client, methods.RESOURCE_READ, {"address": "work://shared/notes.md", "workspaceFolder": workspace.as_uri()}
    )
    assert page["totalLines"] == 4
