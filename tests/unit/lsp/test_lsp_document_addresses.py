"""Finding the token to complete and the address under the cursor, with
ranges in the client's UTF-16 units."""

import pytest
from lsprotocol import types
from pygls.workspace import TextDocument

from mevedel_server.lsp.document_addresses import (
    address_at_position,
    classified_spans,
    token_before,
)


def _document(text: str) -> TextDocument:
    return TextDocument("file:///doc.md", text)


def _token(text: str) -> str | None:
    line = text.count("\n")
    character = len(text.split("\n")[-1])
    found = token_before(_document(text), types.Position(line=line, character=character))
    return None if found is None else found.text


@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("", ""),
        ("see ", ""),
        ("see w", "w"),
        ("see work:", "work:"),
        ("see work:/", "work:/"),
        ("[x](work://shared/dr", "work://shared/dr"),
        ("label:work://sh", "work://sh"),
        ("`skill://name@", "skill://name@"),
        ("either and/", None),
        ("a/b work", "work"),
        ("1work://x", "work://x"),
    ],
)
def test_token_before(text, token):
    assert _token(text) == token


def test_ranges_count_utf16_units():
    text = "😀 work://shared/a"
    document = _document(text)
    token = token_before(document, types.Position(line=0, character=len(text) + 1))
    assert token.text == "work://shared/a"
    assert token.range.start == types.Position(line=0, character=3)  # 😀 is two UTF-16 units
    span = address_at_position(document, types.Position(line=0, character=5))
    assert span.text == "work://shared/a" and span.range.end.character == 3 + len("work://shared/a")


def test_unknown_schemes_setting():
    document = _document("https://x.org wrok://y work://%zz")
    kinds = lambda mode: [getattr(r, "kind", None) and r.kind.value for _s, r in classified_spans(document, mode)]  # noqa: E731
    assert kinds("near-miss") == ["unknown-scheme", "malformed-address"]
    assert kinds("all") == ["unknown-scheme", "unknown-scheme", "malformed-address"]
    assert kinds("off") == ["malformed-address"]
