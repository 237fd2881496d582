"""No input kills or deafens the server: broken frames, malformed envelopes
and requests out of the LSP lifecycle are each answered with an error that
names what is wrong (never a traceback), and the next request is served.
The server is a real process fed raw bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mevedel_protocol import methods
from mevedel_server.lsp.transport import framing

from .raw_client import RawClient, frame


@pytest.fixture
async def wire(tmp_path: Path, raw_servers):
    workspace = tmp_path / "project"
    workspace.mkdir()
    client = await raw_servers()
    client.workspace = workspace
    yield client
    status, stderr = await client.stop()
    assert b"Traceback" not in stderr, stderr.decode()
    for body in client.raw:
        assert b"traceback" not in body.lower(), body


async def _serves(client: RawClient) -> None:
    """The server still answers a well-formed request."""
    reply = await client.request(methods.RESOURCE_READ, {"address": "mevedel://"})
    assert reply["result"]["kind"] == "listing", reply


def _error(reply: dict) -> dict:
    assert "error" in reply, reply
    error = reply["error"]
    assert "traceback" not in json.dumps(error).lower()
    return error


async def test_a_request_before_initialize_is_refused_as_not_initialized(wire):
    error = _error(await wire.request(methods.SESSION_LIST, {}))
    assert error["code"] == -32002
    assert error["data"]["kind"] == "server-not-initialized"
    assert "initialize" in error["message"]
    await wire.initialize(wire.workspace)
    await _serves(wire)


async def test_a_second_initialize_is_refused(wire):
    await wire.initialize(wire.workspace)
    error = _error(await wire.request("initialize", {"capabilities": {}}))
    assert error["code"] == -32600
    assert error["data"] == {
        "kind": "invalid-request",
        "authored": "initialize",
        "reason": "the server is already initialized: initialize is sent once",
    }
    await _serves(wire)


async def test_a_request_after_shutdown_is_refused_as_invalid(wire):
    await wire.initialize(wire.workspace)
    assert "result" in await wire.request("shutdown")
    error = _error(await wire.request(methods.RESOURCE_READ, {"address": "mevedel://"}))
    assert error["code"] == -32600
    assert "shutdown" in error["data"]["reason"]
    again = _error(await wire.request("shutdown"))
    assert again["code"] == -32600


@pytest.mark.parametrize(
    "method, named",
    [(5, "a number"), (None, "null"), ({"name": "x"}, "an object"), (["x"], "an array"), (True, "a boolean")],
    ids=["number", "null", "object", "array", "boolean"],
)
async def test_a_method_that_is_not_a_string_is_an_invalid_request_naming_method(wire, method, named):
    await wire.initialize(wire.workspace)
    error = _error(await wire.request(method, {}))
    assert error["code"] == -32600
    assert error["data"] == {"kind": "invalid-request", "authored": "method", "reason": f"must be a string, not {named}"}
    await _serves(wire)


@pytest.mark.parametrize("bad_id", [{"a": 1}, [1], 1.5, True, None], ids=["object", "array", "fraction", "boolean", "null"])
async def test_an_id_that_is_not_a_number_or_string_is_answered_with_a_null_id(wire, bad_id):
    await wire.initialize(wire.workspace)
    before = len(wire.errors_with_null_id())
    wire.write(frame({"jsonrpc": "2.0", "id": bad_id, "method": methods.SESSION_LIST, "params": {}}))
    await _serves(wire)
    refused = wire.errors_with_null_id()[before:]
    assert [r["error"]["data"]["authored"] for r in refused] == ["id"]
    assert refused[0]["error"]["code"] == -32600


async def test_a_lone_surrogate_in_a_session_id_is_invalid_params_naming_the_field(wire):
    await wire.initialize(wire.workspace)
    body = b'{"jsonrpc":"2.0","id":"s","method":"%s","params":{"address":"work://x","sessionId":"a\\ud800b"}}' % (
        methods.RESOURCE_READ.encode()
    )
    wire.write(frame(body))
    error = _error(await wire.answer("s"))
    assert error["code"] == -32602
    assert error["data"]["kind"] == "invalid-params"
    assert error["data"]["authored"] == "params.sessionId"
    assert "lone surrogate" in error["data"]["reason"]
    await _serves(wire)


async def test_a_lone_surrogate_in_a_method_name_is_an_invalid_request(wire):
    await wire.initialize(wire.workspace)
    wire.write(frame(b'{"jsonrpc":"2.0","id":"m","method":"mevedel/\\udc00","params":{}}'))
    error = _error(await wire.answer("m"))
    assert error["data"]["authored"] == "method"
    await _serves(wire)


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"[1, 2]", "must be a JSON object, not an array"),
        (b'"hello"', "must be a JSON object, not a string"),
        (b"null", "must be a JSON object, not null"),
    ],
)
async def test_a_message_that_is_not_an_object_is_answered_with_a_null_id(wire, body, reason):
    await wire.initialize(wire.workspace)
    wire.write(frame(body))
    await _serves(wire)
    (refused,) = wire.errors_with_null_id()
    assert refused["error"]["data"] == {"kind": "invalid-request", "authored": "message", "reason": reason}


async def test_a_wrong_jsonrpc_version_is_refused_naming_jsonrpc(wire):
    await wire.initialize(wire.workspace)
    error = _error(await wire.request(methods.SESSION_LIST, {}, jsonrpc="1.0"))
    assert error["data"]["authored"] == "jsonrpc"
    await _serves(wire)


async def test_params_that_are_a_string_are_invalid_params(wire):
    await wire.initialize(wire.workspace)
    error = _error(await wire.request(methods.SESSION_LIST, "all"))
    assert error["code"] == -32602
    assert error["data"]["reason"] == "params must be an object or an array, not a string"
    await _serves(wire)


async def test_params_nested_absurdly_deep_are_invalid_params(wire):
    await wire.initialize(wire.workspace)
    deep: object = "x"
    for _ in range(5000):
        deep = [deep]
    msg_id = wire.next_id()
    # json.dumps would recurse; build the text by hand.
    wire.write(frame(b'{"jsonrpc":"2.0","id":"%s","method":"mevedel/session/list","params":{"a":%s"x"%s}}' % (
        msg_id.encode(), b"[" * 5000, b"]" * 5000)))
    error = _error(await wire.answer(msg_id))
    assert error["data"]["kind"] in ("invalid-params", "parse-error")
    await _serves(wire)


async def test_a_body_that_is_not_json_is_a_parse_error_with_the_request_id(wire):
    await wire.initialize(wire.workspace)
    wire.write(frame(b'{"jsonrpc":"2.0","id":77,"method":"x","params":{'))
    error = _error(await wire.answer(77))
    assert error["code"] == -32700
    assert error["data"]["kind"] == "parse-error"
    await _serves(wire)


async def test_a_body_that_is_not_utf8_is_a_parse_error(wire):
    await wire.initialize(wire.workspace)
    wire.write(frame(b'{"jsonrpc":"2.0","id":78,"method":"x","params":{"a":"\xff\xfe"}}'))
    error = _error(await wire.answer(78))
    assert "UTF-8" in error["data"]["reason"]
    await _serves(wire)


# Framing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "length",
    [b"1000000000000000", b"100000000000", b"18446744073709551617", b"9" * 400],
    ids=["10^15", "100 GB", "past 2^64", "400 digits"],
)
async def test_a_content_length_beyond_the_limit_is_answered_and_skipped(wire, length):
    await wire.initialize(wire.workspace)
    wire.write(b"Content-Length: " + length + b"\r\n\r\n" + b'{"jsonrpc":"2.0","id":1,"method":"x"}')
    await _serves(wire)
    (refused,) = wire.errors_with_null_id()
    assert refused["error"]["code"] == -32700
    assert refused["error"]["data"]["authored"] == "Content-Length"
    assert "maxMessageBytes" in refused["error"]["data"]["reason"] or "longer than any" in refused["error"]["data"]["reason"]
    assert wire.process.returncode is None


@pytest.mark.parametrize(
    "header",
    [b"Content-Length: -5", b"Content-Length: ten", b"Content-Length:", b"Content-Type: application/json"],
    ids=["negative", "not a number", "empty", "missing"],
)
async def test_a_frame_without_a_usable_length_is_answered_and_skipped(wire, header):
    await wire.initialize(wire.workspace)
    wire.write(header + b"\r\n\r\n" + b'{"jsonrpc":"2.0","id":1,"method":"x"}')
    await _serves(wire)
    (refused,) = wire.errors_with_null_id()
    assert refused["error"]["data"]["authored"] == "Content-Length"


async def test_header_names_are_read_in_any_case(wire):
    await wire.initialize(wire.workspace)
    body = json.dumps({"jsonrpc": "2.0", "id": "lower", "method": methods.RESOURCE_READ, "params": {"address": "mevedel://"}})
    wire.write(b"content-length: %d\r\ncontent-type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n%s" % (len(body), body.encode()))
    assert "result" in await wire.answer("lower")
    wire.write(b"CONTENT-LENGTH:%d\r\n\r\n%s" % (len(body), body.replace("lower", "upper").encode()))
    assert "result" in await wire.answer("upper")
    assert wire.errors_with_null_id() == []


async def test_headers_ending_in_a_bare_line_feed_are_read(wire):
    await wire.initialize(wire.workspace)
    body = json.dumps({"jsonrpc": "2.0", "id": "lf", "method": methods.RESOURCE_READ, "params": {"address": "mevedel://"}})
    wire.write(b"Content-Length: %d\n\n%s" % (len(body), body.encode()))
    assert "result" in await wire.answer("lf")


async def test_two_different_lengths_are_answered_and_the_next_frame_is_read(wire):
    await wire.initialize(wire.workspace)
    body = json.dumps({"jsonrpc": "2.0", "id": "dup", "method": methods.RESOURCE_READ, "params": {"address": "mevedel://"}})
    wire.write(b"Content-Length: 3\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body.encode()))
    await _serves(wire)
    assert [r["error"]["data"]["authored"] for r in wire.errors_with_null_id()] == ["Content-Length"]
    # The same length twice is one length.
    wire.write(b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s" % (len(body), len(body), body.replace("dup", "two").encode()))
    assert "result" in await wire.answer("two")


async def test_a_length_longer_than_the_message_is_answered_when_the_next_frame_arrives(wire):
    await wire.initialize(wire.workspace)
    body = json.dumps({"jsonrpc": "2.0", "id": "long", "method": methods.SESSION_LIST, "params": {}}).encode()
    wire.write(b"Content-Length: %d\r\n\r\n%s" % (len(body) + 100, body))
    await _serves(wire)
    error = _error(await wire.answer("long"))
    assert error["code"] == -32700
    assert "next frame starts after" in error["data"]["reason"]


async def test_a_length_shorter_than_the_message_is_answered_and_the_rest_skipped(wire):
    await wire.initialize(wire.workspace)
    body = json.dumps({"jsonrpc": "2.0", "id": "short", "method": methods.SESSION_LIST, "params": {}}).encode()
    wire.write(b"Content-Length: %d\r\n\r\n%s" % (len(body) - 10, body))
    error = _error(await wire.answer("short"))
    assert error["code"] == -32700
    await _serves(wire)


async def test_a_frame_that_stops_arriving_is_answered(wire):
    await wire.initialize(wire.workspace)
    body = json.dumps({"jsonrpc": "2.0", "id": "stalled", "method": methods.SESSION_LIST, "params": {}}).encode()
    wire.write(b"Content-Length: %d\r\n\r\n%s" % (len(body) + 10, body))
    error = _error(await wire.answer("stalled", framing.STALLED_FRAME_SECONDS + 30))
    assert "arrived" in error["data"]["reason"]
    await _serves(wire)


async def test_an_endless_header_line_is_skipped(wire):
    await wire.initialize(wire.workspace)
    wire.write(b"X-Junk: " + b"a" * (framing.MAX_HEADER_LINE * 3) + b"\r\n")
    await _serves(wire)
    assert wire.errors_with_null_id()


async def test_a_message_over_the_max_message_bytes_setting_is_refused(tmp_path, wire):
    await wire.initialize(wire.workspace, maxMessageBytes=65536)
    text = "x" * 100_000
    wire.write(frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
        "textDocument": {"uri": (wire.workspace / "big.md").as_uri(), "languageId": "markdown", "version": 1, "text": text}}}))
    await _serves(wire)
    (refused,) = wire.errors_with_null_id()
    assert "65536" in refused["error"]["data"]["reason"]


async def test_binary_garbage_between_frames_is_skipped(wire):
    await wire.initialize(wire.workspace)
    wire.write(bytes(range(256)) * 40)
    await _serves(wire)
    assert wire.process.returncode is None


async def test_an_address_with_a_component_too_long_for_a_file_name_is_malformed(wire):
    await wire.initialize(wire.workspace)
    long = "work://shared/" + "n" * 256
    error = _error(await wire.request(methods.RESOURCE_READ, {"address": long}))
    assert error["data"]["kind"] == "malformed-address"
    assert "at most 255 bytes" in error["data"]["reason"]
    # A document holding one still gets its other links.
    (wire.workspace / ".mevedel" / "shared").mkdir(parents=True)
    (wire.workspace / ".mevedel" / "shared" / "ok.md").write_text("fine\n")
    uri = (wire.workspace / "doc.md").as_uri()
    wire.write(frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "markdown", "version": 1, "text": f"see {long} and work://shared/ok.md\n"}}}))
    links = await wire.request("textDocument/documentLink", {"textDocument": {"uri": uri}})
    assert [link["range"]["start"]["character"] for link in links["result"]] == [4 + len(long) + 5]
