"""Thousands of generated malformed inputs against one real ``mevedel-lsp``
process: broken frames (lengths, header names and line ends, garbage), JSON
that is not a message, envelopes with the wrong types, lone surrogates, and
real methods with random params. After each input a well-formed request
must be answered (no hang), the process must be alive (no death), and no
byte the server ever sent may hold a traceback.

The counts are printed (``-s``) and checked at the end of the module."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mevedel_protocol import REQUESTS

from .raw_client import RawClient, frame

#: Examples per generated family (six families).
EXAMPLES = int(os.environ.get("MEVEDEL_WIRE_FUZZ_EXAMPLES", "600"))
#: A probe not answered within this long is a hang.
HANG_SECONDS = 30.0

PROBE = {"address": "mevedel://"}
TALLY: Counter[str] = Counter()

# One server for the module: its client lives on the module's event loop.
pytestmark = pytest.mark.asyncio(loop_scope="module")


async def probe(server: RawClient) -> dict[str, Any]:
    """The answer to a well-formed request, which must come (no hang, no death)."""
    try:
        return await asyncio.wait_for(server.request("mevedel/resource/read", PROBE), HANG_SECONDS)
    except TimeoutError:
        raise AssertionError(f"hang: no answer to mevedel/resource/read within {HANG_SECONDS} s") from None
    except ConnectionError:
        raise AssertionError(f"death: the server closed its output (status {server.process.returncode})") from None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    workspace = root / "project"
    (workspace / ".mevedel" / "shared").mkdir(parents=True)
    (workspace / ".mevedel" / "shared" / "notes.md").write_text("# notes\n")
    running = await RawClient.start(root / "server.log")
    await running.initialize(workspace)
    yield running
    status, stderr = await running.stop()
    print(f"\nwire fuzz: {sum(TALLY.values())} malformed inputs ({dict(TALLY)}), "
          f"0 deaths, 0 hangs, {running.tracebacks} tracebacks to the client; exit status {status}")
    assert status == 0
    assert running.tracebacks == 0
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")


async def survive(server: RawClient, data: bytes, family: str) -> None:
    """Send ``data``, then the server must answer; a second probe must succeed."""
    if not data:
        return
    server.write(data)
    TALLY[family] += 1
    await probe(server)  # answered, whatever it says
    reply = await probe(server)
    assert reply.get("result", {}).get("kind") == "listing", reply
    assert server.process.returncode is None, "death"
    assert server.tracebacks == 0, "a traceback reached the client"


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Strategies ----------------------------------------------------------------------

_json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
)
json_values = st.recursive(_json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)

_SURROGATE_ESCAPES = [b"\\ud800", b"\\udfff", b"\\uDC00", b"\\ud83d", b"\\ude00x"]


def _with_surrogate(text: bytes, escape: bytes) -> bytes:
    """Put a lone surrogate escape into the first string of ``text``."""
    at = text.find(b'"')
    return text if at < 0 else text[: at + 1] + escape + text[at + 1 :]


_line_ends = st.sampled_from([b"\r\n", b"\n", b"\r", b"\r\r\n", b""])
_length_names = st.sampled_from([b"Content-Length", b"content-length", b"CONTENT-LENGTH", b"Content-length",
                                 b"Content-Length ", b"Content_Length", b"Content-Lengt", b" Content-Length"])
_length_values = st.one_of(
    st.integers(min_value=-10, max_value=400).map(lambda n: str(n).encode()),
    st.sampled_from([b"", b"ten", b"1e3", b"0x10", b"+5", b"5.0", b"1000000000000000", b"100000000000",
                     b"18446744073709551617", b"9" * 300, b" 12 ", b"\xff"]),
)


@st.composite
def header_blocks(draw) -> bytes:
    lines = []
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        kind = draw(st.integers(min_value=0, max_value=3))
        if kind <= 1:
            lines.append(draw(_length_names) + b":" + draw(st.sampled_from([b"", b" ", b"\t"])) + draw(_length_values))
        elif kind == 2:
            lines.append(draw(st.sampled_from([b"Content-Type: application/vscode-jsonrpc; charset=utf-8",
                                               b"X-Thing: 1", b"no colon here", b": empty name", b"a" * 9000])))
        else:
            lines.append(draw(st.binary(max_size=30)))
        lines.append(draw(_line_ends))
    lines.append(draw(_line_ends))
    body = draw(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())))
    return b"".join(lines) + body


@st.composite
def wrong_lengths(draw) -> bytes:
    message = {"jsonrpc": "2.0", "id": draw(st.integers(0, 10**6)), "method": draw(st.sampled_from(sorted(REQUESTS))),
               "params": draw(json_values)}
    body = json.dumps(message).encode()
    declared = max(0, len(body) + draw(st.integers(min_value=-len(body), max_value=300)))
    return b"Content-Length: %d\r\n\r\n" % declared + body


_envelope_values = st.one_of(json_values, st.just("2.0"), st.sampled_from(["initialize", "shutdown",
                             "textDocument/hover", "mevedel/session/list", "$/cancelRequest", "mevedel/turn/prompt"]))


@st.composite
def envelopes(draw) -> bytes:
    message: dict[str, Any] = {}
    for key in ("jsonrpc", "id", "method", "params", "result", "error"):
        if draw(st.booleans()):
            message[key] = draw(_envelope_values)
    if message.get("method") in ("shutdown", "exit"):
        message["method"] = "shutdownx"
    if draw(st.booleans()):
        message[draw(st.text(max_size=6))] = draw(json_values)
    body = json.dumps(message).encode()
    if draw(st.integers(0, 3)) == 0:
        body = _with_surrogate(body, draw(st.sampled_from(_SURROGATE_ESCAPES)))
    return frame(body)


_NOT_THESE = {"shutdown", "exit"}
_METHODS = sorted(set(REQUESTS) | {
    "textDocument/didOpen", "textDocument/didChange", "textDocument/didClose", "textDocument/hover",
    "textDocument/completion", "textDocument/definition", "textDocument/documentLink", "workspace/didChangeConfiguration",
    "workspace/didChangeWorkspaceFolders", "workspace/executeCommand", "$/cancelRequest", "$/setTrace", "initialized",
    "mevedel/unknown",
} - _NOT_THESE)


@st.composite
def method_calls(draw) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": draw(st.sampled_from(_METHODS)), "params": draw(json_values)}
    if draw(st.booleans()):
        message["id"] = draw(st.one_of(st.integers(0, 10**9), st.text(max_size=8)))
    if message["method"] == "workspace/didChangeConfiguration" and isinstance(message["params"], dict):
        message["params"].pop("settings", None)  # keep maxMessageBytes and the watch settings as they are
    body = json.dumps(message).encode()
    if draw(st.integers(0, 4)) == 0:
        body = _with_surrogate(body, draw(st.sampled_from(_SURROGATE_ESCAPES)))
    return frame(body)


@st.composite
def not_json(draw) -> bytes:
    body = draw(st.one_of(
        st.binary(max_size=120),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.sampled_from([b"{", b"[" * 3000 + b"]" * 3000, b'{"a": NaN}', b'{"a": Infinity}', b"\xef\xbb\xbf{}",
                         b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":"\xc3"}}', b"", b" ", b"nul"]),
    ))
    return frame(body)


# Tests -----------------------------------------------------------------------------

#: Each family of malformed input, by the name the tally counts it under.
FAMILIES = {
    "random bytes": st.binary(min_size=1, max_size=600),
    "frame headers": header_blocks(),
    "wrong lengths": wrong_lengths(),
    "not JSON": not_json(),
    "envelopes": envelopes(),
    "random params": method_calls(),
}


@pytest.mark.parametrize("family", list(FAMILIES))
@FUZZ
@given(inputs=st.data())
async def test_malformed_input_never_kills_or_deafens_the_server(server, family, inputs):
    await survive(server, inputs.draw(FAMILIES[family], label=family), family)
