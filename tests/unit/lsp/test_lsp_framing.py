"""The frame reader and the envelope checks, without a process: which
frames are read, which are reported broken, where reading resumes, and that
an unexpected exception in a handler reaches the client as ``internal``
without its traceback."""

from __future__ import annotations

import asyncio
import json

import pytest

from mevedel_server.lsp import FEATURES, build_server
from mevedel_server.lsp.transport import framing
from mevedel_server.lsp.transport.framing import BrokenFrame, FrameReader, recover_id


class Chunks:
    """A byte source handing out the given chunks, then the end of input."""

    def __init__(self, *chunks: bytes, hold: bool = False) -> None:
        self._chunks = list(chunks)
        self._hold = hold

    async def read(self, n: int = -1) -> bytes:
        if self._chunks:
            return self._chunks.pop(0)
        if self._hold:  # a client that sends nothing more but stays connected
            await asyncio.Event().wait()
        return b""


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def read_all(*chunks: bytes, max_bytes: int = 1000, stall: float = 5.0, hold: bool = False):
    broken: list[BrokenFrame] = []
    reader = FrameReader(Chunks(*chunks, hold=hold), max_bytes=lambda: max_bytes, on_broken=broken.append, stall_seconds=stall)
    bodies = []
    while (body := await reader.next_body()) is not None:
        try:
            framing.decode_body(body)
        except framing.NotJson:
            reader.reject(body)
            broken.append(BrokenFrame("message body", "not JSON", body))
            continue
        bodies.append(body)
    return bodies, broken


GOOD = b'{"jsonrpc":"2.0","id":1,"method":"a"}'
NEXT = b'{"jsonrpc":"2.0","id":2,"method":"b"}'


async def test_frames_split_anywhere_are_read_whole():
    data = frame(GOOD) + frame(NEXT)
    for cut in range(1, len(data)):
        bodies, broken = await read_all(data[:cut], data[cut:])
        assert bodies == [GOOD, NEXT] and broken == [], cut


async def test_one_byte_at_a_time_is_read_whole():
    data = frame(GOOD) + frame(NEXT)
    bodies, broken = await read_all(*(data[i : i + 1] for i in range(len(data))))
    assert bodies == [GOOD, NEXT] and broken == []


@pytest.mark.parametrize(
    "header",
    [b"Content-Length: 10000", b"Content-Length: -1", b"Content-Length: x", b"Content-Length: " + b"9" * 30,
     b"Content-Type: text/plain", b"garbage line", b"Content-Length: 3\r\nContent-Length: 4"],
)
async def test_a_broken_header_is_reported_and_the_next_frame_read(header):
    bodies, broken = await read_all(header + b"\r\n\r\n" + GOOD + frame(NEXT))
    assert bodies == [NEXT]
    assert broken


async def test_a_length_past_the_message_ends_where_the_next_frame_starts():
    bodies, broken = await read_all(b"Content-Length: 500\r\n\r\n" + GOOD + frame(NEXT))
    assert bodies == [NEXT]
    assert [b.body for b in broken] == [GOOD]
    assert recover_id(broken[0].body) == 1


async def test_a_length_short_of_the_message_is_rejected_and_the_rest_skipped():
    bodies, broken = await read_all(b"Content-Length: 30\r\n\r\n" + GOOD + frame(NEXT))
    assert bodies == [NEXT]
    assert recover_id(broken[0].body) == 1


async def test_a_frame_that_stops_arriving_is_broken_after_the_stall_time():
    reader_broken: list[BrokenFrame] = []

    class Slow(Chunks):
        async def read(self, n: int = -1) -> bytes:
            if len(self._chunks) == 1:
                await asyncio.sleep(1.0)
            return await super().read(n)

    reader = FrameReader(Slow(b"Content-Length: 500\r\n\r\n" + GOOD, frame(NEXT)), on_broken=reader_broken.append, stall_seconds=0.05)
    body = await reader.next_body()
    assert body == NEXT
    assert "only" in reader_broken[0].reason and reader_broken[0].body == GOOD


async def test_header_names_in_any_case_and_bare_line_feeds_are_read():
    data = b"content-length: %d\ncontent-TYPE: x\n\n%s" % (len(GOOD), GOOD)
    bodies, broken = await read_all(data)
    assert bodies == [GOOD] and broken == []


async def test_a_header_in_the_middle_of_a_line_starts_a_frame():
    bodies, broken = await read_all(b"junkContent-Length: %d\r\n\r\n%s" % (len(GOOD), GOOD))
    assert bodies == [GOOD]
    assert len(broken) == 1


async def test_skipped_bytes_are_not_kept():
    reader = FrameReader(Chunks(b"Content-Length: 99999\r\n\r\n", *(b"x" * 65536 for _ in range(50)), frame(GOOD)),
                         max_bytes=lambda: 1000)
    assert await reader.next_body() == GOOD
    assert len(reader._buffer) == 0


async def test_a_long_header_line_is_broken():
    bodies, broken = await read_all(b"X: " + b"a" * (framing.MAX_HEADER_LINE + 10) + b"\r\n" + frame(GOOD))
    assert bodies == [GOOD]
    assert "longer than" in broken[0].reason


def test_recover_id_takes_a_usable_id_only():
    assert recover_id(b'{"id": "abc", "method": 5}') == "abc"
    assert recover_id(b'{"jsonrpc":"2.0","id":7,"method":"x","params":{') == 7
    assert recover_id(b'{"id": {"a": 1}}') is None
    assert recover_id(b'{"id": true}') is None
    assert recover_id(b"[1]") is None
    assert recover_id(None) is None


# The protocol, without a process ---------------------------------------------------------


class Capture:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    def messages(self) -> list[dict]:
        out, rest = [], self.data
        while rest:
            head, _, rest = rest.partition(b"\r\n\r\n")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            out.append(json.loads(rest[:length]))
            rest = rest[length:]
        return out


async def test_an_unexpected_exception_is_answered_as_internal_without_a_traceback():
    ls = build_server(FEATURES)
    capture = Capture()
    ls.protocol.set_writer(capture)

    @ls.feature("mevedel/test/explode")
    async def explode(ls, params):
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed at /secret/path")

    ls.protocol._phase = type(ls.protocol._phase).INITIALIZED
    ls.protocol.receive(b'{"jsonrpc":"2.0","id":9,"method":"mevedel/test/explode","params":{}}')
    for _ in range(20):
        await asyncio.sleep(0.01)
        if capture.data:
            break
    (reply,) = capture.messages()
    assert reply["id"] == 9
    assert reply["error"]["code"] == -32603
    assert reply["error"]["data"]["kind"] == "internal"
    text = json.dumps(reply)
    assert "traceback" not in text.lower() and "/secret/path" not in text and "UnicodeEncodeError" not in text
