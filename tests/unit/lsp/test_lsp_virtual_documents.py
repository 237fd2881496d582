"""The mevedel-resource: URI grammar round-trips, survives a client that
decodes and re-encodes the path, and refuses what is not one."""

from urllib.parse import quote, unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mevedel_server.addresses import encode_component, parse_address
from mevedel_server.lsp.virtual_documents import format_uri, parse_uri

KEY = "0123456789abcdef"
SESSION = "2026-07-19T09-47-bf87b5dd793a"


def _vscode_normalised(uri: str) -> str:
    """What VS Code's Uri.parse(...).toString() does to a path: decode each
    escape, then encode everything outside unreserved and '/'."""
    scheme, _colon, path = uri.partition(":")
    return f"{scheme}:" + "/".join(quote(unquote(part), safe="") for part in path.split("/"))


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("mevedel://", "mevedel-resource:/_/_/mevedel/"),
        ("mevedel://guides/a.md", "mevedel-resource:/_/_/mevedel/guides/a.md"),
        ("work://shared/drafts", f"mevedel-resource:/{KEY}/_/work/shared/drafts"),
        ("work://shared/a%20b", f"mevedel-resource:/{KEY}/_/work/shared/a%2520b"),
        ("work://plans", f"mevedel-resource:/{KEY}/{SESSION}/work/plans"),
        ("memory://journal/", f"mevedel-resource:/{KEY}/_/memory/journal/"),
        ("artifact://", f"mevedel-resource:/{KEY}/{SESSION}/artifact/"),
    ],
)
def test_format_and_parse(address, expected):
    uri = format_uri(parse_address(address), KEY, SESSION)
    assert uri == expected
    document = parse_uri(uri)
    assert parse_address(document.address).canonical == address
    assert _vscode_normalised(uri) == uri


def test_session_is_dropped_where_the_address_does_not_depend_on_it():
    assert parse_uri(format_uri(parse_address("work://shared/x"), KEY, SESSION)).session_id is None
    assert parse_uri(format_uri(parse_address("work://x"), KEY, SESSION)).session_id == SESSION
    assert parse_uri(format_uri(parse_address("mevedel://x.md"), KEY, SESSION)).workspace_key is None


def test_empty_authority_form_is_accepted():
    assert parse_uri("mevedel-resource:///_/_/mevedel/a.md").address == "mevedel://a.md"


@pytest.mark.parametrize(
    "uri",
    [
        "file:///x",
        "mevedel-resource:/nope",
        "mevedel-resource:/_/_/ftp/x",
        "mevedel-resource://host/_/_/work/x",
        "mevedel-resource:/_/_/work/x?q=1",
    ],
)
def test_refused(uri):
    with pytest.raises(ValueError):
        parse_uri(uri)


names = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12).filter(
    lambda name: name not in (".", "..") and "/" not in name
)


@given(st.lists(names, min_size=1, max_size=4))
def test_any_shared_path_round_trips_through_normalisation(parts):
    address = parse_address("work://shared/" + "/".join(encode_component(part) for part in parts))
    uri = _vscode_normalised(format_uri(address, KEY, None))
    assert parse_address(parse_uri(uri).address).canonical == address.canonical
