"""Property tests for the address grammar, encoding and scanner."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from mevedel_server.addresses import (
    SCHEMES,
    AddressError,
    address_at,
    classify_span,
    decode_component,
    encode_component,
    find_address_spans,
    parse_address,
)

UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
CANONICAL_COMPONENT = re.compile(r"(?:[A-Za-z0-9._~-]|%[0-9A-F]{2})*")
CONTROLS = "".join(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)])

#: Text a component may decode to: any Unicode scalar except controls.
component_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters=CONTROLS)
path_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters=CONTROLS + "/")
segment_values = st.text(path_chars, min_size=1, max_size=12).filter(lambda v: v not in (".", ".."))
shared_ids = st.from_regex(r"[A-Za-z0-9_-]{1,80}", fullmatch=True)
digests = st.from_regex(r"[0-9a-f]{64}", fullmatch=True)


@st.composite
def spelled(draw: st.DrawFn, value: str) -> str:
    """One authored spelling of ``value``: each byte literal or escaped, in
    either hex case, wherever the grammar allows both."""
    out = []
    for char in value:
        must_escape = char in "/%#"
        if not must_escape and draw(st.booleans()):
            out.append(char)
            continue
        lower = draw(st.booleans())
        for byte in char.encode("utf-8"):
            escape = f"%{byte:02X}"
            out.append(escape.lower() if lower else escape)
    return "".join(out)


def spell_path(draw: st.DrawFn, values: list[str]) -> str:
    return "/".join(draw(spelled(value)) for value in values)


@st.composite
def valid_addresses(draw: st.DrawFn) -> str:
    path = draw(st.lists(segment_values, min_size=1, max_size=4))
    trailing = "/" if draw(st.booleans()) else ""
    family = draw(st.sampled_from(SCHEMES + ("journal",)))
    if family == "work":
        head = draw(st.sampled_from(["", "shared/"]))
        return "work://" + head + spell_path(draw, path) + trailing
    if family in ("artifact", "mevedel"):
        return f"{family}://" + spell_path(draw, path) + trailing
    if family == "skill":
        if draw(st.booleans()):
            return f"skill://{draw(spelled(path[0]))}@{draw(digests)}/" + spell_path(draw, path[1:] or ["SKILL.md"])
        origin = draw(st.sampled_from(["local-mevedel", "bundled", "managed", "plugin/" + draw(spelled(path[0]))]))
        return f"skill://{origin}/" + spell_path(draw, path)
    if family == "agent":
        address = "agent://root/" + spell_path(draw, path) + trailing
        if draw(st.booleans()):
            tokens = draw(st.lists(st.text(component_chars, max_size=6), max_size=3))
            pointer = "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)
            address += "#" + "/".join(draw(spelled(part)) if part else "" for part in pointer.split("/"))
        return address
    if family == "history":
        choice = draw(st.integers(0, 2))
        if choice == 0:
            return "history://root/" + spell_path(draw, path)
        segment = f"segment-{draw(st.integers(0, 9999)):04d}.chat.jsonl"
        tail = "/" + draw(spelled(segment)) if choice == 2 else ""
        return "history://saved/" + draw(spelled(path[0])) + tail
    if family == "memory":
        key = draw(st.one_of(st.sampled_from(["local-mevedel", "global-agents"]), digests))
        return f"memory://{key}/" + spell_path(draw, path) + trailing
    if family == "journal":
        return "memory://journal/" + draw(spelled(path[0]))
    if family == "mcp":
        server = draw(st.text(component_chars, min_size=1, max_size=10).filter(lambda v: v not in (".", "..")))
        uri = draw(st.text(component_chars, min_size=1, max_size=20).filter(lambda v: v not in (".", "..")))
        return f"mcp://{draw(spelled(server))}/{draw(spelled(uri))}"
    item = draw(shared_ids)
    part = draw(st.sampled_from(["", "/view.png", "/discussions", "/history", "/elements/", "/images/"]))
    if part.endswith("/"):
        part += draw(shared_ids)
    return f"shared://{item}{part}"


def _identity(address):
    return (address.family, address.scope, address.path, address.key, address.name, address.pointer,
            address.operations, address.locator_class)  # fmt: skip


@settings(max_examples=600)
@given(valid_addresses())
def test_any_spelling_of_a_valid_address_parses_and_canonicalisation_is_idempotent(text):
    address = parse_address(text)
    again = parse_address(address.canonical)
    assert again.canonical == address.canonical
    assert _identity(again) == _identity(address)
    scheme, _sep, rest = address.canonical.partition("://")
    body, _hash, fragment = rest.partition("#")
    for component in body.split("/"):
        if scheme == "skill" and "@" in component:
            component = component.replace("@", "")
        assert CANONICAL_COMPONENT.fullmatch(component), (address.canonical, component)


@settings(max_examples=400)
@given(st.text(path_chars))
def test_encode_decode_round_trip(text):
    spelled_text = encode_component(text)
    assert CANONICAL_COMPONENT.fullmatch(spelled_text)
    assert decode_component(spelled_text, "x") == text
    assert encode_component(decode_component(spelled_text, "x")) == spelled_text


@settings(max_examples=400)
@given(st.text())
def test_decode_raises_only_address_errors(text):
    try:
        decode_component(text, "x")
    except AddressError:
        pass


prefixes = st.sampled_from([f"{s}://" for s in SCHEMES] + ["WORK://", "wrok://", "https://", "", "agent://root/"])
tails = st.sampled_from(
    [*UNRESERVED[:6], *"/%#~.@:é \x00\udc80", "%2F", "%2e", "%C3", "root", "journal", "saved", "shared", "library"]
)


@settings(max_examples=800)
@given(st.one_of(st.text(), st.builds(lambda p, t: p + "".join(t), prefixes, st.lists(tails, max_size=8))))
def test_parse_address_raises_only_address_errors_and_valid_results_are_stable(text):
    try:
        address = parse_address(text)
    except AddressError as error:
        assert error.authored == text and error.reason
        return
    assert address.authored == text
    assert parse_address(address.canonical).canonical == address.canonical


@settings(max_examples=400)
@given(st.text(), st.booleans(), st.integers(-2, 300))
def test_scan_never_raises_and_spans_index_the_document(text, strict, offset):
    spans = find_address_spans(text)
    previous_end = -1
    for span in spans:
        assert text[span.start : span.end] == span.text
        assert "://" in span.text and span.start > previous_end
        previous_end = span.end
        classify_span(span, strict=strict)
    found = address_at(text, offset)
    if found is not None:
        assert found in spans and found.start <= offset <= found.end
