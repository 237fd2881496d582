"""Addresses in an open document, with LSP ranges.

The address grammar's scanner works on Python ``str`` offsets; this module
scans one line at a time (an address never crosses whitespace, so never a
line break) and converts columns to the client's position encoding.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from lsprotocol import types
from pygls.workspace import TextDocument
from pygls.workspace.position_codec import ServerTextPosition

from ..addresses import (
    Address,
    AddressError,
    AddressSpan,
    ErrorKind,
    address_at,
    classify_span,
    find_address_spans,
)


@dataclass(frozen=True, slots=True)
class DocumentSpan:
    text: str
    range: types.Range


def _lines(document: TextDocument) -> tuple[str, ...]:
    return tuple(document.lines)


def _content(line: str) -> str:
    return line.rstrip("\r\n")


def _range(document: TextDocument, lines: tuple[str, ...], number: int, start: int, end: int) -> types.Range:
    codec = document.position_codec
    return types.Range(
        start=codec.position_to_client_units(lines, ServerTextPosition(number, start)),
        end=codec.position_to_client_units(lines, ServerTextPosition(number, end)),
    )


def classify(span_text: str, unknown_schemes: str) -> Address | AddressError | None:
    """What a token is under the ``diagnostics.unknownSchemes`` setting:
    ``None`` for text that is not (or not reported as) an address."""
    result = classify_span(AddressSpan(0, len(span_text), span_text), strict=unknown_schemes == "all")
    if unknown_schemes == "off" and isinstance(result, AddressError) and result.kind is ErrorKind.UNKNOWN_SCHEME:
        return None
    return result


def _spans(document: TextDocument) -> Iterator[tuple[DocumentSpan, str]]:
    lines = _lines(document)
    for number, line in enumerate(lines):
        content = _content(line)
        if "://" not in content:
            continue
        for span in find_address_spans(content):
            yield DocumentSpan(span.text, _range(document, lines, number, span.start, span.end)), span.text


def classified_spans(
    document: TextDocument, unknown_schemes: str
) -> Iterator[tuple[DocumentSpan, Address | AddressError]]:
    for span, text in _spans(document):
        result = classify(text, unknown_schemes)
        if result is not None:
            yield span, result


def address_at_position(document: TextDocument, position: types.Position) -> DocumentSpan | None:
    """The ``scheme://`` token under (or just before) the cursor."""
    lines = _lines(document)
    if position.line >= len(lines):
        return None
    server = document.position_codec.position_from_client_units(lines, position)
    content = _content(lines[server.line])
    span = address_at(content, min(server.character, len(content)))
    if span is None:
        return None
    return DocumentSpan(span.text, _range(document, lines, server.line, span.start, span.end))


# Characters that end a token when walking back from the cursor: whitespace,
# the scanner's stop characters, and brackets (``[text](work://...``).
_TOKEN_STOP = re.compile(r"[\s<>\"'`()\[\]]")
_SCHEME_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*(?::/?)?")
_SCHEME_CHARS = re.compile(r"[A-Za-z0-9+.-]")


def token_before(document: TextDocument, position: types.Position) -> DocumentSpan | None:
    """The address-like text ending at the cursor, for completion: a partial
    scheme (``wo``, ``work:``), or ``scheme://`` and what follows it. Other
    text (``and/or``) is not a token."""
    lines = _lines(document)
    if position.line >= len(lines):  # the empty last line of a document
        return DocumentSpan("", types.Range(start=position, end=position))
    server = document.position_codec.position_from_client_units(lines, position)
    content = _content(lines[server.line])
    column = min(server.character, len(content))
    start = column
    while start > 0 and not _TOKEN_STOP.match(content[start - 1]):
        start -= 1
    run = content[start:column]
    marker = run.find("://")
    if marker >= 0:
        head = marker
        while head > 0 and _SCHEME_CHARS.match(run[head - 1]):
            head -= 1
        while head < marker and not run[head].isalpha():
            head += 1
        if head == marker:
            return None
        start += head
    elif run and not _SCHEME_PREFIX.fullmatch(run):
        return None
    return DocumentSpan(content[start:column], _range(document, lines, server.line, start, column))
