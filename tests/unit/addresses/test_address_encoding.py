"""encode_component / decode_component: the canonical component spelling."""

from __future__ import annotations

import pytest

from mevedel_server.addresses import (
    AddressError,
    ErrorKind,
    decode_component,
    encode_component,
    encode_fragment,
)


@pytest.mark.parametrize(
    ("text", "spelled"),
    [
        ("", ""),
        ("AZaz09-._~", "AZaz09-._~"),
        ("a b", "a%20b"),
        ("a:b", "a%3Ab"),
        ("a/b", "a%2Fb"),
        ("100%", "100%25"),
        ("#?&=+@!$'()*,;", "%23%3F%26%3D%2B%40%21%24%27%28%29%2A%2C%3B"),
        ("café", "caf%C3%A9"),
        ("日本", "%E6%97%A5%E6%9C%AC"),
        ("🙂", "%F0%9F%99%82"),
    ],
)
def test_only_unreserved_bytes_stay_literal_and_escapes_are_uppercase(text, spelled):
    assert encode_component(text) == spelled
    assert decode_component(spelled, "x", separators=True) == text


def test_decoding_accepts_either_hex_case_and_literal_bytes():
    assert decode_component("caf%c3%a9", "x") == "café"
    assert decode_component("caf%C3%a9", "x") == "café"
    assert decode_component("café", "x") == "café"
    assert decode_component("%41b%63", "x") == "Abc"


def test_decoding_happens_exactly_once():
    assert decode_component("a%2525", "x") == "a%25"
    assert encode_component("a%25") == "a%2525"


def test_a_non_utf8_filename_is_spelled_by_its_bytes_and_refused_on_the_way_back():
    name = b"caf\xe9".decode("utf-8", "surrogateescape")
    spelled = encode_component(name)
    assert spelled == "caf%E9"
    with pytest.raises(AddressError) as caught:
        decode_component(spelled, "work://caf%E9", index=1)
    assert caught.value.reason == "component 1 'caf%E9' does not decode as UTF-8"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("a%2Fb", "component 2 'a%2Fb' decodes to a '/' separator"),
        ("a/b", "component 2 'a/b' contains a '/' separator"),
        ("a%G0", "component 2 'a%G0' has a malformed percent escape '%G0' (expected % and two hex digits)"),
        ("a%0", "component 2 'a%0' has a malformed percent escape '%0' (expected % and two hex digits)"),
        ("%é1", "component 2 '%é1' has a malformed percent escape '%é1' (expected % and two hex digits)"),
        ("a%C3%28", "component 2 'a%C3%28' does not decode as UTF-8"),
        ("%ED%A0%80", "component 2 '%ED%A0%80' does not decode as UTF-8"),
        ("a%1F", "component 2 'a%1F' contains the control character U+001F"),
        ("a\x7f", "component 2 'a\\x7f' contains the control character U+007F"),
        ("a%C2%9F", "component 2 'a%C2%9F' contains the control character U+009F"),
        ("a\ud83d", "component 2 'a\\ud83d' is not valid Unicode text"),
    ],
)
def test_decoding_failures_are_malformed_addresses_with_a_precise_reason(raw, reason):
    with pytest.raises(AddressError) as caught:
        decode_component(raw, "work://x/" + raw, index=2)
    assert caught.value.kind is ErrorKind.MALFORMED_ADDRESS
    assert caught.value.authored == "work://x/" + raw
    assert caught.value.reason == reason


def test_separators_may_be_allowed_for_opaque_components():
    assert decode_component("repo%3A%2F%2Fx", "mcp://s/repo%3A%2F%2Fx", separators=True) == "repo://x"


def test_reason_without_an_index():
    with pytest.raises(AddressError) as caught:
        decode_component("%zz", "a")
    assert caught.value.reason.startswith("component '%zz' has a malformed percent escape")


def test_fragment_encoding_keeps_pointer_separators_literal():
    assert encode_fragment("/a b/c~1d/é") == "/a%20b/c~1d/%C3%A9"
    assert encode_fragment("") == ""
    assert encode_fragment("/") == "/"
