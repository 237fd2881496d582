"""Length-prefixed binary frames for requests to, and answers from, a remote
target program.

Both ends run this source (the SSH target sends it to the remote machine), so
it is standard library only and Python 3.7 compatible.

A value is a tag byte and its payload: ``N`` None, ``T``/``F`` booleans,
``I`` an integer as length-prefixed decimal digits (any size: inode numbers
are unsigned 64-bit), ``B`` length-prefixed bytes, ``S`` a string as the
bytes ``os.fsencode`` gives it (so a name with undecodable bytes survives the
trip unchanged), ``L`` a count followed by that many values. Lengths are
8-byte big-endian. Nothing is escaped, so any byte passes unchanged.

A frame is ``MAGIC_HEAD nonce length body MAGIC_TAIL nonce``. The reader
knows the body's length before reading it, so truncation is detected, and the
tail repeats the nonce, so a frame cut short can never pass for a shorter
whole one. An answer carries the nonce of the request it answers; output that
does not start with the expected head is not an answer.
"""

from __future__ import annotations

import os
import struct

MAGIC_HEAD = b"MEVEDEL\x01"
MAGIC_TAIL = b"MEVEDEL\x02"
NONCE_SIZE = 16
HEAD_SIZE = len(MAGIC_HEAD) + NONCE_SIZE + 8
TAIL_SIZE = len(MAGIC_TAIL) + NONCE_SIZE

_LENGTH = struct.Struct(">Q")


class FrameError(Exception):
    """Bytes that are not a whole, well-formed frame or value."""


# -- values ------------------------------------------------------------------


def encode_value(value, out):
    """Append the encoding of ``value`` to the chunk list ``out``. Payload
    bytes are appended as they are, not copied."""
    if value is None:
        out.append(b"N")
    elif value is True:
        out.append(b"T")
    elif value is False:
        out.append(b"F")
    elif isinstance(value, int):
        digits = str(value).encode("ascii")
        out.append(b"I" + _LENGTH.pack(len(digits)) + digits)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out.append(b"B" + _LENGTH.pack(len(value)))
        out.append(value)
    elif isinstance(value, str):
        raw = os.fsencode(value)
        out.append(b"S" + _LENGTH.pack(len(raw)))
        out.append(raw)
    elif isinstance(value, (list, tuple)):
        out.append(b"L" + _LENGTH.pack(len(value)))
        for item in value:
            encode_value(item, out)
    else:
        raise TypeError("cannot frame a value of type %s" % type(value).__name__)
    return out


class _Cursor:
    def __init__(self, data):
        self.view = memoryview(data)
        self.pos = 0

    def take(self, size):
        end = self.pos + size
        if end > len(self.view):
            raise FrameError("value runs past the end of the frame")
        chunk = self.view[self.pos:end]
        self.pos = end
        return chunk

    def length(self):
        return _LENGTH.unpack(self.take(8))[0]


def _decode(cursor, depth):
    if depth > 16:
        raise FrameError("values nested too deeply")
    tag = bytes(cursor.take(1))
    if tag == b"N":
        return None
    if tag == b"T":
        return True
    if tag == b"F":
        return False
    if tag == b"I":
        digits = bytes(cursor.take(cursor.length()))
        unsigned = digits[1:] if digits[:1] == b"-" else digits
        if not unsigned.isdigit():
            raise FrameError("malformed integer")
        return int(digits)
    if tag == b"B":
        return bytes(cursor.take(cursor.length()))
    if tag == b"S":
        return os.fsdecode(bytes(cursor.take(cursor.length())))
    if tag == b"L":
        count = cursor.length()
        if count > len(cursor.view) - cursor.pos:
            raise FrameError("list longer than the frame")
        return [_decode(cursor, depth + 1) for _ in range(count)]
    raise FrameError("unknown value tag %r" % tag)


def decode_value(data):
    """Decode one value that must occupy all of ``data``."""
    cursor = _Cursor(data)
    value = _decode(cursor, 0)
    if cursor.pos != len(cursor.view):
        raise FrameError("trailing bytes after the value")
    return value


# -- frames ------------------------------------------------------------------


def frame_chunks(nonce, value):
    """The chunks of a frame carrying ``value``, ready to be written in
    order (large payloads are referenced, not copied)."""
    if len(nonce) != NONCE_SIZE:
        raise ValueError("a frame nonce is %d bytes" % NONCE_SIZE)
    body = encode_value(value, [])
    length = sum(len(chunk) for chunk in body)
    return [MAGIC_HEAD + nonce + _LENGTH.pack(length)] + body + [MAGIC_TAIL + nonce]


def parse_head(head, nonce=None):
    """``(nonce, body_length)`` of a frame head; ``nonce`` given: the head
    must carry it."""
    if len(head) != HEAD_SIZE or head[: len(MAGIC_HEAD)] != MAGIC_HEAD:
        raise FrameError("not a frame head")
    found = bytes(head[len(MAGIC_HEAD) : len(MAGIC_HEAD) + NONCE_SIZE])
    if nonce is not None and found != nonce:
        raise FrameError("the frame answers another request")
    return found, _LENGTH.unpack(head[len(MAGIC_HEAD) + NONCE_SIZE :])[0]


def check_tail(tail, nonce):
    if len(tail) != TAIL_SIZE or bytes(tail) != MAGIC_TAIL + nonce:
        raise FrameError("the frame does not end with its tail")


def read_frame(read, nonce=None):
    """Read one frame with ``read(n)`` (a blocking read that returns fewer
    than ``n`` bytes only at end of input); return ``(nonce, value)``."""
    found, length = parse_head(_read_exactly(read, HEAD_SIZE), nonce)
    body = _read_exactly(read, length)
    check_tail(_read_exactly(read, TAIL_SIZE), found)
    return found, decode_value(body)


def _read_exactly(read, size):
    parts = []
    remaining = size
    while remaining:
        chunk = read(min(remaining, 1 << 20))
        if not chunk:
            raise FrameError("input ended %d bytes short of a whole frame" % remaining)
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)
