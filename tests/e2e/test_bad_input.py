"""Malformed JSON-RPC params get an InvalidParams answer naming the fields,
and the server keeps answering afterwards."""

from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from deadlines import ticks
from mevedel_protocol import methods

from .conftest import raw_request, request


async def _invalid(client, method: str, params) -> JsonRpcException:
    with pytest.raises(JsonRpcException) as caught:
        await raw_request(client, method, params)
    assert caught.value.code == -32602
    assert caught.value.data["kind"] == "invalid-params"
    return caught.value


async def test_custom_method_params_are_checked_field_by_field(client, workspace):
    wrong_type = await _invalid(client, methods.RESOURCE_READ, {"address": 42})
    assert "params.address: expected a string, got a number" in wrong_type.message
    unknown = await _invalid(client, methods.RESOURCE_GLOB, {"address": "work://", "patern": "*"})
    assert "unknown field(s) patern" in unknown.message
    missing = await _invalid(client, methods.RESOURCE_GREP, {"address": "work://shared"})
    assert "params.pattern: required field missing" in missing.message
    not_object = await _invalid(client, methods.ADDRESS_DESCRIBE, ["work://"])
    assert "params must be an object" in not_object.message
    absent = await _invalid(client, methods.RESOURCE_APPLY_PATCH, None)
    assert absent.data["authored"] == methods.RESOURCE_APPLY_PATCH
    bad_session = await _invalid(client, methods.RESOURCE_READ, {"address": "work://x", "sessionId": "../../etc"})
    assert bad_session.data["authored"] == "../../etc"


async def test_standard_method_with_undecodable_params_is_answered(client, workspace):
    # A hover without a position: pygls alone would drop this and never answer.
    error = await _invalid(client, types.TEXT_DOCUMENT_HOVER, {"textDocument": {"uri": "file:///x.md"}})
    assert error.data["authored"] == types.TEXT_DOCUMENT_HOVER
    assert "position" in error.data["reason"]
    completion = await _invalid(client, types.TEXT_DOCUMENT_COMPLETION, {"textDocument": 5, "position": "here"})
    assert "textDocument" in completion.data["reason"]


async def test_server_keeps_answering_after_bad_input(client, workspace):
    for _ in range(3):
        await _invalid(client, methods.RESOURCE_READ, {"offset": "x"})
        await _invalid(client, types.TEXT_DOCUMENT_HOVER, {"bogus": True})
    page = await request(client, methods.RESOURCE_READ, {"address": "work://shared/a-b.md"})
    assert page["text"] == "     1\tdash file"
    with pytest.raises(JsonRpcException) as caught:
        await request(client, "mevedel/resource/nothing", {})
    assert caught.value.code == -32601  # MethodNotFound
    page = await request(client, methods.RESOURCE_READ, {"address": "mevedel://"})
    assert page["kind"] == "listing"


async def test_a_failing_notification_is_reported_without_details(client, workspace):
    import asyncio

    secret = workspace / "never-opened.md"
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=secret.as_uri(), version=2),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(start=types.Position(5, 0), end=types.Position(9, 0)), text="x"
                )
            ],
        )
    )
    for _ in ticks():
        if client.messages:
            break
        await asyncio.sleep(0.05)
    shown = [m.message for m in client.messages]
    assert shown == ["mevedel-lsp hit an internal error; details are in its log"]
    page = await request(client, methods.RESOURCE_READ, {"address": "work://shared/a-b.md"})
    assert page["totalLines"] == 1


async def test_a_progress_token_of_the_wrong_type_is_invalid_params_naming_it(client, workspace):
    position = {"line": 0, "character": 0}
    hover = {"textDocument": {"uri": (workspace / "memory" / "topic.md").as_uri()}, "position": position}
    for method, params in ((types.TEXT_DOCUMENT_HOVER, hover), (methods.RESOURCE_READ, {"address": "work://shared/a-b.md"})):
        for token in ({"a": 1}, 3.5, [1], True):
            error = await _invalid(client, method, {**params, "workDoneToken": token})
            assert error.data["authored"] == "params.workDoneToken" and "progress token" in error.data["reason"]
        error = await _invalid(client, method, {**params, "partialResultToken": None})
        assert error.data["authored"] == "params.partialResultToken"
    page = await raw_request(client, methods.RESOURCE_READ, {"address": "work://shared/a-b.md", "workDoneToken": "t1"})
    assert page["text"] == "     1\tdash file"


async def test_hover_and_completion_on_a_document_never_opened(client, workspace):
    position = {"line": 0, "character": 3}
    (workspace / "notes.md").write_text("see work://shared/a-b.md\n")
    # Read from disk: a regular file.
    found = await raw_request(client, types.TEXT_DOCUMENT_HOVER, {"textDocument": {"uri": (workspace / "notes.md").as_uri()}, "position": {"line": 0, "character": 8}})
    assert "work://shared/a-b.md" in found["contents"]["value"]
    # Refused clearly: absent, not a file (never read: /dev/zero would never end), not a file URI.
    for uri, why in (((workspace / "never.md").as_uri(), "No such file"), ("file:///dev/zero", "not a regular file"),
                     ("untitled:Untitled-1", "not a file to read")):
        for method in (types.TEXT_DOCUMENT_HOVER, types.TEXT_DOCUMENT_COMPLETION):
            error = await _invalid(client, method, {"textDocument": {"uri": uri}, "position": position})
            assert error.data["authored"] == uri and "is not open in the editor" in error.data["reason"] and why in error.data["reason"]
