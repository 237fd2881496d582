"""parse_address: per-family forms, canonical spellings and rejection reasons."""

from __future__ import annotations

import pytest

from mevedel_server.addresses import (
    Address,
    AddressError,
    ErrorKind,
    Family,
    LocatorClass,
    Operation,
    parse_address,
)

R, G, S, P = Operation.READ, Operation.GLOB, Operation.GREP, Operation.APPLY_PATCH
DIGEST = "0123456789abcdef" * 4


def ops(address: Address) -> set[Operation]:
    return set(address.operations)


def malformed(text: str) -> str:
    with pytest.raises(AddressError) as caught:
        parse_address(text)
    assert caught.value.kind is ErrorKind.MALFORMED_ADDRESS, caught.value.reason
    assert caught.value.authored == text
    return caught.value.reason


# -- schemes ---------------------------------------------------------------


def test_uppercase_scheme_is_malformed_with_the_lowercase_spelling():
    assert malformed("WORK://x") == "scheme must be lowercase: work://"
    assert malformed("Memory://root") == "scheme must be lowercase: memory://"


@pytest.mark.parametrize("text", ["foo://x", "https://example.com/a", "git+ssh://host/x", "works://x"])
def test_unknown_scheme_lists_known_prefixes(text):
    with pytest.raises(AddressError) as caught:
        parse_address(text)
    assert caught.value.kind is ErrorKind.UNKNOWN_SCHEME
    assert caught.value.authored == text
    for prefix in ("work://", "artifact://", "skill://", "agent://", "history://", "memory://", "mcp://", "shared://", "mevedel://"):
        assert prefix in caught.value.reason


@pytest.mark.parametrize("text", ["", "notes.md", "work:/x", "://x", "1abc://x", " work://x"])
def test_text_without_a_scheme_is_not_an_address(text):
    assert "not a resource address" in malformed(text)


# -- shared component rules ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("work://notes.md", "work://notes.md"),
        ("work://notes.md/", "work://notes.md"),
        ("work://caf%c3%a9/a%3ab", "work://caf%C3%A9/a%3Ab"),
        ("work://café/a:b", "work://caf%C3%A9/a%3Ab"),
        ("work://a%20b/~x_y-z.md", "work://a%20b/~x_y-z.md"),
        ("work://%41%62c", "work://Abc"),
        ("work://a b", "work://a%20b"),
        ("work://日本", "work://%E6%97%A5%E6%9C%AC"),
    ],
)
def test_components_canonicalise_to_uppercase_escapes_of_non_unreserved_bytes(text, canonical):
    address = parse_address(text)
    assert address.canonical == canonical
    assert address.authored == text
    assert parse_address(canonical).canonical == canonical


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("work://a//b", "component 2 is empty"),
        ("work://a//", "component 2 is empty"),
        ("work:///etc", "absolute component"),
        ("work:///", "absolute component"),
        ("work://a/../b", "component 2 '..' is a '..' traversal"),
        ("work://a/%2E%2E", "component 2 '%2E%2E' is a '..' traversal"),
        ("work://./a", "component 1 '.' is a '.' component"),
        ("work://x/a%2Fb", "component 2 'a%2Fb' decodes to a '/' separator"),
        ("work://x/a%2fb", "component 2 'a%2fb' decodes to a '/' separator"),
        ("work://a%zz", "component 1 'a%zz' has a malformed percent escape '%zz'"),
        ("work://a%4", "malformed percent escape '%4'"),
        ("work://a%", "malformed percent escape '%'"),
        ("work://a%FF", "component 1 'a%FF' does not decode as UTF-8"),
        ("work://a%C3", "does not decode as UTF-8"),
        ("work://a%00b", "control character U+0000"),
        ("work://a%7F", "control character U+007F"),
        ("work://a%C2%85", "control character U+0085"),
        ("work://a\tb", "control character U+0009"),
        ("work://a\nb", "control character U+000A"),
        ("work://a#b", "'#' fragment is only valid in agent://"),
        ("work://a\ud800", "not valid Unicode"),
    ],
)
def test_component_rejections_name_the_component_and_reason(text, needle):
    assert needle in malformed(text)


@pytest.mark.parametrize(
    "text",
    [
        "work://" + "a" * 256,
        "work://shared/" + "b" * 300,
        "memory://local-mevedel/" + "%C3%A9" * 128,  # 128 characters, 256 bytes
        "artifact://" + "c" * 4000,
        "skill://local-mevedel/" + "d" * 256,
        "history://saved/" + "e" * 256,
    ],
)
def test_a_component_longer_than_a_file_name_is_malformed_naming_its_length(text):
    reason = malformed(text)
    assert "bytes long" in reason and "at most 255 bytes" in reason


def test_a_component_of_255_bytes_is_an_address():
    assert parse_address("work://shared/" + "a" * 255).canonical == "work://shared/" + "a" * 255
    assert parse_address("work://" + "%C3%A9" * 127 + "x").family is Family.WORK


# -- work --------------------------------------------------------------------


def test_work_forms():
    bare = parse_address("work://")
    assert (bare.family, bare.scope, bare.path, bare.canonical) == (Family.WORK, "listing", (), "work://")
    assert bare.locator_class is LocatorClass.DISCOVERY and ops(bare) == {R, G, S}

    for text in ("work://shared", "work://shared/"):
        root = parse_address(text)
        assert (root.scope, root.path, root.canonical) == ("shared", (), "work://shared")
        assert root.locator_class is LocatorClass.EXACT and ops(root) == {R, G, S}

    shared = parse_address("work://shared/notes/a.md")
    assert (shared.scope, shared.path) == ("shared", ("notes", "a.md"))
    assert shared.locator_class is LocatorClass.EXACT and ops(shared) == {R, G, S, P}

    plans = parse_address("work://plans/accepted-2026-07-19T09%3A47.md")
    assert (plans.scope, plans.path) == ("session", ("plans", "accepted-2026-07-19T09:47.md"))
    assert plans.locator_class is LocatorClass.SESSION_RELATIVE and ops(plans) == {R, G, S, P}

    assert parse_address("work://%73hared/x").scope == "shared"


# -- artifact ----------------------------------------------------------------


def test_artifact_forms():
    bare = parse_address("artifact://")
    assert bare.scope == "listing" and bare.is_discovery and ops(bare) == {R, G, S}
    handle = parse_address("artifact://executions/build-17.log.gz/")
    assert handle.canonical == "artifact://executions/build-17.log.gz"
    assert (handle.scope, handle.path) == ("handle", ("executions", "build-17.log.gz"))
    assert handle.locator_class is LocatorClass.SESSION_RELATIVE and ops(handle) == {R, G, S}


# -- skill -------------------------------------------------------------------


def test_skill_exact_forms():
    exact = parse_address(f"skill://review@{DIGEST}/refs/a.md")
    assert exact.canonical == f"skill://review@{DIGEST}/refs/a.md"
    assert (exact.scope, exact.key, exact.name, exact.path) == ("exact", f"review@{DIGEST}", "review", ("refs", "a.md"))
    assert exact.locator_class is LocatorClass.EXACT and ops(exact) == {R, G, S}

    spaced = parse_address(f"skill://my%20skill@{DIGEST}")
    assert spaced.name == "my skill" and spaced.path == ()
    assert spaced.canonical == f"skill://my%20skill@{DIGEST}"

    at_name = parse_address(f"skill://a@b@{DIGEST}")
    assert at_name.name == "a@b" and at_name.canonical == f"skill://a%40b@{DIGEST}"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (f"skill://review@{DIGEST.upper()}", "must be lowercase hexadecimal"),
        (f"skill://review@{DIGEST[:-1]}", "full lowercase SHA-256 digest (64 hexadecimal digits)"),
        (f"skill://review@{DIGEST}0", "64 hexadecimal digits"),
        (f"skill://review@{DIGEST[:-1]}g", "64 hexadecimal digits"),
        (f"skill://@{DIGEST}", "skill name before '@' is empty"),
        ("skill://review", "unknown skill origin 'review': use skill://NAME@SOURCE-KEY or one of"),
        ("skill://local-mevedel", "name a skill: skill://local-mevedel/SKILL"),
        ("skill://plugin/tools", "skill://plugin/PLUGIN/SKILL"),
    ],
)
def test_skill_rejections(text, needle):
    assert needle in malformed(text)


@pytest.mark.parametrize("origin", ["local-mevedel", "local-agents", "global-mevedel", "global-agents", "bundled", "managed"])
def test_skill_origin_aliases(origin):
    alias = parse_address(f"skill://{origin}/review/SKILL.md/")
    assert alias.canonical == f"skill://{origin}/review/SKILL.md"
    assert (alias.scope, alias.key, alias.name, alias.path) == ("alias", origin, "review", ("SKILL.md",))
    assert alias.locator_class is LocatorClass.EXACT and ops(alias) == {R, G, S}


def test_skill_plugin_alias_keeps_the_decoded_plugin_in_the_key():
    alias = parse_address("skill://plugin/my%20tools/lint/docs/x.md")
    assert alias.canonical == "skill://plugin/my%20tools/lint/docs/x.md"
    assert (alias.key, alias.name, alias.path) == ("plugin/my tools", "lint", ("docs", "x.md"))


# -- agent -------------------------------------------------------------------


def test_agent_forms_and_pointers():
    bare = parse_address("agent://")
    assert bare.is_discovery and ops(bare) == {R}
    whole = parse_address("agent://root/explore/tests/")
    assert (whole.scope, whole.path, whole.pointer, whole.canonical) == (
        "root", ("explore", "tests"), None, "agent://root/explore/tests")
    assert whole.locator_class is LocatorClass.SESSION_RELATIVE and ops(whole) == {R}

    empty = parse_address("agent://root/a#")
    assert empty.pointer == () and empty.canonical == "agent://root/a#"
    assert parse_address("agent://root/a/#").canonical == "agent://root/a#"

    tokens = parse_address("agent://root/a#/result/0~1x/~0y")
    assert tokens.pointer == ("result", "0/x", "~y")
    assert tokens.canonical == "agent://root/a#/result/0~1x/~0y"

    escaped = parse_address("agent://root/a#%2Fk%20ey/caf%c3%a9")
    assert escaped.pointer == ("k ey", "café")
    assert escaped.canonical == "agent://root/a#/k%20ey/caf%C3%A9"

    empty_key = parse_address("agent://root/a#/")
    assert empty_key.pointer == ("",) and empty_key.canonical == "agent://root/a#/"

    hashes = parse_address("agent://root/a#/x#y")
    assert hashes.pointer == ("x#y",) and hashes.canonical == "agent://root/a#/x%23y"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("agent://root", "agent://root/PATH"),
        ("agent://root/", "agent://root/PATH"),
        ("agent://explore", "agent://root/PATH"),
        ("agent://#/x", "agent://root/PATH#POINTER"),
        ("agent://root/a#x", "must be empty or start with '/'"),
        ("agent://root/a#/x~2", "'~' not followed by 0 or 1"),
        ("agent://root/a#/x~", "'~' not followed by 0 or 1"),
        ("agent://root/a#/%ZZ", "malformed percent escape"),
        ("agent://root/a#/%FF", "does not decode as UTF-8"),
        ("agent://root/a#/%01", "control character U+0001"),
    ],
)
def test_agent_rejections(text, needle):
    assert needle in malformed(text)


# -- history -----------------------------------------------------------------


def test_history_forms():
    bare = parse_address("history://")
    assert bare.is_discovery and ops(bare) == {R}
    root = parse_address("history://root/")
    assert (root.scope, root.path, root.canonical) == ("root", (), "history://root")
    assert root.locator_class is LocatorClass.SESSION_RELATIVE and ops(root) == {R, S}
    agent = parse_address("history://root/explore/tests")
    assert agent.path == ("explore", "tests") and ops(agent) == {R, S}

    saved = parse_address("history://saved/")
    assert (saved.scope, saved.path, saved.canonical) == ("saved", (), "history://saved")
    assert saved.is_discovery and ops(saved) == {R, G, S}
    session = parse_address("history://saved/2026-07-19T09-47-bf87")
    assert session.path == ("2026-07-19T09-47-bf87",) and session.locator_class is LocatorClass.EXACT
    segment = parse_address("history://saved/s1/segment-0001.chat.jsonl")
    assert segment.path == ("s1", "segment-0001.chat.jsonl") and ops(segment) == {R, G, S}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("history://saved/s1/segment-0001.chat.org", "segment-NNNN.chat.jsonl"),
        ("history://saved/s1/segment-01.chat.jsonl", "segment-NNNN.chat.jsonl"),
        ("history://saved/s1/notes.md", "segment-NNNN.chat.jsonl"),
        ("history://saved/s1/segment-0001.chat.jsonl/x", "at most SESSION/SEGMENT"),
        ("history://live", "unknown history branch 'live'"),
    ],
)
def test_history_rejections(text, needle):
    assert needle in malformed(text)


# -- memory and journal --------------------------------------------------------


def test_memory_forms():
    union = parse_address("memory://root/")
    assert (union.family, union.scope, union.canonical) == (Family.MEMORY, "union", "memory://root")
    assert union.is_discovery and ops(union) == {R, G, S}

    root = parse_address("memory://local-agents")
    assert (root.scope, root.key, root.path) == ("root", "local-agents", ())
    assert root.locator_class is LocatorClass.EXACT and ops(root) == {R, G, S}

    topic = parse_address("memory://global-mevedel/topics/python.md")
    assert (topic.key, topic.path) == ("global-mevedel", ("topics", "python.md"))
    assert ops(topic) == {R, G, S, P}

    hashed = parse_address(f"memory://{DIGEST}/a.md")
    assert hashed.key == DIGEST and hashed.canonical == f"memory://{DIGEST}/a.md"


def test_journal_forms():
    for text in ("memory://journal", "memory://journal/"):
        listing = parse_address(text)
        assert (listing.family, listing.scope, listing.canonical) == (Family.JOURNAL, "listing", "memory://journal/")
        assert listing.is_discovery and ops(listing) == {R, G, S}
    entry = parse_address("memory://journal/2026-07-19T09:47:00Z.md")
    assert entry.canonical == "memory://journal/2026-07-19T09%3A47%3A00Z.md"
    assert (entry.family, entry.scope, entry.path) == (Family.JOURNAL, "entry", ("2026-07-19T09:47:00Z.md",))
    assert entry.locator_class is LocatorClass.EXACT and ops(entry) == {R, G, S}
    assert parse_address("memory://journal/2026-07-19T09%3a47.md").canonical == "memory://journal/2026-07-19T09%3A47.md"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("memory://", "memory://root"),
        ("memory://root/x.md", "union of all roots"),
        ("memory://journal/a/b.md", "no nested names"),
        ("memory://project/x.md", "unknown memory root key 'project'"),
        (f"memory://{DIGEST.upper()}/x.md", "must be lowercase hexadecimal"),
        (f"memory://{DIGEST[:60]}/x.md", "unknown memory root key"),
    ],
)
def test_memory_rejections(text, needle):
    reason = malformed(text)
    assert needle in reason
    if text == "memory://":
        assert "memory://journal/" in reason and "memory://ROOT-KEY/PATH" in reason


# -- mcp ---------------------------------------------------------------------


def test_mcp_forms():
    bare = parse_address("mcp://")
    assert bare.is_discovery and ops(bare) == {R}
    server = parse_address("mcp://github%20server/")
    assert (server.scope, server.key, server.name, server.canonical) == (
        "server", "github server", None, "mcp://github%20server")
    assert ops(server) == {R} and server.locator_class is LocatorClass.EXACT
    resource = parse_address("mcp://gh/repo%3a%2f%2fissues%2F17%23top%25%20%C3%A9")
    assert (resource.scope, resource.key, resource.name) == ("resource", "gh", "repo://issues/17#top% é")
    assert resource.canonical == "mcp://gh/repo%3A%2F%2Fissues%2F17%23top%25%20%C3%A9"
    assert ops(resource) == {R}


def test_mcp_with_a_literal_native_uri_is_refused():
    assert "encode the native URI as one component" in malformed("mcp://gh/repo:/issues/17")
    assert "'#' fragment" in malformed("mcp://gh/a#b")


# -- shared ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "scope", "key", "path", "grep"),
    [
        ("shared://board-1", "item", "board-1", (), True),
        ("shared://board-1/", "item", "board-1", (), True),
        ("shared://board-1/view.png", "item", "board-1", ("view.png",), False),
        ("shared://board-1/discussions", "item", "board-1", ("discussions",), True),
        ("shared://board-1/history", "item", "board-1", ("history",), True),
        ("shared://board-1/elements/e_42", "item", "board-1", ("elements", "e_42"), True),
        ("shared://board-1/images/k9", "item", "board-1", ("images", "k9"), False),
        ("shared://library", "library", None, (), True),
        ("shared://library/icons", "library", "icons", (), True),
        ("shared://library/sheet.png", "library", None, ("sheet.png",), False),
        ("shared://library/icons/sheet.png", "library", "icons", ("sheet.png",), False),
    ],
)
def test_shared_forms(text, scope, key, path, grep):
    address = parse_address(text)
    assert (address.family, address.scope, address.key, address.path) == (Family.SHARED, scope, key, path)
    assert address.canonical == text.rstrip("/")
    assert ops(address) == ({R, S} if grep else {R})
    expected = LocatorClass.EXACT if scope == "library" else LocatorClass.SESSION_RELATIVE
    assert address.locator_class is expected


def test_shared_listing():
    bare = parse_address("shared://")
    assert bare.is_discovery and ops(bare) == {R}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("shared://board.1", "shared item id 'board.1'"),
        ("shared://" + "a" * 81, "shared item id"),
        ("shared://b/elements/e%20x", "shared element id 'e x'"),
        ("shared://b/images/k.png", "shared image key 'k.png'"),
        ("shared://library/my.lib", "shared library name 'my.lib'"),
        ("shared://b/elements", "shared://b/elements/ELEMENT"),
        ("shared://b/images", "shared://b/images/KEY"),
        ("shared://b/notes", "unknown shared item part 'notes'"),
        ("shared://b/view.png/x", "unknown shared item part 'view.png/x'"),
        ("shared://library/icons/sheet.png/x", "shared://library[/NAME][/sheet.png]"),
        ("shared://library/icons/other", "shared://library[/NAME][/sheet.png]"),
    ],
)
def test_shared_rejections(text, needle):
    assert needle in malformed(text)


def test_shared_identity_length_boundary():
    assert parse_address("shared://" + "a" * 80).key == "a" * 80


# -- mevedel -----------------------------------------------------------------


def test_mevedel_forms():
    bare = parse_address("mevedel://")
    assert bare.is_discovery and ops(bare) == {R, G, S}
    doc = parse_address("mevedel://guides/getting-started.md/")
    assert (doc.scope, doc.path, doc.canonical) == ("doc", ("guides", "getting-started.md"), "mevedel://guides/getting-started.md")
    assert doc.locator_class is LocatorClass.EXACT and ops(doc) == {R, G, S}


def test_unsupported_operation_is_not_a_malformed_address():
    with pytest.raises(AddressError) as caught:
        parse_address("agent://root/a").require(Operation.GREP)
    assert caught.value.kind is ErrorKind.UNSUPPORTED_OPERATION
    assert "Grep is not supported for agent://root/a" in caught.value.reason
