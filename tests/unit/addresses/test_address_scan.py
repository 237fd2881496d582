"""Finding addresses in documents: spans, classification, hover lookup."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mevedel_server.addresses import (
    PUBLIC_SCHEMES,
    SCHEMES,
    Address,
    AddressError,
    AddressSpan,
    ErrorKind,
    address_at,
    classify_span,
    find_address_spans,
    find_addresses,
    is_near_miss,
)


def texts(document: str) -> list[str]:
    return [span.text for span in find_address_spans(document)]


def test_spans_carry_offsets_into_the_document():
    document = "See work://notes.md and memory://root."
    spans = find_address_spans(document)
    assert spans == [AddressSpan(4, 19, "work://notes.md"), AddressSpan(24, 37, "memory://root")]
    for span in spans:
        assert document[span.start : span.end] == span.text


@pytest.mark.parametrize(
    ("document", "found"),
    [
        ("[plan](work://plans/p.md) done", ["work://plans/p.md"]),
        ("(see work://a(b).md)", ["work://a(b).md"]),
        ("list [work://x] now", ["work://x"]),
        ("`artifact://executions/1.log`", ["artifact://executions/1.log"]),
        ('"mcp://s/u" <shared://b>', ["mcp://s/u", "shared://b"]),
        ("'agent://root/a#/x'", ["agent://root/a#/x"]),
        ("Read memory://journal/.", ["memory://journal/"]),
        ("ends work://a.md!?;:,.", ["work://a.md"]),
        ("two:work://a,work://b", ["work://a,work://b"]),
        ("tab\twork://a\nnext mevedel://", ["work://a", "mevedel://"]),
        ("nbsp work://a\u00a0b", ["work://a"]),
        ("go to https://example.com/x.", ["https://example.com/x"]),
        ("1work://x", ["work://x"]),
        ("x ://nothing", []),
        ("", []),
    ],
)
def test_token_boundaries(document, found):
    assert texts(document) == found


def classify(text: str, strict: bool = False) -> Address | AddressError | None:
    (span,) = find_address_spans(text)
    return classify_span(span, strict=strict)


def test_known_schemes_classify_to_addresses_or_their_errors():
    address = classify("work://a%3ab")
    assert isinstance(address, Address) and address.canonical == "work://a%3Ab"
    error = classify("work://a/../b")
    assert isinstance(error, AddressError) and error.kind is ErrorKind.MALFORMED_ADDRESS
    case = classify("Work://a")
    assert isinstance(case, AddressError) and case.reason == "scheme must be lowercase: work://"


@pytest.mark.parametrize("text", ["wrok://a", "artefact://x", "memroy://root", "skil://x", "mevedl://x", "histroy://root"])
def test_near_misses_of_known_schemes_are_reported(text):
    result = classify(text)
    assert isinstance(result, AddressError) and result.kind is ErrorKind.UNKNOWN_SCHEME


@pytest.mark.parametrize(
    "text", ["https://example.com", "http://x", "ftp://host/f", "tcp://h:1", "file:///etc/x", "postgres://db", "zebra://x"]
)
def test_other_uri_schemes_are_left_alone(text):
    assert classify(text) is None


def test_strict_reports_every_unknown_scheme():
    result = classify("https://example.com", strict=True)
    assert isinstance(result, AddressError) and result.kind is ErrorKind.UNKNOWN_SCHEME


def test_find_addresses_keeps_only_ours():
    found = find_addresses("https://x.org work://a wrok://b zebra://c")
    assert [(span.text, type(result).__name__) for span, result in found] == [
        ("work://a", "Address"),
        ("wrok://b", "AddressError"),
    ]


def test_address_at_finds_the_token_under_the_offset():
    document = "first line\nsee (work://a/b.md), then memory://root"
    start = document.index("work://")
    end = start + len("work://a/b.md")
    for offset in (start, start + 5, end):
        span = address_at(document, offset)
        assert span == AddressSpan(start, end, "work://a/b.md")
    assert address_at(document, start - 1) is None
    assert address_at(document, end + 1) is None
    assert address_at(document, 0) is None
    last = address_at(document, len(document))
    assert last is not None and last.text == "memory://root"
    assert address_at(document, -1) is None
    assert address_at(document, len(document) + 1) is None


def osa_distance(a: str, b: str) -> int:
    """Reference optimal-string-alignment distance, the textbook table."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        table[i][0] = i
    for j in range(len(b) + 1):
        table[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                table[i][j] = min(table[i][j], table[i - 2][j - 2] + 1)
    return table[len(a)][len(b)]


@settings(max_examples=300)
@given(st.text(st.sampled_from("workmcpshardagenty+.-"), max_size=9))
def test_near_miss_is_distance_at_most_two_from_a_scheme(scheme):
    expected = scheme not in PUBLIC_SCHEMES and any(osa_distance(scheme, known) <= 2 for known in SCHEMES)
    assert is_near_miss(scheme) is expected


@pytest.mark.parametrize(
    ("scheme", "near"),
    [("wokr", True), ("wrk", True), ("worky", True), ("wxyk", True), ("wxyz", False), ("shaerd", True), ("sharedxyz", False)],
)
def test_near_miss_examples(scheme, near):
    assert is_near_miss(scheme) is near
