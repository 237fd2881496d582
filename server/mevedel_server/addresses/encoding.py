"""Canonical component encoding: UTF-8 RFC 3986 percent-encoding.

Only the unreserved bytes (``A-Z a-z 0-9 - . _ ~``) stay literal; every other
byte becomes an uppercase ``%XX`` escape. Decoding accepts any byte spelled
literally or escaped, in either hex case, and rejects what would make two
spellings name different things or smuggle structure into a component:
malformed escapes, invalid UTF-8, a decoded ``/`` separator (for components
that are path segments), and control characters (C0, DEL, C1).
"""

from __future__ import annotations

import re

from .model import AddressError, ErrorKind

_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

#: byte value -> its canonical spelling, built once.
_BYTE_SPELLING: tuple[str, ...] = tuple(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in range(256))

#: str.translate table for ASCII text: each character to its canonical spelling.
_ASCII_SPELLING = {b: _BYTE_SPELLING[b] for b in range(128)}
_ALL_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*").fullmatch
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]").search
#: two hex digits (either case) -> the byte they escape, for every pair.
_ESCAPED: dict[bytes, bytes] = {
    f"{high}{low}".encode(): bytes([int(high + low, 16)])
    for high in "0123456789abcdefABCDEF"
    for low in "0123456789abcdefABCDEF"
}


def encode_component(text: str) -> str:
    """The canonical spelling of one decoded component.

    A lone surrogate (a non-UTF-8 filename as Python's ``os`` functions
    report it) is spelled by its original byte, so listing such a file never
    crashes; the resulting address is then refused by ``decode_component`` as
    invalid UTF-8, which is the truth about that name.
    """
    if _ALL_UNRESERVED(text):
        return text
    if text.isascii():
        return text.translate(_ASCII_SPELLING)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            data = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            data = text.encode("utf-8", "surrogatepass")
    spelling = _BYTE_SPELLING
    return "".join([spelling[b] for b in data])


def encode_fragment(text: str) -> str:
    """Canonical spelling of a decoded JSON-pointer fragment: the component
    encoding with ``/`` kept literal, because ``/`` is the pointer's own token
    separator and RFC 3986 allows it literally in a fragment."""
    return "/".join([encode_component(part) for part in text.split("/")])


def _describe(raw: str, index: int | None) -> str:
    return f"component {index} {raw!r}" if index is not None else f"component {raw!r}"


def _first_bad_escape(raw: str) -> str:
    for piece in raw.split("%")[1:]:
        if piece[:2].encode("utf-8", "surrogatepass") not in _ESCAPED:
            return "%" + piece[:2]
    return "%"


def decode_component(raw: str, authored: str, *, index: int | None = None, separators: bool = False) -> str:
    """Decode one component exactly once.

    ``index`` (1-based) only improves the error reason; ``separators=True`` is
    for opaque components that legitimately carry ``/`` (an MCP native URI, a
    JSON pointer). Raises ``AddressError(MALFORMED_ADDRESS)`` naming the
    component and the reason.
    """
    if "%" not in raw:
        text = raw
        if not separators and "/" in text:
            raise AddressError(ErrorKind.MALFORMED_ADDRESS, authored, f"{_describe(raw, index)} contains a '/' separator")
        if not text.isascii():
            try:
                # A literal lone surrogate cannot be spelled in UTF-8 at all.
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise AddressError(
                    ErrorKind.MALFORMED_ADDRESS, authored, f"{_describe(raw, index)} is not valid Unicode text"
                ) from None
    else:
        try:
            pieces = raw.encode("utf-8").split(b"%")
        except UnicodeEncodeError:
            raise AddressError(
                ErrorKind.MALFORMED_ADDRESS, authored, f"{_describe(raw, index)} is not valid Unicode text"
            ) from None
        out = [pieces[0]]
        for piece in pieces[1:]:
            byte = _ESCAPED.get(piece[:2])
            if byte is None:
                bad = _first_bad_escape(raw)
                raise AddressError(
                    ErrorKind.MALFORMED_ADDRESS,
                    authored,
                    f"{_describe(raw, index)} has a malformed percent escape {bad!r} (expected % and two hex digits)",
                )
            out.append(byte)
            out.append(piece[2:])
        try:
            text = b"".join(out).decode("utf-8")
        except UnicodeDecodeError:
            raise AddressError(
                ErrorKind.MALFORMED_ADDRESS, authored, f"{_describe(raw, index)} does not decode as UTF-8"
            ) from None
        if not separators and "/" in text:
            raise AddressError(
                ErrorKind.MALFORMED_ADDRESS, authored, f"{_describe(raw, index)} decodes to a '/' separator"
            )
    control = _CONTROL(text)
    if control is not None:
        raise AddressError(
            ErrorKind.MALFORMED_ADDRESS,
            authored,
            f"{_describe(raw, index)} contains the control character U+{ord(control.group()):04X}",
        )
    return text
