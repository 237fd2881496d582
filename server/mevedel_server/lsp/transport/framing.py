"""Reading LSP frames (``Content-Length: N`` headers, a blank line, N bytes of
JSON) from bytes nobody vouches for.

Whatever arrives, the server neither dies nor goes deaf: every frame that
cannot be read is reported (the log, and an error response to the client
through ``on_broken``) and reading resynchronises at the next frame header.

- Header names are case-insensitive (``content-length`` is
  ``Content-Length``); a header line may end in CRLF or a bare LF; other
  headers (``Content-Type``) are ignored.
- A frame without a usable length (absent, negative, not a number, longer
  than ``max_bytes`` -- the ``maxMessageBytes`` setting), with two
  different lengths, or with a line that is not a header, is broken: its
  bytes are skipped up to the next ``Content-Length:`` header. Identical
  duplicate lengths are accepted (logged).
- A declared length that runs past the message into the next frame's header
  is caught there: no valid JSON text can hold a ``Content-Length: N``
  line, since JSON strings cannot hold a raw line break. The bytes before
  that header are the broken message (its request ``id``, when it can be
  recovered, gets the error), and the next frame is read from its header.
  A length longer than what arrives, with nothing more for
  ``STALLED_FRAME_SECONDS``, is broken the same way: the client is waiting
  for an answer, so it gets one.
- A length shorter than the message leaves a body that is not JSON: it is
  broken, and the rest of the message is skipped up to the next header.
- A header line longer than ``MAX_HEADER_LINE`` or a header block of more
  than ``MAX_HEADER_LINES`` lines is broken (and skipped).

Memory is bounded by ``max_bytes`` plus a chunk: skipped bytes are never
kept, a body is read only up to its declared length.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

_log = logging.getLogger(__name__)

#: The default of the ``maxMessageBytes`` setting: the longest message body read.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: A header line longer than this is not a header.
MAX_HEADER_LINE = 8 * 1024
#: A header block with more lines than this is not one.
MAX_HEADER_LINES = 32
#: A frame whose body stops arriving for this long is broken (its client waits for an answer).
STALLED_FRAME_SECONDS = 5.0
#: One more wait after a stall, for bytes a busy loop has not read yet.
_STALL_GRACE_SECONDS = 0.5
_CHUNK = 64 * 1024

#: Where a frame can start: what resynchronisation looks for.
_HEADER_START = re.compile(rb"content-length[ \t]*:", re.I)
#: A whole length header line: no JSON text can contain one (a JSON string
#: cannot hold a raw line break, and outside strings the name is not JSON).
_HEADER_LINE = re.compile(rb"content-length[ \t]*:[ \t]*[0-9]+[ \t]*\r?\n", re.I)
_HEADER_LINE_LONGEST = 24  # bytes of _HEADER_LINE before its digits, rounded up
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")


class ByteSource(Protocol):
    """Where frames come from: ``read`` returns what arrived (at most ``n``
    bytes), ``b""`` at the end of input."""

    def read(self, n: int = -1) -> Awaitable[bytes]: ...


@dataclass(frozen=True)
class BrokenFrame:
    """A frame that could not be read, for the log and the client."""

    #: Which part: ``Content-Length`` or another header name, ``header``, ``body``.
    part: str
    reason: str
    #: The broken message's bytes when they were read (to recover its ``id``).
    body: bytes | None = None


class FrameReader:
    """Yields message bodies (bytes) from ``source``; calls ``on_broken`` for
    every frame it has to skip."""

    def __init__(
        self,
        source: ByteSource,
        *,
        max_bytes: Callable[[], int] = lambda: DEFAULT_MAX_MESSAGE_BYTES,
        on_broken: Callable[[BrokenFrame], None] = lambda _broken: None,
        stall_seconds: float = STALLED_FRAME_SECONDS,
    ) -> None:
        self._source = source
        self._max_bytes = max_bytes
        self._on_broken = on_broken
        self._stall = stall_seconds
        self._buffer = bytearray()
        self._eof = False
        #: Skip bytes up to the next frame header before reading one.
        self._skipping = False
        self.broken_count = 0

    # Input ---------------------------------------------------------------------

    async def _fill(self, timeout: float | None = None) -> bool:
        """Read more into the buffer; False at the end of input (or when
        ``timeout`` passed with nothing new)."""
        if self._eof:
            return False
        try:
            chunk = await (asyncio.wait_for(self._source.read(_CHUNK), timeout) if timeout else self._source.read(_CHUNK))
        except TimeoutError:
            return False
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    def _broken(self, part: str, reason: str, body: bytes | None = None) -> None:
        self.broken_count += 1
        _log.warning("skipping a broken frame: %s: %s", part, reason)
        try:
            self._on_broken(BrokenFrame(part, reason, body))
        except Exception:
            _log.exception("reporting a broken frame")

    # Frames ----------------------------------------------------------------------

    async def next_body(self) -> bytes | None:
        """The next frame's body, or None at the end of input."""
        while True:
            if self._skipping and not await self._skip():
                return None
            length = await self._headers()
            if length is None:
                if self._eof and not self._skipping:
                    return None
                continue
            body = await self._body(length)
            if body is not None:
                return body
            if self._eof and not self._buffer:
                return None

    async def _skip(self) -> bool:
        """Drop bytes up to the next ``Content-Length:``; False at the end of input."""
        while True:
            found = _HEADER_START.search(self._buffer)
            if found is not None:
                del self._buffer[: found.start()]
                self._skipping = False
                return True
            # Keep a tail that could be the start of a header split across reads.
            del self._buffer[: max(0, len(self._buffer) - _HEADER_LINE_LONGEST)]
            if not await self._fill():
                self._buffer.clear()
                return False

    async def _line(self) -> bytes | None:
        """The next header line without its line ending; None at the end of
        input or when the line is too long (then reported, and skipping)."""
        searched = 0
        while True:
            end = self._buffer.find(b"\n", searched)
            if end >= 0:
                if end > MAX_HEADER_LINE:
                    self._broken("header", f"a header line is longer than {MAX_HEADER_LINE} bytes")
                    self._resume_after(1)
                    return None
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                return line[:-1] if line.endswith(b"\r") else line
            searched = len(self._buffer)
            if searched > MAX_HEADER_LINE:
                self._broken("header", f"a header line is longer than {MAX_HEADER_LINE} bytes")
                self._resume_after(1)
                return None
            if not await self._fill():
                if self._buffer.strip():
                    self._broken("header", "the input ended inside a frame header")
                self._buffer.clear()
                return None

    def _resume_after(self, offset: int) -> None:
        """Skip from ``offset`` bytes into the buffer to the next frame header."""
        del self._buffer[:offset]
        self._skipping = True

    async def _headers(self) -> int | None:
        """Read one header block; its body length, or None when it was broken
        (reported; skipping or restarting as needed) or the input ended."""
        length: int | None = None
        lines = 0
        while True:
            line = await self._line()
            if line is None:
                return None
            lines += 1
            if not line.strip():
                if lines == 1:
                    lines = 0  # a stray blank line between frames
                    continue
                if length is None:
                    self._broken("Content-Length", "the frame has no Content-Length header")
                    self._skipping = True
                    return None
                return length
            if lines > MAX_HEADER_LINES:
                self._broken("header", f"the frame has more than {MAX_HEADER_LINES} header lines")
                self._skipping = True
                return None
            # A frame header in the middle of a line: what came before it is
            # debris of a broken frame, and a new frame starts here.
            inner = _HEADER_LINE.search(line + b"\n", 1)
            if inner is not None:
                self._broken("header", "a frame header starts in the middle of a line")
                self._buffer[:0] = line[inner.start() :] + b"\n"
                return None
            name, colon, value = line.partition(b":")
            name = name.strip()
            if not colon or not _TOKEN.match(name):
                self._broken("header", f"not a header line: {_show(line)}")
                self._buffer[:0] = line[1:] + b"\n"
                self._skipping = True
                return None
            if name.lower() != b"content-length":
                continue
            parsed = _length(value)
            if isinstance(parsed, str):
                self._broken("Content-Length", parsed)
                self._skipping = True
                return None
            if length is not None and parsed != length:
                # Two lengths: the earlier header was a frame that never
                # ended; this one may start the next frame.
                self._broken("Content-Length", f"the frame has two different lengths ({length} and {parsed})")
                self._buffer[:0] = line + b"\n"
                return None
            if length is not None:
                _log.warning("a frame repeats its Content-Length header (%s)", parsed)
            limit = self._max_bytes()
            if parsed > limit:
                self._broken(
                    "Content-Length",
                    f"{parsed} bytes is longer than the longest message this server reads "
                    f"({limit} bytes, the maxMessageBytes setting)",
                )
                self._skipping = True
                return None
            length = parsed

    async def _body(self, length: int) -> bytes | None:
        """``length`` bytes, or None when the frame was broken (reported)."""
        checked = 0
        while len(self._buffer) < length:
            # A frame header inside the body: the length ran past the message.
            if self._header_in_body(length, checked):
                return None
            checked = max(0, len(self._buffer) - _HEADER_LINE_LONGEST - 40)
            if await self._fill(self._stall):
                continue
            # A loop busy for the whole wait has not read what came meanwhile.
            if not self._eof and await self._fill(_STALL_GRACE_SECONDS):
                continue
            body = bytes(self._buffer)
            self._buffer.clear()
            if self._eof:
                if body.strip():
                    self._broken("body", f"the input ended {length - len(body)} bytes short of the declared length")
                return None
            self._broken(
                "Content-Length",
                f"the declared length is {length} bytes but only {len(body)} arrived "
                f"(nothing more for {self._stall:g} seconds)",
                body,
            )
            return None
        if self._header_in_body(length, checked):
            return None
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        return body

    def _header_in_body(self, length: int, start: int) -> bool:
        found = _HEADER_LINE.search(self._buffer, start, length + _HEADER_LINE_LONGEST + 40)
        if found is None or found.start() >= length:
            return False
        body = bytes(self._buffer[: found.start()])
        del self._buffer[: found.start()]
        self._broken(
            "Content-Length",
            f"the declared length is {length} bytes but the next frame starts after {len(body)}",
            body,
        )
        return True

    def reject(self, body: bytes) -> None:
        """``body`` (the last one returned) is not a message: its frame's
        length was wrong or its content is not JSON. Whatever follows its
        first byte, the rest of the message included, is skipped up to the
        next frame header (which may lie inside ``body``)."""
        self._buffer[:0] = body[1:]
        self._skipping = True


def _length(value: bytes) -> int | str:
    text = value.strip()
    if not text.isdigit() or not text.isascii():
        return f"not a length: {_show(text)}"
    if len(text) > 20:
        return f"{_show(text)} bytes is longer than any message"
    return int(text)


def _show(raw: bytes, limit: int = 40) -> str:
    shown = raw[:limit].decode("utf-8", "backslashreplace")
    return repr(shown + ("..." if len(raw) > limit else ""))


# Decoding -------------------------------------------------------------------------


class NotJson(ValueError):
    """A body that is not one UTF-8 JSON value."""


def _refuse_constant(name: str) -> Any:
    raise NotJson(f"holds {name}, which is not JSON")


def decode_body(body: bytes) -> Any:
    """The JSON value ``body`` holds (strict UTF-8, no NaN or Infinity)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NotJson(f"is not UTF-8 text (byte {error.start})") from None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise NotJson("is nested too deeply") from None
    except json.JSONDecodeError as error:
        raise NotJson(f"is not JSON: {error.msg} at character {error.pos}") from None


def recover_id(body: bytes | None) -> int | str | None:
    """The ``id`` of a broken message, when its start still decodes to an
    object with a usable one."""
    if not body:
        return None
    text = body.decode("utf-8", "replace").lstrip()
    try:
        value, _end = json.JSONDecoder(parse_constant=_refuse_constant).raw_decode(text)
    except (ValueError, RecursionError, NotJson):
        match = re.search(r'"id"\s*:\s*(-?[0-9]{1,15}(?![0-9.eE])|"(?:[^"\\\x00-\x1f]|\\.){0,200}")', text)
        if match is None:
            return None
        try:
            value = {"id": json.loads(match.group(1))}
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    msg_id = value.get("id")
    if isinstance(msg_id, bool) or not isinstance(msg_id, (int, str)):
        return None
    if isinstance(msg_id, str) and _has_lone_surrogate(msg_id):
        return None
    return msg_id


_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_lone_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None
